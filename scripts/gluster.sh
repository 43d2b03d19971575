#!/usr/bin/env bash
# A private single-brick GlusterFS volume for sluice's GlusterFS layout tests.
#
#   scripts/gluster.sh start DIR   start glusterd, a volume and a FUSE mount
#                                  in DIR; print the mount point (DIR/mnt)
#   scripts/gluster.sh stop DIR    unmount, stop and delete the volume, stop
#                                  the daemons started in DIR
#
# Installs nothing (scripts/setup.sh installs glusterfs-server and
# glusterfs-client); without glusterd, `start` says so and exits 2. Needs
# root (glusterd, FUSE mount, trusted.* xattrs) and /dev/fuse.
#
# Loopback only: glusterd reads DIR/glusterd.vol, which binds it to
# 127.0.0.1 (transport.socket.bind-address; glusterd hands the same address
# to the brick process, so the brick listens on 127.0.0.1 too). The brick
# host name is sluice-gluster.local, added to /etc/hosts as 127.0.0.1 if it
# does not resolve (the gluster CLI refuses `localhost` and `127.0.0.1`).
#
# Files: DIR/glusterd.vol, DIR/glusterd.pid, DIR/state/ (glusterd's working
# directory, instead of /var/lib/glusterd), DIR/run/ (its run directory: CLI
# socket, brick pid file), DIR/log/ (glusterd, CLI and mount logs),
# DIR/brick/ (the brick), DIR/mnt/ (the mount). GlusterFS itself puts the
# brick's log under /var/log/glusterfs/bricks/ and its socket under
# /var/run/gluster/ whatever the options; `stop` moves that log to
# DIR/log/brick.log and removes the socket.
#
# One volume per host: brick processes always fetch their volfile from
# glusterd on port 24007, so `start` refuses if 127.0.0.1:24007 is taken.
#
# `stop` only signals processes it can tie to DIR: the glusterd whose
# command line names DIR/glusterd.vol, glusterfsd processes serving
# DIR/brick and the glusterfs client mounted on DIR/mnt.
set -euo pipefail

HOST=sluice-gluster.local
VOLUME=sluice
PORT=24007

die() { echo "gluster.sh: $*" >&2; exit 1; }
say() { echo "gluster.sh: $*" >&2; }
usage() { die "usage: $0 start DIR | $0 stop DIR"; }

[ "$#" -eq 2 ] || usage
cmd=$1
dir=$2

# shellcheck source-path=SCRIPTDIR source=proc.sh
. "$(dirname "$0")/proc.sh"

# The command line of PID with NULs as spaces (and a trailing space).
cmdline() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null || true; }

# True if PID is the glusterd started for $dir.
ours_glusterd() {
  alive "$1" && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = glusterd ] &&
    [[ "$(cmdline "$1")" == *" -f $dir/glusterd.vol "* ]]
}

# Pids of live glusterfsd (brick) processes serving $dir/brick.
brick_pids() {
  local p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = glusterfsd ] || continue
    [[ "$(cmdline "$p")" == *" --brick-name $dir/brick "* ]] || continue
    alive "$p" && echo "$p"
  done
  return 0
}

# Pids of live glusterfs (FUSE client) processes mounted on $dir/mnt.
client_pids() {
  local p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = glusterfs ] || continue
    [[ "$(cmdline "$p")" == *" $dir/mnt " ]] || continue
    alive "$p" && echo "$p"
  done
  return 0
}

# True if something accepts connections on 127.0.0.1:$1.
# shellcheck disable=SC2016 # $0 expands in the inner bash
listening() { timeout 1 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$0' "$1" 2>/dev/null; }

cli() {
  timeout 60 gluster --mode=script --glusterd-sock="$dir/run/glusterd.socket" \
    --log-file="$dir/log/cli.log" "$@"
}

# Sends SIGTERM to PID, then SIGKILL after 10 s; waits until it is gone.
terminate() {
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 200); do
    alive "$pid" || return 0
    sleep 0.05
  done
  say "pid $pid ignored SIGTERM for 10 s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    alive "$pid" || return 0
    sleep 0.05
  done
  die "pid $pid did not exit"
}

