#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build, run sluice's main
# job with its embedded defaults: `sluice demo` (a real FUSE mount over a
# local fast tier and an emulated 7200 rpm capacity tier under
# ./sluice-demo; writers, live status, drain, verification, summary).
# With arguments, runs `sluice ARGS...` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source-path=SCRIPTDIR source=path.sh
source scripts/path.sh # cargo in PATH
./scripts/setup.sh
if [ "$#" -eq 0 ]; then set -- demo; fi
# `cargo run` finds the binary wherever the target directory is
# (CARGO_TARGET_DIR, build.target-dir), and execs it.
exec cargo run --release --quiet -p sluice-cli -- "$@"
