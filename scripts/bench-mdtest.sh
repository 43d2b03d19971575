#!/usr/bin/env bash
# Metadata at FUSE speed (issue 33, items 2 and 3): real mdtest, IO500's
# mdtest-easy and mdtest-hard, through the raw directory, mergerfs and a
# default sluice mount, in one run, side by side, over the same local
# directory. Each phase of each system runs once per round on fresh
# directories (the systems' order rotates from round to round):
#   raw        mdtest into a plain directory,
#   mergerfs   `mergerfs -o MERGERFS_OPTS RAW MNT` (scripts/bench-mount.sh's
#              options), a FUSE peer over the same kind of directory,
#   sluice     `sluice mount --fast FAST --capacity CAP MNT`: the defaults
#              (policy cost, close-to-open, the default log), both tiers
#              plain directories on the same file system,
# each on a fresh ext4 file system (FS=loop, the default: an image file in
# BENCH_DIR, mkfs.ext4 and a loop mount per run) or in BENCH_DIR itself
# (FS=dir). A fresh file system per run keeps the runs apart: ext4 skips
# inodes freed in the last minute or so when it allocates (its
# recently_deleted check), so on one long-lived file system a create phase
# that follows another run's removals scans inode tables (perf showed 43 %
# of the mount's CPU time in recently_deleted), and the order of the
# systems decided their create rates (raw: 11,800 or 2,000 op/s).
# and for each of IO500's mdtest phases (IO500's options, src/phase_*.c):
#   mdtest-easy  empty files, a directory per rank:
#                mdtest -n EASY_FILES -u -L -F -P -G 31 -N 1
#   mdtest-hard  3901-byte files in one shared directory:
#                mdtest -n HARD_FILES -t -w 3901 -e 3901 -P -G 32 -N 1 -F -X
# run as one mdtest invocation of its four phases, `-C -T -E -r` (create,
# stat, read, remove; mdtest -N 1 makes each rank stat and read another
# rank's files). IO500's -Y (a global `sync` after each phase) is left
# out: FUSE has no syncfs, it would only flush the host's other file
# systems.
#
# Prints one Markdown table (op/s per phase and operation, the median of
# RUNS rounds, and sluice/mergerfs), writes every number as JSON
# (RESULTS/mdtest.json) and, unless --no-doc, the table with the command
# and the machine into DOC (scripts/bench-doc.py, block `bench-mdtest`).
#
# Usage: scripts/bench-mdtest.sh [--no-build] [--no-doc] [-h]
# Environment (defaults, for a 2-core machine: two to three minutes):
#   RANKS=2                 MPI ranks
#   EASY_FILES=5000         mdtest-easy files per rank
#   HARD_FILES=2500         mdtest-hard files per rank
#   RUNS=3                  rounds; a cell is their median
#   SYSTEMS="raw mergerfs sluice"   also: libfuse, libfuse-uring (below)
#   PHASES="mdtest-easy mdtest-hard"
#   SLUICE_CONFIG           a config file for the sluice mount (none: defaults)
#   FS=loop                 loop: a fresh ext4 of FS_SIZE per run (root);
#                           dir: directories in BENCH_DIR
#   FS_SIZE=8G              the loop file system's size (a sparse image;
#                           mergerfs refuses creates below 4 GiB free)
#   MDTEST, MPIEXEC         the tools (else mdtest on PATH or /opt/ior/bin,
#                           and mpiexec)
#   BENCH_DIR=/tmp/sluice-bench-mdtest   work directory (wiped at the start)
#   DOC=docs/results/mdtest.md
#   PHASE_TIMEOUT=600       seconds before an mdtest run counts as hung
#   SLUICE=${CARGO_TARGET_DIR:-target}/release/sluice
#   PASSTHROUGH_HP          libfuse's example/passthrough_hp (3.18 or later,
#                           built with io_uring: docs/benchmarks.md), for
#                           the systems libfuse (over read/write of
#                           /dev/fuse) and libfuse-uring (`-o io_uring`:
#                           FUSE over io_uring, which needs
#                           /sys/module/fuse/parameters/enable_uring = Y)
# Needs mdtest (built with IOR against MPICH: docs/benchmarks.md), mpich,
# mergerfs, fusermount3, python3, and cargo unless --no-build.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
ARGS=("$@")

