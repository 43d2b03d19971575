#!/usr/bin/env bash
# Benchmark `sluice xfer` (LADS) side by side with its peers, in one run:
#
# 1. Loopback, two sets: SMALL files of 1 MB (2,000) and BIG files of
#    256 MiB (4, as issue 36 measured). sluice xfer send in
#    congestion-aware mode (ca) and in its own file-at-a-time mode (file,
#    the bbcp model) to a sink that syncs every file (the default) and in
#    ca mode to one started with --no-fsync (rsync's durability); rsync to
#    an rsync daemon (no encryption), with and without --fsync; rclone to
#    `rclone serve sftp` (encrypted, like sluice's TLS; each round and
#    cache state into a directory of its own, or rclone finds the previous
#    copy in the server's directory cache and sends nothing). Then each set is
#    sent again over a complete copy (a rerun): sluice and rsync should
#    find every file unchanged and move no data.
# 2. Local copies of the same sets into a directory on the same disk:
#    sluice xfer copy (every file synced before its rename, the default;
#    with --verify, every file also read back from the device; with
#    --no-fsync), cp -a alone and followed by a sync, rsync -a and
#    rclone's local copy, each followed by a sync. Then a rerun of sluice
#    xfer copy and rsync -a over a complete copy.
# 3. An emulated 16-target PFS at the source (`--layout pfs`: a 7200 rpm
#    disk model per target, one request at a time) holding the BIG set
#    striped over PFS_STRIPE targets, with PFS_CONGESTED targets slowed
#    PFS_FACTOR×, the congested set moving PFS_ROTATE targets on every
#    PFS_PERIOD (congestion that wanders, as in the paper's Fig. 10):
#    round-robin vs congestion-aware vs file-at-a-time, PFS_THREADS threads.
#
# Before every timed command the destination is removed and `sync` run
# (untimed), and the source set is put in the cache state of the row:
# warm (read once, so the page cache holds it) or cold (its pages dropped
# with posix_fadvise(DONTNEED), file by file: what issue 36 measured after
# dropping the caches, without dropping other people's). CACHES says which
# states to measure (default both). Wall time is measured by this script
# around each command, and every copy is checked (file count and bytes).
#
# Every measurement is repeated REPS times, the tools taking turns within
# each round, and the tables give the median with the range and the
# 1-minute load average (median of the rounds) when the command started:
# on a shared machine one run of each says little. A last table compares
# the medians with issue 36's targets.
#
# Writes the tables into docs/results/lads-bench.md, and their plots
# (lads-bench.png, lads-bench-local.png, lads-bench-pfs.png, by
# scripts/bench-doc.py with gnuplot) beside it (unless --no-doc).
# Env: WORK (scratch dir, default /tmp/sluice-bench-xfer; needs about
# 3 × (SMALL MB + BIG × 268 MB)), REPS (3), SMALL (2000), BIG (4),
# THREADS (8), CACHES ("warm cold"), PFS_THREADS (8), PFS_CONGESTED (0-3),
# PFS_FACTOR (8), PFS_PERIOD (2s), PFS_ROTATE (4), PFS_STRIPE (4), PORT
# (base port, 7400), PARTS (loop,local,pfs: which parts to run).
# Flags: --no-build, --no-doc, -h.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench-args.sh
. scripts/bench-args.sh

WORK=${WORK:-/tmp/sluice-bench-xfer}
SMALL=${SMALL:-2000}
BIG=${BIG:-4}
THREADS=${THREADS:-8}
CACHES=${CACHES:-warm cold}
PFS_THREADS=${PFS_THREADS:-8}
PFS_CONGESTED=${PFS_CONGESTED:-0-3}
PFS_FACTOR=${PFS_FACTOR:-8}
PFS_PERIOD=${PFS_PERIOD:-2s}
PFS_ROTATE=${PFS_ROTATE:-4}
PARTS=${PARTS:-loop,local,pfs}
PFS_STRIPE=${PFS_STRIPE:-4}
PORT=${PORT:-7400}
REPS=${REPS:-3}

for tool in rsync rclone python3; do
    command -v "$tool" >/dev/null 2>&1 || die "missing: $tool (scripts/setup.sh installs it)"
