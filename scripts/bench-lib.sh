# shellcheck shell=bash
# Sourced, after bench-args.sh (NAME, BUILD, die), by the benchmarks that
# run one FUSE mount at a time and stop it by its daemon's pid
# (bench-mount.sh, bench-policy.sh). The caller `cd`s to the repository and
# sets ROOT first. While a mount runs, MNT is its mount point and PID its
# daemon; bench_traps makes sure both are gone when the script exits, also
# on failure or Ctrl-C.
#
# SLUICE: the sluice binary; the environment may name another one, else
# ${CARGO_TARGET_DIR:-$ROOT/target}/release/sluice.
SLUICE=${SLUICE:-${CARGO_TARGET_DIR:-$ROOT/target}/release/sluice}
PID=""     # the FUSE daemon of the current mount
MNT=""     # the current mount point
TROUBLE=() # problems met on the way (they go into the doc too)

# require_tools HINT TOOL...: die naming the missing tools (HINT says how to
# install them), or if /dev/fuse is missing.
require_tools() {
    local hint=$1 tool missing=()
    shift
    for tool in "$@"; do
        command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        die "missing: ${missing[*]} (install with: $hint)"
    fi
    [ -e /dev/fuse ] || die "/dev/fuse is missing: FUSE is not available here"
}

# size_bytes NAME VALUE: VALUE (256M, 256k, 1GiB, 1048576: binary units,
# as fio reads them) in bytes on stdout, or die naming the variable NAME.
size_bytes() {
    local v=${2%iB} b
    v=${v%[bB]}
    b=$(numfmt --from=iec "${v^^}" 2>/dev/null) || b=""
    [[ "$b" =~ ^[1-9][0-9]*$ ]] || die "$1 must be a size such as 256M or 1G (got '$2')"
    echo "$b"
}

