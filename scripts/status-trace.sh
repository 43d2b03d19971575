#!/usr/bin/env bash
# Where a mount's time goes: sample `sluice status --json MNT` every
# INTERVAL seconds while MNT is mounted (waiting for it to appear, up to
# WAIT seconds), into OUT (one JSON object per line: {"t": unix time,
# "s": the status}), until MNT is unmounted or Ctrl-C; then print one line
# per sample: seconds since the first write, MiB buffered, written back by
# the idle pass (wb), by closes and fsyncs (synced), flushed, written
# through FUSE (fw), fsyncs, regions flushed.
#
# Used for issue 32's ior-hard trace (docs/results/io500.md, "Where
# ior-hard's time goes under close-to-open"): start it, then run a phase,
# e.g.
#   scripts/status-trace.sh /tmp/sluice-bench-io500/run/mnt &
#   PHASES=ior-hard SYSTEMS=default CONSISTENCIES=close-to-open REFERENCE=0 \
#     RUNS=1 scripts/bench-io500.sh --no-build --no-doc
# With RUST_LOG=sluice_engine=debug,info in the environment of the mount,
# its log also has a "written back" line per write-back pass (bytes,
# pieces, ms waiting, ms writing and syncing, ms in all).
#
# Usage: scripts/status-trace.sh MNT [OUT]
# Environment: INTERVAL=0.2, WAIT=600, SLUICE (the binary; default
# ${CARGO_TARGET_DIR:-target}/release/sluice).
set -euo pipefail
cd "$(dirname "$0")/.."
MNT=${1:?usage: scripts/status-trace.sh MNT [OUT]}
OUT=${2:-status-trace.jsonl}
INTERVAL=${INTERVAL:-0.2}
WAIT=${WAIT:-600}
SLUICE=${SLUICE:-${CARGO_TARGET_DIR:-target}/release/sluice}
[ -x "$SLUICE" ] || { echo "status-trace: no sluice binary at $SLUICE (cargo build --release)" >&2; exit 2; }

: >"$OUT"
waited=0
until mountpoint -q "$MNT" 2>/dev/null; do
    sleep 0.1
    waited=$((waited + 1))
    if [ "$waited" -gt $((WAIT * 10)) ]; then
        echo "status-trace: $MNT was not mounted within $WAIT s" >&2
        exit 1
    fi
done
trap 'true' INT
while mountpoint -q "$MNT" 2>/dev/null; do
    if s=$("$SLUICE" status --json "$MNT" 2>/dev/null); then
        printf '{"t":%s,"s":%s}\n' "$(date +%s.%N)" "$s" >>"$OUT"
    fi
    sleep "$INTERVAL" || break
done
trap - INT

python3 - "$OUT" <<'EOF'
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
rows = [r for r in rows if r["s"].get("fuse_write_bytes", 0) > 0]
if not rows:
    print("status-trace: no sample with a write")
    sys.exit(0)
t0, mib = rows[0]["t"], float(1 << 20)
print("     s  buffered  wb(idle)  synced  flushed  fuse-written  fsyncs  regions-flushed")
for r in rows:
    s = r["s"]
    print(
        f"{r['t'] - t0:6.2f} {s['buffered_bytes'] / mib:9.1f} {s['written_back_bytes'] / mib:9.1f}"
        f" {s['synced_bytes'] / mib:7.1f} {s['flushed_bytes'] / mib:8.1f}"
        f" {s['fuse_write_bytes'] / mib:13.1f} {s['fuse_fsyncs']:7} {s['regions_flushed']:16}"
    )
EOF