# shellcheck source-path=SCRIPTDIR source=bench-args.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-args.sh"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-lib.sh"

RANKS=${RANKS:-2}
EASY_FILES=${EASY_FILES:-5000}
HARD_FILES=${HARD_FILES:-2500}
RUNS=${RUNS:-3}
SYSTEMS=${SYSTEMS:-raw mergerfs sluice}
PHASES=${PHASES:-mdtest-easy mdtest-hard}
BENCH_DIR=${BENCH_DIR:-/tmp/sluice-bench-mdtest}
DOC=${DOC:-docs/results/mdtest.md}
PHASE_TIMEOUT=${PHASE_TIMEOUT:-600}
MPIEXEC=${MPIEXEC:-mpiexec}
FS=${FS:-loop}
FS_SIZE=${FS_SIZE:-8G}
MERGERFS_OPTS=cache.files=off,func.getattr=newest,category.create=ff
HARD_FILE_BYTES=3901 # IO500's mdtest-hard file

if [ -z "${MDTEST:-}" ]; then
    MDTEST=$(command -v mdtest 2>/dev/null || true)
    [ -n "$MDTEST" ] || MDTEST=/opt/ior/bin/mdtest
fi
[ -x "$MDTEST" ] || die "mdtest is missing (set MDTEST, or build IOR: docs/benchmarks.md)"
require_tools "apt-get install mpich mergerfs fuse3" "$MPIEXEC" mergerfs fusermount3 mountpoint python3
positive_int RANKS "$RANKS"
positive_int EASY_FILES "$EASY_FILES"
positive_int HARD_FILES "$HARD_FILES"
positive_int RUNS "$RUNS"
for s in $SYSTEMS; do
    case "$s" in
        raw | mergerfs | sluice) ;;
        libfuse | libfuse-uring)
            [ -x "${PASSTHROUGH_HP:-}" ] ||
                die "SYSTEMS has $s: set PASSTHROUGH_HP to libfuse's example/passthrough_hp (docs/benchmarks.md)"
            ;;
        *) die "unknown system '$s' in SYSTEMS (raw mergerfs sluice libfuse libfuse-uring)" ;;
    esac
done
if [[ " $SYSTEMS " == *" libfuse-uring "* ]] &&
    [ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" != Y ]; then
    die "libfuse-uring needs FUSE over io_uring: echo Y > /sys/module/fuse/parameters/enable_uring (root; Linux 6.14+)"
fi
for p in $PHASES; do
    case "$p" in
        mdtest-easy | mdtest-hard) ;;
        *) die "unknown phase '$p' in PHASES (mdtest-easy mdtest-hard)" ;;
    esac
done
case "$FS" in
    loop) command -v mkfs.ext4 >/dev/null 2>&1 || die "FS=loop needs mkfs.ext4 (or use FS=dir)" ;;
    dir) ;;
    *) die "FS must be loop or dir (got '$FS')" ;;
esac
BENCH_DIR=$(abs_path "$BENCH_DIR")
[ "$BENCH_DIR" != / ] || die "BENCH_DIR must not be /"

build_sluice

RUN_DIR=$BENCH_DIR/run      # one system and phase at a time
RESULTS=$BENCH_DIR/results  # mdtest output, logs, JSON
IMAGE=$BENCH_DIR/fs.img     # FS=loop: the file system of one run
bench_traps
# The EXIT trap: bench-lib's cleanup of a mount, and the loop file system.
# shellcheck disable=SC2317  # called by the EXIT trap
mdtest_cleanup() {
    local rc=$?
    bench_stop_mount
    drop_loop_fs "$IMAGE" "$RUN_DIR"
    exit "$rc"
}
trap mdtest_cleanup EXIT

