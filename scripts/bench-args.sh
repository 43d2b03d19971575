# shellcheck shell=bash
# Sourced by the benchmark scripts (bench-mount.sh, bench-liu.sh, bench-bbos.sh) after
# `cd` to the repository: their shared flags into BUILD (0 with --no-build)
# and WRITE_DOC (0 with --no-doc), -h printing the caller's header comment,
# and die().
NAME=$(basename "$0")
# shellcheck disable=SC2034 # read by the caller
BUILD=1
# shellcheck disable=SC2034 # read by the caller
WRITE_DOC=1
for a in "$@"; do
    case "$a" in
        --no-build) BUILD=0 ;;
        --no-doc) WRITE_DOC=0 ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "$NAME: unknown argument '$a' (try --help)" >&2
            exit 2
            ;;
    esac
done

die() {
    echo "$NAME: $*" >&2
    exit 1
}

# --- for the benchmarks that run one `sluice mount` at a time at $MNT ------
# (bench-liu.sh, bench-bbos.sh). The caller sets MNT, starts the mount in
# the background and stores its pid in MOUNT_PID.

# require_fuse: die unless fusermount3, mountpoint, python3 and /dev/fuse
# are there.
require_fuse() {
    for tool in fusermount3 mountpoint python3; do
        command -v "$tool" >/dev/null 2>&1 || die "missing: $tool (apt-get install fuse3 python3)"
    done
    [ -e /dev/fuse ] || die "/dev/fuse is missing: FUSE is not available here"
}

# At exit: stop a mount still running and detach it.
MOUNT_PID=
cleanup_mount() {
    if [ -n "$MOUNT_PID" ] && kill -0 "$MOUNT_PID" 2>/dev/null; then
        kill "$MOUNT_PID" 2>/dev/null || true
        wait "$MOUNT_PID" 2>/dev/null || true
    fi
    mountpoint -q "$MNT" 2>/dev/null && fusermount3 -u -z "$MNT" || true
}

# wait_mounted LOG: wait up to 10 s for $MNT to be mounted; die with LOG.
wait_mounted() {
    for _ in $(seq 100); do
        mountpoint -q "$MNT" && return 0
        sleep 0.1
    done
    die "mount failed: $(cat "$1")"
}
