// cpu_ops.h: the CPU fp32 reference of every GPT-2 op. It is the oracle of the per-op GPU
// tests and the building block of the CPU model (gpt2_cpu.h). Plain loops, accumulation in
// double where a sum runs over a long axis, so it is the higher-precision side of each check.
//
// Shapes: B batch, T time, C channels, NH heads (HS = C / NH), V vocab, Vp padded vocab,
// N = B*T rows. Every "_backward" ACCUMULATES (+=) into parameter gradients and into dinp,
// except where a comment says it overwrites.
#pragma once
#include <cstddef>

namespace cpu {

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T,
                     int C);
// dwte[inp[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T,
                      int C);

// out = (inp - mean) * rstd * w + b per row; mean and rstd (1/sqrt(var + 1e-5), biased var)
// are written per row (N of each).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int N, int C);
// Accumulates dinp, dw, db.
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C);

// out (N, OC) = inp (N, IC) @ w^T (w is (OC, IC)) + bias (OC; may be null). Overwrites out.
void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int IC,
                    int OC);
// dinp += dout @ w;  dw += dout^T @ inp;  dbias += column sums of dout (dbias may be null).
void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int N, int IC, int OC);

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(float* out, const float* inp, size_t n);
// dinp += gelu'(inp) * dout
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

// out = a + b (overwrites)
void residual_forward(float* out, const float* a, const float* b, size_t n);

// Causal self-attention. qkv is (B, T, 3C): q at [0,C), k at [C,2C), v at [2C,3C), head h
// owning channels [h*HS, (h+1)*HS) of each. Scores are q.k / sqrt(HS), masked to s <= t.
// out (B, T, C) overwritten; lse (B, NH, T) overwritten with log(sum_s exp(score_ts)).
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH);
// dqkv (B, T, 3C) OVERWRITTEN with the gradient of the loss w.r.t. qkv.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH);

// Softmax cross-entropy over the first V of Vp logits per row, for N rows.
// losses[i] = -log softmax(logits[i])[targets[i]] (overwrites). If dlogits is non-null it is
// OVERWRITTEN with (softmax - onehot(target)) * dloss for columns < V and 0 for V..Vp-1.
// Returns the mean loss over the N rows.
float crossentropy_forward_backward(float* dlogits, float* losses, const float* logits,
                                    const int* targets, int N, int V, int Vp, float dloss);

// sum of squares over n values (in double, returned as double)
double sum_of_squares(const float* x, size_t n);

// One AdamW step (PyTorch semantics), for n parameters, step t >= 1:
//   g = grads * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
void adamw(float* params, float* m, float* v, const float* grads, size_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, int t, float grad_scale);

}  // namespace cpu
