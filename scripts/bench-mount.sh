#!/usr/bin/env bash
# Mount benchmark (issue 5, item 6): the same fio jobs, in one run, through
#   raw              a plain directory (the fast tier's kind of directory),
#   mergerfs         mergerfs over such a directory,
#   sluice-default   `sluice mount` with the product's defaults (policy
#                    cost, consistency close-to-open, passthrough on),
#   sluice-no-passthrough  the same with mount.passthrough = false (what
#                    FUSE passthrough is worth: docs/fuse.md),
#   sluice           `sluice mount --policy ssdup+` (the paper's rule),
#   sluice-fast-all  `sluice mount --policy fast-all` (every write to the log),
# and one Markdown table of MB/s (fio's write bw, summed over jobs) with the
# ratios sluice/raw, sluice/mergerfs and fast-all/raw, printed to stdout and
# written (with date, machine and command) into docs/results/mount-bench.md.
#
# Rows: sequential 1 MiB writes and random 256 KiB writes, 1 job and 4 jobs
# (one file per job), SIZE bytes per job, psync, buffered (direct=0), every
# job ending with fsync (end_fsync=1). Every system and row gets fresh
# directories under BENCH_DIR (all on one file system); `sync` runs before
# every fio run; nothing is dropped from the page cache.
#
# Usage: scripts/bench-mount.sh [--no-build] [--no-doc] [-h]
# Environment (defaults):
#   SIZE=256M                    data written by each fio job
#   RUNS=5                       repetitions; a cell is their median
#   BENCH_DIR=/tmp/sluice-bench  work directory (its run/ and results/ are
#                                wiped at the start)
#   SYSTEMS="raw mergerfs sluice-default sluice sluice-fast-all"
#   DOC=docs/results/mount-bench.md   (and its plot DOC's name .png, drawn
#                                      when gnuplot is installed)
#   SLUICE=${CARGO_TARGET_DIR:-target}/release/sluice   the binary
#   SLUICE_CONFIG=               a config file for every sluice mount (to
#                                compare settings, such as
#                                mount.consistency); none by default
# Needs fio, mergerfs, fusermount3 (apt-get install fio mergerfs fuse3),
# python3, and cargo unless --no-build.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
ARGS=("$@")

# shellcheck source-path=SCRIPTDIR source=bench-args.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-args.sh"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh disable=SC1091 # followed with -x
source "$ROOT/scripts/bench-lib.sh"

SIZE=${SIZE:-256M}
RUNS=${RUNS:-5}
BENCH_DIR=${BENCH_DIR:-/tmp/sluice-bench}
SYSTEMS=${SYSTEMS:-raw mergerfs sluice-default sluice sluice-fast-all}
DOC=${DOC:-docs/results/mount-bench.md}
MERGERFS_OPTS=cache.files=off,func.getattr=newest,category.create=ff
ROWS=(seq-1M-1job seq-1M-4jobs rand-256K-1job rand-256K-4jobs)
FIO_COMMON="--size=$SIZE --ioengine=psync --direct=0 --end_fsync=1 --fallocate=none --group_reporting --output-format=json"


# --- what is needed -------------------------------------------------------
require_tools "apt-get install fio mergerfs fuse3" fio mergerfs fusermount3 mountpoint python3
positive_int RUNS "$RUNS"
size_bytes=$(size_bytes SIZE "$SIZE")
for s in $SYSTEMS; do
    case "$s" in
        raw | mergerfs | sluice-default | sluice-no-passthrough | sluice | sluice-fast-all) ;;
        *) die "unknown system '$s' in SYSTEMS (raw mergerfs sluice-default sluice-no-passthrough sluice sluice-fast-all)" ;;
    esac
done
BENCH_DIR=$(abs_path "$BENCH_DIR")
[ "$BENCH_DIR" != / ] || die "BENCH_DIR must not be /"

build_sluice

# --- mounts and their cleanup (scripts/bench-lib.sh) -------------------------
RUN_DIR=$BENCH_DIR/run      # one system and row at a time
RESULTS=$BENCH_DIR/results  # fio JSON, logs, unmount times
bench_traps