done
if [ "$BUILD" = 1 ]; then cargo build --release -q -p sluice-cli; fi
SLUICE=${CARGO_TARGET_DIR:-$PWD/target}/release/sluice
[ -x "$SLUICE" ] || die "no $SLUICE (build it or drop --no-build)"

START=$(date +%s)
UPTIME_START=$(uptime)
rm -rf "$WORK"
mkdir -p "$WORK/src/small" "$WORK/src/big" "$WORK/keys"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

echo "making the sets in $WORK/src" >&2
python3 - "$WORK/src" "$SMALL" "$BIG" <<'EOF'
import os, sys
root, small, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(small):
    with open(f"{root}/small/f{i:05}", "wb") as f:
        f.write(os.urandom(1_000_000))
for i in range(big):
    with open(f"{root}/big/b{i}", "wb") as f:
        for _ in range(256):
            f.write(os.urandom(1 << 20))
EOF
sync

# --- servers ---------------------------------------------------------------
"$SLUICE" xfer keygen --out "$WORK/keys" >/dev/null
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/token"
mkdir -p "$WORK/dst-sluice" "$WORK/dst-sluice-nofsync" "$WORK/dst-rsync" "$WORK/dst-rclone" "$WORK/dst-local"
"$SLUICE" xfer serve --root "$WORK/dst-sluice" --listen "127.0.0.1:$PORT" \
    --cert "$WORK/keys/sluice.crt" --key "$WORK/keys/sluice.key" --token-file "$WORK/token" 2>"$WORK/serve.log" &
PIDS+=($!)
"$SLUICE" xfer serve --root "$WORK/dst-sluice-nofsync" --listen "127.0.0.1:$((PORT + 3))" --no-fsync \
    --cert "$WORK/keys/sluice.crt" --key "$WORK/keys/sluice.key" --token-file "$WORK/token" 2>"$WORK/serve-nofsync.log" &
PIDS+=($!)
cat >"$WORK/rsyncd.conf" <<EOF
pid file = $WORK/rsyncd.pid
use chroot = false
uid = $(id -un)
gid = $(id -gn)
[dst]
path = $WORK/dst-rsync
read only = false
EOF
rsync --daemon --no-detach --address=127.0.0.1 --port=$((PORT + 1)) --config="$WORK/rsyncd.conf" &
PIDS+=($!)
export RCLONE_CONFIG=$WORK/rclone.conf
: >"$RCLONE_CONFIG"
rclone serve sftp "$WORK/dst-rclone" --addr "127.0.0.1:$((PORT + 2))" --user bench --pass bench \
    --cache-dir "$WORK/rclone-cache" 2>"$WORK/rclone.log" &
PIDS+=($!)
RCLONE_PASS=$(rclone obscure bench)
sleep 2

# cache STATE SET: put the source set in the page cache (warm) or drop
# its pages, file by file (cold).
cache() {
    python3 - "$1" "$WORK/src/$2" <<'EOF'
import os, sys
state, root = sys.argv[1], sys.argv[2]
for name in sorted(os.listdir(root)):
    fd = os.open(os.path.join(root, name), os.O_RDONLY)
    if state == "cold":
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    else:
        while os.read(fd, 1 << 20):
            pass
    os.close(fd)
EOF
}

