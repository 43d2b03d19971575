#!/usr/bin/env bash
# A checkpoint burst on many nodes over one congested disk, per consistency
# mode (issue 34, deliverable 5; the targets: docs/results/multinode-ondemand.md).
#
# NODES `sluice mount`s, each with its own fast tier behind its own
# emulated SATA SSD (fast.device = "ssd", in its process), all over ONE
# capacity directory behind ONE emulated 7200 rpm disk: every mount has
# capacity.device = "hdd" with the same capacity.shared_device state file,
# so their disk models share one platter (crates/env/src/shared_disk.rs):
# services of all mounts never overlap in time, and each seeks from where
# the previous one, of any mount, left the head.
#   What that models: a shared parallel file system whose one disk every
#   node queues on (congested as soon as two nodes write back at once);
#   interleaved streams pay seeks between their files.
#   What it does not: the disk's elevator across nodes (each mount sorts
#   its own queue, C-LOOK; between mounts services go first come, first
#   served), PFS servers, striping, server caches, the network.
#
# Per mode and run:
#   burst  all mounts at once (a common start time), each writes FILES files
#          of FILE_SIZE in BS writes, each ended by fsync and close: the
#          seconds until each of its closes returns (per node, and the max)
#   read   right after every burst ended, node 1 opens node 0's last file
#          and reads it to its last byte, every byte checked: seconds to
#          the open's return and to the last byte; under on-demand that
#          open recalls the file, and the holder's write-back time of it
#          comes from node 0's log ("recall answered ... write_back_s",
#          debug level of sluice_engine::engine::held), and so when node 0
#          picked the recall up (the line's time less that; one host, one
#          clock); the recall counts from `sluice status --json` of both
# The shared disk's busy seconds in the burst come from its state file.
# Modes run interleaved (run 1 of every mode, then run 2, ...). Each run
# gets fresh tiers and a fresh disk; mounts stop with `unmount --keep`
# (what is left in a log is thrown away with the run).
#
# Output: the Markdown table on stdout; unless --no-doc, the table, a PNG
# and the command also go into docs/results/multinode-ondemand.md
# (scripts/bench-doc.py), every run's numbers into multinode-ondemand.jsonl.
#
# Usage: scripts/bench-multinode-ondemand.sh [--no-build] [--no-doc] [-h]
# Environment (defaults):
#   NODES=3                mounts (2 or more)
#   FILES=4                files each node writes
#   FILE_SIZE=64M          bytes per file (FILES x FILE_SIZE per node fits
#                          in one node's log: 1 GiB by default)
#   BS=1M                  bytes per write (at most mount.max_write, 1 MiB)
#   RUNS=3                 repetitions per mode; cells: median (min-max)
#   MODES="on-demand close-to-open node-local"
#   POLICY=fast-all        every write to the log, so the mode alone
#                          decides when bytes reach the disk
#   AGE=30s                flush.age
#   RECALL_WAIT=10s        mount.recall_wait (the default)
#   REDIS=0                1: a redis-server on 127.0.0.1 (scripts/redis.sh,
#                          stopped by its pid at the end) as bbos.meta, so
#                          on-demand recalls ring the holder's doorbell
#                          (docs/fuse.md, "On demand")
#   BENCH_DIR=/tmp/sluice-ondemand-bench   work directory (wiped at start)
#   SLUICE=${CARGO_TARGET_DIR:-target}/release/sluice   the binary
# Needs fusermount3, python3, and cargo unless --no-build.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source-path=SCRIPTDIR source=bench-args.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-args.sh"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-lib.sh"
NODES=${NODES:-3}
FILES=${FILES:-4}
FILE_SIZE=${FILE_SIZE:-64M}
BS=${BS:-1M}
RUNS=${RUNS:-3}
MODES=${MODES:-on-demand close-to-open node-local}
POLICY=${POLICY:-fast-all}
AGE=${AGE:-30s}
RECALL_WAIT=${RECALL_WAIT:-10s}
REDIS=${REDIS:-0}
BENCH_DIR=$(abs_path "${BENCH_DIR:-/tmp/sluice-ondemand-bench}")
HELPER=$ROOT/scripts/multinode_burst.py

