#!/usr/bin/env bash
# LiU through the mount (issue 6, item 5): the LiU paper's Table II cases as
# real threads reading real files through `sluice mount`, capacity tier an
# emulated 7200 rpm HDD (--capacity-device hdd), fast tier an emulated SATA
# SSD, LiU off vs on, one Markdown table on stdout and in
# docs/results/liu-mount.md (with date, machine and command), and its plot,
# docs/results/liu-mount.png (scripts/bench-doc.py, needs gnuplot).
#
# Cases (sluice-readers, crates/workload/src/bin/sluice-readers.rs): the target
# mpi-io-test (14 ranks, 64 KiB requests, a barrier per iteration) reads
# BYTES alone, while a second mpi-io-test reads its own file, or while
# ior-mpi-io (14 ranks, each a contiguous 1/14) reads a file of
# INTERFERER_BYTES. The files are written straight into the capacity
# directory before the reads (--prepare-in), so LiU learns only from reads.
# PASSES read passes of the target; the last is the measured one. Every
# case and system gets a fresh mount over fresh tiers.
#
# LiU settings: the defaults (1 MiB head, 4 MiB body, 4 sections) with a
# BUFFER-byte DRAM buffer and liu.sharing = SHARING (per-file, sluice's
# default; paper, the LiU paper's one LRU order: docs/liu.md, "Two
# readers"), with liu.time_share = TIME_SHARE ("The disk's time");
# policy capacity-only (the write path is not under test);
# mount.threads = 32.
#
# RUNS repeats every case, interleaved (run 1 of every case and system,
# then run 2, ...). The tables give per case the median over the runs with
# the range (min–max) in brackets: of each reader's MB/s in the measured
# pass, of the on/off ratio of runs paired by their number, and of the
# aggregate (target + interferer MB/s). The load average (1 min) is taken
# before each mount. CASES picks cases (default all three).
#
# The mpi-io-test interferer meets at a barrier after each request, as the
# paper's mpi-io-test does; INTERFERER_BARRIERS=0 runs it without (its
# ranks drift apart: how this script ran before issue 38).
#
# Usage: scripts/bench-liu.sh [--no-build] [--no-doc] [-h]
# Environment (defaults): BYTES=128MiB INTERFERER_BYTES=512MiB BUFFER=64MiB
#   PASSES=2 RUNS=5 SHARING=per-file TIME_SHARE=0.5
#   CASES="none mpi-io-test ior-mpi-io"
#   INTERFERER_BARRIERS=1
#   BENCH_DIR=/tmp/sluice-bench-liu DOC=docs/results/liu-mount.md
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
ARGS=("$@")
# shellcheck source=bench-args.sh
source "$ROOT/scripts/bench-args.sh"
BYTES=${BYTES:-128MiB}
INTERFERER_BYTES=${INTERFERER_BYTES:-512MiB}
BUFFER=${BUFFER:-64MiB}
PASSES=${PASSES:-2}
RUNS=${RUNS:-5}
SHARING=${SHARING:-per-file}
TIME_SHARE=${TIME_SHARE:-0.5}
CASES=${CASES:-none mpi-io-test ior-mpi-io}
INTERFERER_BARRIERS=${INTERFERER_BARRIERS:-1}
BENCH_DIR=${BENCH_DIR:-/tmp/sluice-bench-liu}
DOC=${DOC:-docs/results/liu-mount.md}
SLUICE=${SLUICE:-$ROOT/target/release/sluice}
READERS=$ROOT/target/release/sluice-readers

require_fuse
if [ "$BUILD" = 1 ]; then
    cargo build --release -q -p sluice-cli -p sluice-workload
fi
{ [ -x "$SLUICE" ] && [ -x "$READERS" ]; } || die "build first (cargo build --release -p sluice-cli -p sluice-workload)"

rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR/results"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer (got '$RUNS')"
case "$INTERFERER_BARRIERS" in 0 | 1) ;; *) die "INTERFERER_BARRIERS must be 0 or 1 (got '$INTERFERER_BARRIERS')" ;; esac
case "$SHARING" in per-file | paper) ;; *) die "SHARING must be per-file or paper (got '$SHARING')" ;; esac
[[ "$TIME_SHARE" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "TIME_SHARE must be a number from 0 to 8 (got '$TIME_SHARE')"
read -r -a CASE_LIST <<<"$CASES"
for case in "${CASE_LIST[@]}"; do
    case "$case" in none | mpi-io-test | ior-mpi-io) ;; *) die "unknown case '$case' in CASES" ;; esac
done
printf '[liu]\nbuffer = "%s"\nsharing = "%s"\ntime_share = %s\n' "$BUFFER" "$SHARING" "$TIME_SHARE" >"$BENCH_DIR/liu.toml"
MNT=$BENCH_DIR/mnt
trap cleanup_mount EXIT

barrier_flag=()
[ "$INTERFERER_BARRIERS" = 1 ] || barrier_flag=(--interferer-without-barriers)
started=$(date +%s)
for n in $(seq "$RUNS"); do
    for case in "${CASE_LIST[@]}"; do
        for system in off on; do
            run=$BENCH_DIR/run-$case-$system
            out=$BENCH_DIR/results/$case-$system-$n
            mkdir -p "$run/fast" "$run/capacity" "$MNT"
            cut -d' ' -f1 /proc/loadavg >"$out.load"
            flag=()
            [ "$system" = on ] && flag=(--liu)
            "$SLUICE" mount --config "$BENCH_DIR/liu.toml" --fast "$run/fast" --capacity "$run/capacity" \
                --fast-device ssd --capacity-device hdd --policy capacity-only --threads 32 \
                "${flag[@]}" "$MNT" >"$run/mount.log" 2>&1 &
            MOUNT_PID=$!
            wait_mounted "$run/mount.log"
            "$READERS" "$MNT" --prepare-in "$run/capacity" --interferer "$case" \
                --bytes "$BYTES" --interferer-bytes "$INTERFERER_BYTES" --passes "$PASSES" \
                "${barrier_flag[@]}" --after-pass "sh -c '$SLUICE status --json $MNT >$out.pass-{pass}.status.json'" \
                >"$out.json"
            "$SLUICE" status --json "$MNT" >"$out.status.json"
            "$SLUICE" unmount "$MNT" >/dev/null
            wait "$MOUNT_PID"
            MOUNT_PID=
            rm -rf "$run"
            echo "bench-liu.sh: run $n/$RUNS, $case, LiU $system done (load $(cat "$out.load"))" >&2
        done
    done
done
elapsed=$(($(date +%s) - started))

table=$(python3 "$ROOT/scripts/liu_table.py" "$BENCH_DIR/results" "$RUNS" "${CASE_LIST[@]}")
echo "$table"
if [ "$WRITE_DOC" = 1 ]; then
    python3 "$ROOT/scripts/bench-doc.py" bench-liu "$DOC" "$table" "$elapsed" \
        "BYTES=$BYTES INTERFERER_BYTES=$INTERFERER_BYTES BUFFER=$BUFFER PASSES=$PASSES RUNS=$RUNS SHARING=$SHARING TIME_SHARE=$TIME_SHARE INTERFERER_BARRIERS=$INTERFERER_BARRIERS scripts/bench-liu.sh ${ARGS[*]}"
fi
