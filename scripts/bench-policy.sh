#!/usr/bin/env bash
# Placement-policy benchmark: sluice's write placement policies through a
# real FUSE mount on emulated tiers (`sluice mount --fast-device ssd
# --capacity-device hdd`: an emulated SATA SSD holds the log, an emulated
# 7200 rpm disk the files), HPC write patterns on ONE shared file, and one
# Markdown table (MiB/s per policy, cost's ratios, where the bytes went,
# drain time), printed to stdout and written (with date, machine, command
# and a plot) into docs/results/policy-bench.md.
#
# The patterns are IOR 4's; fio is the project's stand-in for IOR (no MPI
# here): fio jobs are the IOR ranks, and each job writes exactly the offsets
# the IOR rank would. Where real IOR is installed (built against Debian's
# MPICH: docs/benchmarks.md, "IO500's phases"), scripts/bench-io500.sh runs
# these patterns with IOR itself and is the benchmark of record: its
# ior-hard is the strided pattern, its mixed phase the segmented-contiguous
# and segmented-random pair, its disk row the single sequential writer, and
# SYSTEMS="capacity-only fast-all ssdup ssdup+ cost" puts every policy side
# by side. This script stays for machines without IOR and for the patterns
# IO500 has no phase for (segmented-contiguous and segmented-random each
# alone on one shared file, 8 and 16 writers in one run).
#
# N writers, TOTAL = SIZE bytes per instance, XFER bytes per write (per-job
# sizes are rounded down to whole XFER blocks):
#   segmented-contiguous  job k writes its segment [k*TOTAL/N, (k+1)*TOTAL/N)
#                         sequentially (IOR -s 1 -b TOTAL/N -t XFER);
#   segmented-random      the same segments, each in random order, every
#                         block once (IOR -z; fio randwrite with a random map);
#   strided               job k writes blocks k, k+N, k+2N, ... (IOR -s
#                         TOTAL/(N*XFER) -b XFER -t XFER), TOTAL/N per job;
#   mixed                 two instances at once: a segmented-random instance
#                         of N-1 jobs on rand.dat and ONE sequential writer on
#                         seq.dat, each writing TOTAL/2 (the same bytes, so
#                         the split shows whether a policy buffers the right
#                         one). The sequential instance is one stream, which
#                         the disk serves without seeks; interleaved
#                         sequential segments are measured by
#                         segmented-contiguous;
#   single-sequential     one job writes TOTAL sequentially (run once per
#                         policy and run, with 1 writer, not for each N).
# Every job: psync, buffered (direct=0), fallocate=none, end_fsync=1, bs=XFER;
# the job files are kept in the results directory and quoted in the doc.
#
# Verification: the write run has verify=crc32c with do_verify=0, so every
# block carries fio's header (offset, crc32c of the block). After the drain,
# a second fio run of the same job file with verify_only=1 replays the same
# jobs (same offsets, same random order) as reads through the mount and
# checks every block; a mismatch stops the benchmark. It is not timed into
# the throughput.
#
# Per policy, pattern, writer count and run (RUNS times, the policy order
# rotated from run to run): fresh tier directories; `sluice mount --fast F
# --capacity C --fast-device ssd --capacity-device hdd --policy P --config
# CONFIG MNT`; `sync`; the fio write run, timed with date around it
# (throughput = bytes / those seconds, end fsync included; fio's own
# aggregate bw is recorded too); `sluice status MNT --json` (fast_bytes,
# capacity_bytes, and the per-file split `files` when this sluice has it);
# `sluice drain MNT`, timed; the verification; `sluice unmount MNT`.
# CONFIG is a [log] section: fast-all gets regions x region_size of at least
# 1.25x the pattern's bytes (so it never waits for log room); the other
# policies get the default log (2 x 256 MiB) or LOG_REGIONS/LOG_REGION_SIZE.
#
# Usage: scripts/bench-policy.sh [--no-build] [--no-doc] [-h]
# Environment (defaults):
#   POLICIES="capacity-only fast-all ssdup ssdup+ cost"   passed to --policy
#   PATTERNS="segmented-contiguous segmented-random strided mixed single-sequential"
#   PROCS="8 16"           writer counts (single-sequential: always 1)
#   SIZE=512M              bytes per instance (the shared file's size)
#   XFER=256k              bytes per write
#   RUNS=3                 repetitions; a cell is their median (min-max)
#   LOG_REGIONS, LOG_REGION_SIZE   log of the policies other than fast-all
#                          (and fast-all's floor); default sluice's 2 x 256MiB
#   BENCH_DIR=/tmp/sluice-bench-policy   work directory (its run/ and
#                          results/ are wiped at the start)
#   DOC=docs/results/policy-bench.md     (and its plot, DOC's name .png)
#   SLUICE=${CARGO_TARGET_DIR:-target}/release/sluice   the binary
# Needs fio, fusermount3 (apt-get install fio fuse3), python3, gnuplot for
# the plot (optional), and cargo unless --no-build.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
ARGS=("$@")

