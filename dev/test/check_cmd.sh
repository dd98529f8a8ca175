#!/usr/bin/env bash
# check_cmd.sh: sourced by shell tests. check NAME CONDITION... runs the condition (a command)
# and prints "ok   NAME" or "FAIL NAME", counted in ok and bad; tmp is a scratch directory
# removed on exit.
ok=0 bad=0
check() {
    local name=$1; shift
    if "$@"; then echo "ok   $name"; ok=$((ok + 1)); else echo "FAIL $name"; bad=$((bad + 1)); fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
