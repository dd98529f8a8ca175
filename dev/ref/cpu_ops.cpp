// cpu_ops.cpp: the CPU fp32 reference of every GPT-2 op declared in cpu_ops.h.
//
// Sums over a long axis (channels, sequence, rows of a batch, vocab) run in double, so this is
// the higher-precision side of every GPU comparison. The O(N*C^2) and O(T^2) ops split their
// independent rows over threads (each output element is still summed in one fixed order, so
// results do not depend on the thread count); per-op GPU tests run GPT-2 shapes through these.
#include "cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace cpu {

namespace {

// Runs body(i) for i in [0, n), split into contiguous chunks over the hardware threads when
// the total work (n * cost_per_item, in multiply-adds) is worth a thread start.
template <typename Body>
void parallel_for(size_t n, double cost_per_item, const Body& body) {
    const double kMinWorkPerThread = 1e6;
    size_t threads = std::max(1u, std::thread::hardware_concurrency());
    threads = std::min(threads, (size_t)(n * cost_per_item / kMinWorkPerThread) + 1);
    threads = std::min(threads, n);
    if (threads <= 1) {
        for (size_t i = 0; i < n; i++) body(i);
        return;
    }
    std::vector<std::thread> pool;
    const size_t chunk = (n + threads - 1) / threads;
    for (size_t start = 0; start < n; start += chunk) {
        const size_t end = std::min(n, start + chunk);
        pool.emplace_back([start, end, &body] {
            for (size_t i = start; i < end; i++) body(i);
        });
    }
    for (std::thread& t : pool) t.join();
}

// Dot product in double with four independent partial sums: the chains overlap in the
// pipeline, which matters at GPT-2 shapes where this loop is nearly all of the time.
double dot(const float* a, const float* b, int n) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)a[i] * b[i];
        s1 += (double)a[i + 1] * b[i + 1];
        s2 += (double)a[i + 2] * b[i + 2];
        s3 += (double)a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += (double)a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

// acc[i] += alpha * x[i]
void axpy(double* acc, double alpha, const float* x, int n) {
    for (int i = 0; i < n; i++) acc[i] += alpha * x[i];
}

}  // namespace

void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T,
                     int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float* o = out + ((size_t)b * T + t) * C;
            const float* te = wte + (size_t)inp[b * T + t] * C;
            const float* pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
        }
    }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T,
                      int C) {
    // Each token row and each position gathers from many (b, t); sum those in double first.
    std::vector<double> dpe((size_t)T * C, 0.0);
    std::vector<int> order((size_t)B * T);
    for (size_t i = 0; i < order.size(); i++) order[i] = (int)i;
    std::stable_sort(order.begin(), order.end(), [inp](int a, int b) { return inp[a] < inp[b]; });
    std::vector<double> dte(C);
    for (size_t k = 0; k < order.size();) {
        const int token = inp[order[k]];
        std::fill(dte.begin(), dte.end(), 0.0);
        for (; k < order.size() && inp[order[k]] == token; k++) {
            const float* d = dout + (size_t)order[k] * C;
            axpy(dte.data(), 1.0, d, C);
            axpy(dpe.data() + (size_t)(order[k] % T) * C, 1.0, d, C);
        }
        float* row = dwte + (size_t)token * C;
        for (int c = 0; c < C; c++) row[c] += (float)dte[c];
    }
    for (size_t i = 0; i < dpe.size(); i++) dwpe[i] += (float)dpe[i];
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum += x[c];
        const double m = sum / C;
        double var = 0.0;
        for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
        const double s = 1.0 / std::sqrt(var / C + 1e-5);
        float* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (float)((x[c] - m) * s * w[c] + b[c]);
        mean[n] = (float)m;
        rstd[n] = (float)s;
    }
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C) {
    // dw and db sum over all N rows: keep them in double until the end.
    std::vector<double> dw_acc(C, 0.0), db_acc(C, 0.0);
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        const float* g = dout + (size_t)n * C;
        const double m = mean[n], s = rstd[n];
        // With xhat = (x - m) s and y = xhat w + b, the gradient through m and s is
        // dx = s (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy w.
        double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
        for (int c = 0; c < C; c++) {
            const double xhat = (x[c] - m) * s;
            const double dxhat = (double)g[c] * w[c];
            mean_dxhat += dxhat;
            mean_dxhat_xhat += dxhat * xhat;
        }
        mean_dxhat /= C;
        mean_dxhat_xhat /= C;
        float* dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            const double xhat = (x[c] - m) * s;
            const double dxhat = (double)g[c] * w[c];
            dx[c] += (float)(s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
            dw_acc[c] += g[c] * xhat;
            db_acc[c] += g[c];
        }
    }
    for (int c = 0; c < C; c++) {
        dw[c] += (float)dw_acc[c];
        db[c] += (float)db_acc[c];
    }
}

