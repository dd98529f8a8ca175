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
        echo "FAIL: $bin $* -> exit $rc (want $code), output:"
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
expect 2 "--skip-outliers must be in" -i x --skip-outliers -1
expect 2 "--outlier-window must be in" -i x --outlier-window 1
expect 2 "--prefetch needs a whole number" -i x --prefetch on
expect 2 "--recompute must be in 0..2" -i x --recompute 3
# multi-GPU: the launcher's variables and the options that depend on the world size
expect 2 "--zero must be in 0..1" -i x --zero 2
LLMC_RANK=2 LLMC_WORLD_SIZE=2 expect 2 "not a rank below a world size" -i x
LLMC_RANK=0 expect 2 "LLMC_WORLD_SIZE is not" -i x
LLMC_RANK=0 LLMC_WORLD_SIZE=2 expect 2 "not a multiple of GPUs\*B\*T" -i x -b 4 -t 64 -d 256
LLMC_RANK=0 LLMC_WORLD_SIZE=5 expect 1 "use a number of GPUs that divides C" -i x -e d12 -t 64
OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=x expect 2 "OMPI_COMM_WORLD_SIZE=x" -i x
expect 2 "--recompute must be in 0..2" -i x --recompute -1
expect 2 "--recompute needs a whole number" -i x --recompute all
expect 2 "--recompute needs a value" -i x --recompute
expect 0 "--recompute 0|1|2" --help
expect 1 "could not open the model file" -i x -e "$tmp/missing_model.bin"
expect 2 "longer than the model's maximum" -i x -t 2048
expect 1 "$tmp/none_" -i "$tmp/none_*.bin" -t 64
# A model whose head size (C/NH = 42/2) neither build's kernels take: one sentence before any
# data or GPU work (bf16: flash attention's head sizes; fp32: C a multiple of 4).
le32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)); }
{ for v in 20240326 3 8 100 1 2 42 128; do printf "$(le32 $v)"; done
  head -c $((4 * 248 + 4 * 27510)) /dev/zero; } >"$tmp/hs21.bin"  # maxT 8, V 100, L 1, NH 2, C 42, Vp 128
expect 2 "head size C/NH = 42/2 is not supported\|needs C (42) to be a multiple of 4" -i x -e "$tmp/hs21.bin" -b 1 -t 8
touch "$tmp/file"
expect 1 "cannot create the output directory" -i x -t 64 -o "$tmp/file/sub"
printf 'not a model file at all, far too short' >"$tmp/junk.bin"
expect 1 "junk.bin" -i x -e "$tmp/junk.bin"
# A shard whose ids are all 65535, past GPT-2's vocabulary: refused at init, prefetch or not.
{ printf '\x88\xd8\x34\x01\x01\x00\x00\x00\x08\x00\x00\x00'; head -c 1012 /dev/zero
  head -c 16 /dev/zero | tr '\0' '\377'; } >"$tmp/bad_ids.bin"
