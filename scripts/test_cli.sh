#!/usr/bin/env bash
# test_cli.sh: the trainer refuses bad options with one sentence and exit code 2 (1 for a bad
# file), before it touches a GPU, so this runs anywhere. Each case checks the exit code and a
# key phrase of the message.
set -u
cd "$(dirname "$0")/.."
bin=./train_gpt2cu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok=0 bad=0

expect() {  # expect CODE PHRASE ARGS...
    local code=$1 phrase=$2; shift 2
    local out rc
    out=$("$bin" "$@" 2>&1); rc=$?
    if [ "$rc" = "$code" ] && grep -qi -- "$phrase" <<<"$out"; then
        ok=$((ok + 1))
    else
        bad=$((bad + 1))
        echo "FAIL: train_gpt2cu $* -> exit $rc (want $code), output:"
        echo "$out" | head -5
    fi
}

expect 0 "usage: train_gpt2cu" --help
expect 2 "training shards are required"
expect 2 "unknown option" -i x --bogus 1
expect 2 "-b must be in" -i x -b 0
expect 2 "needs a whole number" -i x -t 12x
expect 2 "not a multiple of B\*T" -i x -b 4 -t 64 -d 1000
expect 2 "needs a value" -i
expect 2 "--tf32 must be in" -i x --tf32 2
expect 2 "--shuffle must be in" -i x --shuffle 2
expect 2 "--prefetch needs a whole number" -i x --prefetch on
expect 2 "--recompute must be in 0..2" -i x --recompute 3
expect 2 "--recompute must be in 0..2" -i x --recompute -1
expect 2 "--recompute needs a whole number" -i x --recompute all
expect 2 "--recompute needs a value" -i x --recompute
expect 0 "--recompute 0|1|2" --help
expect 1 "could not open the model file" -i x -e "$tmp/missing_model.bin"
expect 2 "longer than the model's maximum" -i x -t 2048
expect 1 "$tmp/none_" -i "$tmp/none_*.bin" -t 64
touch "$tmp/file"
expect 1 "cannot create the output directory" -i x -t 64 -o "$tmp/file/sub"
printf 'not a model file at all, far too short' >"$tmp/junk.bin"
expect 1 "junk.bin" -i x -e "$tmp/junk.bin"
# A shard whose ids are all 65535, past GPT-2's vocabulary: refused at init, prefetch or not.
{ printf '\x88\xd8\x34\x01\x01\x00\x00\x00\x08\x00\x00\x00'; head -c 1012 /dev/zero
  head -c 16 /dev/zero | tr '\0' '\377'; } >"$tmp/bad_ids.bin"
expect 1 "token id 65535" -i "$tmp/bad_ids.bin" -b 1 -t 4
expect 1 "token id 65535" -i "$tmp/bad_ids.bin" -b 1 -t 4 --prefetch 0 --shuffle 0
echo "test_cli: $ok passed, $bad failed"
[ "$bad" = 0 ]
