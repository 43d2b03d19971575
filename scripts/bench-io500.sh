#!/usr/bin/env bash
# IO500's phases through the mount (issue 32, item 5): real IOR and mdtest
# (github.com/hpc/ior, built against Debian's MPICH; docs/benchmarks.md,
# "IO500's phases", says how) run through `sluice mount --fast-device ssd
# --capacity-device hdd` (an emulated SATA SSD holds the log, an emulated
# 7200 rpm disk the files), under
#   default        sluice's defaults: policy cost, the default log
#                  (2 x 256 MiB), no --policy flag,
#   capacity-only  --policy capacity-only (the disk alone),
#   fast-all       --policy fast-all, with a log of at least 1.25x the
#                  phase's bytes (so it never waits for room),
# each with mount.consistency = close-to-open (the default) and node-local.
# SYSTEMS may name any other policy too (ssdup, ssdup+, cost: --policy P
# with the default log), to compare policies on IOR's own patterns.
# One Markdown table of medians (min-max) per kind of phase, the targets of
# issue 32 as ratios, printed to stdout and written with a plot into
# docs/results/io500.md (scripts/bench-doc.py; gnuplot draws the PNGs).
#
# Phases (RANKS MPI ranks, SIZE bytes per IOR phase; IO500's options, see
# IO500's src/phase_*.c, without its stonewall -D: every run writes all
# of SIZE):
#   ior-easy     a file per rank, 2 MiB transfers:
#                ior -g -G 271 -k -e -C -Q 1 -F -t 2m -b SIZE/RANKS
#   ior-hard     one shared file, 47,008-byte records interleaved:
#                ior -C -Q 1 -g -G 27 -k -e -t 47008 -b 47008 -s SIZE/(RANKS*47008)
#   mixed        two IOR instances at once, SIZE/2 each, 256 KiB
#                transfers: RANKS/2 ranks segmented-contiguous on mixed/seq
#                (-s 1 -b SIZE/2/(RANKS/2)) and the other ranks
#                segmented-random on mixed/rand (-z --random-offset-seed=29)
#   mdtest-easy  empty files in a directory per rank:
#                mdtest -n MDTEST_EASY_FILES -u -L -F -P -G 31 -N 1 -C
#   mdtest-hard  3901-byte files in one shared directory:
#                mdtest -n MDTEST_HARD_FILES -t -w 3901 -e 3901 -P -G 32 -N 1 -F -C
# and two reference rows, one rank writing one file of SIZE with 2 MiB
# transfers: "disk" under capacity-only (the emulated disk's sequential
# bandwidth, which the targets are ratios of) and "ssd" under fast-all,
# node-local (the log's own rate on the emulated SSD).
#
# Per phase, system and run (RUNS rounds; in each, the systems' order
# rotates): fresh tier directories; `sluice mount ... --config CONFIG MNT`;
# the write phase (IOR -w with -e: fsync before close; mdtest -C);
# `sluice status MNT --json` (bytes to each tier); `sluice drain MNT`,
# timed, and the status again (what the drain moved); the read-back
# (IOR -r -R: every byte checked against IOR's pattern; mdtest -T, or
# -E -X for mdtest-hard); `sluice unmount MNT`.
# IO500's mdtest -Y (a global `sync` after each phase) is left out: FUSE
# has no syncfs, so it would only flush this host's other file systems.
#
# IOR and mdtest: $IOR and $MDTEST, else `ior` and `mdtest` on PATH, else
# /opt/ior/bin (where docs/benchmarks.md's build installs them); mpiexec
# is $MPIEXEC (default mpiexec). Where one is missing (or set to
# "fallback", to check the stand-in), its phases run
# scripts/io500_fallback.py instead: NOT IOR, the same offsets without
# MPI; the output and the results page say so on every such row.
#
# Usage: scripts/bench-io500.sh [--no-build] [--no-doc] [-h]
# Environment (defaults):
#   QUICK=1                a check in a few minutes: SIZE=64M RUNS=1,
#                          MDTEST_EASY_FILES=50 MDTEST_HARD_FILES=25
#   RANKS=8                MPI ranks of every phase but the reference rows
#   SIZE=512M              bytes per IOR phase (all ranks together)
#   MDTEST_EASY_FILES=1000, MDTEST_HARD_FILES=250   files per rank
#   RUNS=3                 rounds; a cell is their median (min-max)
#   PHASES="ior-easy ior-hard mixed mdtest-easy mdtest-hard"
#   SYSTEMS="default capacity-only fast-all"   default, or a --policy name
#   CONSISTENCIES="close-to-open node-local"
#   REFERENCE=1            0 leaves out the disk and ssd rows (and the ratios)
#   DEFAULT_EXTRA          TOML appended to the default system's config (printf
#                          %b: "\n" for newlines), to measure a candidate default,
#                          e.g. DEFAULT_EXTRA='[log]\nregions = 4'
#   IOR, MDTEST, MPIEXEC   the tools (above; IOR=fallback or MDTEST=fallback
#                          runs the stand-in even where the tool is there)
#   BENCH_DIR=/tmp/sluice-bench-io500   work directory (run/ and results/
#                          are wiped at the start)
#   DOC=docs/results/io500.md   (and its plots beside it)
#   PHASE_TIMEOUT=1800, DRAIN_TIMEOUT=1800   seconds before a phase or a
#                          drain counts as hung
#   SLUICE=${CARGO_TARGET_DIR:-target}/release/sluice   the binary
# Needs fusermount3 (fuse3), python3, gnuplot for the plots (optional),
# mpich for real IOR, and cargo unless --no-build.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
ARGS=("$@")