require_tools "apt-get install fuse3 python3" fusermount3 mountpoint python3
positive_int NODES "$NODES"
[ "$NODES" -ge 2 ] || die "NODES must be 2 or more (got $NODES)"
positive_int FILES "$FILES"
positive_int RUNS "$RUNS"
file_bytes=$(size_bytes FILE_SIZE "$FILE_SIZE")
bs_bytes=$(size_bytes BS "$BS")
[ $((file_bytes % bs_bytes)) = 0 ] || die "FILE_SIZE must be a multiple of BS"
for m in $MODES; do
    case "$m" in
        on-demand | close-to-open | node-local) ;;
        *) die "unknown mode '$m' in MODES (on-demand close-to-open node-local)" ;;
    esac
done
build_sluice

case "$REDIS" in 0 | 1) ;; *) die "REDIS must be 0 or 1 (got '$REDIS')" ;; esac
[ "$REDIS" = 0 ] || require_tools "apt-get install redis-server" redis-server

# The mounts of the current run: points and daemons.
POINTS=()
PIDS=()
stop_all() {
    stop_nodes 120 --keep
}
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    local rc=$?
    stop_all
    rm -rf "$BENCH_DIR/run"
    [ ! -f "$BENCH_DIR/redis/redis.pid" ] || bash "$ROOT/scripts/redis.sh" stop "$BENCH_DIR/redis" || true
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR/run"
META=""
if [ "$REDIS" = 1 ]; then
    mkdir -p "$BENCH_DIR/redis"
    redis_port=$(bash "$ROOT/scripts/redis.sh" start "$BENCH_DIR/redis")
    META="redis://127.0.0.1:$redis_port"
fi
# Per node: the burst in the log and on the capacity tier.
check_free "$BENCH_DIR" $((NODES * FILES * file_bytes * 3)) "the fast tiers and the capacity files"

# start_nodes MODE RUN_DIR: NODES mounts over RUN_DIR/capacity, one disk.
start_nodes() {
    local mode=$1 dir=$2 i
    mkdir -p "$dir/capacity"
    cat >"$dir/sluice.toml" <<EOF
[fast]
device = "ssd"
[capacity]
device = "hdd"
shared_device = "$dir/disk.state"
[flush]
age = "$AGE"
[mount]
consistency = "$mode"
recall_wait = "$RECALL_WAIT"
EOF
    # A prefix per run: no ring of an earlier run is left for this one.
    [ -z "$META" ] || printf '[bbos]\nmeta = "%s?prefix=%s"\n' "$META" "$(basename "$dir")" >>"$dir/sluice.toml"
    for ((i = 0; i < NODES; i++)); do
        mkdir -p "$dir/fast$i" "$dir/mnt$i"
        RUST_LOG=info,sluice_engine::engine::held=debug \
            "$SLUICE" mount --config "$dir/sluice.toml" --fast "$dir/fast$i" \
            --capacity "$dir/capacity" --policy "$POLICY" "$dir/mnt$i" \
            >>"$dir/mount$i.log" 2>&1 &
        PIDS+=($!)
        POINTS+=("$dir/mnt$i")
        await_mount "$dir/mnt$i" "$!" "$dir/mount$i.log"
    done
}

# status_field MNT FIELD: FIELD of `sluice status --json` (0 if absent).
status_field() {
    "$SLUICE" status --json "$1" 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin).get(sys.argv[1], 0))' "$2" 2>/dev/null ||
        echo 0
}