# fresh_fs: RUN_DIR empty, on a new ext4 (FS=loop) or in BENCH_DIR.
fresh_fs() {
    if [ "$FS" = loop ]; then
        loop_fs "$IMAGE" "$RUN_DIR" "$FS_SIZE"
    else
        rm -rf "$RUN_DIR"
        mkdir -p "$RUN_DIR"
    fi
}

# drop_fs: unmount and remove the run's file system.
drop_fs() {
    [ "$FS" != loop ] || drop_loop_fs "$IMAGE" "$RUN_DIR"
    rm -rf "$RUN_DIR"
}

# mdtest_args PHASE DIR: IO500's options of PHASE, then its four phases.
mdtest_args() {
    case "$1" in
        mdtest-easy) echo "-n $EASY_FILES -u -L -F -P -G 31 -N 1 -d $2 -C -T -E -r" ;;
        mdtest-hard) echo "-n $HARD_FILES -t -w $HARD_FILE_BYTES -e $HARD_FILE_BYTES -P -G 32 -N 1 -F -X -d $2 -C -T -E -r" ;;
    esac
}

mkdir -p "$BENCH_DIR"
clear_stale_mount "$RUN_DIR/mnt"
if mountpoint -q "$RUN_DIR" 2>/dev/null; then umount "$RUN_DIR"; fi
rm -rf "$RUN_DIR" "$RESULTS" "$IMAGE"
mkdir -p "$RESULTS"
read -ra SYS <<<"$SYSTEMS"
read -ra PH <<<"$PHASES"
total=$((RUNS * ${#PH[@]} * ${#SYS[@]}))
n=0
started=$(date +%s)
echo "== $total mdtest runs: RANKS=$RANKS, files per rank $EASY_FILES (easy) / $HARD_FILES (hard), RUNS=$RUNS, systems: ${SYS[*]}, in $BENCH_DIR" >&2

for ((run = 1; run <= RUNS; run++)); do
    for phase in "${PH[@]}"; do
        for ((k = 0; k < ${#SYS[@]}; k++)); do
            sys=${SYS[$(((k + run - 1) % ${#SYS[@]}))]}
            n=$((n + 1))
            what="$sys $phase run $run"
            out=$RESULTS/${sys}__${phase}__r${run}.out
            log=$RESULTS/${sys}__${phase}__r${run}.log
            fresh_fs
            mkdir -p "$RUN_DIR/raw" "$RUN_DIR/fast" "$RUN_DIR/cap" "$RUN_DIR/mnt"
            : >"$log"
            case "$sys" in
                raw) dir=$RUN_DIR/raw ;;
                mergerfs)
                    MNT=$RUN_DIR/mnt
                    mergerfs -f -o "$MERGERFS_OPTS" "$RUN_DIR/raw" "$MNT" >>"$log" 2>&1 &
                    PID=$!
                    await_mount "$MNT" "$PID" "$log"
                    dir=$MNT
                    ;;
                libfuse | libfuse-uring)
                    MNT=$RUN_DIR/mnt
                    uring=()
                    [ "$sys" = libfuse-uring ] && uring=(-o io_uring)
                    "$PASSTHROUGH_HP" --foreground "${uring[@]}" "$RUN_DIR/raw" "$MNT" >>"$log" 2>&1 &
                    PID=$!
                    await_mount "$MNT" "$PID" "$log"
                    # -o io_uring falls back to /dev/fuse quietly: the
                    # daemon holds a ring (set up after the kernel's INIT,
                    # which follows the mount) only when the kernel took it.
                    if [ "$sys" = libfuse-uring ]; then
                        for ((i = 0; i < 50; i++)); do
                            readlink "/proc/$PID/fd/"* 2>/dev/null | grep -q io_uring && break
                            sleep 0.1
                        done
                        ((i < 50)) || die "$what: passthrough_hp -o io_uring holds no io_uring (log: $log)"
                    fi
                    dir=$MNT
                    ;;
                sluice)
                    MNT=$RUN_DIR/mnt
                    config=()
                    [ -n "${SLUICE_CONFIG:-}" ] && config=(--config "$SLUICE_CONFIG")
                    "$SLUICE" mount "${config[@]}" --fast "$RUN_DIR/fast" --capacity "$RUN_DIR/cap" \
                        "$MNT" >>"$log" 2>&1 &
                    PID=$!
                    await_mount "$MNT" "$PID" "$log"
                    dir=$MNT
                    ;;
            esac
            sync
            read -ra a <<<"$(mdtest_args "$phase" "$dir/$phase")"
            rc=0
            timeout "$PHASE_TIMEOUT" "$MPIEXEC" -n "$RANKS" "$MDTEST" "${a[@]}" >"$out" 2>&1 || rc=$?
            if [ "$rc" != 0 ] || grep -q 'ERROR' "$out"; then
                echo "--- $out" >&2
                tail -n 40 "$out" >&2
                die "mdtest failed (exit $rc): $what ($MPIEXEC -n $RANKS $MDTEST ${a[*]})"
            fi
            [ -n "$MNT" ] && stop_mount "$sys" "$log" "$what"
            rates=$(python3 "$ROOT/scripts/mdtest_table.py" rates "$out")
            printf '[%d/%d] %-9s %-12s run %d: %s\n' "$n" "$total" "$sys" "$phase" "$run" "$rates" >&2
            drop_fs
        done
    done
done
elapsed=$(($(date +%s) - started))
echo "== done in ${elapsed} s; mdtest output and logs in $RESULTS" >&2

table=$(python3 "$ROOT/scripts/mdtest_table.py" table "$RESULTS" "$RESULTS/mdtest.json" "${SYS[*]}" "${PH[*]}")
echo "$table"

if [ "$FS" = loop ]; then
    fs_note="each run on a fresh ext4 of $FS_SIZE (loop device, image on $(fs_summary "$BENCH_DIR"))"
else
    fs_note="directories on $(fs_summary "$BENCH_DIR")"
fi
cmd="RANKS=$RANKS EASY_FILES=$EASY_FILES HARD_FILES=$HARD_FILES RUNS=$RUNS"
[ "$SYSTEMS" = "raw mergerfs sluice" ] || cmd+=" SYSTEMS=\"$SYSTEMS\""
[ "$PHASES" = "mdtest-easy mdtest-hard" ] || cmd+=" PHASES=\"$PHASES\""
[ -n "${SLUICE_CONFIG:-}" ] && cmd+=" SLUICE_CONFIG=$SLUICE_CONFIG"
[ "$FS" = loop ] || cmd+=" FS=$FS"
cmd+=" scripts/bench-mdtest.sh${ARGS[*]:+ ${ARGS[*]}}"
mdtest_version=$(grep -h -o -m1 -E 'mdtest-[0-9][^ ]*' "$RESULTS"/*.out 2>/dev/null | head -n 1 || true)
meta="- machine: $(machine_summary); $fs_note
- $(mergerfs --version 2>&1 | head -n 1) (\`-o $MERGERFS_OPTS\`); ${mdtest_version:-mdtest} ($MDTEST), $RANKS ranks; sluice $(sluice_commit), \`sluice mount --fast FAST --capacity CAP MNT\`${SLUICE_CONFIG:+ --config $SLUICE_CONFIG}
${PASSTHROUGH_HP:+- libfuse: \`passthrough_hp --foreground RAW MNT\` ($PASSTHROUGH_HP); libfuse-uring: the same with \`-o io_uring\`
}- rates in op/s, mdtest's rate of all ranks together (its SUMMARY rate), the median of $RUNS round(s); ratio = sluice / mergerfs

$table"
if [ "$WRITE_DOC" = 1 ]; then
    python3 "$ROOT/scripts/bench-doc.py" bench-mdtest "$DOC" "$meta" "$elapsed" "$cmd"
    echo "== table written into $DOC" >&2
fi