# run NAME SET DSTDIR COMMAND...: time COMMAND from the cache state $CACHE,
# check DSTDIR/SET, record the time under PART in TIMES.
TIMES=$WORK/times.tsv
: >"$TIMES"
PART=loop
CACHE=warm
run() {
    local name=$1 set=$2 dst=$3
    shift 3
    rm -rf "${dst:?}/$set"
    sync
    cache "$CACHE" "$set"
    local t0 t1 load
    load=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    "$@" >"$WORK/last.out" 2>"$WORK/last.err" || {
        cat "$WORK/last.err" >&2
        die "$name on $set failed"
    }
    t1=$(date +%s.%N)
    local want got nwant ngot
    want=$(find "$WORK/src/$set" -type f -printf '%s\n' | awk '{s += $1} END {printf "%d\n", s}')
    got=$(find "$dst/$set" -type f -printf '%s\n' | awk '{s += $1} END {printf "%d\n", s}')
    nwant=$(find "$WORK/src/$set" -type f | wc -l)
    ngot=$(find "$dst/$set" -type f | wc -l)
    [ "$want" = "$got" ] && [ "$nwant" = "$ngot" ] || die "$name on $set: copied $ngot files / $got bytes, want $nwant / $want"
    local secs mbs
    secs=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
    mbs=$(python3 -c "print(f'{$want / 1e6 / ($t1 - $t0):.1f}')")
    echo "$name $set ($CACHE): $secs s, $mbs MB/s, load $load" >&2
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$PART" "$set ($CACHE)" "$name" "$secs" "$want" "$load" "$(extra "$name")" >>"$TIMES"
    rm -rf "${dst:?}/$set"
}
# table PART [EXTRA_HEADER]: one row per set and tool, the median time of
# its runs.
table() {
    python3 - "$TIMES" "$1" <<'EOF'
import collections, statistics, sys
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    part, set_, name, secs, want, load, extra = line.rstrip("\n").split("\t")
    if part == sys.argv[2]:
        rows.setdefault((set_, name), []).append((float(secs), int(want), float(load), extra))
def order(set_):
    # small before big, warm before cold
    return (set_.split()[0] != "small", "cold" in set_)
for (set_, name), runs in sorted(rows.items(), key=lambda kv: order(kv[0][0])):
    secs = sorted(r[0] for r in runs)
    med = statistics.median(secs)
    load = statistics.median(r[2] for r in runs)
    extra = f" {runs[-1][3]} |" if runs[-1][3] != "-" else ""
    print(f"| {set_} | {name} | {med:.2f} | {secs[0]:.2f}–{secs[-1]:.2f} | {runs[0][1] / 1e6 / med:.1f} | {load:.1f} |{extra}")
EOF
}
extra() {
    case "$PART:$1" in
        loop:sluice*) python3 -c "import json,sys; s=json.load(open('$WORK/last.out')); print(f\"{s['busy_skips']} busy / {s['congested_skips']} congested skips, {s['congested_marks']} marks\")" ;;
        pfs:*) python3 -c "import json,sys; s=json.load(open('$WORK/last.out')); print(f\"{s['busy_skips']} busy / {s['congested_skips']} congested skips, {s['congested_marks']} marks\")" ;;
        loop:*) echo "" ;;
        *) echo "-" ;;
    esac
}
sluice_send() {
    sluice_send_to "$PORT" "$@"
}
sluice_send_to() {
    local port=$1 set=$2
    shift 2
    "$SLUICE" xfer send "$WORK/src/$set" "sluice://127.0.0.1:$port/" --ca "$WORK/keys/sluice.crt" \
        --token-file "$WORK/token" --no-journal --progress false --json "$@"
}
sluice_copy() {
    local set=$1
    shift
    "$SLUICE" xfer copy "$WORK/src/$set" "$WORK/dst-local" --no-journal --progress false --json "$@"
}
synced() {
    "$@" && sync
}

# One untimed transfer of each set first: the first run after making the
# sets pays for writeback and cold caches (seen as 2-3x slower).
for set in small big; do
    sluice_send "$set" >/dev/null
    rm -rf "$WORK/dst-sluice/$set"
done

# --- 1. loopback -----------------------------------------------------------
case ",$PARTS," in *,loop,*) LOOP_SETS="small big" ;; *) LOOP_SETS="" ;; esac
for round in $(seq "$REPS"); do
  echo "loopback, round $round of $REPS" >&2
  for CACHE in $CACHES; do
    for set in $LOOP_SETS; do
      run "sluice xfer ca" "$set" "$WORK/dst-sluice" sluice_send "$set" --mode ca --threads "$THREADS"
      run "sluice xfer ca, sink --no-fsync" "$set" "$WORK/dst-sluice-nofsync" \
          sluice_send_to $((PORT + 3)) "$set" --mode ca --threads "$THREADS"
      run "sluice xfer file" "$set" "$WORK/dst-sluice" sluice_send "$set" --mode file --threads "$THREADS"
      run "rsync (daemon)" "$set" "$WORK/dst-rsync" rsync -a "$WORK/src/$set" "rsync://127.0.0.1:$((PORT + 1))/dst/"
      run "rsync --fsync (daemon)" "$set" "$WORK/dst-rsync" rsync -a --fsync "$WORK/src/$set" "rsync://127.0.0.1:$((PORT + 1))/dst/"
      run "rclone (sftp)" "$set" "$WORK/dst-rclone/r$round-$CACHE" rclone copy "$WORK/src/$set" \
          ":sftp,host=127.0.0.1,port=$((PORT + 2)),user=bench,pass=$RCLONE_PASS:r$round-$CACHE/$set" --transfers "$THREADS"
    done
  done