# shellcheck source-path=SCRIPTDIR source=bench-args.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-args.sh"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-lib.sh"

ALL_PHASES="ior-easy ior-hard mixed mdtest-easy mdtest-hard"
if [ "${QUICK:-0}" = 1 ]; then
    SIZE=${SIZE:-64M}
    RUNS=${RUNS:-1}
    MDTEST_EASY_FILES=${MDTEST_EASY_FILES:-50}
    MDTEST_HARD_FILES=${MDTEST_HARD_FILES:-25}
fi
RANKS=${RANKS:-8}
SIZE=${SIZE:-512M}
MDTEST_EASY_FILES=${MDTEST_EASY_FILES:-1000}
MDTEST_HARD_FILES=${MDTEST_HARD_FILES:-250}
RUNS=${RUNS:-3}
PHASES=${PHASES:-$ALL_PHASES}
SYSTEMS=${SYSTEMS:-default capacity-only fast-all}
CONSISTENCIES=${CONSISTENCIES:-close-to-open node-local}
REFERENCE=${REFERENCE:-1}
MPIEXEC=${MPIEXEC:-mpiexec}
BENCH_DIR=${BENCH_DIR:-/tmp/sluice-bench-io500}
DOC=${DOC:-docs/results/io500.md}
PHASE_TIMEOUT=${PHASE_TIMEOUT:-1800}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-1800}
XFER_EASY=$((2 << 20))  # ior-easy and the reference rows (IO500's 2m)
XFER_MIXED=$((256 << 10))
HARD_RECORD=47008       # IO500's ior-hard record
HARD_FILE_BYTES=3901    # IO500's mdtest-hard file
FALLBACK="python3 $ROOT/scripts/io500_fallback.py"

# --- what is needed -------------------------------------------------------
require_tools "apt-get install fuse3 python3" fusermount3 mountpoint python3 numfmt timeout
for v in RANKS RUNS MDTEST_EASY_FILES MDTEST_HARD_FILES PHASE_TIMEOUT DRAIN_TIMEOUT; do
    positive_int "$v" "${!v}"
done
[ "$RANKS" -ge 2 ] || die "RANKS must be at least 2 (the mixed phase runs two instances)"
SIZE_B=$(size_bytes SIZE "$SIZE")
read -ra PHS <<<"$PHASES"
read -ra SYSS <<<"$SYSTEMS"
read -ra CONS <<<"$CONSISTENCIES"
for p in "${PHS[@]}"; do
    [[ " $ALL_PHASES " == *" $p "* ]] || die "unknown phase '$p' in PHASES ($ALL_PHASES)"
