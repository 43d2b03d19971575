#!/usr/bin/env bash
# Many nodes over one parallel file system (issue 20, deliverable 6): NODES
# `sluice mount`s, each with its own fast tier, all over ONE capacity
# directory, under each consistency mode (mount.consistency):
#   aggregate   NODES fio jobs at once, one per mount, each writing its own
#               file (sequential 1 MiB writes, SIZE each, psync, ending with
#               fsync, then close): the summed MB/s, fsync and close included
#   visibility  one mount writes VIS_SIZE bytes to a new file and closes
#               it; the seconds until another mount's stat shows the whole
#               size and a read of it through that mount gives the bytes
# One Markdown table on stdout (a cell is the median of RUNS runs).
# (A checkpoint burst on NODES mounts behind ONE shared emulated disk, per
# mode, with a cross-node read: scripts/bench-multinode-ondemand.sh.)
#
# The capacity directory is CAPACITY: a plain directory by default (one
# kernel arbitrates, as a coherent PFS would); a directory on a parallel
# file system, or on the loopback Gluster volume of scripts/gluster.sh
# (`scripts/gluster.sh start DIR` prints its mount point), gives the real
# picture. Every run gets fresh fast tiers and a fresh directory under it.
#
# Usage: scripts/bench-multinode.sh [--no-build] [-h]
# Environment (defaults):
#   NODES=2                        mounts (2 or more)
#   SIZE=128M                      data each aggregate job writes
#   VIS_SIZE=16M                   the file the visibility run writes
#   RUNS=3                         repetitions; a cell is their median
#   MODES="close-to-open node-local"   (on-demand too)
#   POLICY=fast-all                every write to the log, so what other
#                                  nodes see is what the mode puts there
#   AGE=30s                        flush.age (node-local's bound)
#   BENCH_DIR=/tmp/sluice-multinode   work directory (wiped at the start)
#   CAPACITY=$BENCH_DIR/capacity   the shared capacity directory's parent
#   SLUICE=${CARGO_TARGET_DIR:-target}/release/sluice   the binary
# Needs fio, fusermount3, python3, and cargo unless --no-build.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source-path=SCRIPTDIR source=bench-args.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-args.sh"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-lib.sh"
NODES=${NODES:-2}
SIZE=${SIZE:-128M}
VIS_SIZE=${VIS_SIZE:-16M}
RUNS=${RUNS:-3}
MODES=${MODES:-close-to-open node-local}
POLICY=${POLICY:-fast-all}
AGE=${AGE:-30s}
BENCH_DIR=$(abs_path "${BENCH_DIR:-/tmp/sluice-multinode}")
CAPACITY=$(abs_path "${CAPACITY:-$BENCH_DIR/capacity}")

require_tools "apt-get install fio fuse3 python3" fio fusermount3 mountpoint python3
positive_int NODES "$NODES"
[ "$NODES" -ge 2 ] || die "NODES must be 2 or more (got $NODES)"
positive_int RUNS "$RUNS"
size_bytes SIZE "$SIZE" >/dev/null
vis_bytes=$(size_bytes VIS_SIZE "$VIS_SIZE")
for m in $MODES; do
    case "$m" in
        close-to-open | node-local | on-demand) ;;
        *) die "unknown mode '$m' in MODES (close-to-open node-local on-demand)" ;;
    esac
done
build_sluice

# The mounts of the current run: points and daemons.
POINTS=()
PIDS=()
stop_all() {
    stop_nodes 300
}
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    local rc=$?
    stop_all
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rm -rf "$BENCH_DIR/run"
mkdir -p "$BENCH_DIR/run" "$CAPACITY"
check_free "$BENCH_DIR" $(((NODES * $(size_bytes SIZE "$SIZE")) * 2)) "the fast tiers and the capacity files"

