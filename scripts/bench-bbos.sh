#!/usr/bin/env bash
# BBOS through the mount (issue 7, item 5): checkpointing jobs with
# different periods and MTBFs write through `sluice mount` onto an emulated
# SATA SSD (fast tier) in front of an emulated 7200 rpm HDD (capacity
# tier), the burst buffer over-subscribed OVERS× (DWPP / S), under BBOS,
# Harmonia MaxBW, Harmonia MaxEff and dedicated allocation (DataWarp).
# One Markdown table on stdout and in docs/results/bbos-mount.md, and its
# plot, docs/results/bbos-mount.png (scripts/bench-doc.py, needs gnuplot).
#
# Jobs (sluice-ckpt-load, crates/workload/src/bin/sluice-ckpt-load.rs), as
# ID:PERIOD_S:SIZE_MIB:MTBF_S:VERSIONS: JOBS. Each writes its checkpoint
# in 1 MiB writes, fsyncs, closes, keeps VERSIONS files, and after each
# period fails with probability period/MTBF and restarts by reading its
# newest checkpoint. The planner period is PERIOD; DWPP (from the jobs) is
# 960 MiB per 30 s; S = DWPP / over-subscription.
#
# Bandwidths given to the planner (bytes/s): measured through this mount
# on this machine (140 MB/s checkpoint writes alone), with demotion capped
# at DEMOTE (the capacity tier's share for this burst buffer, so that
# Brmax/Bwmin is near the paper's 1.6/3.0). Baselines use LRU eviction,
# BBOS its own (superseded versions, then lowest failure rate).
#
# Usage: scripts/bench-bbos.sh [--no-build] [--no-doc] [-h]
# Environment (defaults): OVERS="1.3 1.9" DURATION=120 PERIOD=30s
#   DEMOTE=60000000 SCHEMES="bbos maxbw maxeff datawarp"
#   JOBS="a:10:128:20:2 b:15:192:40:2 c:30:192:120:2"
#   BENCH_DIR=/tmp/sluice-bench-bbos DOC=docs/results/bbos-mount.md
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
ARGS=("$@")
# shellcheck source=bench-args.sh
source "$ROOT/scripts/bench-args.sh"
OVERS=${OVERS:-1.3 1.9}
DURATION=${DURATION:-120}
PERIOD=${PERIOD:-30s}
DEMOTE=${DEMOTE:-60000000}
SCHEMES=${SCHEMES:-bbos maxbw maxeff datawarp}
JOBS=${JOBS:-a:10:128:20:2 b:15:192:40:2 c:30:192:120:2}
BENCH_DIR=${BENCH_DIR:-/tmp/sluice-bench-bbos}
DOC=${DOC:-docs/results/bbos-mount.md}
SLUICE=$ROOT/target/release/sluice
LOAD=$ROOT/target/release/sluice-ckpt-load

require_fuse
if [ "$BUILD" = 1 ]; then
    cargo build --release -q -p sluice-cli -p sluice-workload
fi
{ [ -x "$SLUICE" ] && [ -x "$LOAD" ]; } || die "build first (cargo build --release -p sluice-cli -p sluice-workload)"

rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR/results"
MNT=$BENCH_DIR/mnt
trap cleanup_mount EXIT