done
for s in "${SYSS[@]}"; do
    [[ "$s" =~ ^[A-Za-z0-9+._-]+$ ]] || die "bad system name '$s' in SYSTEMS"
done
for c in "${CONS[@]}"; do
    case "$c" in close-to-open | node-local) ;; *) die "unknown consistency '$c' in CONSISTENCIES (close-to-open node-local)" ;; esac
done

# find_tool VAR NAME: the tool's path into VAR ($VAR, NAME on PATH, or
# /opt/ior/bin/NAME), or empty if there is none or VAR is "fallback".
find_tool() {
    local var=$1 name=$2 path=${!1:-}
    if [ "$path" = fallback ]; then
        path=""
    elif [ -n "$path" ]; then
        [ -x "$path" ] || die "$var=$path is not an executable"
    else
        path=$(command -v "$name" 2>/dev/null || true)
        [ -z "$path" ] && [ -x "/opt/ior/bin/$name" ] && path=/opt/ior/bin/$name
    fi
    printf -v "$var" '%s' "$path"
}
find_tool IOR ior
find_tool MDTEST mdtest
if [ -n "$IOR$MDTEST" ]; then
    command -v "$MPIEXEC" >/dev/null 2>&1 || die "$MPIEXEC is missing (apt-get install mpich), needed to run $IOR $MDTEST"
fi
loud() { # a warning that does not scroll past
    echo "$NAME: ############################################################" >&2
    echo "$NAME: $*" >&2
    echo "$NAME: ############################################################" >&2
}
[ -n "$IOR" ] || loud "IOR IS MISSING: the IOR phases run scripts/io500_fallback.py, NOT IOR (same offsets, no MPI). Build IOR as docs/benchmarks.md says, or set IOR=/path/to/ior"
[ -n "$MDTEST" ] || loud "MDTEST IS MISSING: the mdtest phases run scripts/io500_fallback.py, NOT mdtest. Build it with IOR, or set MDTEST=/path/to/mdtest"

BENCH_DIR=$(abs_path "$BENCH_DIR")
[ "$BENCH_DIR" != / ] || die "BENCH_DIR must not be /"
DOC=$(abs_path "$DOC")
build_sluice
mkdir -p "$BENCH_DIR"
for s in "${SYSS[@]}"; do # a policy this sluice does not know fails here, not mid-way
    [ "$s" = default ] && continue
    "$SLUICE" config show --fast "$BENCH_DIR/check-fast" --capacity "$BENCH_DIR/check-cap" \
        --policy "$s" >/dev/null 2>"$BENCH_DIR/check.err" ||
        die "SYSTEMS: $SLUICE does not take --policy $s: $(cat "$BENCH_DIR/check.err")"
done
rm -f "$BENCH_DIR/check.err"

# --- the phases' geometry ---------------------------------------------------------
EASY_BLOCK=$((SIZE_B / RANKS / XFER_EASY * XFER_EASY))
HARD_SEGMENTS=$((SIZE_B / (RANKS * HARD_RECORD)))
MIXED_SEQ_RANKS=$((RANKS / 2))
MIXED_RAND_RANKS=$((RANKS - MIXED_SEQ_RANKS))
MIXED_SEQ_BLOCK=$((SIZE_B / 2 / MIXED_SEQ_RANKS / XFER_MIXED * XFER_MIXED))
MIXED_RAND_BLOCK=$((SIZE_B / 2 / MIXED_RAND_RANKS / XFER_MIXED * XFER_MIXED))
REF_BLOCK=$((SIZE_B / XFER_EASY * XFER_EASY))
if [ "$EASY_BLOCK" -eq 0 ] || [ "$HARD_SEGMENTS" -eq 0 ] || [ "$MIXED_RAND_BLOCK" -le "$XFER_MIXED" ]; then
    die "SIZE=$SIZE is too small for $RANKS ranks (ior-easy needs RANKS x 2 MiB, mixed RANKS x 512 KiB)"
