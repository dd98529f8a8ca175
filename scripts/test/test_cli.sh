#!/usr/bin/env bash
# test_cli.sh: the trainer, generate_gpt2cu, profile_gpt2cu and test_gpt2cu refuse bad options
# with one sentence and exit code 2 (1 for a bad file or output path), before they touch a GPU,
# so this runs anywhere. Each case checks the exit code and a key phrase of the message (a grep
# pattern). dev/test/test_cli.cpp tests the option-table parser itself.
set -u
cd "$(dirname "$0")/../.."
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
# HellaSwag, telemetry, llm.c interop options (checked before the GPU is touched).
{ printf '\x88\xd8\x34\x01\x01\x00\x00\x00\x08\x00\x00\x00'; head -c 1028 /dev/zero; } >"$tmp/ok.bin"
expect 2 "llm.c's switch for its HellaSwag evaluation; here pass --hellaswag FILE" -i x -h 1
expect 2 "--eval-every needs an eval file" -i x --eval-every 10
expect 2 "--model-dtype must be fp32 or bf16" -i x --model-dtype fp16
expect 2 "--gpu-log must be in" -i x --gpu-log -1
expect 1 "could not open the eval file '$tmp/none.bin'" -i "$tmp/ok.bin" -b 1 -t 4 --hellaswag "$tmp/none.bin"
expect 1 "eval file '$tmp/junk.bin' is not usable" -i "$tmp/ok.bin" -b 1 -t 4 --hellaswag "$tmp/junk.bin"
expect 1 "more than the sequence length allows" -i "$tmp/ok.bin" -b 1 -t 4 --hellaswag dev/test/data/hellaswag_synth50.bin
expect 0 "--hellaswag FILE" --help
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
# The CLI tells the truth: each refusal is named for what it is.
expect 2 "unknown option --bogus" -i x --bogus
expect 2 "unknown option --sead; did you mean --seed?" -i x --sead 3
expect 2 "stray argument 'stray_word' after -i X" -i X stray_word
expect 2 "quote it: -i 'data/brown/\*_train_\*.bin'" -i data/a_train_000000.bin data/a_train_000001.bin
expect 2 "-x needs a value (N)" -i x -x
expect 2 "-x needs a value (N), but -b follows it" -i x -x -b 4
expect 2 "--batch-size must be in" -i x --batch-size 0
expect 2 "-b must be in 1..65536, got 0" -i x -b=0
expect 2 "--tf32 must be in 0..1, got 2" -i x --tf32=2
# -k=VALUE and --key=VALUE are accepted: the run gets past its options to the missing data.
expect 1 "$tmp/none_" -i "$tmp/none_*.bin" -b=4 --tf32=1 --seq-len=64 --input="$tmp/none_*.bin"
# llm.c's flags that mean something else here: the llm.c meaning and this trainer's option.
expect 2 "-s N is llm.c's sample_every; here text samples are --sample-every N and the seed is --seed N" \
    -i x -s 20000
expect 2 "llm.c's genT.*--sample-tokens N.*--grad-clip NORM" -i x -g 64
expect 2 "HellaSwag.*-h or --help alone prints the help" -h 0
expect 0 "usage: train_gpt2cu" -h
for f in -n:--checkpoint-every -nk:--keep-last -nm:--keep-every -y:--resume -q:--lr-final-frac \
         -k:--lr-schedule -a:--overfit-batch -f:--tf32 -w:"no equivalent" -ge:"no equivalent" \
         -z:--zero -r:--recompute -lg:--gpu-log -sl:--skip-outliers -sg:--skip-outliers \
         -pn:launch.sh -pr:LLMC_RANK -pg:srun -pi:--init-file -pm:LLMC_MASTER_ADDR \
         -ps:LLMC_MASTER_ADDR -pf:--init-file -pp:--init-file; do
    expect 2 "${f%%:*} .*is llm.c's .*${f#*:}" -i x "${f%%:*}" 1
done
# Globs that match prepare_data's shards (NAME_train_000000.bin).
expect 0 "'data/brown/\*_train_\*.bin'" --help
expect 2 "pass -i 'DIR/\*_train_\*.bin', e.g. -i 'data/brown/\*_train_\*.bin'"
# Every output path is checked before the first step (and before the data), creating nothing.
expect 1 "--json-summary $tmp/no/such/x.json: the directory $tmp/no/such does not exist" \
    -i "$tmp/none_*.bin" -t 64 --json-summary "$tmp/no/such/x.json"
expect 1 "--json-summary $tmp is not a regular file" -i "$tmp/none_*.bin" -t 64 --json-summary "$tmp"
expect 1 "$tmp/none_" -i "$tmp/none_*.bin" -t 64 --json-summary "$tmp/summary.json"
if [ -e "$tmp/summary.json" ]; then
    bad=$((bad + 1)); echo "FAIL: the check of --json-summary left $tmp/summary.json behind"
else ok=$((ok + 1)); fi
expect 1 "cannot create the output directory" -i "$tmp/none_*.bin" -t 64 \
    --json-summary "$tmp/summary.json" -o "$tmp/file/sub"
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
expect 2 "unknown option --bogus" --load x --prompt-ids 1 --bogus 1
expect 2 "unknown option --bogus" --load x --prompt-ids 1 --bogus
expect 2 "stray argument 'stray' after --prompt-ids 1" --load x --prompt-ids 1 stray
expect 2 "--max-tokens needs a value (N)" --load x --prompt-ids 1 --max-tokens
expect 1 "could not open the model file '$tmp/missing_model.bin'" --load="$tmp/missing_model.bin" \
    --prompt-ids=1 --max-tokens=3
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
# profile_gpt2cu and test_gpt2cu: the same parser.
bin=./profile_gpt2cu
expect 0 "usage: profile_gpt2cu" --help
expect 2 "-b must be in 1..65536, got 0" -b 0
expect 2 "--steps needs a whole number, got 'x'" --steps x
expect 2 "unknown option --bogus" --bogus
expect 2 "stray argument 'stray' after -b 2" -b 2 stray
bin=./test_gpt2cu
expect 0 "usage: test_gpt2cu" --help
expect 2 "--model and --state are required" --model x
expect 2 "--graph must be in 0..1, got 2" --model x --state y --graph 2
expect 2 "unknown option --bogus" --model x --state y --bogus
echo "test_cli: $ok passed, $bad failed"
[ "$bad" = 0 ]