# positive_int NAME VALUE: die unless VALUE is a positive integer.
positive_int() {
    [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer (got '$2')"
}

# abs_path PATH: PATH, made absolute against $ROOT.
abs_path() {
    case "$1" in
        /*) echo "$1" ;;
        *) echo "$ROOT/$1" ;;
    esac
}

# build_sluice: cargo build --release -p sluice-cli unless --no-build, then
# die unless $SLUICE is there.
build_sluice() {
    if [ "$BUILD" = 1 ]; then
        # shellcheck source-path=SCRIPTDIR source=path.sh
        source "$ROOT/scripts/path.sh"
        command -v cargo >/dev/null 2>&1 || die "cargo is missing (or use --no-build with a built $SLUICE)"
        echo "== cargo build --release -p sluice-cli" >&2
        cargo build --release -p sluice-cli >&2
    fi
    [ -x "$SLUICE" ] || die "$SLUICE is missing: run cargo build --release -p sluice-cli (or set SLUICE)"
}

# clear_stale_mount DIR: unmount DIR if an interrupted run left it mounted.
clear_stale_mount() {
    if mountpoint -q "$1" 2>/dev/null; then
        fusermount3 -u "$1" || die "$1 is still mounted; unmount it first"
    fi
}

# check_free DIR BYTES WHAT: die unless DIR's file system has BYTES free.
check_free() {
    local avail
    avail=$(($(df -P -k "$1" | awk 'NR==2 {print $4}') * 1024))
    [ "$avail" -ge "$2" ] ||
        die "$1 has $((avail >> 20)) MiB free, needs about $(($2 >> 20)) MiB for $3"
}

# bench_stop_mount: detach a mount still there, stop its daemon.
# shellcheck disable=SC2317  # called by EXIT traps
bench_stop_mount() {
    if [ -n "$MNT" ] && mountpoint -q "$MNT"; then
        fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT" 2>/dev/null || true
    fi
    if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
        kill "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
    fi
}

# The EXIT trap: bench_stop_mount, keeping the exit status.
# shellcheck disable=SC2317  # called by the EXIT trap
bench_cleanup() {
    local rc=$?
    bench_stop_mount
    exit "$rc"
}

# loop_fs IMAGE DIR SIZE: DIR empty, on a new ext4 file system of SIZE in
# IMAGE, loop-mounted (root and mkfs.ext4): each run of a metadata
# benchmark starts on a file system of its own.
loop_fs() {
    local image=$1 dir=$2 size=$3
    mountpoint -q "$dir" && umount "$dir"
    rm -rf "$dir" "$image"
    mkdir -p "$dir"
    truncate -s "$size" "$image"
    mkfs.ext4 -q -F "$image" >/dev/null
    mount -o loop "$image" "$dir" || die "cannot loop-mount $image on $dir"
    rm -rf "$dir/lost+found"
}

# drop_loop_fs IMAGE DIR: DIR unmounted (lazily if still busy, as at an
# interrupted run's exit) and IMAGE removed.
drop_loop_fs() {
    local image=$1 dir=$2
    if mountpoint -q "$dir" 2>/dev/null; then
        umount "$dir" 2>/dev/null || umount -l "$dir" 2>/dev/null || true
    fi
    rm -f "$image"
}

# bench_traps: run bench_cleanup at exit, also after Ctrl-C or TERM.
bench_traps() {
    trap bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# await_mount MNT PID LOG: wait until MNT is a mount point served by PID,
# 30 s at most; die with LOG if PID exits first or time runs out.
await_mount() {
    local mnt=$1 pid=$2 log=$3 i
    for ((i = 0; i < 60; i++)); do
        mountpoint -q "$mnt" && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "--- $log" >&2
            cat "$log" >&2
            die "the file system exited before $mnt was mounted (log above)"
        fi
        sleep 0.5
    done
    echo "--- $log" >&2
    cat "$log" >&2
    die "$mnt was not mounted after 30 s (log above)"
}

# await_exit PID SECS: wait up to SECS seconds for PID to exit; fail if it
# does not.
await_exit() {
    local pid=$1 secs=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || {
            wait "$pid" 2>/dev/null || true
            return 0
        }
        sleep 0.1
    done
    return 1
}

# stop_mount SYSTEM LOG WHAT: stop the mount at $MNT: `sluice unmount`
# (which drains) when SYSTEM is sluice or sluice-*, else fusermount3 -u;
# then wait for the daemon $PID. On trouble: note it in TROUBLE (WHAT names
# the run), kill the daemon and detach the mount.
stop_mount() {
    local sys=$1 log=$2 what=$3 ok=1
    if [ "${sys%%-*}" = sluice ]; then
        timeout 300 "$SLUICE" unmount "$MNT" >>"$log" 2>&1 || ok=0
    else
        fusermount3 -u "$MNT" >>"$log" 2>&1 || ok=0
    fi
    if [ "$ok" = 1 ] && await_exit "$PID" 120; then
        PID=""
        MNT=""
        return 0
    fi
    TROUBLE+=("$what: the unmount failed or the daemon did not exit (log: $log)")
    echo "$NAME: WARNING: $what: unmount trouble, killing pid $PID; log $log:" >&2
    tail -n 20 "$log" >&2 || true
    kill "$PID" 2>/dev/null || true
    await_exit "$PID" 10 || kill -9 "$PID" 2>/dev/null || true
    mountpoint -q "$MNT" && { fusermount3 -u "$MNT" || fusermount3 -uz "$MNT" || true; }
    PID=""
    MNT=""
}

# stop_nodes SECS [ARGS...]: stop every mount of the arrays POINTS (mount
# points) and PIDS (their daemons): `sluice unmount ARGS POINT` within SECS
# seconds, else a lazy fusermount3 -u; then wait up to 60 s for the daemon,
# else kill it. Empties both arrays.
stop_nodes() {
    local secs=$1 i
    shift
    for i in "${!POINTS[@]}"; do
        if mountpoint -q "${POINTS[$i]}"; then
            timeout "$secs" "$SLUICE" unmount "$@" "${POINTS[$i]}" >/dev/null 2>&1 ||
                fusermount3 -uz "${POINTS[$i]}" 2>/dev/null || true
        fi
        await_exit "${PIDS[$i]}" 60 || kill "${PIDS[$i]}" 2>/dev/null || true
    done
    POINTS=()
    PIDS=()
}

# elapsed T0 T1: T1 - T0 (date +%s.%N stamps) in seconds, 3 decimals.
elapsed() {
    awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", b - a}'
}

# sluice_commit: the commit of $ROOT, noting uncommitted changes under crates/.
sluice_commit() {
    local commit
    commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [ -n "$(git -C "$ROOT" status --porcelain -- crates Cargo.toml Cargo.lock 2>/dev/null)" ]; then
        commit+=" (with uncommitted changes under crates/)"
    fi
    echo "$commit"
}

# machine_summary: "N CPUs (model), M GiB RAM, kernel K".
machine_summary() {
    local cpu mem
    cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
    mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo 2>/dev/null || true)
    echo "$(nproc) CPUs${cpu:+ ($cpu)}, ${mem:-? GiB} RAM, kernel $(uname -r)"
}

# fs_summary DIR: "TYPE on DEVICE" of DIR's file system.
fs_summary() {
    df -P -T "$1" | awk 'NR==2 {print $2 " on " $1}'
}