# start_nodes MODE RUN_DIR: NODES mounts over RUN_DIR's capacity directory.
start_nodes() {
    local mode=$1 dir=$2 i cap
    cap=$CAPACITY/$(basename "$dir")
    mkdir -p "$cap"
    printf '[flush]\nage = "%s"\n[mount]\nconsistency = "%s"\n' "$AGE" "$mode" >"$dir/sluice.toml"
    for ((i = 0; i < NODES; i++)); do
        mkdir -p "$dir/fast$i" "$dir/mnt$i"
        "$SLUICE" mount --config "$dir/sluice.toml" --fast "$dir/fast$i" --capacity "$cap" \
            --policy "$POLICY" "$dir/mnt$i" >>"$dir/mount$i.log" 2>&1 &
        PIDS+=($!)
        POINTS+=("$dir/mnt$i")
        await_mount "$dir/mnt$i" "$!" "$dir/mount$i.log"
    done
}

# median of the numbers on stdin
median() {
    sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

declare -A AGG VIS
n=0
for mode in $MODES; do
    for ((r = 1; r <= RUNS; r++)); do
        n=$((n + 1))
        dir=$BENCH_DIR/run/$mode-$r
        mkdir -p "$dir"
        # aggregate: one fio job per mount, all at once
        start_nodes "$mode" "$dir"
        sync
        fio_pids=()
        for ((i = 0; i < NODES; i++)); do
            fio --name=agg$i --rw=write --bs=1M --size="$SIZE" --ioengine=psync --direct=0 \
                --end_fsync=1 --fallocate=none --output-format=json \
                --directory="${POINTS[$i]}" --output="$dir/fio$i.json" >>"$dir/fio.log" 2>&1 &
            fio_pids+=($!)
        done
        for p in "${fio_pids[@]}"; do
            wait "$p" || die "fio failed (log: $dir/fio.log)"
        done
        mbs=$(python3 - "$dir" "$NODES" <<'EOF'
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
total = 0.0
for i in range(n):
    with open(f"{d}/fio{i}.json") as f:
        job = json.load(f)["jobs"][0]["write"]
    # bytes over the job's whole runtime (fsync included)
    total += job["io_bytes"] / (job["runtime"] / 1000.0) / 1e6
print(f"{total:.0f}")
EOF
)
        AGG[$mode]+="$mbs "
        # visibility: node 0 writes and closes, node 1 looks
        secs=$(python3 - "${POINTS[0]}/vis" "${POINTS[1]}/vis" "$vis_bytes" <<'EOF'
import hashlib, os, sys, time
src, seen, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = os.urandom(size)
want = hashlib.sha256(data).digest()
with open(src, "wb") as f:
    f.write(data)
t0 = time.monotonic()
while time.monotonic() - t0 < 600:
    try:
        if os.stat(seen).st_size == size:
            with open(seen, "rb") as f:
                if hashlib.sha256(f.read()).digest() == want:
                    print(f"{time.monotonic() - t0:.3f}")
                    sys.exit(0)
    except FileNotFoundError:
        pass
    time.sleep(0.01)
print("timeout")
EOF
)
        VIS[$mode]+="$secs "
        echo "[$n] $mode run $r: aggregate $mbs MB/s, visible after $secs s" >&2
        stop_all
        rm -rf "$dir" "${CAPACITY:?}/$(basename "$dir")"
    done
done

echo "| mode | $NODES mounts writing at once (MB/s, $SIZE each) | another mount sees a closed $VIS_SIZE file after (s) |"
echo "|---|---:|---:|"
for mode in $MODES; do
    a=$(tr ' ' '\n' <<<"${AGG[$mode]}" | grep -v '^$' | median)
    v=$(tr ' ' '\n' <<<"${VIS[$mode]}" | grep -v '^$' | median)
    echo "| $mode | $a | $v |"
done
echo "(policy $POLICY, flush.age $AGE, $RUNS runs each, medians; capacity $CAPACITY; $(sluice_commit))"