# Tears down whatever of a volume in $dir is running. Never fails half-way
# on a part that is already gone.
stop_all() {
  local pid sockets='' s
  if mountpoint -q "$dir/mnt" 2>/dev/null; then
    umount "$dir/mnt" 2>/dev/null || umount -l "$dir/mnt" || say "cannot unmount $dir/mnt"
  fi
  # The client exits on unmount; give it a moment, then end it.
  for _ in $(seq 1 100); do
    [ -z "$(client_pids)" ] && break
    sleep 0.05
  done
  for pid in $(client_pids); do terminate "$pid"; done
  # Remember the bricks' sockets (in /var/run/gluster) before they exit.
  for pid in $(brick_pids); do
    s=$(cmdline "$pid" | sed -n 's/.* -S \([^ ]*\.socket\) .*/\1/p')
    sockets="$sockets $s"
  done
  pid=''
  [ -s "$dir/glusterd.pid" ] && pid=$(cat "$dir/glusterd.pid")
  if [ -n "$pid" ] && [[ "$pid" =~ ^[0-9]+$ ]] && ours_glusterd "$pid"; then
    if cli volume info "$VOLUME" >/dev/null 2>&1; then
      cli volume stop "$VOLUME" force >/dev/null 2>&1 || say "volume stop failed (see $dir/log)"
      cli volume delete "$VOLUME" >/dev/null 2>&1 || say "volume delete failed (see $dir/log)"
    fi
    terminate "$pid"
  fi
  rm -f "$dir/glusterd.pid"
  for pid in $(brick_pids); do terminate "$pid"; done
  # Keep the brick's log with the rest, not in /var/log/glusterfs/bricks.
  s="/var/log/glusterfs/bricks/$(printf '%s' "${dir#/}/brick" | tr / -).log"
  if [ -f "$s" ] && [ -d "$dir/log" ]; then mv -f "$s" "$dir/log/brick.log" || true; fi
  for s in $sockets; do
    case "$s" in /var/run/gluster/*.socket | /run/gluster/*.socket) rm -f "$s" ;; esac
  done
}

case "$cmd" in
start)
  if ! command -v glusterd >/dev/null || ! command -v gluster >/dev/null; then
    echo "gluster.sh: glusterd not found (scripts/setup.sh installs it; Debian: apt-get install glusterfs-server glusterfs-client)" >&2
    exit 2
  fi
  command -v mount.glusterfs >/dev/null ||
    die "mount.glusterfs not found (Debian: apt-get install glusterfs-client)"
  [ "$(id -u)" -eq 0 ] || die "needs root (glusterd, the FUSE mount and trusted.* xattrs)"
  [ -e /dev/fuse ] || die "no /dev/fuse: the GlusterFS client needs FUSE"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd -P)
  case "$dir" in *' '*) die "DIR must not contain blanks: $dir" ;; esac
  # glusterd's socket, DIR/run/glusterd.socket, must fit in a socket
  # address (107 bytes).
  [ "${#dir}" -le 80 ] || die "DIR is ${#dir} bytes long, too long for glusterd's socket under it (80 at most): $dir"
  if [ -s "$dir/glusterd.pid" ]; then
    old=$(cat "$dir/glusterd.pid")
    [[ "$old" =~ ^[0-9]+$ ]] && ours_glusterd "$old" &&
      die "a glusterd (pid $old) is already running in $dir: run '$0 stop $dir' first"
    rm -f "$dir/glusterd.pid" # stale
  fi
  mountpoint -q "$dir/mnt" 2>/dev/null && die "$dir/mnt is already a mount point"

  # The brick host name must resolve to 127.0.0.1 and nothing else.
  addr=$(getent ahostsv4 "$HOST" 2>/dev/null | awk 'NR == 1 { print $1 }' || true)
  if [ -z "$addr" ]; then
    say "adding '127.0.0.1 $HOST' to /etc/hosts"
    printf '127.0.0.1 %s # sluice scripts/gluster.sh\n' "$HOST" >>/etc/hosts ||
      die "cannot add $HOST to /etc/hosts"
    addr=$(getent ahostsv4 "$HOST" 2>/dev/null | awk 'NR == 1 { print $1 }' || true)
  fi
  [ "$addr" = 127.0.0.1 ] || die "$HOST resolves to '$addr', not 127.0.0.1: fix /etc/hosts"

  listening "$PORT" &&
    die "127.0.0.1:$PORT is in use (another glusterd?): only one volume per host, since bricks fetch their volfile from port $PORT"

  mkdir -p "$dir/state" "$dir/run" "$dir/log" "$dir/brick" "$dir/mnt"
  # A brick left by an earlier run in this DIR carries the old volume's id:
  # clear it (the standard recipe for reusing a brick; files stay).
  if getfattr -n trusted.glusterfs.volume-id "$dir/brick" >/dev/null 2>&1; then
    setfattr -x trusted.glusterfs.volume-id "$dir/brick"
    setfattr -x trusted.gfid "$dir/brick" 2>/dev/null || true
    rm -rf "$dir/brick/.glusterfs"
  fi
  cat >"$dir/glusterd.vol" <<EOF
volume management
    type mgmt/glusterd
    option working-directory $dir/state
    option run-directory $dir/run
    option glusterd-sockfile $dir/run/glusterd.socket
    option transport-type socket
    option transport.address-family inet
    option transport.socket.bind-address 127.0.0.1
    option transport.socket.listen-port $PORT
    option transport.socket.keepalive-time 10
    option transport.socket.keepalive-interval 2
    option transport.socket.read-fail-log off
    option ping-timeout 0
    option event-threads 1
    option max-port 60999
end-volume
EOF

  trap 'say "start failed; cleaning up"; stop_all' ERR
  glusterd -f "$dir/glusterd.vol" -p "$dir/glusterd.pid" -l "$dir/log/glusterd.log" ||
    { stop_all; die "glusterd did not start (see $dir/log/glusterd.log)"; }
  up=''
  for _ in $(seq 1 200); do # 20 s
    if [ -S "$dir/run/glusterd.socket" ] && cli volume list >/dev/null 2>&1; then up=1; break; fi
    sleep 0.1
  done
  [ -n "$up" ] || { stop_all; die "glusterd does not answer on $dir/run/glusterd.socket (see $dir/log/glusterd.log)"; }

  cli volume create "$VOLUME" "$HOST:$dir/brick" force >/dev/null ||
    { stop_all; die "volume create failed (see $dir/log/glusterd.log)"; }
  cli volume start "$VOLUME" >/dev/null ||
    { stop_all; die "volume start failed (see $dir/log/glusterd.log and /var/log/glusterfs/bricks/)"; }
  timeout 60 mount -t glusterfs -o "log-file=$dir/log/mount.log" "$HOST:/$VOLUME" "$dir/mnt" ||
    { stop_all; die "mount failed (see $dir/log/mount.log)"; }
  # Wait until the brick answers through the mount.
  ok=''
  for _ in $(seq 1 200); do # 20 s
    if : >"$dir/mnt/.sluice-probe" 2>/dev/null && rm -f "$dir/mnt/.sluice-probe"; then ok=1; break; fi
    sleep 0.1
  done
  [ -n "$ok" ] || { stop_all; die "the mount at $dir/mnt does not accept writes (see $dir/log/mount.log)"; }
  trap - ERR
  echo "$dir/mnt"
  ;;
stop)
  [ -d "$dir" ] || die "no such directory: $dir"
  dir=$(cd "$dir" && pwd -P)
  stop_all
  ;;
*) usage ;;
esac