fi

# phase_bytes PHASE: the bytes the phase writes.
phase_bytes() {
    case "$1" in
        ior-easy) echo $((RANKS * EASY_BLOCK)) ;;
        ior-hard) echo $((RANKS * HARD_SEGMENTS * HARD_RECORD)) ;;
        mixed) echo $((MIXED_SEQ_RANKS * MIXED_SEQ_BLOCK + MIXED_RAND_RANKS * MIXED_RAND_BLOCK)) ;;
        mdtest-easy) echo 0 ;;
        mdtest-hard) echo $((RANKS * MDTEST_HARD_FILES * HARD_FILE_BYTES)) ;;
        disk | ssd) echo "$REF_BLOCK" ;;
    esac
}

# ior_args INSTANCE DIR: IOR's options of one instance (without -w/-r);
# INSTANCE is a phase, or mixed-seq / mixed-rand.
ior_args() {
    local d=$2
    case "$1" in
        ior-easy) echo "-a POSIX -g -G 271 -k -e -C -Q 1 -F -t $XFER_EASY -b $EASY_BLOCK -o $d/ior_file_easy" ;;
        ior-hard) echo "-a POSIX -C -Q 1 -g -G 27 -k -e -t $HARD_RECORD -b $HARD_RECORD -s $HARD_SEGMENTS -o $d/file" ;;
        mixed-seq) echo "-a POSIX -g -G 28 -k -e -C -Q 1 -t $XFER_MIXED -b $MIXED_SEQ_BLOCK -s 1 -o $d/seq" ;;
        # IOR refuses -C with -z on a shared file; on one node -C moves no rank anyway.
        mixed-rand) echo "-a POSIX -g -G 29 -k -e -z --random-offset-seed=29 -t $XFER_MIXED -b $MIXED_RAND_BLOCK -s 1 -o $d/rand" ;;
        disk | ssd) echo "-a POSIX -g -G 30 -k -e -t $XFER_EASY -b $REF_BLOCK -o $d/file" ;;
    esac
}

# mdtest_args PHASE DIR: mdtest's options (without -C/-T/-E).
mdtest_args() {
    case "$1" in
        mdtest-easy) echo "-n $MDTEST_EASY_FILES -u -L -F -P -G 31 -N 1 -d $2" ;;
        mdtest-hard) echo "-n $MDTEST_HARD_FILES -t -w $HARD_FILE_BYTES -e $HARD_FILE_BYTES -P -G 32 -N 1 -F -d $2" ;;
    esac
}

# run_ior RANKS OUT ARGS...: one IOR instance; its JSON summary in OUT.json,
# its output in OUT.log.
run_ior() {
    local ranks=$1 out=$2
    shift 2
    if [ -n "$IOR" ]; then
        timeout "$PHASE_TIMEOUT" "$MPIEXEC" -n "$ranks" "$IOR" "$@" \
            -O summaryFormat=JSON -O "summaryFile=$out.json" >"$out.log" 2>&1
    else
        # shellcheck disable=SC2086 # FALLBACK is a command and its script
        timeout "$PHASE_TIMEOUT" $FALLBACK ior --ranks "$ranks" "$@" -O "summaryFile=$out.json" >"$out.log" 2>&1
    fi
}

# run_mdtest RANKS OUT ARGS...: mdtest's output in OUT.log.
run_mdtest() {
    local ranks=$1 out=$2
    shift 2
    if [ -n "$MDTEST" ]; then
        timeout "$PHASE_TIMEOUT" "$MPIEXEC" -n "$ranks" "$MDTEST" "$@" >"$out.log" 2>&1
    else
        # shellcheck disable=SC2086
        timeout "$PHASE_TIMEOUT" $FALLBACK mdtest --ranks "$ranks" "$@" >"$out.log" 2>&1
    fi
}

# is_fallback PHASE: true if the phase runs the stand-in.
is_fallback() {
    case "$1" in
        mdtest-*) [ -z "$MDTEST" ] ;;
        *) [ -z "$IOR" ] ;;
    esac
}