# shellcheck source-path=SCRIPTDIR source=bench-args.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-args.sh"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-lib.sh"

ALL_PATTERNS="segmented-contiguous segmented-random strided mixed single-sequential"
POLICIES=${POLICIES:-capacity-only fast-all ssdup ssdup+ cost}
PATTERNS=${PATTERNS:-$ALL_PATTERNS}
PROCS=${PROCS:-8 16}
SIZE=${SIZE:-512M}
XFER=${XFER:-256k}
RUNS=${RUNS:-3}
LOG_REGIONS=${LOG_REGIONS:-}
LOG_REGION_SIZE=${LOG_REGION_SIZE:-}
BENCH_DIR=${BENCH_DIR:-/tmp/sluice-bench-policy}
DOC=${DOC:-docs/results/policy-bench.md}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-3600} # seconds a drain may take before it counts as trouble
DEFAULT_REGIONS=2                    # sluice's default log: 2 x 256 MiB
DEFAULT_REGION_BYTES=$((256 << 20))

# --- what is needed -------------------------------------------------------
require_tools "apt-get install fio fuse3" fio fusermount3 mountpoint python3 numfmt timeout
positive_int RUNS "$RUNS"
positive_int DRAIN_TIMEOUT "$DRAIN_TIMEOUT"
SIZE_B=$(size_bytes SIZE "$SIZE")
XFER_B=$(size_bytes XFER "$XFER")
[ "$SIZE_B" -ge "$XFER_B" ] || die "SIZE ($SIZE) must be at least XFER ($XFER)"
read -ra POL <<<"$POLICIES"
read -ra PAT <<<"$PATTERNS"
read -ra NPROCS <<<"$PROCS"
[ ${#POL[@]} -gt 0 ] || die "POLICIES is empty"
[ ${#PAT[@]} -gt 0 ] || die "PATTERNS is empty"
for p in "${POL[@]}"; do
    [[ "$p" =~ ^[A-Za-z0-9+._-]+$ ]] || die "bad policy name '$p' in POLICIES"
done
for p in "${PAT[@]}"; do
    [[ " $ALL_PATTERNS " == *" $p "* ]] || die "unknown pattern '$p' in PATTERNS ($ALL_PATTERNS)"
done
for n in "${NPROCS[@]}"; do positive_int PROCS "$n"; done
regions=$DEFAULT_REGIONS
region_bytes=$DEFAULT_REGION_BYTES
if [ -n "$LOG_REGIONS" ]; then
    positive_int LOG_REGIONS "$LOG_REGIONS"
    regions=$LOG_REGIONS
fi
[ -n "$LOG_REGION_SIZE" ] && region_bytes=$(size_bytes LOG_REGION_SIZE "$LOG_REGION_SIZE")
BENCH_DIR=$(abs_path "$BENCH_DIR")
[ "$BENCH_DIR" != / ] || die "BENCH_DIR must not be /"
DOC=$(abs_path "$DOC")

build_sluice
if command -v ior >/dev/null 2>&1 || [ -x /opt/ior/bin/ior ]; then
    echo "$NAME: note: real IOR is installed here; scripts/bench-io500.sh runs these patterns with it" \
        "(SYSTEMS=\"capacity-only fast-all ssdup ssdup+ cost\" for every policy; docs/benchmarks.md)" >&2
fi
mkdir -p "$BENCH_DIR"
for p in "${POL[@]}"; do # a policy this sluice does not know fails here, not mid-way
    "$SLUICE" config show --fast "$BENCH_DIR/check-fast" --capacity "$BENCH_DIR/check-cap" \
        --policy "$p" >/dev/null 2>"$BENCH_DIR/check.err" ||
        die "$SLUICE does not take --policy $p: $(cat "$BENCH_DIR/check.err")"
done
rm -f "$BENCH_DIR/check.err"

# --- the patterns as fio job files ------------------------------------------------
# geometry PATTERN N: sets JOBS (writers), PER (bytes per job), BYTES (all
# jobs) and REGION (the strided jobs' region); fails when N does not fit.
geometry() {
    local pattern=$1 n=$2 blocks
    JOBS=$n
    REGION=0
    case "$pattern" in
        segmented-contiguous | segmented-random)
            PER=$((SIZE_B / n / XFER_B * XFER_B))
            BYTES=$((n * PER))
            ;;
        strided)
            blocks=$((SIZE_B / (n * XFER_B))) # per job
            PER=$((blocks * XFER_B))
            REGION=$(((blocks - 1) * n * XFER_B + XFER_B)) # its first to its last block
            BYTES=$((n * PER))
            ;;
        mixed)
            [ "$n" -ge 2 ] || return 1
            PER=$((SIZE_B / 2 / (n - 1) / XFER_B * XFER_B)) # per random job
            BYTES=$((2 * (n - 1) * PER))
            ;;
        single-sequential)
            JOBS=1
            PER=$((SIZE_B / XFER_B * XFER_B))
            BYTES=$PER
            ;;
        *) die "unknown pattern $pattern" ;;
    esac
    [ "$PER" -gt 0 ] || return 1
}

