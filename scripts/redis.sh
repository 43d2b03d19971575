#!/usr/bin/env bash
# A private redis-server for sluice's Redis catalogue (tests, experiments).
#
#   scripts/redis.sh start [--auth] [--tls] DIR [PORT]
#                                       start one in DIR, print its port
#   scripts/redis.sh stop DIR           stop the one started in DIR
#
# --auth: the server requires a password (requirepass, for the `default`
#   user) and has one more ACL user, `sluice`, allowed only the catalogue's
#   commands on keys `sluice:*`. Their passwords are random and written to
#   DIR/default.password and DIR/sluice.password (0600); the server reads
#   them from DIR/redis.conf (0600), never from its command line.
# --tls: the server speaks only TLS on PORT (no plain port), with a
#   throwaway CA and server certificate made by openssl in DIR/tls/ (ca.crt
#   is the CA a client must trust; the certificate names 127.0.0.1 and
#   localhost). Clients are not asked for certificates (tls-auth-clients no).
#
# The server listens on 127.0.0.1 only (protected mode on), keeps all its
# files in DIR (redis.pid, redis.log, appendonlydir/) and makes every write
# durable before acknowledging it (appendonly yes, appendfsync always; no
# RDB snapshots). Without PORT a free port is picked at random (retrying if
# another process takes it first). `start` returns once the server answers
# PING with PONG (not while it is still loading its append-only file).
#
# `stop` only ever signals the pid in DIR/redis.pid, and only if that
# process is a redis-server whose working directory is DIR (redis chdirs to
# --dir), so it can never touch a system-wide redis or a reused pid.
set -euo pipefail

die() { echo "redis.sh: $*" >&2; exit 1; }
usage() { die "usage: $0 start [--auth] [--tls] DIR [PORT] | $0 stop DIR"; }

[ "$#" -ge 1 ] || usage
cmd=$1
shift
auth=0
tls=0
if [ "$cmd" = start ]; then
  while [ "$#" -gt 0 ]; do
    case "$1" in
    --auth) auth=1 ;;
    --tls) tls=1 ;;
    --*) usage ;;
    *) break ;;
    esac
    shift
  done
fi
[ "$#" -ge 1 ] || usage
dir=$1
set -- "$cmd" "$@"

# shellcheck source-path=SCRIPTDIR source=proc.sh
. "$(dirname "$0")/proc.sh"

# True if PID is a redis-server running in directory $dir.
ours() {
  alive "$1" || return 1
  [ "$(readlink "/proc/$1/cwd" 2>/dev/null)" = "$dir" ] || return 1
  case "$(cat "/proc/$1/comm" 2>/dev/null)" in redis-server*) return 0 ;; esac
  return 1
}

# Prints the reply to one inline command (PING) on 127.0.0.1:$1, or nothing.
ask() {
  if [ "$auth" -eq 1 ] || [ "$tls" -eq 1 ]; then
    local opts=()
    [ "$tls" -eq 1 ] && opts+=(--tls --cacert "$dir/tls/ca.crt")
    # The password through the environment, not the command line.
    REDISCLI_AUTH=$([ "$auth" -eq 1 ] && cat "$dir/default.password" || true) \
      timeout 2 redis-cli "${opts[@]}" -h 127.0.0.1 -p "$1" "$2" 2>/dev/null || true
  elif command -v redis-cli >/dev/null; then
    timeout 2 redis-cli -h 127.0.0.1 -p "$1" "$2" 2>/dev/null || true
  else
    # shellcheck disable=SC2016 # $0 and $1 expand in the inner bash
    timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$0 || exit 0
      printf "%s\r\n" "$1" >&3; IFS= read -r line <&3; printf "%s\n" "${line#+}"' "$1" "$2" \
      2>/dev/null | tr -d '\r' || true
  fi
}

# True if something accepts connections on 127.0.0.1:$1.
# shellcheck disable=SC2016 # $0 expands in the inner bash
listening() { timeout 1 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$0' "$1" 2>/dev/null; }

# A random password: 32 hex digits.
new_password() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }

# --auth: passwords and the config file that holds them (made once per DIR,
# so a restart keeps them).
make_auth() {
  [ -s "$dir/redis.conf" ] && return 0
  (
    umask 077
    new_password >"$dir/default.password"
    new_password >"$dir/sluice.password"
    {
      echo "requirepass $(cat "$dir/default.password")"
      # The catalogue's commands (docs/catalog.md), on its keys only.
      echo "user sluice on >$(cat "$dir/sluice.password") ~sluice:* resetchannels -@all +@hash +eval +ping +select"
    } >"$dir/redis.conf"
  )
}

# --tls: a throwaway CA and a server certificate for 127.0.0.1/localhost
# (made once per DIR).
make_tls() {
  [ -s "$dir/tls/server.crt" ] && return 0
  command -v openssl >/dev/null ||
    die "openssl not found (scripts/setup.sh installs it; Debian: apt-get install openssl)"
  mkdir -p "$dir/tls"
  (
    cd "$dir/tls"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=sluice test CA" \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
      -keyout server.key -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -days 2 -extfile server.ext -out server.crt 2>/dev/null
  ) || die "openssl could not make the test certificates in $dir/tls"
}