fio_args() { # row -> fio options (without directory and output)
    local rw bs jobs
    case "$1" in
        seq-1M-1job) rw=write bs=1M jobs=1 ;;
        seq-1M-4jobs) rw=write bs=1M jobs=4 ;;
        rand-256K-1job) rw=randwrite bs=256k jobs=1 ;;
        rand-256K-4jobs) rw=randwrite bs=256k jobs=4 ;;
        *) die "unknown row $1" ;;
    esac
    # fallocate=none: sluice answers EOPNOTSUPP to fallocate; all systems
    # write into sparse files alike.
    echo "--name=$1 --rw=$rw --bs=$bs --numjobs=$jobs $FIO_COMMON"
}

# no_passthrough_config [CONFIG]: CONFIG's text (none: empty) with
# mount.passthrough = false.
no_passthrough_config() {
    local text=""
    [ -n "$1" ] && text=$(cat "$1")
    if grep -q '^\[mount\]' <<<"$text"; then
        sed 's/^\[mount\]$/[mount]\npassthrough = false/' <<<"$text"
    else
        printf '%s\n\n[mount]\npassthrough = false\n' "$text"
    fi
}

# --- preparation -------------------------------------------------------------
mkdir -p "$BENCH_DIR"
clear_stale_mount "$RUN_DIR/mnt" # left by an interrupted run
rm -rf "$RUN_DIR" "$RESULTS"
mkdir -p "$RESULTS"
no_passthrough_config "${SLUICE_CONFIG:-}" >"$RESULTS/no-passthrough.toml"
read -ra SYS <<<"$SYSTEMS"
check_free "$BENCH_DIR" $((size_bytes * 4 * 3)) "SIZE=$SIZE" # the 4-job rows: log + capacity, with room

