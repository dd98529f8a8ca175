#!/usr/bin/env bash
# test_compare_binaries.sh: scripts/bench/compare_binaries.sh on the CPU, with a stand-in
# trainer that writes the --json-summary the script reads (its step time and loss from the
# environment, so that -O / -N show through):
#   - one binary against itself with -N FAKE_MS=50: NEW/OLD 0.5000, losses bitwise equal, exit 0;
#   - -N FAKE_LOSS=2.5: the losses differ, exit 1;
#   - an assignment without '=' or an unknown option: exit 2 before any run.
# Exits 1 on any failure.
set -u
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=dev/test/check_cmd.sh
. dev/test/check_cmd.sh  # check NAME CONDITION..., the counts ok and bad, the scratch dir tmp
touch "$tmp/x_train_000001.bin"
cat >"$tmp/fake_trainer" <<'FAKE'
#!/usr/bin/env bash
while [ $# -gt 0 ]; do
    [ "$1" = --json-summary ] && json=$2
    shift
done
printf '{"median_ms": %s, "wall_ms": %s, "losses": [%s, 10.5]}\n' "${FAKE_MS:-100}" \
    "${FAKE_MS:-100}" "${FAKE_LOSS:-10.9}" >"$json"
FAKE
chmod +x "$tmp/fake_trainer"
cmp=scripts/bench/compare_binaries.sh
f=$tmp/fake_trainer

out=$("$cmp" -b 4 -r 2 -d "$tmp/x_train_000001.bin" -o "$tmp/a" -N FAKE_MS=50 "$f" "$f" 2>&1)
rc=$?
check "-N FAKE_MS=50: exit 0" test "$rc" = 0
check "-N FAKE_MS=50: NEW/OLD 0.5000, losses bitwise equal" \
    grep -q '^| 4 | 100.000 | 50.000 | 0.5000 | .* | bitwise equal |$' <<<"$out"
check "-N: the NEW line names the assignment" grep -q "^NEW $f FAKE_MS=50$" <<<"$out"

out=$("$cmp" -b 4 -r 1 -d "$tmp/x_train_000001.bin" -o "$tmp/b" -N FAKE_LOSS=2.5 "$f" "$f" 2>&1)
rc=$?
check "-N FAKE_LOSS=2.5: exit 1, losses DIFFER" test "$rc" = 1 -a -n "$(grep DIFFER <<<"$out")"

out=$("$cmp" -b 4 -r 1 -d "$tmp/x_train_000001.bin" -o "$tmp/c" -O FAKE_MS "$f" "$f" 2>&1)
rc=$?
check "-O without '=': exit 2, one sentence, no run" \
    test "$rc" = 2 -a -n "$(grep 'VAR=VALUE' <<<"$out")" -a ! -e "$tmp/c/old.B4.r1.json"
"$cmp" -q "$f" "$f" >/dev/null 2>&1
check "an unknown option: exit 2" test $? = 2

echo "test_compare_binaries: $ok passed, $bad failed"
[ "$bad" = 0 ]