RESULTS=$BENCH_DIR/results.jsonl
: >"$RESULTS"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
t_start=$(date +%s.%N)
last=$((FILES - 1))
n=0
for ((r = 1; r <= RUNS; r++)); do
    for mode in $MODES; do
        n=$((n + 1))
        dir=$BENCH_DIR/run/$mode-$r
        mkdir -p "$dir"
        start_nodes "$mode" "$dir"
        sync
        busy0=$(python3 "$HELPER" disk "$dir/disk.state")
        start=$(python3 -c 'import time; print(f"{time.monotonic() + 1.0:.6f}")')
        writers=()
        for ((i = 0; i < NODES; i++)); do
            python3 "$HELPER" write "${POINTS[$i]}" "$i" "$FILES" "$file_bytes" "$bs_bytes" \
                "$start" "$dir/burst$i.json" 2>>"$dir/burst.log" &
            writers+=($!)
        done
        for p in "${writers[@]}"; do
            wait "$p" || die "a burst writer failed (log: $dir/burst.log)"
        done
        busy1=$(python3 "$HELPER" disk "$dir/disk.state")
        recalls0=$(status_field "${POINTS[1]}" recalls)
        python3 "$HELPER" read "${POINTS[1]}/n0-f$last" 0 "$last" "$file_bytes" "$bs_bytes" \
            "$dir/read.json"
        recalls1=$(status_field "${POINTS[1]}" recalls)
        answered=$(status_field "${POINTS[0]}" recalls_answered)
        wb=$(python3 "$HELPER" holder-write-back "$dir/mount0.log" "n0-f$last")
        python3 - "$dir" "$NODES" "$mode" "$r" "$busy0" "$busy1" "$((recalls1 - recalls0))" \
            "$answered" "${wb:-}" >>"$RESULTS" <<'EOF'
import json, sys
d, nodes, mode, run, busy0, busy1, recalls, answered, wb = sys.argv[1:10]
bursts = [json.load(open(f"{d}/burst{i}.json")) for i in range(int(nodes))]
read = json.load(open(f"{d}/read.json"))
wb = json.loads(wb) if wb else None
print(json.dumps({
    "mode": mode, "run": int(run),
    "burst_s": [b["burst_s"] for b in bursts],
    "burst_max_s": max(b["burst_s"] for b in bursts),
    "closes_s": [b["closes_s"] for b in bursts],
    "read": read,
    "reader_recalls": int(recalls), "holder_recalls_answered": int(answered),
    "holder_write_back_s": wb["write_back_s"] if wb else None,
    # from the open's start to the holder's reading of the entry
    "holder_picked_up_s": (wb["answered_epoch"] - wb["write_back_s"] - read["open_started_epoch"])
        if wb and "open_started_epoch" in read else None,
    "disk_busy_burst_s": json.loads(busy1)["busy_s"] - json.loads(busy0)["busy_s"],
}))
EOF
        python3 - "$RESULTS" "$n" <<'EOF' >&2
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
rd = r["read"]
read = (f"read {rd['total_s']:.2f} s (open {rd['open_s']:.2f} s)" if rd.get("verified")
        else f"read NOT right ({rd.get('error') or str(rd.get('bytes_right')) + ' bytes right of ' + str(rd.get('bytes_seen'))})")
print(f"[{sys.argv[2]}] {r['mode']} run {r['run']}: burst {r['burst_max_s']:.2f} s "
      f"(nodes {', '.join(f'{b:.2f}' for b in r['burst_s'])}), {read}, "
      f"recalls {r['reader_recalls']}, holder write-back {r['holder_write_back_s']} "
      f"(picked up after {r['holder_picked_up_s']}), "
      f"disk busy in burst {r['disk_busy_burst_s']:.2f} s")
EOF
        stop_all
        rm -rf "$dir"
    done
done
t_end=$(date +%s.%N)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

table=$(python3 "$HELPER" table "$RESULTS" "$NODES" "$FILES" "$file_bytes" "$bs_bytes")
table+=$'\n\n'"Machine: $(machine_summary); tiers under $(fs_summary "$BENCH_DIR"). "
table+="Load average (1, 5, 15 min) before: $load_before; after: $load_after. "
table+="Policy $POLICY, flush.age $AGE, mount.recall_wait $RECALL_WAIT"
[ "$REDIS" = 0 ] || table+=", a Redis catalogue (the recall doorbell)"
table+="; sluice $(sluice_commit)."
echo "$table"
if [ "$WRITE_DOC" = 1 ]; then
    # the raw numbers of every run beside the table
    cp "$RESULTS" "$ROOT/docs/results/multinode-ondemand.jsonl"
    command="NODES=$NODES FILES=$FILES FILE_SIZE=$FILE_SIZE BS=$BS RUNS=$RUNS MODES=\"$MODES\" scripts/bench-multinode-ondemand.sh"
    python3 "$ROOT/scripts/bench-doc.py" bench-multinode-ondemand \
        "$ROOT/docs/results/multinode-ondemand.md" "$table" "$(elapsed "$t_start" "$t_end")" "$command"
fi