# jobfile PATTERN N DIR MODE: the fio job file (after geometry PATTERN N),
# its files in DIR; MODE write or verify (the same jobs, replayed as
# verifying reads).
jobfile() {
    job_global "$4"
    echo
    job_sections "$1" "$2" "$3"
}

# job_global MODE: the job file's [global] section.
job_global() {
    local mode=$1
    echo "[global]"
    echo "ioengine=psync"
    echo "direct=0"
    echo "fallocate=none"
    echo "end_fsync=1"
    echo "bs=$XFER_B"
    echo "verify=crc32c"
    echo "verify_state_save=0"
    if [ "$mode" = verify ]; then
        echo "do_verify=1"
        echo "verify_only=1"
    else
        echo "do_verify=0"
    fi
    echo "group_reporting=1"
}

# job_sections PATTERN N DIR: the job file's jobs (after geometry PATTERN N).
job_sections() {
    local pattern=$1 n=$2 dir=$3
    echo "; $pattern, $JOBS writers, $BYTES bytes (scripts/bench-policy.sh, IOR 4's offsets)"
    case "$pattern" in
        segmented-contiguous | segmented-random)
            echo "[$pattern]"
            echo "filename=$dir/shared.dat"
            if [ "$pattern" = segmented-random ]; then
                echo "rw=randwrite"
                echo "randrepeat=1"
                echo "norandommap=0"
            else
                echo "rw=write"
            fi
            echo "numjobs=$n"
            echo "size=$PER"
            echo "offset=0"
            echo "offset_increment=$PER"
            ;;
        strided)
            echo "[strided]"
            echo "filename=$dir/shared.dat"
            echo "rw=write:$(((n - 1) * XFER_B))"
            echo "numjobs=$n"
            echo "size=$REGION"
            echo "io_size=$PER"
            echo "offset=0"
            echo "offset_increment=$XFER_B"
            ;;
        mixed)
            echo "[mixed-rand]"
            echo "filename=$dir/rand.dat"
            echo "rw=randwrite"
            echo "randrepeat=1"
            echo "norandommap=0"
            echo "numjobs=$((n - 1))"
            echo "size=$PER"
            echo "offset=0"
            echo "offset_increment=$PER"
            echo
            echo "[mixed-seq]"
            echo "filename=$dir/seq.dat"
            echo "rw=write"
            echo "numjobs=1"
            echo "size=$(((n - 1) * PER))"
            ;;
        single-sequential)
            echo "[single-sequential]"
            echo "filename=$dir/shared.dat"
            echo "rw=write"
            echo "numjobs=1"
            echo "size=$PER"
            ;;
    esac
}