done

# rerun NAME SET COMMAND...: COMMAND once to make a complete copy, then
# time it again over that copy; a row with the seconds and what was sent.
RERUN=()
rerun() {
    local name=$1 set=$2
    shift 2
    "$@" >/dev/null 2>"$WORK/last.err" || die "$name on $set failed: $(cat "$WORK/last.err")"
    local t0 t1 sent
    t0=$(date +%s.%N)
    "$@" >"$WORK/last.out" 2>"$WORK/last.err" || die "$name rerun on $set failed: $(cat "$WORK/last.err")"
    t1=$(date +%s.%N)
    case "$name" in
        sluice*) sent=$(python3 -c "import json; s=json.load(open('$WORK/last.out')); print(f\"{s['bytes']} bytes, {s['files_unchanged']} files unchanged\")") ;;
        rsync*) sent=$(awk '/^sent /{print $2 " bytes on the wire (file list and checksums)"}' "$WORK/last.out") ;;
        *) sent=$(awk '/^Total transferred file size: /{print $5 " bytes of file data moved"}' "$WORK/last.out") ;;
    esac
    local secs
    secs=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
    echo "$name rerun $set: $secs s, $sent" >&2
    RERUN+=("| $set | $name | $secs | $sent |")
}
for set in $LOOP_SETS; do
    rerun "sluice xfer ca" "$set" sluice_send "$set" --mode ca --threads "$THREADS"
    rerun "rsync (daemon)" "$set" rsync -a --stats "$WORK/src/$set" "rsync://127.0.0.1:$((PORT + 1))/dst/"
    rm -rf "${WORK:?}/dst-sluice/$set" "${WORK:?}/dst-rsync/$set"
done

# --- 2. local copies ---------------------------------------------------------
case ",$PARTS," in *,local,*) LOCAL_SETS="small big" ;; *) LOCAL_SETS="" ;; esac
PART=local
L=$WORK/dst-local
for round in $(seq "$REPS"); do
  echo "local copies, round $round of $REPS" >&2
  for CACHE in $CACHES; do
    for set in $LOCAL_SETS; do
      run "sluice xfer copy" "$set" "$L" sluice_copy "$set" --threads "$THREADS"
      run "sluice xfer copy --verify" "$set" "$L" sluice_copy "$set" --threads "$THREADS" --verify
      run "sluice xfer copy --no-fsync" "$set" "$L" sluice_copy "$set" --threads "$THREADS" --no-fsync
      run "cp -a" "$set" "$L" cp -a "$WORK/src/$set" "$L/"
      run "cp -a; sync" "$set" "$L" synced cp -a "$WORK/src/$set" "$L/"
      run "rsync -a; sync" "$set" "$L" synced rsync -a "$WORK/src/$set" "$L/"
      run "rclone copy; sync" "$set" "$L" synced rclone copy "$WORK/src/$set" "$L/$set" --transfers "$THREADS"
    done
  done
done
for set in $LOCAL_SETS; do
    rerun "sluice xfer copy" "$set" sluice_copy "$set" --threads "$THREADS"
    rerun "rsync -a (local)" "$set" rsync -a --stats "$WORK/src/$set" "$L/"
    rm -rf "${L:?}/$set"
done

# --- 3. emulated PFS with congested targets ---------------------------------
PFS=(--layout pfs --pfs-targets 16 --pfs-stripe "$PFS_STRIPE" --pfs-congested "$PFS_CONGESTED"
    --pfs-factor "$PFS_FACTOR" --pfs-on "$PFS_PERIOD" --pfs-rotate "$PFS_ROTATE" --threads "$PFS_THREADS")
case ",$PARTS," in *,pfs,*) PFS_MODES="rr ca file" ;; *) PFS_MODES="" ;; esac
PART=pfs
CACHE=warm
for round in $(seq "$REPS"); do
    for mode in $PFS_MODES; do
        run "sluice xfer $mode" big "$WORK/dst-sluice" sluice_send big --mode "$mode" "${PFS[@]}"
    done