# run_phase PHASE DIR TAG ACCESS: the phase's write (ACCESS w) or read-back
# (r) through the mount; its outputs are $RESULTS/TAG.ACCESS*. Sets OUTS
# (the files io500_table.py reads). Dies, naming the log, if a tool fails
# or the read-back finds a byte that differs.
run_phase() {
    local phase=$1 dir=$2 tag=$3 access=$4 out=$RESULTS/$3.$4 rc=0 a b
    local -a mode
    if [ "$access" = w ]; then mode=(-w); else mode=(-r -R); fi
    OUTS=()
    case "$phase" in
        ior-easy | ior-hard)
            read -ra a <<<"$(ior_args "$phase" "$dir")"
            run_ior "$RANKS" "$out" "${mode[@]}" "${a[@]}" || rc=$?
            OUTS=("$out.json")
            ;;
        disk | ssd)
            read -ra a <<<"$(ior_args "$phase" "$dir")"
            run_ior 1 "$out" "${mode[@]}" "${a[@]}" || rc=$?
            OUTS=("$out.json")
            ;;
        mixed)
            read -ra a <<<"$(ior_args mixed-seq "$dir")"
            read -ra b <<<"$(ior_args mixed-rand "$dir")"
            run_ior "$MIXED_SEQ_RANKS" "$out-seq" "${mode[@]}" "${a[@]}" &
            local seq_pid=$!
            run_ior "$MIXED_RAND_RANKS" "$out-rand" "${mode[@]}" "${b[@]}" || rc=$?
            wait "$seq_pid" || rc=$?
            OUTS=("$out-seq.json" "$out-rand.json")
            ;;
        mdtest-*)
            if [ "$access" = w ]; then
                mode=(-C)
            elif [ "$phase" = mdtest-hard ]; then
                mode=(-E -X)
            else
                mode=(-T)
            fi
            read -ra a <<<"$(mdtest_args "$phase" "$dir")"
            run_mdtest "$RANKS" "$out" "${a[@]}" "${mode[@]}" || rc=$?
            OUTS=("$out.log")
            ;;
    esac
    local logs=("$out"*.log)
    if [ "$rc" != 0 ] || grep -q -E "Incorrect data on read|ERROR: verifying|read back wrong" "${logs[@]}"; then
        tail -n 30 "${logs[@]}" >&2 || true
        # IOR exits 64 on a mismatch, mdtest prints "ERROR: verifying" and exits 0.
        if [ "$access" = r ] && grep -q -E "Incorrect data|ERROR: verifying|read back wrong" "${logs[@]}"; then
            die "VERIFICATION FAILED: $tag: the data read back through the mount differs from what was written (logs: ${logs[*]})"
        fi
        die "$phase failed ($([ "$access" = w ] && echo write || echo read-back)), exit status $rc: $tag (logs: ${logs[*]})"
    fi
}

# config SYSTEM CONSISTENCY BYTES: the mount's config file on stdout.
config() {
    local system=$1 consistency=$2 bytes=$3 need size=$((256 << 20))
    echo "# scripts/bench-io500.sh: $system, $consistency, a phase of $bytes bytes"
    printf '[mount]\nconsistency = "%s"\n' "$consistency"
    if [ "$system" = fast-all ]; then # 2 regions holding 1.25x the bytes, whole MiB, at least the default
        need=$(((bytes * 5 / 4 + 1) / 2))
        need=$(((need + (1 << 20) - 1) >> 20 << 20))
        [ "$need" -gt "$size" ] && size=$need
        printf '\n[log]\nregions = 2\nregion_size = %d\n' "$size"
    fi
    if [ "$system" = default ] && [ -n "${DEFAULT_EXTRA:-}" ]; then
        printf '\n%b\n' "$DEFAULT_EXTRA"
    fi
}