total=$((RUNS * ${#ROWS[@]} * ${#SYS[@]}))
n=0
started=$(date +%s)
echo "== $total fio runs: SIZE=$SIZE per job, RUNS=$RUNS, systems: ${SYS[*]}, in $BENCH_DIR" >&2
printf 'system\trow\trun\tunmount_s\n' >"$RESULTS/unmount.tsv"

for ((run = 1; run <= RUNS; run++)); do
    for row in "${ROWS[@]}"; do
        # Rotate the order of the systems from run to run, so none is always
        # first (or last) after a given row.
        for ((k = 0; k < ${#SYS[@]}; k++)); do
            sys=${SYS[$(((k + run - 1) % ${#SYS[@]}))]}
            n=$((n + 1))
            what="$sys $row run $run"
            out=$RESULTS/${sys}__${row}__r${run}.json
            log=$RESULTS/${sys}__${row}__r${run}.log
            rm -rf "$RUN_DIR"
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
                sluice | sluice-*)
                    policy=()
                    [ "$sys" = sluice ] && policy=(--policy ssdup+)
                    [ "$sys" = sluice-fast-all ] && policy=(--policy fast-all)
                    MNT=$RUN_DIR/mnt
                    config=()
                    [ -n "${SLUICE_CONFIG:-}" ] && config=(--config "$SLUICE_CONFIG")
                    [ "$sys" = sluice-no-passthrough ] && config=(--config "$RESULTS/no-passthrough.toml")
                    "$SLUICE" mount "${config[@]}" --fast "$RUN_DIR/fast" --capacity "$RUN_DIR/cap" \
                        "${policy[@]}" "$MNT" >>"$log" 2>&1 &
                    PID=$!
                    await_mount "$MNT" "$PID" "$log"
                    dir=$MNT
                    ;;
                *) die "no way to run system $sys" ;;
            esac
            sync
            read -ra opts <<<"$(fio_args "$row")"
            if ! fio "${opts[@]}" --directory="$dir" --output="$out" >>"$log" 2>&1; then
                echo "--- $log" >&2
                tail -n 40 "$log" >&2
                echo "--- $out" >&2
                tail -n 40 "$out" >&2 || true
                die "fio failed: $what (fio ${opts[*]} --directory=$dir)"
            fi
            mbs=$(python3 -c 'import json,sys
t=open(sys.argv[1]).read(); d=json.loads(t[t.find("{"):])
print("%.0f" % (sum(j["write"]["bw_bytes"] for j in d["jobs"]) / 1e6))' "$out")
            note=""
            if [ "${sys%%-*}" = sluice ]; then # where the bytes went (log or files)
                "$SLUICE" status "$MNT" >"${out%.json}.status" 2>&1 || true
                routed=$(sed -n 's/^routed *//p' "${out%.json}.status")
                note=" [${routed:-no status}]"
            fi
            if [ -n "$MNT" ]; then
                t0=$(date +%s.%N)
                stop_mount "$sys" "$log" "$what"
                t1=$(date +%s.%N)
                secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
                printf '%s\t%s\t%s\t%s\n' "$sys" "$row" "$run" "$secs" >>"$RESULTS/unmount.tsv"
                note=" (unmount ${secs} s)$note"
            fi
            printf '[%d/%d] %-16s %-16s run %d: %6s MB/s%s\n' \
                "$n" "$total" "$sys" "$row" "$run" "$mbs" "$note" >&2
            rm -rf "$RUN_DIR"
        done
    done
done
elapsed=$(($(date +%s) - started))
echo "== done in ${elapsed} s; fio JSON and logs in $RESULTS" >&2

# --- the table -------------------------------------------------------------------
meta=$RESULTS/meta.md
cmd="SIZE=$SIZE RUNS=$RUNS BENCH_DIR=$BENCH_DIR"
[ -n "${SLUICE_CONFIG:-}" ] && cmd+=" SLUICE_CONFIG=$SLUICE_CONFIG"
[ "$SYSTEMS" = "raw mergerfs sluice-default sluice sluice-fast-all" ] || cmd+=" SYSTEMS=\"$SYSTEMS\""
cmd+=" scripts/bench-mount.sh${ARGS[*]:+ ${ARGS[*]}}"
commit=$(sluice_commit)
fstype=$(fs_summary "$BENCH_DIR")
{
    echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') in ${elapsed} s with"
    echo
    echo '```sh'
    echo "$cmd"
    echo '```'
    echo
    echo "- machine: $(machine_summary);" \
        "$(fio --version), $(mergerfs --version 2>&1 | head -n 1), sluice $commit"
    echo "- work directory: $BENCH_DIR ($fstype); every system and row in fresh directories there"
    echo "- fio: \`fio --name=ROW --rw=RW --bs=BS --numjobs=N $FIO_COMMON --directory=DIR --output=FILE\`;" \
        "seq rows \`--rw=write --bs=1M\`, rand rows \`--rw=randwrite --bs=256k\`, N = 1 or 4 (one file per job);" \
        "\`sync\` before every run"
    echo "- raw dir: fio into a plain directory; mergerfs: \`mergerfs -o $MERGERFS_OPTS RAWDIR MNT\`;" \
        "sluice: \`sluice mount --fast F --capacity C [--policy ssdup+|fast-all] MNT\` (the defaults column without --policy: policy \`cost\`, consistency \`close-to-open\`, passthrough on; the no-passthrough column adds \`mount.passthrough = false\`), stopped with \`sluice unmount\` (drain) after each run"
    if [ -n "${SLUICE_CONFIG:-}" ]; then
        echo "- every sluice mount with \`--config $SLUICE_CONFIG\`:" \
            "\`$(tr '\n' ' ' <"$SLUICE_CONFIG" | sed 's/ *$//')\`"
    fi
    echo "- MB/s = 10^6 bytes/s, fio's \`write.bw_bytes\` summed over the jobs; the fsync at the end is inside fio's time"
    if [ ${#TROUBLE[@]} -gt 0 ]; then
        echo "- **trouble during the run:**"
        for t in "${TROUBLE[@]}"; do echo "  - $t"; done
    fi
} >"$meta"
DOC=$(abs_path "$DOC")
update=()
[ "$WRITE_DOC" = 1 ] && update=(--update "$DOC" --meta "$meta" --plot "${DOC%.md}.png")
python3 "$ROOT/scripts/fio_table.py" "${update[@]}" "$RESULTS"/*__*__r*.json
[ "$WRITE_DOC" = 1 ] && echo "== written into $DOC" >&2
exit 0
