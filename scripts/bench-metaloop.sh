#!/usr/bin/env bash
# The mount's answer to metadata requests without mdtest (issue 33,
# docs/results/mdtest.md, "At parity, and where the time goes"): two
# processes, each a loop of one operation over its own directory of
# FILES files (scripts/metaloop/metaloop.c: create with 3,901 bytes,
# stat that asks the mount, open and close, open-read-close, two renames
# of each file, unlink),
# through mergerfs and a default sluice mount over the same kind of
# directory, each on a fresh ext4 file system (a loop mount, as
# bench-mdtest.sh), the systems alternating for RUNS rounds. The entries
# expire (1.2 s) before the stat and the first open-and-close pass.
#
# Prints one Markdown table: op/s of the two processes together, the
# median of the rounds and their range, per system and operation.
#
# Usage: scripts/bench-metaloop.sh [--no-build] [-h]
# Environment: FILES=5000, RUNS=4, BENCH_DIR=/tmp/sluice-bench-metaloop,
#   SLUICE=${CARGO_TARGET_DIR:-target}/release/sluice, CC=cc.
# Needs root (the loop mount), mergerfs, fusermount3 and a C compiler.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source-path=SCRIPTDIR source=bench-args.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-args.sh"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-lib.sh"

FILES=${FILES:-5000}
RUNS=${RUNS:-4}
BENCH_DIR=${BENCH_DIR:-/tmp/sluice-bench-metaloop}
CC=${CC:-cc}
MERGERFS_OPTS=cache.files=off,func.getattr=newest,category.create=ff # as bench-mdtest.sh
positive_int FILES "$FILES"
positive_int RUNS "$RUNS"
require_tools "apt-get install mergerfs fuse3 gcc" mergerfs fusermount3 mountpoint mkfs.ext4 "$CC"
BENCH_DIR=$(abs_path "$BENCH_DIR")
[ "$BENCH_DIR" != / ] || die "BENCH_DIR must not be /"
build_sluice

rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR"
RUN_DIR=$BENCH_DIR/run
IMAGE=$BENCH_DIR/fs.img
LOOP=$BENCH_DIR/loop
"$CC" -O2 -o "$LOOP" "$ROOT/scripts/metaloop/metaloop.c"
MNT=""
PID=""
bench_traps
# shellcheck disable=SC2317  # called by the EXIT trap
metaloop_cleanup() {
    local rc=$?
    bench_stop_mount
    drop_loop_fs "$IMAGE" "$RUN_DIR"
    exit "$rc"
}
trap metaloop_cleanup EXIT

OPS="create stat openclose read rename unlink"
RESULTS=$BENCH_DIR/results.txt
: >"$RESULTS"
for ((run = 1; run <= RUNS; run++)); do
    for sys in sluice mergerfs; do
        loop_fs "$IMAGE" "$RUN_DIR" 8G
        mkdir -p "$RUN_DIR/raw" "$RUN_DIR/fast" "$RUN_DIR/cap" "$RUN_DIR/mnt"
        MNT=$RUN_DIR/mnt
        log=$BENCH_DIR/$sys.$run.log
        if [ "$sys" = sluice ]; then
            "$SLUICE" mount --fast "$RUN_DIR/fast" --capacity "$RUN_DIR/cap" "$MNT" >"$log" 2>&1 &
        else
            mergerfs -f -o "$MERGERFS_OPTS" "$RUN_DIR/raw" "$MNT" >"$log" 2>&1 &
        fi
        PID=$!
        await_mount "$MNT" "$PID" "$log"
        mkdir "$MNT/a" "$MNT/b"
        sync
        for op in $OPS; do
            case "$op" in stat) sleep 1.2 ;; esac
            "$LOOP" "$MNT/a" "$FILES" "$op" >"$BENCH_DIR/a.out" &
            a=$!
            "$LOOP" "$MNT/b" "$FILES" "$op" >"$BENCH_DIR/b.out" || die "$sys $op failed"
            wait "$a" || die "$sys $op failed"
            rate=$(awk '{s += $2} END {printf "%.0f", s}' "$BENCH_DIR/a.out" "$BENCH_DIR/b.out")
            echo "$sys $op $rate" >>"$RESULTS"
            echo "[$run/$RUNS] $sys $op: $rate op/s" >&2
        done
        stop_mount "$sys" "$log" "$sys run $run"
        drop_loop_fs "$IMAGE" "$RUN_DIR"
    done
done

python3 - "$RESULTS" "$OPS" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
print("| op | sluice op/s (median, range) | mergerfs op/s (median, range) | sluice / mergerfs |")
print("|---|--:|--:|--:|")
for op in sys.argv[2].split():
    cell = {}
    for system in ("sluice", "mergerfs"):
        rates = [float(r[2]) for r in rows if r[0] == system and r[1] == op]
        cell[system] = (statistics.median(rates), min(rates), max(rates))
    s, m = cell["sluice"], cell["mergerfs"]
    print(f"| {op} | {s[0]:,.0f} ({s[1]:,.0f}-{s[2]:,.0f}) | {m[0]:,.0f} ({m[1]:,.0f}-{m[2]:,.0f}) | {s[0] / m[0]:.2f}x |")
PY
