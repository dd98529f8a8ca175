#!/usr/bin/env bash
# run_gpt2_350M.sh [extra train_gpt2cu options]: GPT-2 350M (d24: L=24, C=1024, NH=16, T=1024) from
# random init, with checkpoints, resuming by itself after a crash (scripts/run/run_gpt2_common.sh).
#
#   make PRECISION=BF16 train_gpt2cu
#   TRAIN='data/fineweb10B/*_train_*.bin' VAL='data/fineweb10B/*_val_*.bin' scripts/run/run_gpt2_350M.sh
#
# Arithmetic (FLOPs per token = 6N + 12 L C T, forward + backward, attention included):
#   N                = 354,871,296 parameters (wte padded to Vp = 50304 rows)
#   FLOPs per token  = 6N + 12*24*1024*1024 = 2.1292G + 0.3020G = 2.431 GFLOP
#   tokens           = 30B = 57220 steps of 524,288 tokens (-d 524288)
#   total            = 7.29e19 FLOPs
#   one H100 SXM     = 51.2 h at 40% MFU of its bf16 dense peak (989.4 TFLOP/s, i.e. 396 TFLOP/s
#                      sustained); 186 h at the 22% MFU of the TF32 peak (494.7 TFLOP/s) that
#                      the fp32 build measured for d12 (docs/results.md); the trainer uses
#                      one GPU.
# Optimisation: AdamW (0.9, 0.95), lr 3e-4 (GPT-3's for this size), 700 warmup steps, cosine to
# 10% of the peak, weight decay 0.1 on 2-D weights, gradient clip 1.0. Micro-batch -b 32
# (MICRO_B=...; fits an 80 GB H100 without recompute, whose measured largest B is 92 at d24, 45 at
# d36 and 22 at d48 (docs/results.md); lower it on a smaller GPU: -d keeps the total batch). Validation
# every 250 steps, a checkpoint every 1000 (last 2 kept, plus every 5000th), in OUT (default
# out/gpt2_350M); log.jsonl there feeds scripts/run/plot.py.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/run/run_gpt2_common.sh
run_fineweb "${OUT:-out/gpt2_350M}" -e d24 -b "${MICRO_B:-32}" -t 1024 -d 524288 \
    -x 57220 -l 3e-4 -u 700 --lr-schedule cosine --lr-final-frac 0.1 -c 0.1 --grad-clip 1.0 \
    -v 250 -m 20 --checkpoint-every 1000 --keep-last 2 --keep-every 5000 "$@"
