#!/usr/bin/env bash
# Installs what sluice needs and is missing, then fetches the crates.
# Idempotent; safe to run on every CI run. Debian 12, run as root or with sudo.
set -euo pipefail
cd "$(dirname "$0")/.."
# PATH with cargo and the installed tools; $cargo_bin is $CARGO_HOME/bin.
# shellcheck source-path=SCRIPTDIR source=path.sh
source scripts/path.sh

say() { printf 'setup: %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    say "need root to run: $*"; exit 1; fi
}

# Debian packages. Only what the current code needs: a C toolchain for the
# linker, pkg-config, the font the simulator's plots are drawn with, fuse3
# for the mount (fusermount3), and for the end-to-end tests and the mount
# benchmark: fio, mergerfs (the peer), attr (setfattr/getfattr) and
# util-linux (setpriv, fallocate); redis-server for the Redis catalogue
# tests (scripts/redis.sh starts it on 127.0.0.1, also with a password
# and TLS), glusterfs for
# the GlusterFS layout test (scripts/gluster.sh starts a loopback volume),
# rsync and rclone, the peers of the transfer benchmark (bench-xfer.sh);
# tmux, the terminal `sluice top`'s end-to-end test runs it in
# (crates/cli/tests/top_e2e.rs).
# gnuplot, which draws the real-run benchmarks' plots beside their tables
# (scripts/fio_table.py, scripts/bench-doc.py).
want=()
command -v cc >/dev/null || want+=(build-essential)
command -v pkg-config >/dev/null || want+=(pkg-config)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || want+=(fonts-dejavu-core)
command -v fusermount3 >/dev/null || want+=(fuse3)
# systemd-analyze checks the shipped unit (contrib/systemd); mount.fuse3
# (fuse3) runs sluice for `mount -t fuse.sluice`.
command -v systemd-analyze >/dev/null || want+=(systemd)
command -v fio >/dev/null || want+=(fio)
command -v mergerfs >/dev/null || want+=(mergerfs)
command -v setfattr >/dev/null || want+=(attr)
command -v setpriv >/dev/null || want+=(util-linux)
command -v python3 >/dev/null || want+=(python3)
command -v redis-server >/dev/null || want+=(redis-server)
# redis-cli (redis.sh's readiness check with --auth/--tls) and openssl (its
# throwaway CA for the TLS catalogue tests).
command -v redis-cli >/dev/null || want+=(redis-tools)
command -v openssl >/dev/null || want+=(openssl)
[ -x /usr/sbin/glusterd ] && [ -x /sbin/mount.glusterfs ] || want+=(glusterfs-server glusterfs-client)
command -v rsync >/dev/null || want+=(rsync)
command -v rclone >/dev/null || want+=(rclone)
command -v tmux >/dev/null || want+=(tmux)
command -v gnuplot >/dev/null || want+=(gnuplot-nox)
if [ "${#want[@]}" -gt 0 ]; then
  say "installing Debian packages: ${want[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq "${want[@]}" </dev/null
fi

# Prometheus, for the e2e test that scrapes a mount and runs the Grafana
# dashboard's queries (contrib/grafana; it listens on 127.0.0.1 only): the
# binary is taken out of Debian's package without installing the package,
# so no service is set up or started.
if ! command -v prometheus >/dev/null; then
  say "installing prometheus (the binary of Debian's package) in /usr/local/bin"
  tmp=$(mktemp -d)
  (cd "$tmp" && { apt-get download prometheus 2>/dev/null || { as_root apt-get update -qq && apt-get download prometheus; }; } &&
    dpkg-deb -x prometheus_*.deb root && as_root install -m 0755 root/usr/bin/prometheus /usr/local/bin/prometheus)
  rm -rf "$tmp"
fi

# FUSE needs /dev/fuse; load the module if the kernel has it unloaded.
if [ ! -e /dev/fuse ]; then
  as_root modprobe fuse 2>/dev/null || say "no /dev/fuse: the mount and its tests need FUSE (a VM or a container started with --device /dev/fuse)"
fi

# Rust: the stock rustup toolchain. Debian's own rustc is too old for clap 4.
# (The official Docker images put it in /usr/local/cargo/bin.)
if ! command -v cargo >/dev/null && [ -x /usr/local/cargo/bin/cargo ]; then
  export PATH="/usr/local/cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
  say "cargo not found: install Rust with rustup (https://rustup.rs), then rerun"
  exit 1
fi

# The oldest rustc that builds sluice is the workspace's rust-version
# (Cargo.toml, the one place it is written; docs/decisions.md "Current
# dependencies"). rustup's stable is at least that; an older one is updated.
need_rust=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
have_rust=$(rustc --version | awk '{print $2}')
if [ "$(printf '%s\n%s\n' "$need_rust" "$have_rust" | sort -V | head -n 1)" != "$need_rust" ]; then
  if command -v rustup >/dev/null; then
    say "rustc $have_rust is older than the workspace's rust-version $need_rust: rustup update stable"
    rustup update stable
  else
    say "rustc $have_rust is older than the workspace's rust-version $need_rust: install Rust $need_rust or newer with rustup (https://rustup.rs)"
    exit 1
  fi
fi

# The OS-less target proves the policy crate does no I/O (scripts/test.sh).
if command -v rustup >/dev/null && ! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-none; then
  say "adding the x86_64-unknown-none target (policy purity check)"
  rustup target add x86_64-unknown-none || say "could not add x86_64-unknown-none; the purity check will say so"
fi

# The file-system conformance suites (scripts/conformance.sh, docs/conformance.md):
# pjdfstest (the Rust port) and fsx, from crates.io at pinned versions, into
# ~/.cargo/bin beside the toolchain. Installed only when that version is missing.
conformance_crates=(pjdfstest@0.2.2 fsx@0.3.2)
installed=$(cargo install --list 2>/dev/null || true)
want_crates=()
for c in "${conformance_crates[@]}"; do
  grep -qx "${c%@*} v${c#*@}:" <<<"$installed" && [ -x "$cargo_bin/${c%@*}" ] ||
    want_crates+=("$c")
done
if [ "${#want_crates[@]}" -gt 0 ]; then
  say "installing from crates.io: ${want_crates[*]}"
  cargo install --locked --quiet "${want_crates[@]}"
fi

# pjdfstest switches to two dummy users; `nobody` exists, this one is made.
if ! getent passwd pjdfstest >/dev/null; then
  say "adding the system user pjdfstest (a dummy user of pjdfstest's tests)"
  as_root useradd --system --user-group --no-create-home --home-dir / \
    --shell /usr/sbin/nologin --comment "dummy user for pjdfstest" pjdfstest
fi

say "fetching crates"
cargo fetch --quiet
