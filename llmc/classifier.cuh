// classifier.cuh: the fused classifier. For each of N rows of Vp logits (first V valid):
//   p = softmax(logits[:V]);  losses[row] = -log p[target]            (overwritten)
//   if write_dlogits: logits[:V] <- (p - onehot(target)) * dloss;  logits[V:Vp] <- 0
// in one kernel, in place: no separate probabilities tensor. Sums in float.
// loss_accumulate: *loss (one float) += sum(losses) * scale in a fixed order (deterministic);
// it adds into *loss so micro-steps of gradient accumulation sum up.
#pragma once
#include "context.cuh"
#include "precision.cuh"

void fused_classifier(const Context& ctx, floatX* logits, float* losses, const int* targets,
                      float dloss, int N, int V, int Vp, bool write_dlogits);

void loss_accumulate(const Context& ctx, float* loss, const float* losses, int N, float scale);
