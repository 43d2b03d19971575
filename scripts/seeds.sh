#!/usr/bin/env bash
# More seeds of the seeded crash harness than CI runs (issue 35;
# crates/engine/tests/seeded.rs, docs/crash-consistency.md "The seeded
# harness"): each seed draws a workload and a crash point, crashes there,
# recovers and checks every acknowledged byte; then as many seeds of the
# harness of completions in random orders (orders.rs), each seed without a
# crash and with one. A failing seed is printed with what it lost; replay it
# alone with
#   SLUICE_SEED=N SLUICE_SEED_VERBOSE=1 cargo test -p sluice-engine --test seeded -- --nocapture
#   SLUICE_ORDERS_SEED=N SLUICE_ORDERS_VERBOSE=1 cargo test -p sluice-engine --lib orders -- --nocapture
#
# Usage: scripts/seeds.sh [N [FROM]]   (N seeds from FROM; default 2000
# from 0, release build)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source-path=SCRIPTDIR source=path.sh
source scripts/path.sh
n=${1:-2000}
from=${2:-0}
for v in "$n" "$from"; do
    case "$v" in
        '' | *[!0-9]*) echo "usage: scripts/seeds.sh [N [FROM]]  (numbers: how many seeds, the first)" >&2; exit 2 ;;
    esac
done
started=$(date +%s)
SLUICE_SEEDS=$n SLUICE_SEED_FROM=$from cargo test --release -p sluice-engine --test seeded issue_35_seeded
echo "== seeds $from..$((from + n)) in $(($(date +%s) - started)) s"
# The harness of completions in random orders (crates/engine/src/engine/
# orders.rs), as many seeds from 0 (it is quick: about 1,000 a second,
# each run with and without its crash).
started=$(date +%s)
SLUICE_ORDERS_SEEDS=$((from + n)) cargo test --release -p sluice-engine --lib orders
echo "== orders seeds 0..$((from + n)) in $(($(date +%s) - started)) s"
