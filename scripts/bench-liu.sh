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
# BUFFER-byte DRAM buffer; policy capacity-only (the write path is not
# under test); mount.threads = 32.
#
# Usage: scripts/bench-liu.sh [--no-build] [--no-doc] [-h]
# Environment (defaults): BYTES=128MiB INTERFERER_BYTES=512MiB BUFFER=64MiB
#   PASSES=2 BENCH_DIR=/tmp/sluice-bench-liu DOC=docs/results/liu-mount.md
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
BENCH_DIR=${BENCH_DIR:-/tmp/sluice-bench-liu}
DOC=${DOC:-docs/results/liu-mount.md}
SLUICE=$ROOT/target/release/sluice
READERS=$ROOT/target/release/sluice-readers

require_fuse
if [ "$BUILD" = 1 ]; then
    cargo build --release -q -p sluice-cli -p sluice-workload
fi
{ [ -x "$SLUICE" ] && [ -x "$READERS" ]; } || die "build first (cargo build --release -p sluice-cli -p sluice-workload)"

rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR/results"
printf '[liu]\nbuffer = "%s"\n' "$BUFFER" >"$BENCH_DIR/liu.toml"
MNT=$BENCH_DIR/mnt
trap cleanup_mount EXIT

started=$(date +%s)
for case in none mpi-io-test ior-mpi-io; do
    for system in off on; do
        run=$BENCH_DIR/run-$case-$system
        mkdir -p "$run/fast" "$run/capacity" "$MNT"
        flag=()
        [ "$system" = on ] && flag=(--liu)
        "$SLUICE" mount --config "$BENCH_DIR/liu.toml" --fast "$run/fast" --capacity "$run/capacity" \
            --fast-device ssd --capacity-device hdd --policy capacity-only --threads 32 \
            "${flag[@]}" "$MNT" >"$run/mount.log" 2>&1 &
        MOUNT_PID=$!
        wait_mounted "$run/mount.log"
        "$READERS" "$MNT" --prepare-in "$run/capacity" --interferer "$case" \
            --bytes "$BYTES" --interferer-bytes "$INTERFERER_BYTES" --passes "$PASSES" \
            >"$BENCH_DIR/results/$case-$system.json"
        "$SLUICE" status --json "$MNT" >"$BENCH_DIR/results/$case-$system.status.json"
        "$SLUICE" unmount "$MNT" >/dev/null
        wait "$MOUNT_PID"
        MOUNT_PID=
        rm -rf "$run"
        echo "bench-liu.sh: $case, LiU $system done" >&2
    done
done
elapsed=$(($(date +%s) - started))

table=$(python3 - "$BENCH_DIR/results" <<'PY'
import json, sys, os
d = sys.argv[1]
names = {"none": "alone", "mpi-io-test": "interfered by mpi-io-test", "ior-mpi-io": "interfered by ior-mpi-io"}
paper = {"none": "264.7 / 304.5 (1.15×)", "mpi-io-test": "130.3 / 273.6 (2.10×)", "ior-mpi-io": "66.7 / 230.2 (3.45×)"}
print("| mpi-io-test read (measured pass) | MB/s LiU off | MB/s LiU on | on/off | mean latency ms off / on | interferer MB/s off / on | paper MB/s w/o / w/ LiU |")
print("|---|---:|---:|---:|---:|---:|---|")
details = []
for case in ["none", "mpi-io-test", "ior-mpi-io"]:
    r = {s: json.load(open(os.path.join(d, f"{case}-{s}.json"))) for s in ["off", "on"]}
    last = {s: r[s]["passes"][-1] for s in r}
    ratio = last["on"]["target_mb_s"] / max(last["off"]["target_mb_s"], 1e-9)
    inter = "–" if case == "none" else f'{last["off"]["interferer_mb_s"]:.1f} / {last["on"]["interferer_mb_s"]:.1f}'
    print(f'| {names[case]} | {last["off"]["target_mb_s"]:.1f} | {last["on"]["target_mb_s"]:.1f} | {ratio:.2f}× | '
          f'{last["off"]["latency_ms_mean"]:.1f} / {last["on"]["latency_ms_mean"]:.1f} | {inter} | {paper[case]} |')
    st = json.load(open(os.path.join(d, f"{case}-on.status.json")))["liu"]
    per_pass = {s: " → ".join(f'{p["target_mb_s"]:.1f}' for p in r[s]["passes"]) for s in r}
    details.append(f'| {names[case]} | {per_pass["off"]} | {per_pass["on"]} | {st["lifts"]} | {st["lifted_loads"]} / {st["whole_loads"]} | {st["buffer_hits"]} | {st["head_reads"]} / {st["capacity_reads"]} | {st["errors"]} |')
print()
print("LiU's counters at the end of each LiU-on case (`sluice status --json`):")
print()
print("| case | target MB/s per pass, LiU off | LiU on (the first pass learns) | lifts | loads head-from-fast / whole | buffer hits | direct reads head / capacity | errors |")
print("|---|---|---|---:|---:|---:|---:|---:|")
print("\n".join(details))
PY
)
echo "$table"
if [ "$WRITE_DOC" = 1 ]; then
    python3 "$ROOT/scripts/bench-doc.py" bench-liu "$DOC" "$table" "$elapsed" \
        "BYTES=$BYTES INTERFERER_BYTES=$INTERFERER_BYTES BUFFER=$BUFFER PASSES=$PASSES scripts/bench-liu.sh ${ARGS[*]}"
fi
