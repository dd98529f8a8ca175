#!/usr/bin/env bash
# run_gpt2_1558M.sh [extra train_gpt2cu options]: GPT-2 1558M (d48: L=48, C=1600, NH=25, T=1024) from
# random init, with checkpoints, resuming by itself after a crash (scripts/run/run_gpt2_common.sh).
#
#   make PRECISION=BF16 train_gpt2cu
#   TRAIN='data/fineweb10B/*_train_*.bin' VAL='data/fineweb10B/*_val_*.bin' scripts/run/run_gpt2_1558M.sh
#
# Arithmetic (FLOPs per token = 6N + 12 L C T, forward + backward, attention included):
#   N                = 1,557,686,400 parameters (wte padded to Vp = 50304 rows)
#   FLOPs per token  = 6N + 12*48*1600*1024 = 9.3461G + 0.9437G = 10.290 GFLOP
#   tokens           = 32B = 61035 steps of 524,288 tokens (-d 524288)
#   total            = 3.29e20 FLOPs
#   one H100 SXM     = 231 h at 40% MFU of its bf16 dense peak (989.4 TFLOP/s, i.e. 396 TFLOP/s
#                      sustained); 840 h at the 22% MFU of the TF32 peak (494.7 TFLOP/s) that
#                      the fp32 build measured for d12 (docs/results.md); the trainer uses
#                      one GPU.
# Optimisation: AdamW (0.9, 0.95), lr 2e-4 (GPT-3's for this size), 700 warmup steps, cosine to
# 10% of the peak, weight decay 0.1 on 2-D weights, gradient clip 1.0. Micro-batch -b 16
# (MICRO_B=...; fits an 80 GB H100 without recompute, whose measured largest B is 92 at d24, 45 at
# d36 and 22 at d48 (docs/results.md); lower it on a smaller GPU: -d keeps the total batch). Validation
# every 250 steps, a checkpoint every 1000 (last 2 kept, plus every 5000th), in OUT (default
# out/gpt2_1558M); log.jsonl there feeds scripts/run/plot.py.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/run/run_gpt2_common.sh
run_fineweb "${OUT:-out/gpt2_1558M}" -e d48 -b "${MICRO_B:-16}" -t 1024 -d 524288 \
    -x 61035 -l 2e-4 -u 700 --lr-schedule cosine --lr-final-frac 0.1 -c 0.1 --grad-clip 1.0 \
    -v 250 -m 20 --checkpoint-every 1000 --keep-last 2 --keep-every 5000 "$@"