# --- preparation ----------------------------------------------------------------
RUN_DIR=$BENCH_DIR/run     # one phase, system and run at a time
RESULTS=$BENCH_DIR/results # tool outputs, configs, status JSON, logs, runs.jsonl
bench_traps
mkdir -p "$BENCH_DIR"
clear_stale_mount "$RUN_DIR/mnt" # left by an interrupted run
rm -rf "$RUN_DIR" "$RESULTS"
mkdir -p "$RESULTS"
check_free "$BENCH_DIR" $((SIZE_B * 3 + (512 << 20))) "SIZE=$SIZE"
"$SLUICE" config show --fast "$BENCH_DIR/check-fast" --capacity "$BENCH_DIR/check-cap" \
    >"$RESULTS/default-config.toml" 2>/dev/null || die "$SLUICE config show failed"
default_summary=$(python3 -c 'import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
print("policy %s, consistency %s, log %d x %s" % (c["policy"]["name"], c["mount"]["consistency"],
      c["log"]["regions"], c["log"]["region_size"]))' "$RESULTS/default-config.toml")

# The rows: "phase|system|consistency|label".
ROWS=()
if [ "$REFERENCE" = 1 ]; then
    ROWS+=("disk|capacity-only|close-to-open|capacity-only, close-to-open" "ssd|fast-all|node-local|fast-all, node-local")
fi
for p in "${PHS[@]}"; do
    for c in "${CONS[@]}"; do
        for s in "${SYSS[@]}"; do ROWS+=("$p|$s|$c|$s, $c"); done
    done
done

# run_one ROW RUN: one mount, write, status, drain, read-back, unmount.
run_one() {
    local phase system consistency label run=$2
    IFS='|' read -r phase system consistency label <<<"$1"
    local tag=${phase}__${system}__${consistency}__r${run}
    local log=$RESULTS/$tag.mount.log cfg=$RESULTS/$tag.toml bytes t0 drain_s wr rd
    local what="$phase, $label, run $run"
    local -a policy=() fallback=()
    bytes=$(phase_bytes "$phase")
    [ "$system" = default ] || policy=(--policy "$system")
    is_fallback "$phase" && fallback=(--fallback)
    rm -rf "$RUN_DIR"
    mkdir -p "$RUN_DIR/fast" "$RUN_DIR/cap" "$RUN_DIR/mnt"
    config "$system" "$consistency" "$bytes" >"$cfg"
    : >"$log"
    MNT=$RUN_DIR/mnt
    "$SLUICE" mount --fast "$RUN_DIR/fast" --capacity "$RUN_DIR/cap" --fast-device ssd \
        --capacity-device hdd "${policy[@]}" --config "$cfg" "$MNT" >>"$log" 2>&1 &
    PID=$!
    await_mount "$MNT" "$PID" "$log"
    local dir=$MNT/$phase
    mkdir -p "$dir"
    sync
    local load
    load=$(cut -d' ' -f1 /proc/loadavg)

    run_phase "$phase" "$dir" "$tag" w
    wr=("${OUTS[@]}")
    "$SLUICE" status "$MNT" --json >"$RESULTS/$tag.status.json" 2>>"$log" ||
        die "sluice status failed: $what (log $log)"

    t0=$(date +%s.%N)
    if timeout "$DRAIN_TIMEOUT" "$SLUICE" drain "$MNT" >>"$log" 2>&1; then
        drain_s=$(elapsed "$t0" "$(date +%s.%N)")
    else
        drain_s=""
        TROUBLE+=("$what: sluice drain failed or took over $DRAIN_TIMEOUT s (log: $log)")
        echo "$NAME: WARNING: $what: sluice drain failed (log $log)" >&2
    fi

    "$SLUICE" status "$MNT" --json >"$RESULTS/$tag.drained.json" 2>>"$log" ||
        die "sluice status failed after the drain: $what (log $log)"

    run_phase "$phase" "$dir" "$tag" r
    rd=("${OUTS[@]}")
    stop_mount sluice "$log" "$what"
    rm -rf "$RUN_DIR"

    LAST=$(python3 "$ROOT/scripts/io500_table.py" record "$RESULTS" --phase "$phase" --system "$label" \
        --run "$run" --bytes "$bytes" --write "${wr[@]}" --read "${rd[@]}" --status "$RESULTS/$tag.status.json" \
        --status-after "$RESULTS/$tag.drained.json" --load "$load" \
        ${drain_s:+--drain-seconds "$drain_s"} "${fallback[@]}") ||
        die "could not record $what"
}

total=$((RUNS * ${#ROWS[@]}))
count=0
started=$(date +%s)
LOAD_BEFORE=$(uptime | sed 's/^ *//')
# The tree as the runs start: edits made while they go on are not in the
# binary measured.
COMMIT=$(sluice_commit)
echo "== $total runs: RANKS=$RANKS SIZE=$SIZE RUNS=$RUNS, mdtest files per rank $MDTEST_EASY_FILES / $MDTEST_HARD_FILES, in $BENCH_DIR" >&2
echo "== IOR: ${IOR:-MISSING (io500_fallback.py, NOT IOR)}; mdtest: ${MDTEST:-MISSING (io500_fallback.py, NOT mdtest)}" >&2
echo "== load before: $LOAD_BEFORE" >&2
if pgrep -x rustc >/dev/null 2>&1 || pgrep -x cargo >/dev/null 2>&1; then
    echo "$NAME: note: cargo or rustc is running on this machine: the figures will be noisy" >&2
fi
for ((run = 1; run <= RUNS; run++)); do
    # The reference rows, then each phase with its systems in an order
    # rotated from run to run, so none is always first after another phase.
    n_ref=0
    [ "$REFERENCE" = 1 ] && n_ref=2
    per_phase=$(((${#ROWS[@]} - n_ref) / ${#PHS[@]}))
    for ((i = 0; i < ${#ROWS[@]}; i++)); do
        if [ "$i" -lt "$n_ref" ]; then
            row=${ROWS[$i]}
        else
            k=$(((i - n_ref) % per_phase))
            base=$((i - k))
            row=${ROWS[$((base + (k + run - 1) % per_phase))]}
        fi
        count=$((count + 1))
        run_one "$row" "$run"
        IFS='|' read -r phase _ _ label <<<"$row"
        note=""
        is_fallback "$phase" && note=" [FALLBACK, NOT IOR/mdtest]"
        printf '[%d/%d] %-12s %-26s run %d: %s%s\n' "$count" "$total" "$phase" "$label" "$run" "$LAST" "$note" >&2
    done
done
elapsed_s=$(($(date +%s) - started))
LOAD_AFTER=$(uptime | sed 's/^ *//')
echo "== done in ${elapsed_s} s; load after: $LOAD_AFTER; outputs, status JSON, logs and runs.jsonl in $RESULTS" >&2

# --- the table and the doc ---------------------------------------------------------
cmd="RANKS=$RANKS SIZE=$SIZE RUNS=$RUNS MDTEST_EASY_FILES=$MDTEST_EASY_FILES MDTEST_HARD_FILES=$MDTEST_HARD_FILES"
[ "$PHASES" = "$ALL_PHASES" ] || cmd+=" PHASES=\"$PHASES\""
[ "$SYSTEMS" = "default capacity-only fast-all" ] || cmd+=" SYSTEMS=\"$SYSTEMS\""
[ "$CONSISTENCIES" = "close-to-open node-local" ] || cmd+=" CONSISTENCIES=\"$CONSISTENCIES\""
[ "$REFERENCE" = 1 ] || cmd+=" REFERENCE=$REFERENCE"
cmd+=" scripts/bench-io500.sh${ARGS[*]:+ ${ARGS[*]}}"
# The versions the tools reported in this run's outputs.
ior_version=$(python3 -c 'import glob, json
for f in sorted(glob.glob("'"$RESULTS"'/*.w*.json")):
    print(json.load(open(f)).get("Version", "?")); break' 2>/dev/null || true)
mdtest_version=$(grep -h -o -m1 -E 'mdtest-[0-9][^ ]*' "$RESULTS"/*.log 2>/dev/null | head -n 1 || true)
mpich=$(dpkg-query -W -f '${Package} ${Version}' mpich 2>/dev/null || "$MPIEXEC" --version 2>/dev/null | grep -m1 Version || echo unknown)
meta=$RESULTS/meta.md
{
    echo "- machine: $(machine_summary); sluice $COMMIT at the start ($SLUICE)"
    echo "- load: before \`$LOAD_BEFORE\`, after \`$LOAD_AFTER\`;" \
        "1-minute load at the start of each run: $(python3 -c 'import json, statistics, sys
l = [json.loads(x)["load"] for x in open(sys.argv[1])]
print("median %.2f, min %.2f, max %.2f" % (statistics.median(l), min(l), max(l)))' "$RESULTS/runs.jsonl")"
    if [ -n "$IOR" ]; then
        echo "- IOR: $IOR, version ${ior_version:-?} (from its JSON summary)"
    else
        echo "- IOR: **MISSING: scripts/io500_fallback.py ran the IOR phases instead, NOT IOR (same offsets, no MPI)**"
    fi
    if [ -n "$MDTEST" ]; then
        echo "- mdtest: $MDTEST, ${mdtest_version:-?}"
    else
        echo "- mdtest: **MISSING: scripts/io500_fallback.py ran the mdtest phases instead, NOT mdtest**"
    fi
    echo "- MPI: $mpich (\`$MPIEXEC -n RANKS\`); $RANKS ranks; work directory $BENCH_DIR ($(fs_summary "$BENCH_DIR"))"
    echo "- mount: \`sluice mount --fast F --capacity C --fast-device ssd --capacity-device hdd [--policy P] --config CONFIG MNT\`;" \
        "CONFIG sets \`[mount] consistency\`; default = no --policy ($default_summary, from \`sluice config show\`);" \
        "fast-all gets a log of 2 regions holding at least 1.25x the phase's bytes"
    echo "- per run: fresh tiers, mount, the write phase, \`sluice status --json\`, \`sluice drain\` (timed)," \
        "the read-back, \`sluice unmount\`; the systems' order rotates from run to run"
    echo "- SIZE=$SIZE: ior-easy $RANKS x $((EASY_BLOCK >> 20)) MiB files; ior-hard $HARD_SEGMENTS segments of" \
        "$RANKS x $HARD_RECORD B ($(($(phase_bytes ior-hard) >> 20)) MiB); mixed $MIXED_SEQ_RANKS ranks x" \
        "$((MIXED_SEQ_BLOCK >> 20)) MiB contiguous + $MIXED_RAND_RANKS ranks x $((MIXED_RAND_BLOCK >> 20)) MiB random;" \
        "mdtest-easy $RANKS x $MDTEST_EASY_FILES empty files; mdtest-hard $RANKS x $MDTEST_HARD_FILES files of $HARD_FILE_BYTES B"
    echo "- IOR options (then \`-w\`, or \`-r -R\` for the read-back; MNT/PHASE is the phase's directory):"
    for inst in ior-easy ior-hard mixed-seq mixed-rand disk; do
        echo "  - $inst: \`ior $(ior_args "$inst" MNT/PHASE)\`"
    done
    echo "- mdtest options (then \`-C\`; the read-back \`-T\`, or \`-E -X\` for mdtest-hard):"
    for p in mdtest-easy mdtest-hard; do
        echo "  - $p: \`mdtest $(mdtest_args "$p" MNT/PHASE)\`"
    done
    if [ ${#TROUBLE[@]} -gt 0 ]; then
        echo "- **trouble during the run:**"
        for t in "${TROUBLE[@]}"; do echo "  - $t"; done
    fi
} >"$meta"
table=$(python3 "$ROOT/scripts/io500_table.py" table "$RESULTS") || die "could not make the table from $RESULTS/runs.jsonl"
printf '%s\n\n%s\n' "$(cat "$meta")" "$table"
if [ "$WRITE_DOC" = 1 ]; then
    python3 "$ROOT/scripts/bench-doc.py" bench-io500 "$DOC" "$(cat "$meta")

$table" "$elapsed_s" "$cmd"
    echo "== written into $DOC" >&2
fi
exit 0
