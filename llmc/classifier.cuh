// classifier.cuh: the fused classifier. For each of N rows of Vp logits (first V valid):
//   p = softmax(logits[:V]);  losses[row] = -log p[target]            (overwritten)
//   if write_dlogits: logits[:V] <- (p - onehot(target)) * dloss;  logits[V:Vp] <- 0
// in one kernel, in place: no separate probabilities tensor. Sums in float.
// classifier_chunked: the whole classifier of the model over N rows of lnf (N, C) with the
// tied embedding wte (Vp, C), chunk_rows rows at a time through one (chunk_rows, Vp) logits
// buffer, so no (N, Vp) tensor exists:
//   logits = lnf[rows] @ wte^T;  fused_classifier (losses[rows]; dlogits in place if backward)
//   backward (dlnf and dwte given): dlnf[rows] = dlogits @ wte (overwritten),
//                                   dwte += dlogits^T @ lnf[rows] (accumulates, chunk by chunk
//                                   in row order: deterministic; without accumulate_dwte
//                                   the first chunk writes dwte, its old contents unread)
// logits_copy, when given (forward only), is an (N, Vp) buffer that receives every chunk's
// logits (for tests).
// loss_accumulate: *loss (one float) += sum(losses) * scale in a fixed order (deterministic);
// it adds into *loss so micro-steps of gradient accumulation sum up.
#pragma once
#include "context.cuh"
#include "precision.cuh"

namespace llmc {

void fused_classifier(const Context& ctx, floatX* logits, float* losses, const int* targets,
                      float dloss, int N, int V, int Vp, bool write_dlogits);

void classifier_chunked(const Context& ctx, floatX* logits, float* losses, floatX* dlnf,
                        floatX* dwte, const floatX* lnf, const floatX* wte, const int* targets,
                        float dloss, int N, int C, int V, int Vp, int chunk_rows,
                        floatX* logits_copy = nullptr, bool accumulate_dwte = true);

void loss_accumulate(const Context& ctx, float* loss, const float* losses, int N, float scale);

}  // namespace llmc
