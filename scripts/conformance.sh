#!/usr/bin/env bash
# The file-system community's conformance suites through a real sluice mount
# (docs/conformance.md): pjdfstest (the Rust port) and fsx, both installed
# from crates.io by scripts/setup.sh. scripts/test.sh runs the default
# (both parts) in CI.
#
#   pjdfstest  runs pjdfstest as root on the capacity directory itself, then
#              on the same directory through an `--allow-other` sluice mount,
#              and compares the two per test: every test that passes on the
#              directory must pass through the mount. The only exceptions are
#              the tests listed in scripts/conformance/pjdfstest-known-differences.txt
#              (a temporary list that may only shrink): a listed test that
#              passes through the mount now fails the run too, until its line
#              is deleted.
#   fsx        runs fsx with each seed for each case, each on a fresh mount:
#                default             the default config (policy cost)
#                fast-all            policy fast-all (every write to the log)
#                tiny-wait           fast-all, a 2 x 1 MiB log, when_full = wait
#                tiny-write-through  fast-all, a 2 x 1 MiB log, when_full = write-through
#                full-fast           fast-all, a 2 x 2 MiB log on a 3 MiB tmpfs fast
#                                    tier: appends fail with ENOSPC and fall back to
#                                    the capacity tier (root only; skipped otherwise)
#                mmap                default config, mmap reads and writes (+ msync)
#                close-open          default config, close and reopen of the file
#                passthrough         policy capacity-only: the file is opened by FUSE
#                                    passthrough (the kernel reads and writes the
#                                    capacity file itself), with mmap and close/reopen
#                page-cache          mount.passthrough = false and a file of at most
#                                    60 KiB, with close/reopen: reopens are
#                                    served from the kernel's page cache (issue 33);
#                                    the run fails unless some were, where the
#                                    capacity tier has exact change times
#                page-cache-mmap     page-cache with writes through a mapping (fsx's
#                                    mapwrite, which unmaps after each): mappings of
#                                    handles opened page-cached, their dirty pages
#                                    written back through sluice
#                on-demand           fast-all, mount.consistency = "on-demand" (issue 34:
#                                    the file stays held, its bytes in the log), with
#                                    close/reopen; the run fails unless the file was
#                                    held (a `held` line in sluice status)
#                on-demand-sidecar   on-demand with mount.held_mark = "sidecar": the
#                                    file's mark is an entry in .sluice/held on the
#                                    capacity tier instead of an xattr
#              pread/pwrite/truncate/fsync/fdatasync in every case. After each
#              run the file as read through the mount must equal the file on
#              the capacity tier after `sluice unmount` (which drains).
#
# Usage: scripts/conformance.sh [all|pjdfstest|fsx] [options]
#   --ops N            fsx operations per run (default 20000)
#   --seeds "S..."     fsx seeds (default "1 2 3")
#   --cases "C..."     fsx cases (default: all of the above)
#   --release          build and use the release binary (default: the debug
#                      binary that `cargo test` builds)
#   --no-build         use the binary as it is
#   --keep             keep the work directory (logs, configs, fsx artifacts)
#   -h, --help         this text
# Longer runs, for anyone:
#   scripts/conformance.sh fsx --release --ops 1000000 --seeds "$(seq -s ' ' 1 20)"
# Environment: CONFORMANCE_DIR (work directory; default a new one under
# ${TMPDIR:-/tmp}), FSX_TIMEOUT (seconds per fsx run, default 60 + ops/100).
# Needs root for pjdfstest (its tests switch users), fuse3 (fusermount3) and
# /dev/fuse, and pjdfstest/fsx in PATH or ~/.cargo/bin (scripts/setup.sh).
set -euo pipefail
export LC_ALL=C

cd "$(dirname "$0")/.."
ROOT=$PWD
ARGS=("$@")

# die(), require_fuse(), cleanup_mount() with MNT and MOUNT_PID, from the
# benchmarks' helpers (sourced without arguments: its flags are not ours).
set --
# shellcheck source-path=SCRIPTDIR source=bench-args.sh
source "$ROOT/scripts/bench-args.sh"
set -- "${ARGS[@]}"
# alive PID (zombie-aware)
# shellcheck source-path=SCRIPTDIR source=proc.sh
source "$ROOT/scripts/proc.sh"

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit "${1:-0}"
}

