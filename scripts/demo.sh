#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build, run sluice's main
# job with its embedded defaults: `sluice demo` (a real FUSE mount over a
# local fast tier and an emulated 7200 rpm capacity tier under
# ./sluice-demo; writers, live status, drain, verification, summary).
# With arguments, runs `sluice ARGS...` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --quiet -p sluice-cli
if [ "$#" -eq 0 ]; then set -- demo; fi
exec ./target/release/sluice "$@"
