# tests/batch/lib.sh - the harness the batch suites share (sourced after T
# is set): pass/fail counting, checks with a log tail, and PNG folder
# comparisons.
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; if [ -n "$2" ]; then echo "$2" | tail -15 | sed 's/^/  | /'; fi; }
check() { if eval "$2"; then ok; else bad "$1" "$(cat "${3:-/dev/null}" 2>/dev/null)"; fi; }
# the same PNG names with the same bytes in two folders
same_set() {
  (cd "$1" && ls | grep '\.png$') > "$T/la"
  (cd "$2" && ls | grep '\.png$') > "$T/lb"
  cmp -s "$T/la" "$T/lb" || return 1
  while read -r f; do cmp -s "$1/$f" "$2/$f" || return 1; done < "$T/la"
}
count_png() { ls "$1" 2>/dev/null | grep -c '\.png$'; }