# log_config POLICY BYTES: the mount's config file (a [log] section) on
# stdout. fast-all: at least 1.25 x BYTES of log, in whole MiB regions.
log_config() {
    local policy=$1 bytes=$2 size=$region_bytes need
    echo "# scripts/bench-policy.sh: $policy, a pattern of $bytes bytes"
    if [ "$policy" = fast-all ]; then
        need=$(((bytes * 5 / 4 + regions - 1) / regions))
        need=$(((need + (1 << 20) - 1) >> 20 << 20))
        [ "$need" -gt "$size" ] && size=$need
    elif [ -z "$LOG_REGIONS$LOG_REGION_SIZE" ]; then
        return 0 # sluice's default log
    fi
    printf '[log]\nregions = %d\nregion_size = %d\n' "$regions" "$size"
}

# --- preparation ----------------------------------------------------------------
RUN_DIR=$BENCH_DIR/run     # one policy, pattern and run at a time
RESULTS=$BENCH_DIR/results # job files, fio JSON, status JSON, logs, runs.jsonl
bench_traps
clear_stale_mount "$RUN_DIR/mnt" # left by an interrupted run
rm -rf "$RUN_DIR" "$RESULTS"
mkdir -p "$RESULTS"
# The log (fast-all's holds all the bytes) and the capacity tier, with room.
check_free "$BENCH_DIR" $((SIZE_B * 3 + (256 << 20))) "SIZE=$SIZE"

# fio's own start-up and exit, which every wall-clock time includes: the
# median of 3 runs writing one XFER block into a plain file.
mkdir -p "$BENCH_DIR/fio-overhead"
for _ in 1 2 3; do
    t0=$(date +%s.%N)
    fio --name=overhead --filename="$BENCH_DIR/fio-overhead/f" --rw=write --bs="$XFER_B" --size="$XFER_B" \
        --ioengine=psync --end_fsync=1 --output-format=json --output=/dev/null >/dev/null 2>&1 ||
        die "fio does not run (fio --name=overhead --filename=$BENCH_DIR/fio-overhead/f ...)"
    elapsed "$t0" "$(date +%s.%N)"
    echo
done | sort -n | sed -n 2p >"$BENCH_DIR/fio-overhead/seconds"
FIO_OVERHEAD=$(cat "$BENCH_DIR/fio-overhead/seconds")
rm -rf "$BENCH_DIR/fio-overhead"

# The (pattern, writers) rows, in order.
ROWS=()
for pattern in "${PAT[@]}"; do
    if [ "$pattern" = single-sequential ]; then
        ROWS+=("$pattern:1")
        continue
    fi
    for n in "${NPROCS[@]}"; do
        if geometry "$pattern" "$n"; then
            ROWS+=("$pattern:$n")
        else
            echo "$NAME: skipping $pattern with $n writer(s) (needs 2+ writers and SIZE >= writers x XFER)" >&2
        fi
    done