ALL_CASES="default fast-all tiny-wait tiny-write-through full-fast mmap close-open passthrough page-cache page-cache-mmap on-demand on-demand-sidecar"
PART=all
OPS=20000
SEEDS="1 2 3"
CASES=$ALL_CASES
PROFILE=debug
BUILD=1
KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
        all | pjdfstest | fsx) PART=$1 ;;
        --ops) OPS=${2:?--ops needs a number}; shift ;;
        --seeds) SEEDS=${2:?--seeds needs a list}; shift ;;
        --cases) CASES=${2:?--cases needs a list}; shift ;;
        --release) PROFILE=release ;;
        --no-build) BUILD=0 ;;
        --keep) KEEP=1 ;;
        -h | --help) usage 0 ;;
        *) echo "$NAME: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done
[[ "$OPS" =~ ^[1-9][0-9]*$ ]] || die "--ops must be a positive integer (got '$OPS')"
for s in $SEEDS; do
    [[ "$s" =~ ^[0-9]+$ ]] || die "--seeds must be numbers (got '$s')"
done
[ -n "${SEEDS// /}" ] || die "--seeds is empty"
for c in $CASES; do
    case " $ALL_CASES " in
        *" $c "*) ;;
        *) die "unknown fsx case '$c' (cases: $ALL_CASES)" ;;
    esac
done
FSX_TIMEOUT=${FSX_TIMEOUT:-$((60 + OPS / 100))}

KNOWN=$ROOT/scripts/conformance/pjdfstest-known-differences.txt
# shellcheck source-path=SCRIPTDIR source=path.sh
source "$ROOT/scripts/path.sh" # pjdfstest, fsx and cargo in PATH

# --- what is needed ------------------------------------------------------------
require_fuse
want=()
[ "$PART" = fsx ] || want+=(pjdfstest)
[ "$PART" = pjdfstest ] || want+=(fsx)
for tool in "${want[@]}"; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "$tool is missing: run scripts/setup.sh (cargo install --locked $tool)"
done
if [ "$PART" != fsx ]; then
    [ "$(id -u)" -eq 0 ] || die "pjdfstest needs root (its tests switch users and chown); run the fsx part alone with: $0 fsx"
    getent passwd pjdfstest >/dev/null ||
        die "pjdfstest's dummy user 'pjdfstest' is missing: run scripts/setup.sh"
    [ -f "$KNOWN" ] || die "$KNOWN is missing"
fi