void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int IC,
                    int OC) {
    parallel_for(N, (double)IC * OC, [&](size_t n) {
        const float* x = inp + n * IC;
        float* o = out + n * OC;
        for (int oc = 0; oc < OC; oc++) {
            const double bv = bias != nullptr ? bias[oc] : 0.0;
            o[oc] = (float)(dot(x, w + (size_t)oc * IC, IC) + bv);
        }
    });
}

void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int N, int IC, int OC) {
    // dinp row n = sum_oc dout[n, oc] * w row oc: a sum of rows, so every step is contiguous.
    parallel_for(N, (double)IC * OC, [&](size_t n) {
        std::vector<double> acc(IC, 0.0);
        const float* g = dout + n * OC;
        for (int oc = 0; oc < OC; oc++) {
            if (g[oc] != 0.0f) axpy(acc.data(), g[oc], w + (size_t)oc * IC, IC);
        }
        float* dx = dinp + n * IC;
        for (int ic = 0; ic < IC; ic++) dx[ic] += (float)acc[ic];
    });
    // dw row oc = sum_n dout[n, oc] * inp row n; dbias[oc] = sum_n dout[n, oc].
    parallel_for(OC, (double)IC * N, [&](size_t oc) {
        std::vector<double> acc(IC, 0.0);
        double bsum = 0.0;
        for (int n = 0; n < N; n++) {
            const float g = dout[(size_t)n * OC + oc];
            bsum += g;
            if (g != 0.0f) axpy(acc.data(), g, inp + (size_t)n * IC, IC);
        }
        float* row = dw + oc * IC;
        for (int ic = 0; ic < IC; ic++) row[ic] += (float)acc[ic];
        if (dbias != nullptr) dbias[oc] += (float)bsum;
    });
}

namespace {
const double kGeluScale = std::sqrt(2.0 / M_PI);
}

void gelu_forward(float* out, const float* inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const double x = inp[i];
        out[i] = (float)(0.5 * x * (1.0 + std::tanh(kGeluScale * (x + 0.044715 * x * x * x))));
    }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const double x = inp[i];
        const double th = std::tanh(kGeluScale * (x + 0.044715 * x * x * x));
        const double du_dx = kGeluScale * (1.0 + 3.0 * 0.044715 * x * x);
        const double grad = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du_dx;
        dinp[i] += (float)(grad * dout[i]);
    }
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const double scale = 1.0 / std::sqrt((double)HS);
    const size_t C3 = (size_t)3 * C;
    parallel_for((size_t)B * NH, (double)T * T * HS, [&](size_t bh) {
        const size_t b = bh / NH, h = bh % NH;
        const float* base = qkv + b * T * C3 + h * HS;
        std::vector<double> score(T), acc(HS);
        for (int t = 0; t < T; t++) {
            const float* q = base + t * C3;
            double max_score = -INFINITY;
            for (int s = 0; s <= t; s++) {
                score[s] = dot(q, base + s * C3 + C, HS) * scale;
                max_score = std::max(max_score, score[s]);
            }
            double sum = 0.0;
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int s = 0; s <= t; s++) {
                const double e = std::exp(score[s] - max_score);
                sum += e;
                axpy(acc.data(), e, base + s * C3 + 2 * C, HS);
            }
            float* o = out + (b * T + t) * C + h * HS;
            for (int i = 0; i < HS; i++) o[i] = (float)(acc[i] / sum);
            lse[bh * T + t] = (float)(max_score + std::log(sum));
        }
    });
}