done
[ ${#ROWS[@]} -gt 0 ] || die "nothing to run"

# run_one POLICY PATTERN N RUN WHAT: one mount, write, status, drain, verify, unmount.
run_one() {
    local policy=$1 pattern=$2 n=$3 run=$4 what=$5
    local tag=${policy}__${pattern}__p${n}__r${run}
    local log=$RESULTS/$tag.log cfg=$RESULTS/$tag.toml
    local t0 t1 secs drain_s verify_s fio_rc
    geometry "$pattern" "$n"
    rm -rf "$RUN_DIR"
    mkdir -p "$RUN_DIR/fast" "$RUN_DIR/cap" "$RUN_DIR/mnt"
    log_config "$policy" "$BYTES" >"$cfg"
    jobfile "$pattern" "$n" "$RUN_DIR/mnt" write >"$RESULTS/$tag.fio"
    jobfile "$pattern" "$n" "$RUN_DIR/mnt" verify >"$RESULTS/$tag.verify.fio"
    : >"$log"

    MNT=$RUN_DIR/mnt
    "$SLUICE" mount --fast "$RUN_DIR/fast" --capacity "$RUN_DIR/cap" \
        --fast-device ssd --capacity-device hdd --policy "$policy" --config "$cfg" \
        "$MNT" >>"$log" 2>&1 &
    PID=$!
    await_mount "$MNT" "$PID" "$log"
    sync

    # The write phase: fio's own start-up, the writes and the end fsync.
    t0=$(date +%s.%N)
    fio_rc=0
    fio --output-format=json --output="$RESULTS/$tag.write.json" "$RESULTS/$tag.fio" >>"$log" 2>&1 || fio_rc=$?
    t1=$(date +%s.%N)
    if [ "$fio_rc" != 0 ]; then
        echo "--- $log" >&2
        tail -n 40 "$log" >&2
        tail -n 40 "$RESULTS/$tag.write.json" >&2 || true
        die "fio failed: $what (job file $RESULTS/$tag.fio)"
    fi
    secs=$(elapsed "$t0" "$t1")

    "$SLUICE" status "$MNT" --json >"$RESULTS/$tag.status.json" 2>>"$log" ||
        die "sluice status failed: $what (log $log)"

    t0=$(date +%s.%N)
    if timeout "$DRAIN_TIMEOUT" "$SLUICE" drain "$MNT" >>"$log" 2>&1; then
        t1=$(date +%s.%N)
        drain_s=$(elapsed "$t0" "$t1")
    else
        drain_s=""
        TROUBLE+=("$what: sluice drain failed or took over $DRAIN_TIMEOUT s (log: $log)")
        echo "$NAME: WARNING: $what: sluice drain failed (log $log)" >&2
    fi

    # Verification (not timed into the throughput): the same jobs as reads.
    t0=$(date +%s.%N)
    if ! fio --output-format=json --output="$RESULTS/$tag.verify.json" "$RESULTS/$tag.verify.fio" >>"$log" 2>&1; then
        echo "--- $RESULTS/$tag.verify.json" >&2
        grep -v '^ ' "$RESULTS/$tag.verify.json" | head -n 20 >&2 || true
        die "VERIFICATION FAILED: $what: the data read back through the mount differs from what fio wrote (job file $RESULTS/$tag.verify.fio, log $log)"
    fi
    t1=$(date +%s.%N)
    verify_s=$(elapsed "$t0" "$t1")

    stop_mount sluice "$log" "$what"

    python3 "$ROOT/scripts/policy_table.py" --record "$RESULTS" --policy "$policy" \
        --pattern "$pattern" --procs "$n" --run "$run" --seconds "$secs" --bytes "$BYTES" \
        ${drain_s:+--drain-seconds "$drain_s"} --fio-json "$RESULTS/$tag.write.json" \
        --status-json "$RESULTS/$tag.status.json" --verify-json "$RESULTS/$tag.verify.json" ||
        die "could not record $what"
    LAST=$(python3 -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
f = r["fast_bytes"] + r["forced_to_log_bytes"]
t = f + r["capacity_bytes"]
print("%.0f MiB/s (fio %.0f), %s to the log" % (r["bytes"] / r["seconds"] / 2**20, r["fio_bw"] / 2**20,
      "%.0f%%" % (100 * f / t) if t else "n/a"))' "$RESULTS/runs.jsonl")
    LAST+=", drain ${drain_s:-?} s, verified in $verify_s s"
    rm -rf "$RUN_DIR"
}

total=$((RUNS * ${#ROWS[@]} * ${#POL[@]}))
count=0
started=$(date +%s)
echo "== $total runs: SIZE=$SIZE XFER=$XFER RUNS=$RUNS, rows: ${ROWS[*]}, policies: ${POL[*]}, in $BENCH_DIR" >&2
echo "== fio's own start-up and exit: $FIO_OVERHEAD s (in every wall-clock time)" >&2
for ((run = 1; run <= RUNS; run++)); do
    for row in "${ROWS[@]}"; do
        pattern=${row%%:*}
        n=${row##*:}
        # Rotate the order of the policies from run to run, so none is always
        # first (or last) after a given row.
        for ((k = 0; k < ${#POL[@]}; k++)); do
            policy=${POL[$(((k + run - 1) % ${#POL[@]}))]}
            count=$((count + 1))
            LAST=""
            run_one "$policy" "$pattern" "$n" "$run" "$policy $pattern $n writers run $run"
            printf '[%d/%d] %-13s %-20s %2d writer(s), run %d: %s\n' \
                "$count" "$total" "$policy" "$pattern" "$n" "$run" "$LAST" >&2
        done
    done
done
elapsed_s=$(($(date +%s) - started))
echo "== done in ${elapsed_s} s; job files, fio JSON, status JSON, logs and runs.jsonl in $RESULTS" >&2

# --- the table and the doc ---------------------------------------------------------
meta=$RESULTS/meta.md
cmd="POLICIES=\"$POLICIES\" PATTERNS=\"$PATTERNS\" PROCS=\"$PROCS\" SIZE=$SIZE XFER=$XFER RUNS=$RUNS"
[ -n "$LOG_REGIONS" ] && cmd+=" LOG_REGIONS=$LOG_REGIONS"
[ -n "$LOG_REGION_SIZE" ] && cmd+=" LOG_REGION_SIZE=$LOG_REGION_SIZE"
cmd+=" BENCH_DIR=$BENCH_DIR scripts/bench-policy.sh${ARGS[*]:+ ${ARGS[*]}}"
{
    echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') in ${elapsed_s} s with"
    echo
    echo '```sh'
    echo "$cmd"
    echo '```'
    echo
    echo "- machine: $(machine_summary); $(fio --version), sluice $(sluice_commit) ($SLUICE)"
    echo "- work directory: $BENCH_DIR ($(fs_summary "$BENCH_DIR")); fresh tier directories for every run"
    echo "- mount: \`sluice mount --fast F --capacity C --fast-device ssd --capacity-device hdd --policy P --config CONFIG MNT\`;" \
        "CONFIG: fast-all gets a log of at least 1.25x the pattern's bytes ($regions regions), the other policies" \
        "$([ -z "$LOG_REGIONS$LOG_REGION_SIZE" ] && echo "sluice's default log (2 x 256 MiB)" || echo "$regions x $((region_bytes >> 20)) MiB")"
    echo "- per run: \`sync\`, the fio write run (timed with \`date\` around it), \`sluice status MNT --json\`," \
        "\`sluice drain MNT\` (timed), the verification run, \`sluice unmount MNT\`; the policy order rotates from run to run"
    echo "- fio stands in for IOR 4 (no MPI here): its jobs are the ranks and write IOR's offsets on one shared file;" \
        "SIZE=$SIZE per instance, XFER=$XFER per write; mixed = a segmented-random instance of N-1 writers on rand.dat" \
        "and one sequential writer on seq.dat, SIZE/2 each (the sequential instance is one stream, which the disk serves" \
        "without seeks; interleaved segments are what segmented-contiguous measures)"
    echo "- fio's own start-up and exit take $FIO_OVERHEAD s here (one XFER block into a plain file, median of 3);" \
        "the wall-clock times include it, so it weighs only when SIZE is small"
    echo "- verification: the write jobs carry \`verify=crc32c\` headers (\`do_verify=0\`); after the drain the same job" \
        "file with \`verify_only=1\` reads every block back through the mount and checks it (not timed into MiB/s)"
    if [ ${#TROUBLE[@]} -gt 0 ]; then
        echo "- **trouble during the run:**"
        for t in "${TROUBLE[@]}"; do echo "  - $t"; done
    fi
    echo
    echo "<details><summary>fio job files (write runs; the first writer count; MNT = the mount point)</summary>"
    echo
    echo "Every job file starts with this section (the verification run's has \`do_verify=1\` and \`verify_only=1\` instead of \`do_verify=0\`):"
    echo
    echo '```ini'
    job_global write
    echo '```'
    echo
    echo "Then, per pattern:"
    echo
    for row in "${ROWS[@]}"; do
        pattern=${row%%:*}
        n=${row##*:}
        [[ " ${shown:-} " == *" $pattern "* ]] && continue
        shown="${shown:-} $pattern"
        geometry "$pattern" "$n"
        echo '```ini'
        job_sections "$pattern" "$n" MNT
        echo '```'
        echo
    done
    echo "</details>"
} >"$meta"
update=(--policies "$POLICIES")
[ "$WRITE_DOC" = 1 ] && update+=(--update "$DOC" --meta "$meta" --plot "${DOC%.md}.png")
python3 "$ROOT/scripts/policy_table.py" "${update[@]}" "$RESULTS"
[ "$WRITE_DOC" = 1 ] && echo "== written into $DOC" >&2
exit 0
