# shellcheck shell=bash
# Sourced by the benchmark scripts (bench-mount.sh, bench-liu.sh) after
# `cd` to the repository: their shared flags into BUILD (0 with --no-build)
# and WRITE_DOC (0 with --no-doc), -h printing the caller's header comment,
# and die().
NAME=$(basename "$0")
# shellcheck disable=SC2034 # read by the caller
BUILD=1
# shellcheck disable=SC2034 # read by the caller
WRITE_DOC=1
for a in "$@"; do
    case "$a" in
        --no-build) BUILD=0 ;;
        --no-doc) WRITE_DOC=0 ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "$NAME: unknown argument '$a' (try --help)" >&2
            exit 2
            ;;
    esac
done

die() {
    echo "$NAME: $*" >&2
    exit 1
}
