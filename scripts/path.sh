# shellcheck shell=bash
# Sourced by the scripts that run cargo, the tests or what setup.sh
# installs (setup.sh, demo.sh, test.sh, conformance.sh, .ci/run): PATH with
# - $CARGO_HOME/bin (default ~/.cargo/bin) first, when it exists: rustup's
#   cargo (not none, nor Debian's older one) and pjdfstest and fsx, which
#   setup.sh installs there with `cargo install`;
# - /usr/local/bin (setup.sh puts prometheus there), /usr/sbin and /sbin
#   (glusterd) last, when missing: a short PATH (cron's /usr/bin:/bin, a
#   service's) lacks them, and then setup.sh would install prometheus
#   again on every run and the tests would not find it.
# HOME may be unset (env -i, some service managers): the home directory
# is then the one in the passwd entry, as cargo and rustup find it.
cargo_bin=${CARGO_HOME:-${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}/.cargo}/bin
[ -d "$cargo_bin" ] && PATH="$cargo_bin:$PATH"
for dir in /usr/local/bin /usr/sbin /sbin; do
  case ":$PATH:" in
    *":$dir:"*) ;;
    *) PATH="$PATH:$dir" ;;
  esac
done
export PATH