# Starts redis-server on port $1; returns 0 once it answers PONG, 1 if it
# exited (e.g. the port was taken), 2 if it did not answer in time.
start_on() {
  local port=$1 pid='' log_start conf=()
  local listen=(--port "$port")
  rm -f "$dir/redis.pid"
  log_start=$(($(stat -c %s "$dir/redis.log" 2>/dev/null || echo 0) + 1))
  [ "$auth" -eq 1 ] && conf=("$dir/redis.conf")
  [ "$tls" -eq 1 ] && listen=(--port 0 --tls-port "$port"
    --tls-cert-file "$dir/tls/server.crt" --tls-key-file "$dir/tls/server.key"
    --tls-ca-cert-file "$dir/tls/ca.crt" --tls-auth-clients no)
  redis-server "${conf[@]}" --bind 127.0.0.1 --protected-mode yes "${listen[@]}" \
    --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
    --daemonize yes --appendonly yes --appendfsync always --save '' \
    >/dev/null 2>&1 || return 1
  # redis 7.0 writes the pidfile after it has bound the port, so a pidfile
  # in our DIR means the server on $port is ours.
  for i in $(seq 1 400); do # 20 s: replaying a long append-only file
    if [ -z "$pid" ] && [ -s "$dir/redis.pid" ]; then pid=$(cat "$dir/redis.pid"); fi
    if [ -z "$pid" ]; then
      # No pidfile yet: the server may have failed to bind and exited.
      tail -c "+$log_start" "$dir/redis.log" 2>/dev/null | grep -q 'Failed listening\|aborting\|FATAL' &&
        return 1
      [ "$i" -lt 100 ] || return 1 # 5 s without a pidfile
    else
      alive "$pid" || return 1
      [ "$(ask "$port" PING)" = PONG ] && return 0
    fi
    sleep 0.05
  done
  [ -n "$pid" ] && alive "$pid" && return 2
  return 1
}

case "$cmd" in
start)
  [ "$#" -le 3 ] || usage
  command -v redis-server >/dev/null ||
    die "redis-server not found (scripts/setup.sh installs it; Debian: apt-get install redis-server)"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd -P)
  if [ "$auth" -eq 1 ] || [ "$tls" -eq 1 ]; then
    command -v redis-cli >/dev/null ||
      die "redis-cli not found (scripts/setup.sh installs it; Debian: apt-get install redis-tools)"
  fi
  [ "$auth" -eq 1 ] && make_auth
  [ "$tls" -eq 1 ] && make_tls
  if [ -s "$dir/redis.pid" ]; then
    old=$(cat "$dir/redis.pid")
    ours "$old" && die "a redis-server (pid $old) is already running in $dir"
    rm -f "$dir/redis.pid" # stale: the server was killed
  fi
  if [ "$#" -eq 3 ]; then
    port=$3
    if ! [[ "$port" =~ ^[0-9]{1,5}$ ]] || [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
      die "bad port '$port'"
    fi
    rc=0; start_on "$port" || rc=$?
    [ "$rc" -eq 0 ] || die "redis-server did not start on 127.0.0.1:$port (rc $rc; see $dir/redis.log)"
  else
    rc=1
    for _ in $(seq 1 20); do
      port=$((20000 + RANDOM % 40000))
      listening "$port" && continue
      rc=0; start_on "$port" || rc=$?
      [ "$rc" -eq 1 ] || break
    done
    [ "$rc" -eq 0 ] || die "redis-server did not start (rc $rc; see $dir/redis.log)"
  fi
  echo "$port"
  ;;
stop)
  [ "$#" -eq 2 ] || usage
  [ -d "$dir" ] || die "no such directory: $dir"
  dir=$(cd "$dir" && pwd -P)
  [ -s "$dir/redis.pid" ] || { echo "redis.sh: no redis.pid in $dir: nothing to stop" >&2; exit 0; }
  pid=$(cat "$dir/redis.pid")
  [[ "$pid" =~ ^[0-9]+$ ]] || die "bad pid '$pid' in $dir/redis.pid"
  if ! ours "$pid"; then
    alive "$pid" && die "pid $pid from $dir/redis.pid is not a redis-server in $dir: not stopping it"
    rm -f "$dir/redis.pid"
    exit 0
  fi
  kill -TERM "$pid"
  for _ in $(seq 1 200); do # 10 s, then SIGKILL
    alive "$pid" || { rm -f "$dir/redis.pid"; exit 0; }
    sleep 0.05
  done
  echo "redis.sh: pid $pid ignored SIGTERM for 10 s: SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    alive "$pid" || { rm -f "$dir/redis.pid"; exit 0; }
    sleep 0.05
  done
  die "pid $pid did not exit"
  ;;
*) usage ;;
esac
