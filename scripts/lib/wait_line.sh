# Sourced by the scripts that start kvfold servers in the background.
#
#   wait_line FILE PID PATTERN   prints the rest of FILE's first line containing PATTERN
#                                (e.g. "listening on " -> the bound address), waiting up to
#                                30 s; exits the script if PID dies (showing FILE's .log
#                                sibling) or on timeout. Messages are prefixed with $0's name.
wait_line() {
  local who
  who="$(basename "$0" .sh)"
  for _ in $(seq 1 300); do
    if grep -q "$3" "$1" 2>/dev/null; then
      sed -n "s/.*$3//p" "$1" | head -1
      return 0
    fi
    kill -0 "$2" 2>/dev/null || { echo "$who: process died, see ${1%.out}.log:" >&2; cat "${1%.out}.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "$who: timeout waiting for $1" >&2
  exit 1
}