# DWPP per planner period from the jobs: sum of size × period / job period.
period_s=${PERIOD%s}
dwpp=$(python3 -c "
import sys
p = float('$period_s')
print(int(sum(float(j.split(':')[2]) * 1048576 * p / float(j.split(':')[1]) for j in '$JOBS'.split())))")
load_args=()
for j in $JOBS; do load_args+=(--job "$j"); done

started=$(date +%s)
for over in $OVERS; do
    capacity=$(python3 -c "print(int($dwpp / $over))")
    for scheme in $SCHEMES; do
        run=$BENCH_DIR/run-$over-$scheme
        mkdir -p "$run/fast" "$run/capacity" "$MNT"
        eviction=lru
        [ "$scheme" = bbos ] && eviction=bbos
        cat >"$run/sluice.toml" <<TOML
[bbos]
scheme = "$scheme"
eviction = "$eviction"
capacity = $capacity
period = "$PERIOD"
admit_wait = "60s"
write_max = 140000000
write_min = 105000000
demote_max = $DEMOTE
demote_min = 10000000
idle_demote = $DEMOTE
TOML
        "$SLUICE" mount --config "$run/sluice.toml" --fast "$run/fast" --capacity "$run/capacity" \
            --fast-device ssd --capacity-device hdd --threads 32 --no-drain "$MNT" >"$run/mount.log" 2>&1 &
        MOUNT_PID=$!
        wait_mounted "$run/mount.log"
        for j in $JOBS; do
            IFS=: read -r id period size mtbf versions <<<"$j"
            "$SLUICE" ckpt register --mount "$MNT" --id "$id" --period "${period}s" \
                --size "${size}MiB" --mtbf "${mtbf}s" --versions "$versions" \
                --glob "ckpt/$id/*" >/dev/null
        done
        "$LOAD" "$MNT" "${load_args[@]}" --duration "$DURATION" >"$BENCH_DIR/results/$over-$scheme.json" ||
            die "load failed: $(cat "$BENCH_DIR/results/$over-$scheme.json")"
        "$SLUICE" status --json "$MNT" >"$BENCH_DIR/results/$over-$scheme.status.json"
        "$SLUICE" unmount --keep "$MNT" >/dev/null
        wait "$MOUNT_PID"
        MOUNT_PID=
        rm -rf "$run"
        echo "bench-bbos.sh: over-subscription $over, $scheme done" >&2
    done
done
elapsed=$(($(date +%s) - started))

table=$(python3 - "$BENCH_DIR/results" "$OVERS" "$SCHEMES" <<'PY'
import json, sys, os
d, overs, schemes = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
names = {"bbos": "BBOS", "maxbw": "MaxBW", "maxeff": "MaxEff", "datawarp": "DataWarp"}
print("| DWPP/S | scheme | checkpoints | ckpt MB/s (bytes / time in checkpoints) | latency mean / p95 s | staged / cold / spilled | demoted MiB | restarts hit / miss (ratio) | admission waits | throttled s |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for over in overs:
    for s in schemes:
        r = json.load(open(os.path.join(d, f"{over}-{s}.json")))
        b = json.load(open(os.path.join(d, f"{over}-{s}.status.json")))["bbos"]
        n = sum(j["checkpoints"] for j in r["jobs"])
        by = sum(j["bytes"] for j in r["jobs"])
        busy = sum(j["busy_s"] for j in r["jobs"])
        lats = [j["latency_s"] for j in r["jobs"] if j["latency_s"]["n"]]
        mean = sum(l["mean"] * l["n"] for l in lats) / max(1, sum(l["n"] for l in lats))
        p95 = max((l["p95"] for l in lats), default=0)
        staged = b["checkpoints"] - b["cold_direct"] - b["spills"]
        h, m = b["restart_hits"], b["restart_misses"]
        ratio = f"{h / (h + m):.2f}" if h + m else "–"
        print(f'| {over} | {names.get(s, s)} | {n} | {by / max(busy, 1e-9) / 1e6:.1f} | {mean:.2f} / {p95:.2f} | '
              f'{staged} / {b["cold_direct"]} / {b["spills"]} | {b["demoted_bytes"] / 1048576:.0f} | {h} / {m} ({ratio}) | '
              f'{b["admission_waits"]} | {b["throttle_ns"] / 1e9:.1f} |')
PY
)
echo "$table"
if [ "$WRITE_DOC" = 1 ]; then
    python3 "$ROOT/scripts/bench-doc.py" bench-bbos "$DOC" "$table" "$elapsed" \
        "OVERS='$OVERS' DURATION=$DURATION PERIOD=$PERIOD DEMOTE=$DEMOTE JOBS='$JOBS' scripts/bench-bbos.sh ${ARGS[*]}"
fi