SLUICE=${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE/sluice
if [ "$BUILD" = 1 ]; then
    command -v cargo >/dev/null 2>&1 || die "cargo is missing (or use --no-build with a built $SLUICE)"
    flag=()
    [ "$PROFILE" = release ] && flag=(--release)
    echo "== cargo build ${flag[*]:+${flag[*]} }-p sluice-cli"
    cargo build --quiet "${flag[@]}" -p sluice-cli
fi
[ -x "$SLUICE" ] || die "$SLUICE is missing: run cargo build -p sluice-cli (or drop --no-build)"

# --- work directory, mounts and their cleanup ---------------------------------------
# as_user USER CMD...: CMD as USER (its own group, no other groups, its own
# environment, in /): what pjdfstest's dummy users can do.
as_user() {
    local user=$1
    shift
    (cd / && setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups --reset-env -- "$@")
}
# pjdfstest_unfit WORK: why pjdfstest cannot run under WORK (nothing if it
# can). Its dummy users must reach it (a TMPDIR of one's own, mode 0700 as
# pam_tmpdir makes /tmp/user/0, shuts them out), and the deepest socket it
# makes, 60 bytes below the directory it tests (two temp dirs, a 32-byte
# name, a file in it), must fit in a socket address (107 bytes): so
# WORK/pjdfstest/cap has at most 47 bytes, WORK at most 33. Either way
# the tests concerned would fail alike on both sides and not be compared.
pjdfstest_unfit() {
    local user
    for user in nobody pjdfstest; do
        as_user "$user" test -x "$1" || { echo "user $user cannot search $1"; return; }
    done
    [ "${#1}" -le 33 ] ||
        echo "$1 is ${#1} bytes long, too long for the sockets pjdfstest makes below it (33 at most)"
}
if [ -n "${CONFORMANCE_DIR:-}" ]; then
    WORK=$CONFORMANCE_DIR
    mkdir -p "$WORK"
else
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-conformance.XXXXXX")
fi
WORK=$(cd "$WORK" && pwd)
[ "$WORK" != / ] || die "the work directory must not be /"
# Others (pjdfstest's dummy users) must reach the test directories.
chmod 755 "$WORK"
if [ "$PART" != fsx ] && why=$(pjdfstest_unfit "$WORK") && [ -n "$why" ]; then
    [ -z "${CONFORMANCE_DIR:-}" ] ||
        die "pjdfstest cannot run in CONFORMANCE_DIR: $why; pick a short one that others may search"
    echo "conformance: $why; the work directory goes under /tmp instead" >&2
    rmdir "$WORK"
    WORK=$(mktemp -d /tmp/sluice-conformance.XXXXXX)
    chmod 755 "$WORK"
    why=$(pjdfstest_unfit "$WORK")
    [ -z "$why" ] || die "pjdfstest cannot run in $WORK either: $why"
fi
MNT=
# shellcheck disable=SC2317  # called by the EXIT trap
on_exit() {
    local rc=$?
    set +e # clean up as far as possible; the exit status is the script's
    if [ -n "$MNT" ] && mountpoint -q "$MNT" 2>/dev/null; then
        timeout 60 "$SLUICE" unmount "$MNT" >/dev/null 2>&1 || true
    fi
    cleanup_mount # kill $MOUNT_PID, then fusermount3 -u -z $MNT
    # Never remove files through a mount left behind. (/proc/self/mounts
    # writes a blank in a path as \040: printf %b reads it back.)
    awk '{ print $2 }' /proc/self/mounts | while read -r m; do
        m=$(printf '%b' "${m//\\/\\0}")
        case "$m" in "$WORK"/*) fusermount3 -u -z "$m" ;; esac
    done
    if [ "$KEEP" = 1 ] || [ "$rc" -ne 0 ]; then
        echo "conformance: work directory kept: $WORK" >&2
    else
        rm -rf --one-file-system "$WORK"
    fi
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# mount_sluice CONFIG MNT LOG [FLAGS...]: start `sluice mount` in the
# background and wait (30 s at most) until MNT is mounted.
mount_sluice() {
    local config=$1 mnt=$2 log=$3 i
    shift 3
    MNT=$mnt
    "$SLUICE" mount --config "$config" "$@" "$mnt" >"$log" 2>&1 &
    MOUNT_PID=$!
    for ((i = 0; i < 300; i++)); do
        mountpoint -q "$mnt" && return 0
        if ! alive "$MOUNT_PID"; then
            cat "$log" >&2
            die "sluice mount exited before $mnt was mounted (log above: $log)"
        fi
        sleep 0.1
    done
    cat "$log" >&2
    die "$mnt was not mounted after 30 s (log above: $log)"
}

# unmount_sluice LOG: `sluice unmount` (drains) and wait for the daemon to
# exit. On trouble: say so, kill the daemon, detach the mount, return 1.
unmount_sluice() {
    local log=$1 i ok=1
    timeout 300 "$SLUICE" unmount "$MNT" >>"$log" 2>&1 || ok=0
    for ((i = 0; ok && i < 600; i++)); do
        alive "$MOUNT_PID" || break
        sleep 0.1
    done
    alive "$MOUNT_PID" && ok=0
    if [ "$ok" = 0 ]; then
        echo "$NAME: sluice unmount $MNT failed or the daemon (pid $MOUNT_PID) did not exit; killing it. End of $log:" >&2
        tail -n 20 "$log" >&2
        cleanup_mount # kill $MOUNT_PID, then fusermount3 -u -z $MNT
    elif mountpoint -q "$MNT" 2>/dev/null; then
        echo "$NAME: $MNT is still mounted after sluice unmount and the daemon's exit; detaching it. End of $log:" >&2
        tail -n 20 "$log" >&2
        fusermount3 -u -z "$MNT" || true
        ok=0
    fi
    wait "$MOUNT_PID" 2>/dev/null || true
    MOUNT_PID=
    MNT=
    [ "$ok" = 1 ]
}

# write_sluice_config FILE FAST CAPACITY [TOML lines...]
write_sluice_config() {
    local file=$1 fast=$2 cap=$3
    shift 3
    {
        printf '[fast]\npath = "%s"\n\n[capacity]\npath = "%s"\n' "$fast" "$cap"
        for line in "$@"; do printf '%s\n' "$line"; done
    } >"$file"
    "$SLUICE" config check --config "$file" >/dev/null ||
        die "sluice refuses the config $file"
}

FAILED=() # one line per failure, summarised at the end
started=$(date +%s)

# --- pjdfstest -------------------------------------------------------------------------
# pjdfstest's output -> "test<TAB>status<TAB>first line of the message":
# status ok, FAILED or skipped; the message is the panic (or skip reason).
pjdfstest_results() {
    awk '
        function flush() { if (name != "") print name "\t" status "\t" msg; name = "" }
        /^[^ \t]+ +(ok|FAILED|skipped)$/ { flush(); name = $1; status = $NF; msg = ""; want = 1; next }
        /^\t/ && want { m = $0; sub(/^\t/, "", m); msg = m; want = 0; next }
        { want = 0 }
        END { flush() }
    ' "$1" | sort -t "$(printf '\t')" -k1,1
}

run_pjdfstest() {
    local dir=$WORK/pjdfstest cfg raw_log
    echo "== pjdfstest $(pjdfstest --version | awk '{print $2}'): the capacity directory itself, then through an --allow-other sluice mount"
    mkdir -p "$dir/fast" "$dir/cap" "$dir/mnt"
    chmod 755 "$dir" "$dir/cap" "$dir/mnt"
    cfg=$dir/pjdfstest.toml
    # The features Linux has (posix_fallocate, utimensat, UTIME_NOW, rename
    # updating ctime); the users: nobody and the one setup.sh adds.
    cat >"$cfg" <<'EOF'
[features]
posix_fallocate = {}
rename_ctime = {}
utime_now = {}
utimensat = {}

[settings]
naptime = 0.01
allow_remount = false

[dummy_auth]
entries = [["nobody", "nogroup"], ["pjdfstest", "pjdfstest"]]
EOF
    getent group nogroup >/dev/null || sed -i 's/"nobody", "nogroup"/"nobody", "nobody"/' "$cfg"
    # The dummy users must reach the test directories, or the tests that
    # switch users would fail alike on both sides and compare as equal.
    # (pjdfstest itself may be in a directory they cannot enter, like
    # /root/.cargo/bin: it switches users with seteuid, not by exec.)
    for user in nobody pjdfstest; do
        as_user "$user" test -x "$dir/cap" ||
            die "user $user cannot reach $dir/cap: pick a CONFORMANCE_DIR (or TMPDIR) whose parents others may search"
    done
    raw_log=$dir/raw.log
    local t0 t1
    t0=$(date +%s.%N)
    # pjdfstest exits 1 when any test fails; the comparison below decides.
    # umask 022: pjdfstest makes its base directory before it sets umask 0,
    # and under umask 077 that directory (0700) shut its dummy users out.
    (umask 022 && NO_COLOR=1 RUST_BACKTRACE=0 exec pjdfstest -c "$cfg" -p "$dir/cap") >"$raw_log" 2>&1 || true
    t1=$(date +%s.%N)
    pjdfstest_results "$raw_log" >"$dir/raw.tsv"
    echo "capacity directory: $(pjdfstest_counts "$dir/raw.tsv") ($(seconds "$t0" "$t1") s)"
    [ -s "$dir/raw.tsv" ] || { tail -n 30 "$raw_log" >&2; die "pjdfstest printed no results (log: $raw_log)"; }
    awk -F'\t' '$2 == "FAILED"' "$dir/raw.tsv" | while IFS=$'\t' read -r t _ m; do
        echo "  note: fails on the capacity directory itself (not compared): $t: $m"
    done
    # Through the mount twice: the default config, and one whose policy
    # never buffers, so files are served by FUSE passthrough (the kernel
    # reads and writes the capacity file itself; docs/fuse.md).
    compare_pjdfstest "$dir" "$cfg" default
    compare_pjdfstest "$dir" "$cfg" passthrough '' '[policy]' 'name = "capacity-only"'
    # Under on-demand (issue 34): every write buffered and held, every
    # open of a file checks its mark, chmod a-w seals.
    compare_pjdfstest "$dir" "$cfg" on-demand '' '[policy]' 'name = "fast-all"' \
        '' '[mount]' 'consistency = "on-demand"'
    return 0
}

pjdfstest_counts() { # TSV -> "N tests: ... ok, ... failed, ... skipped"
    awk -F'\t' '{ n[$2]++ } END { printf "%d tests: %d ok, %d failed, %d skipped", NR, n["ok"], n["FAILED"], n["skipped"] }' "$1"
}
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# compare_pjdfstest DIR PJDFSTEST_CONFIG VARIANT [TOML lines...]: run
# pjdfstest through an --allow-other mount of the config with the lines,
# and compare with the capacity directory's results (DIR/raw.tsv).
compare_pjdfstest() {
    local dir=$1 cfg=$2 variant=$3 mnt_log t1 t2
    shift 3
    mnt_log=$dir/mount-$variant.log
    rm -rf "$dir/fast"
    mkdir -p "$dir/fast"
    t1=$(date +%s.%N)
    write_sluice_config "$dir/sluice-$variant.toml" "$dir/fast" "$dir/cap" "$@"
    mount_sluice "$dir/sluice-$variant.toml" "$dir/mnt" "$dir/sluice-$variant.log" --allow-other
    (umask 022 && NO_COLOR=1 RUST_BACKTRACE=0 exec pjdfstest -c "$cfg" -p "$dir/mnt") >"$mnt_log" 2>&1 || true
    t2=$(date +%s.%N)
    timeout 10 "$SLUICE" status "$dir/mnt" >"$dir/status-$variant.txt" 2>&1 || true
    unmount_sluice "$dir/sluice-$variant.log" ||
        FAILED+=("pjdfstest ($variant): sluice unmount after the run failed (log $dir/sluice-$variant.log)")
    if [ "$variant" = on-demand ] && ! grep -q '^held ' "$dir/status-$variant.txt"; then
        FAILED+=("pjdfstest ($variant): the mount is not on-demand (no held line in $dir/status-$variant.txt)")
    fi
    if [ "$variant" = passthrough ] && ! grep -q 'opens by passthrough' "$dir/status-$variant.txt"; then
        FAILED+=("pjdfstest ($variant): no file was opened by FUSE passthrough (the run tests nothing new; $dir/status-$variant.txt, $dir/sluice-$variant.log)")
    fi

    pjdfstest_results "$mnt_log" >"$dir/mount-$variant.tsv"
    echo "through the mount ($variant):  $(pjdfstest_counts "$dir/mount-$variant.tsv") ($(seconds "$t1" "$t2") s, mounting included)"
    if [ ! -s "$dir/mount-$variant.tsv" ]; then
        tail -n 30 "$mnt_log" >&2
        die "pjdfstest printed no results through the mount (log: $mnt_log)"
    fi

    # Differences: ok on the directory, anything else through the mount.
    awk -F'\t' 'NR == FNR { if ($2 == "ok") ok[$1] = 1; next }
                ($1 in ok) && $2 != "ok" { print $1 "\t" $2 "\t" $3 }
                { all[$1] = 1 }
                END { for (t in ok) if (!(t in all)) print t "\tmissing\tnot run through the mount" }' \
        "$dir/raw.tsv" "$dir/mount-$variant.tsv" | sort >"$dir/differences-$variant.tsv"
    # The known list: one test name a line; '#' starts a comment.
    sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$KNOWN" | sort -u >"$dir/known.txt"
    local ndiff nknown new fixed uncompared
    ndiff=$(wc -l <"$dir/differences-$variant.tsv")
    nknown=$(wc -l <"$dir/known.txt")
    new=$(cut -f1 "$dir/differences-$variant.tsv" | comm -23 - "$dir/known.txt")
    # A listed test that is not a difference is fixed if it is ok on the
    # directory (so ok through the mount too); one that is not ok on this
    # directory (LINK_MAX is unknown on tmpfs as well) is not compared here.
    awk -F'\t' '$2 == "ok" { print $1 }' "$dir/raw.tsv" | sort >"$dir/ok-on-directory.txt"
    fixed=$(cut -f1 "$dir/differences-$variant.tsv" | comm -13 - "$dir/known.txt" |
        comm -12 - "$dir/ok-on-directory.txt")
    uncompared=$(cut -f1 "$dir/differences-$variant.tsv" | comm -13 - "$dir/known.txt" |
        comm -23 - "$dir/ok-on-directory.txt")
    echo "differences (ok on the directory, not through the mount): $ndiff;" \
        "listed as known in ${KNOWN#"$ROOT"/}: $nknown"
    # Ok through the mount but not on the directory: printed, not a failure.
    awk -F'\t' 'NR == FNR { st[$1] = $2; next } $2 == "ok" && ($1 in st) && st[$1] != "ok" { print "  note: ok through the mount but " st[$1] " on the directory: " $1 }' \
        "$dir/raw.tsv" "$dir/mount-$variant.tsv"
    if [ -n "$uncompared" ]; then
        while read -r t; do
            printf '  note: listed as known, but %s on this directory, so not compared: %s\n' \
                "$(awk -F'\t' -v t="$t" '$1 == t { print $2 }' "$dir/raw.tsv" | grep . || echo 'not run')" "$t"
        done <<<"$uncompared"
    fi
    if [ -n "$new" ]; then
        echo "NEW pjdfstest differences ($variant; not in the known list):"
        while read -r t; do
            awk -F'\t' -v t="$t" '$1 == t { printf "  %s: %s through the mount: %s\n", $1, $2, $3 }' "$dir/differences-$variant.tsv"
        done <<<"$new"
        FAILED+=("pjdfstest ($variant): $(wc -l <<<"$new") test(s) pass on the capacity directory but not through the mount (listed above; log $mnt_log)")
    fi
    if [ -n "$fixed" ]; then
        echo "pjdfstest tests ($variant) in the known list that are no longer a difference — delete their lines from ${KNOWN#"$ROOT"/}:"
        while read -r t; do
            printf '  %s (directory: %s, mount: %s)\n' "$t" \
                "$(awk -F'\t' -v t="$t" '$1 == t { print $2 }' "$dir/raw.tsv" | grep . || echo 'not run')" \
                "$(awk -F'\t' -v t="$t" '$1 == t { print $2 }' "$dir/mount-$variant.tsv" | grep . || echo 'not run')"
        done <<<"$fixed"
        FAILED+=("pjdfstest ($variant): $(wc -l <<<"$fixed") listed known difference(s) no longer differ (listed above): delete their lines from ${KNOWN#"$ROOT"/}")
    fi
    [ -z "$new" ] && [ -z "$fixed" ] &&
        echo "pjdfstest ($variant): no differences beyond the $nknown known ones (logs: $dir/raw.log, $mnt_log)"
    return 0
}

# --- fsx -----------------------------------------------------------------------------------
# fsx_weights FILE CASE: fsx's config (its weights are relative frequencies).
fsx_weights() {
    local mmap=0 mapwrite="" close_open=0 invalidate=0 flen=262144
    case "$2" in
        mmap) mmap=10 invalidate=1 ;;
        close-open | on-demand | on-demand-sidecar) close_open=2 ;;
        passthrough) mmap=5 invalidate=1 close_open=2 ;;
        # Always shorter than 64 KiB: every close stores the file. No
        # mmap: fsx 0.3.2 leaves some of its mappings in place, and a
        # mapping keeps the file open (no last release, nothing stored).
        page-cache) invalidate=1 close_open=4 flen=61440 ;;
        # Writes through a mapping, which fsx unmaps after each (not its
        # mapped reads, left in place): the file is still stored at its
        # closes, so the mappings are made on handles opened page-cached.
        page-cache-mmap) mapwrite=5 invalidate=1 close_open=4 flen=61440 ;;
    esac
    cat >"$1" <<EOF
# fsx config for case $2 (scripts/conformance.sh); opsize: fsx's default (operations up to 64 KiB)
flen = $flen
[weights]
read = 10
write = 10
truncate = 2
fsync = 1
fdatasync = 1
mapread = $mmap
mapwrite = ${mapwrite:-$mmap}
invalidate = $invalidate
close_open = $close_open
# issue 37: fallocate (glibc's posix_fallocate: mode 0), hole punching and
# copy_file_range in every case; a run fails if fsx says any is unsupported.
posix_fallocate = 2
punch_hole = 2
copy_file_range = 2

# fsx 0.3.2 draws sizes from min to max, 0 included, and skips a 0-byte
# read or write but not a 0-byte posix_fallocate, which is EINVAL on every
# file system (ext4 too): fsx then says "does not support posix_fallocate"
# and stops (mmap seed 2). No operation is 0 bytes long.
[opsize]
min = 1
EOF
}

# sluice_case_lines CASE: the sluice config lines of a case (beyond the tiers).
sluice_case_lines() {
    case "$1" in
        default | mmap | close-open) ;;
        fast-all) printf '%s\n' '' '[policy]' 'name = "fast-all"' ;;
        passthrough) printf '%s\n' '' '[policy]' 'name = "capacity-only"' ;;
        page-cache | page-cache-mmap) printf '%s\n' '' '[mount]' 'passthrough = false' ;;
        on-demand) printf '%s\n' '' '[policy]' 'name = "fast-all"' '' '[mount]' 'consistency = "on-demand"' ;;
        on-demand-sidecar)
            printf '%s\n' '' '[policy]' 'name = "fast-all"' '' '[mount]' 'consistency = "on-demand"' \
                'held_mark = "sidecar"'
            ;;
        tiny-wait | tiny-write-through)
            printf '%s\n' '' '[log]' 'regions = 2' 'region_size = "1MiB"' 'record_max = "256KiB"' \
                "when_full = \"${1#tiny-}\"" '' '[policy]' 'name = "fast-all"'
            ;;
        full-fast)
            printf '%s\n' '' '[log]' 'regions = 2' 'region_size = "2MiB"' 'record_max = "256KiB"' \
                '' '[policy]' 'name = "fast-all"'
            ;;
    esac
}

FSX_ROWS=() # "case seed seconds result"

run_fsx_one() {
    local case=$1 seed=$2 dir fsx_cfg cfg lines rc t0 secs result replay routed
    dir=$WORK/fsx/$case-seed$seed
    rm -rf "$dir"
    mkdir -p "$dir/fast" "$dir/cap" "$dir/mnt" "$dir/artifacts"
    local tmpfs=""
    if [ "$case" = full-fast ]; then
        if [ "$(id -u)" -ne 0 ]; then
            printf '  %-20s seed %-6s skipped: needs root to mount a tmpfs fast tier\n' "$case" "$seed"
            return 0
        fi
        # A fast tier smaller than the log: appends fail with ENOSPC.
        mount -t tmpfs -o size=3m,mode=0700 sluice-fsx "$dir/fast"
        tmpfs=$dir/fast
    fi
    fsx_cfg=$dir/fsx.toml
    cfg=$dir/sluice.toml
    fsx_weights "$fsx_cfg" "$case"
    mapfile -t lines < <(sluice_case_lines "$case")
    write_sluice_config "$cfg" "$dir/fast" "$dir/cap" "${lines[@]}"
    mount_sluice "$cfg" "$dir/mnt" "$dir/sluice.log"
    # With a tiny log, fsx's one small file alone rarely fills it: a filler
    # keeps writing another file (1 MiB rounds over 8 MiB) so the log stays
    # full and fsx's writes meet the full-log paths (write-through, waits,
    # the overlap rule). It stops when fsx is done (or the mount is gone).
    local filler=""
    case "$case" in
        tiny-* | full-fast)
            (
                i=0
                while dd if=/dev/zero of="$dir/mnt/filler.data" bs=256K count=4 \
                    seek=$(((i % 8) * 4)) conv=notrunc status=none 2>/dev/null; do
                    i=$((i + 1))
                done
            ) &
            filler=$!
            ;;
    esac
    t0=$(date +%s.%N)
    rc=0
    NO_COLOR=1 timeout -k 10 "$FSX_TIMEOUT" fsx -f "$fsx_cfg" -N "$OPS" -S "$seed" -P "$dir/artifacts" \
        "$dir/mnt/fsx.data" >"$dir/fsx.log" 2>&1 || rc=$?
    if [ -n "$filler" ]; then
        kill "$filler" 2>/dev/null || true
        wait "$filler" 2>/dev/null || true
    fi
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
    # Where the bytes went (log, capacity tier, written through a full log).
    timeout 10 "$SLUICE" status "$dir/mnt" >"$dir/status.txt" 2>&1 || true
    routed=$(sed -n 's/^routed *//p' "$dir/status.txt")
    replay="scripts/conformance.sh fsx --cases $case --seeds $seed --ops $OPS --keep"
    if [ "$rc" -eq 0 ]; then
        # What the mount serves must be what lands on the capacity tier.
        cp "$dir/mnt/fsx.data" "$dir/through-mount.data"
        if ! unmount_sluice "$dir/sluice.log"; then
            result="FAILED: sluice unmount (drain) failed (log $dir/sluice.log)"
        elif cmp "$dir/through-mount.data" "$dir/cap/fsx.data" >"$dir/cmp.log" 2>&1; then
            result=ok
        else
            result="FAILED: after the drain the capacity tier's file differs from what the mount served ($(head -n 1 "$dir/cmp.log"))"
        fi
    else
        result="FAILED: fsx exit status $rc"
        [ "$rc" -eq 124 ] && result="FAILED: timed out after $FSX_TIMEOUT s"
        # fsx prints what went wrong, then a dump of its last operations.
        echo "--- fsx failed: case $case, seed $seed ($OPS ops); from $dir/fsx.log:"
        sed -n '1,/LOG DUMP/p' "$dir/fsx.log" | tail -n 30 | sed 's/^/    /'
        echo "    [...]"
        tail -n 12 "$dir/fsx.log" | sed 's/^/    /'
        echo "--- sluice status $dir/mnt:"
        sed 's/^/    /' "$dir/status.txt"
        unmount_sluice "$dir/sluice.log" || true
    fi
    # fsx says so and stops when a mode is refused ("does not support"):
    # never a silent pass. And the fallocates must have reached sluice and
    # worked: glibc's posix_fallocate writes zeros instead when the mount
    # refuses it, and fsx would not notice (fsx asks nothing that fails).
    if grep -qi 'not support' "$dir/fsx.log"; then
        result="FAILED: fsx reports an operation unsupported: $(grep -i -m1 'not support' "$dir/fsx.log")"
    elif [ "$result" = ok ] && ! grep -Eq ' [1-9][0-9]* fallocates, .* 0 errors' "$dir/status.txt"; then
        result="FAILED: no fallocate reached the mount, or a request failed ($(grep requests "$dir/status.txt"))"
    fi
    if [ "$case" = passthrough ] && ! grep -q 'opens by passthrough' "$dir/status.txt"; then
        result="FAILED: the file was not opened by FUSE passthrough (the case tests nothing; $dir/status.txt)"
    fi
    if [[ "$case" = page-cache* ]] && ! grep -q 'opens from the page cache' "$dir/status.txt" &&
        ! grep -q 'page cache: small files are not kept' "$dir/sluice.log"; then
        result="FAILED: no reopen was served from the page cache (the case tests nothing; $dir/status.txt)"
    fi
    if [[ "$case" = on-demand* ]] && ! grep -Eq '^held +[1-9][0-9]* files' "$dir/status.txt"; then
        result="FAILED: no file was held at the end of the run (the case tests nothing; $dir/status.txt)"
    fi
    if [ "$case" = on-demand-sidecar ] && ! grep -q 'sidecar entries' "$dir/status.txt"; then
        result="FAILED: the marks were not sidecar entries (the case tests nothing; $dir/status.txt)"
    fi
    if [ -n "$tmpfs" ]; then
        grep -q 'append to the log' "$dir/sluice.log" ||
            result="FAILED: no append failed on the full fast tier (the case tests nothing; log $dir/sluice.log)"
        umount -l "$tmpfs" || true
    fi
    printf '  %-20s seed %-6s %8s ops %7s s  %s%s\n' "$case" "$seed" "$OPS" "$secs" "$result" \
        "${routed:+  [routed $routed]}"
    FSX_ROWS+=("$case $seed $secs ${result%%:*}")
    if [ "$result" != ok ]; then
        echo "    replay: $replay"
        echo "    or by hand: sluice mount --config $cfg $dir/mnt & fsx -f $fsx_cfg -N $OPS -S $seed -P $dir/artifacts $dir/mnt/fsx.data"
        FAILED+=("fsx $case seed $seed: $result; replay: $replay")
    fi
}

run_fsx() {
    local n_cases n_seeds t0
    read -ra cases <<<"$CASES"
    read -ra seeds <<<"$SEEDS"
    n_cases=${#cases[@]}
    n_seeds=${#seeds[@]}
    echo "== fsx $(fsx --version | awk '{print $2}'): $n_cases cases x $n_seeds seeds x $OPS operations, each on a fresh sluice mount ($PROFILE build)"
    t0=$(date +%s)
    for case in "${cases[@]}"; do
        for seed in "${seeds[@]}"; do
            run_fsx_one "$case" "$seed"
        done
    done
    echo "fsx: $((n_cases * n_seeds)) runs in $(($(date +%s) - t0)) s"
}

echo "== conformance: $PART; sluice $SLUICE; work directory $WORK"
case "$PART" in
    all) run_pjdfstest; run_fsx ;;
    pjdfstest) run_pjdfstest ;;
    fsx) run_fsx ;;
esac

echo "== conformance: done in $(($(date +%s) - started)) s"
if [ ${#FAILED[@]} -gt 0 ]; then
    echo "conformance FAILED:"
    printf '  %s\n' "${FAILED[@]}"
    exit 1
fi
echo "conformance passed"
