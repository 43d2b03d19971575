# shellcheck shell=bash
# Sourced by the scripts that start and stop private daemons by pid
# (redis.sh, gluster.sh).

# True if PID is a live (not zombie) process. Under some init processes an
# exited daemon stays a zombie, which `kill -0` would still report.
alive() {
  local state
  # The state follows the last ')' (the command name may hold spaces).
  state=$(sed 's/.*) //; s/ .*//' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