expect 1 "token id 65535" -i "$tmp/bad_ids.bin" -b 1 -t 4
expect 1 "token id 65535" -i "$tmp/bad_ids.bin" -b 1 -t 4 --prefetch 0 --shuffle 0
# Schedules, checkpoints and resume (checked before any data or GPU work).
expect 2 "--lr-schedule must be constant, linear, cosine or wsd" -i x --lr-schedule exp
expect 2 "--lr-final-frac must be in" -i x --lr-final-frac 1.5
expect 2 "--decay-frac must be in" -i x --decay-frac -0.1
expect 2 "--keep-last must be in" -i x --keep-last 0
expect 2 "--checkpoint-every needs an output directory" -i x --checkpoint-every 5
expect 2 "--resume needs the run's directory" -i x --resume
expect 2 "--stop-after 30 is past the last step" -i x -x 20 --stop-after 30
mkdir -p "$tmp/run" "$tmp/empty"
touch "$tmp/run/state_00000005.bin" "$tmp/run/model_00000005.bin"
expect 1 "already holds checkpoints (the newest of step 5); pass --resume" -i x -t 64 -o "$tmp/run"
expect 1 "holds no complete checkpoint" -i x -t 64 --resume "$tmp/empty"
expect 1 "no such file or directory" -i x -t 64 --resume "$tmp/nowhere" -o "$tmp/run"
# A valid 8-token shard, so the checkpoint itself is what gets refused.
{ printf '\x88\xd8\x34\x01\x01\x00\x00\x00\x08\x00\x00\x00'; head -c 1028 /dev/zero; } >"$tmp/ok.bin"
expect 1 "too short for its 4096-byte header" -i "$tmp/ok.bin" -b 1 -t 4 --resume "$tmp/run"
# Text samples (--sample-every ...): values, and a --tokenizer that cannot be read.
expect 2 "--sample-every must be in" -i x --sample-every -1
expect 2 "--sample-tokens must be in" -i x --sample-tokens 0
expect 2 "--temperature must be in" -i x --temperature -0.5
expect 2 "--temperature must be in" -i x --temperature nan
expect 2 "--temperature needs a number" -i x --temperature hot
expect 2 "--top-k must be in" -i x --top-k -1
expect 2 "--sample-seed needs a whole number" -i x --sample-seed 1.5
expect 2 "--tokenizer needs a value" -i x --tokenizer
expect 0 "--sample-every N" --help
expect 1 "cannot open the tokenizer file '$tmp/missing.bin'" -i "$tmp/ok.bin" -b 1 -t 4 \
    --sample-every 1 --tokenizer "$tmp/missing.bin"
expect 1 "not an llm.c tokenizer file" -i "$tmp/ok.bin" -b 1 -t 4 --sample-every 1 \
    --tokenizer "$tmp/ok.bin"
# generate_gpt2cu: the same rules.
bin=./generate_gpt2cu
expect 0 "usage: generate_gpt2cu" --help
expect 2 "a model is required" --prompt hi
expect 2 "exactly one of --prompt TEXT and --prompt-ids" --load x
expect 2 "exactly one of --prompt TEXT and --prompt-ids" --load x --prompt hi --prompt-ids 1
expect 2 "--prompt is empty" --load x --prompt ""
expect 2 "--prompt-ids needs a whole number, got 'a'" --load x --prompt-ids 1,a
expect 2 "--prompt-ids must be in" --load x --prompt-ids -3
expect 2 "--max-tokens must be in" --load x --prompt-ids 1 --max-tokens 0
expect 2 "--temperature must be in" --load x --prompt-ids 1 --temperature -1
expect 2 "--top-k must be in" --load x --prompt-ids 1 --top-k -2
expect 2 "--print-ids must be in" --load x --prompt-ids 1 --print-ids 2
expect 2 "unknown option" --load x --prompt-ids 1 --bogus 1
expect 1 "could not open the model file '$tmp/missing_model.bin'" --load "$tmp/missing_model.bin" \
    --prompt-ids 1
expect 1 "junk.bin" --load "$tmp/junk.bin" --prompt-ids 1
expect 1 "$tmp/empty/model.bin" --load "$tmp/empty" --prompt-ids 1
expect 1 "too short for its 4096-byte header" --load "$tmp/run" --prompt-ids 1
expect 1 "cannot open the tokenizer file" --load x --prompt-ids 1 --tokenizer "$tmp/missing.bin"
# A one-token llm.c tokenizer file: it decodes, but cannot encode a text prompt.
{ printf '\xc8\xd7\x34\x01\x02\x00\x00\x00\x01\x00\x00\x00'; head -c 1012 /dev/zero; printf '\x01a'; } \
    >"$tmp/tok.bin"
expect 1 "needs GPT-2's encoder.json and vocab.bpe" --load x --prompt hi --tokenizer "$tmp/tok.bin"
echo "test_cli: $ok passed, $bad failed"
[ "$bad" = 0 ]
