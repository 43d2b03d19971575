#!/usr/bin/env bash
# The tests that act as another user, run once from a copy of this
# repository inside a new directory no other user may enter (issue 39):
# the usual place of a clone of root's (/root is 0700 on Debian) or of one
# in a `mktemp -d` directory. .ci/run runs it after scripts/test.sh.
#
# The copy is made in `mktemp -d` (mode 0700), under a name with a blank
# ("sluice copy"), with its own target directory inside it, seeded with
# this checkout's built dependencies so that only sluice-cli is compiled
# again; its tests then run under `umask 077`. So the binaries under test
# are out of other users' reach, as in such a clone, and the same run
# checks that a checkout path with a blank and a strict umask change
# nothing. It runs:
#   - cargo test -p sluice-cli --test mount_e2e: every test that runs
#     something as uid 65534 is there;
#   - scripts/conformance.sh pjdfstest, whose dummy users work in the
#     mount (as root only; without root it is skipped with a message,
#     unless CI is set: then it fails).
# It fails first if the premise does not hold: if user nobody can reach
# the copy's target directory.
#
# The copy takes about 1.5 GiB (the sources and the dependencies' build)
# while it runs, by default in the target directory (on the build's file
# system, not in a tmpfs /tmp), and is removed at the end.
#
# Usage: scripts/test-private-copy.sh [--keep] [--in DIR]
#   --in DIR   make the 0700 directory under DIR (default: the target
#              directory, ${CARGO_TARGET_DIR:-target})
#   --keep     keep the copy (and print where it is)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
ROOT=$PWD
NAME=$(basename "$0")
# shellcheck source-path=SCRIPTDIR source=path.sh
source scripts/path.sh # cargo in PATH

die() {
    echo "$NAME: $*" >&2
    exit 1
}

KEEP=0
BASE=${CARGO_TARGET_DIR:-$ROOT/target}
while [ $# -gt 0 ]; do
    case "$1" in
        --keep) KEEP=1 ;;
        --in) BASE=${2:?--in needs a directory}; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (try --help)" ;;
    esac
    shift
done

started=$(date +%s)
mkdir -p "$BASE"
PRIVATE=$(mktemp -d "$BASE/sluice-private.XXXXXX")
COPY="$PRIVATE/sluice copy"
# shellcheck disable=SC2317 # called by the EXIT trap
on_exit() {
    local rc=$?
    set +e
    # Never remove files through a mount a failed test left behind.
    awk '{ print $2 }' /proc/self/mounts | while read -r m; do
        m=$(printf '%b' "${m//\\/\\0}")
        case "$m" in "$PRIVATE"/*) fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m" ;; esac
    done
    if [ "$KEEP" = 1 ] || [ "$rc" -ne 0 ]; then
        echo "$NAME: copy kept: $COPY" >&2
    else
        rm -rf --one-file-system "$PRIVATE"
    fi
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
[ "$(stat -c %a "$PRIVATE")" = 700 ] || die "mktemp -d made $PRIVATE with mode $(stat -c %a "$PRIVATE"), not 0700"

echo "== the tests that act as another user, from a copy in a 0700 directory: $COPY"
# The files git knows (tracked or not ignored, as they are now), with
# their times, so that cargo finds the copied build up to date; without
# git, everything but target/.
mkdir "$COPY"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do
            if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
        done |
        xargs -0 cp -a --parents -t "$COPY"
else
    tar --exclude=./target -cf - . | tar -xf - -C "$COPY"
fi
# The dependencies as this checkout built them (cargo reuses them at the
# new path; only sluice-cli is compiled again); not the test binaries.
built=${CARGO_TARGET_DIR:-$ROOT/target}/debug
export CARGO_TARGET_DIR="$COPY/target"
if [ -d "$built/deps" ]; then
    mkdir -p "$CARGO_TARGET_DIR/debug/deps"
    cp -a "$built/.fingerprint" "$built/build" "$CARGO_TARGET_DIR/debug/"
    find "$built/deps" -maxdepth 1 -name 'lib*' -exec cp -a -t "$CARGO_TARGET_DIR/debug/deps" {} +
fi
echo "copied in $(($(date +%s) - started)) s"

cd "$COPY"
umask 077
cargo build --quiet -p sluice-cli
# The premise: the binary under test is out of other users' reach.
if [ "$(id -u)" -eq 0 ] &&
    setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups --reset-env -- \
        test -x "$CARGO_TARGET_DIR/debug/sluice" 2>/dev/null; then
    die "user nobody can run $CARGO_TARGET_DIR/debug/sluice: the copy does not test what it should"
fi

echo "== cargo test -p sluice-cli --test mount_e2e (from the copy, umask 077)"
cargo test --quiet -p sluice-cli --test mount_e2e

echo "== scripts/conformance.sh pjdfstest (from the copy, umask 077)"
if [ "$(id -u)" -ne 0 ]; then
    [ -z "${CI:-}" ] || die "CI: pjdfstest needs root"
    echo "skipped: pjdfstest needs root"
else
    ./scripts/conformance.sh pjdfstest --no-build
fi
echo "== from a private copy: passed in $(($(date +%s) - started)) s"