// With S = q k^T * scale (causal), P = softmax(S) = exp(S - lse), out = P v:
//   dv_s = sum_t P_ts dout_t          dP_ts = dout_t . v_s
//   dS_ts = P_ts (dP_ts - D_t),  D_t = sum_s P_ts dP_ts  (the softmax Jacobian applied to dP)
//   dq_t = scale * sum_s dS_ts k_s    dk_s = scale * sum_t dS_ts q_t
// D_t equals dout_t . out_t mathematically (the GPU kernels use that form and so take `out`);
// here it is summed from the recomputed P in double, which does not inherit out's rounding.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const double scale = 1.0 / std::sqrt((double)HS);
    const size_t C3 = (size_t)3 * C;
    parallel_for((size_t)B * NH, (double)T * T * HS * 2, [&](size_t bh) {
        const size_t b = bh / NH, h = bh % NH;
        const float* base = qkv + b * T * C3 + h * HS;
        std::vector<double> dq((size_t)T * HS, 0.0), dk((size_t)T * HS, 0.0);
        std::vector<double> dv((size_t)T * HS, 0.0), p(T), dp(T);
        for (int t = 0; t < T; t++) {
            const float* q = base + t * C3;
            const float* g = dout + (b * T + t) * C + h * HS;
            const double l = lse[bh * T + t];
            double d = 0.0;
            for (int s = 0; s <= t; s++) {
                p[s] = std::exp(dot(q, base + s * C3 + C, HS) * scale - l);
                dp[s] = dot(g, base + s * C3 + 2 * C, HS);
                d += p[s] * dp[s];
            }
            for (int s = 0; s <= t; s++) {
                const double ds = p[s] * (dp[s] - d) * scale;
                axpy(dv.data() + (size_t)s * HS, p[s], g, HS);
                axpy(dq.data() + (size_t)t * HS, ds, base + s * C3 + C, HS);
                axpy(dk.data() + (size_t)s * HS, ds, q, HS);
            }
        }
        for (int t = 0; t < T; t++) {
            float* row = dqkv + (b * T + t) * C3 + h * HS;
            for (int i = 0; i < HS; i++) {
                row[i] = (float)dq[(size_t)t * HS + i];
                row[C + i] = (float)dk[(size_t)t * HS + i];
                row[2 * C + i] = (float)dv[(size_t)t * HS + i];
            }
        }
    });
}

float crossentropy_forward_backward(float* dlogits, float* losses, const float* logits,
                                    const int* targets, int N, int V, int Vp, float dloss) {
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        const float* row = logits + (size_t)n * Vp;
        double max_logit = -INFINITY;
        for (int v = 0; v < V; v++) max_logit = std::max(max_logit, (double)row[v]);
        double sum = 0.0;
        for (int v = 0; v < V; v++) sum += std::exp(row[v] - max_logit);
        const double lse = max_logit + std::log(sum);
        const double loss = lse - row[targets[n]];
        losses[n] = (float)loss;
        total += loss;
        if (dlogits == nullptr) continue;
        float* d = dlogits + (size_t)n * Vp;
        for (int v = 0; v < V; v++) {
            const double prob = std::exp(row[v] - lse);
            d[v] = (float)((prob - (v == targets[n] ? 1.0 : 0.0)) * dloss);
        }
        // Padded columns are not part of the softmax; their gradient is exactly zero.
        for (int v = V; v < Vp; v++) d[v] = 0.0f;
    }
    return (float)(total / N);
}

double sum_of_squares(const float* x, size_t n) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += (double)x[i] * x[i];
    return sum;
}

void adamw(float* params, float* m, float* v, const float* grads, size_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, int t, float grad_scale) {
    const double bias1 = 1.0 - std::pow((double)beta1, t);
    const double bias2 = 1.0 - std::pow((double)beta2, t);
    for (size_t i = 0; i < n; i++) {
        const double g = (double)grads[i] * grad_scale;
        const double mi = beta1 * (double)m[i] + (1.0 - beta1) * g;
        const double vi = beta2 * (double)v[i] + (1.0 - beta2) * g * g;
        m[i] = (float)mi;
        v[i] = (float)vi;
        const double step = (mi / bias1) / (std::sqrt(vi / bias2) + eps);
        params[i] = (float)(params[i] - lr * (step + weight_decay * (double)params[i]));
    }
}

}  // namespace cpu
