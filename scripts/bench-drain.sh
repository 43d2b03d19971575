#!/usr/bin/env bash
# Drain benchmark (issue 18, "a flusher that drains at disk speed"): how
# fast buffered random data reaches the capacity tier, through the mount.
#
# For each flusher setting in SETTINGS and each request size in BS, RUNS
# times: a fresh `sluice mount --policy fast-all --fast-device ssd
# --capacity-device hdd` (emulated SATA SSD log, emulated 7200 rpm disk)
# with a log of 4 x 256 MiB, `flush.idle = "1h"` and `mount.consistency =
# "node-local"` (nothing flushes or is written back before the drain, so
# the drain flushes everything); fio writes SIZE to one file
# in random order, every block once, ending with fsync; then `sluice drain`
# is timed, while `sluice status --json` is sampled every 50 ms. Printed
# per run: the drain command's wall time and MiB/s, and the rate while
# flushing (from the first to the last sampled change of flushed_bytes).
# Random data covering the whole file is contiguous once sorted, so a
# flusher that merges and orders it should drain near the disk's
# sequential rate: 200 MB/s = 190.7 MiB/s at the emulated disk's outer edge.
#
# SETTINGS is a list of flush settings separated by ';', each a
# comma-separated list of key=value for the [flush] section (e.g.
# "writers=1;writers=4"); "default" means none.
#
# Usage: scripts/bench-drain.sh [--no-build] [-h]
# Environment (defaults):
#   SIZE=480M  BS="256k 64k"  RUNS=3  SETTINGS="writers=1;default"
#   BENCH_DIR=/tmp/sluice-drain-bench
# Needs fio, fusermount3, python3.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source-path=SCRIPTDIR source=bench-args.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-args.sh"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-lib.sh"

SIZE=${SIZE:-480M}
BS=${BS:-256k 64k}
RUNS=${RUNS:-3}
SETTINGS=${SETTINGS:-writers=1;default}
BENCH_DIR=$(abs_path "${BENCH_DIR:-/tmp/sluice-drain-bench}")
[ "$BENCH_DIR" != / ] || die "BENCH_DIR must not be /"

require_tools "apt-get install fio fuse3 python3" fio fusermount3 mountpoint python3
positive_int RUNS "$RUNS"
bytes=$(size_bytes SIZE "$SIZE")
for b in $BS; do size_bytes BS "$b" >/dev/null; done
build_sluice
bench_traps
mkdir -p "$BENCH_DIR"
clear_stale_mount "$BENCH_DIR/mnt"
check_free "$BENCH_DIR" $((bytes * 3)) "SIZE=$SIZE"

IFS=';' read -ra SETS <<<"$SETTINGS"
printf '| flush settings | request | run | drain command s | drain MiB/s | MiB/s while flushing |\n'
printf '|---|---|---:|---:|---:|---:|\n'
for setting in "${SETS[@]}"; do
    for bs in $BS; do
        for ((run = 1; run <= RUNS; run++)); do
            rm -rf "${BENCH_DIR:?}/fast" "${BENCH_DIR:?}/cap" "${BENCH_DIR:?}/mnt"
            mkdir -p "$BENCH_DIR/fast" "$BENCH_DIR/cap" "$BENCH_DIR/mnt"
            {
                # node-local: under close-to-open fio's closing fsync would
                # write everything back, leaving nothing to drain.
                printf '[mount]\nconsistency = "node-local"\n'
                printf '[log]\nregions = 4\nregion_size = "256MiB"\n[flush]\nidle = "1h"\n'
                if [ "$setting" != default ]; then
                    tr ',' '\n' <<<"$setting" | sed -E 's/^ *([a-z_]+) *= *(.*)$/\1 = \2/'
                fi
            } >"$BENCH_DIR/config.toml"
            MNT=$BENCH_DIR/mnt
            "$SLUICE" mount --config "$BENCH_DIR/config.toml" --fast "$BENCH_DIR/fast" \
                --capacity "$BENCH_DIR/cap" --fast-device ssd --capacity-device hdd \
                --policy fast-all "$MNT" >"$BENCH_DIR/mount.log" 2>&1 &
            PID=$!
            await_mount "$MNT" "$PID" "$BENCH_DIR/mount.log"
            fio --name=w --filename="$MNT/f" --rw=randwrite --bs="$bs" --size="$SIZE" \
                --ioengine=psync --direct=0 --end_fsync=1 --fallocate=none \
                --randrepeat=1 --output-format=terse >/dev/null
            samples=$BENCH_DIR/samples
            : >"$samples"
            (
                while :; do
                    printf '%s %s\n' "$(date +%s.%N)" "$("$SLUICE" status "$MNT" --json |
                        python3 -c 'import json, sys; print(json.load(sys.stdin)["flushed_bytes"])')"
                    sleep 0.05
                done
            ) >>"$samples" 2>/dev/null &
            sampler=$!
            t0=$(date +%s.%N)
            "$SLUICE" drain "$MNT" >/dev/null
            t1=$(date +%s.%N)
            kill "$sampler" 2>/dev/null || true
            wait "$sampler" 2>/dev/null || true
            python3 - "$setting" "$bs" "$run" "$(elapsed "$t0" "$t1")" "$bytes" "$samples" <<'PY'
import sys
setting, bs, run, secs, total, path = sys.argv[1:]
secs, total = float(secs), int(total)
rows = []
for line in open(path):
    parts = line.split()
    if len(parts) == 2:
        rows.append((float(parts[0]), int(parts[1])))
moved = [t for (t, b), (_, b0) in zip(rows[1:], rows) if b != b0]
flushing = "-"
if len(moved) >= 2 and rows[-1][1] > 0:
    first, last = moved[0], moved[-1]
    done_before = next(b for t, b in rows if t >= first)
    if last > first:
        flushing = "%.1f" % ((rows[-1][1] - done_before) / 1048576 / (last - first))
print("| %s | %s | %s | %.2f | %.1f | %s |" % (setting, bs, run, secs, total / 1048576 / secs, flushing))
PY
            stop_mount sluice "$BENCH_DIR/mount.log" "$setting $bs run $run"
        done
    done
done