done

# Issue 36's targets, from the medians above: sluice's time against its
# peer's (above 1.00× means faster).
targets() {
    python3 - "$TIMES" <<'EOF'
import collections, statistics, sys
med = collections.defaultdict(list)
for line in open(sys.argv[1]):
    part, set_, name, secs = line.split("\t")[:4]
    med[(part, set_, name)].append(float(secs))
med = {k: statistics.median(v) for k, v in med.items()}
wants = [
    ("loop", "big", "sluice xfer ca", "rsync --fsync (daemon)", 1.0),
    ("loop", "big", "sluice xfer ca", "rsync (daemon)", 0.8),
    ("loop", "small", "sluice xfer ca", "rsync (daemon)", 1.0),
    ("local", "big", "sluice xfer copy", "cp -a; sync", 1.0),
    ("local", "small", "sluice xfer copy", "cp -a; sync", 1.0),
]
sets = sorted({k[1] for k in med}, key=lambda s: (s.split()[0] != "small", "cold" in s))
for part, set_, ours, peer, want in wants:
    for s in sets:
        if s.split()[0] != set_ or (part, s, ours) not in med or (part, s, peer) not in med:
            continue
        a, b = med[(part, s, ours)], med[(part, s, peer)]
        ratio = b / a
        where = "loopback" if part == "loop" else "local"
        print(f"| {where}, {s} | {ours} | {peer} | {a:.2f} | {b:.2f} | {ratio:.2f}× | {want:.1f}× | {'yes' if ratio >= want else 'no'} |")
EOF
}

ELAPSED=$(($(date +%s) - START))
UPTIME_END=$(uptime)
TABLE="Loopback (TLS for sluice and rclone/sftp, none for the rsync daemon), $THREADS threads/transfers,
sets: small = $SMALL × 1 MB, big = $BIG × 256 MiB, the source warm (in the page cache) or cold
(its pages dropped before each command); median of $REPS rounds (range: fastest–slowest; load:
the 1-minute load average when the command started, median of the rounds):

| set | tool | seconds | range | MB/s | load | scheduler |
|---|---|---:|---:|---:|---:|---|
$(table loop)

Local copies into a directory on the same disk, $THREADS threads/transfers (cp and rsync: one);
\"; sync\": the command followed by \`sync\`, inside the time:

| set | tool | seconds | range | MB/s | load |
|---|---|---:|---:|---:|---:|
$(table local)

A rerun over a complete copy:

| set | tool | seconds | sent |
|---|---|---:|---|
$(printf '%s\n' "${RERUN[@]+"${RERUN[@]}"}")

Emulated PFS at the source: 16 targets (7200 rpm model each), big set striped over $PFS_STRIPE,
targets $PFS_CONGESTED congested ${PFS_FACTOR}×, the set moving $PFS_ROTATE targets on every $PFS_PERIOD, $PFS_THREADS I/O threads:

| set | mode | seconds | range | MB/s | load | scheduler |
|---|---|---:|---:|---:|---:|---|
$(table pfs)

Issue 36's targets, from the medians above (speed: the peer's seconds over sluice's):

| where, set | sluice | peer | sluice s | peer s | speed | wanted | met |
|---|---|---|---:|---:|---:|---:|---|
$(targets)

\`uptime\` at the start: \`$UPTIME_START\`; at the end: \`$UPTIME_END\`."
echo "$TABLE"
if [ "$WRITE_DOC" = 1 ]; then
    python3 scripts/bench-doc.py lads-bench docs/results/lads-bench.md "$TABLE" "$ELAPSED" \
        "REPS=$REPS SMALL=$SMALL BIG=$BIG THREADS=$THREADS CACHES=\"$CACHES\" PFS_THREADS=$PFS_THREADS PFS_CONGESTED=$PFS_CONGESTED PFS_FACTOR=$PFS_FACTOR PFS_PERIOD=$PFS_PERIOD PFS_ROTATE=$PFS_ROTATE PFS_STRIPE=$PFS_STRIPE PARTS=$PARTS scripts/bench-xfer.sh"
fi
