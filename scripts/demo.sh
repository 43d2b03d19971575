#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build, run sluice's main
# job with its embedded defaults. Extra arguments go to `sluice`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --quiet -p sluice-cli
exec ./target/release/sluice "$@"
