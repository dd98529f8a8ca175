// matmul.cuh: every matrix product of the model, through cuBLASLt, and on sm_90 through our own
// kernels for the products around GELU where ctx.gelu_gemm asks for them (matmul_sm90.cuh).
//
// Shapes are row-major, as the tensors are stored. Linear layers (weight is (OC, IC), as in
// PyTorch):
//   matmul_forward : out (N, OC) = inp (N, IC) @ weight^T + bias
//                    with pre_gelu != null: pre_gelu = inp @ weight^T + bias and
//                    out = gelu_tanh(pre_gelu), both from one cuBLASLt call (GELU_AUX_BIAS
//                    epilogue), or on sm_90 with a bias from our own kernel (matmul_sm90.cuh,
//                    ctx.gelu_gemm), which takes the GELU from the rounded pre_gelu.
//   matmul_forward_residual: out (N, OC) = inp (N, IC) @ weight^T + bias + residual (N, OC),
//                    the residual read as cuBLASLt's C (beta 1) and added in float before the
//                    one rounding of out: the residual stream's add without a pass of its own.
//   matmul_backward: dinp (N, IC) = dout @ weight              (OVERWRITES dinp)
//                    with pre_gelu != null: dinp = (dout @ weight) * gelu'(pre_gelu) (DGELU
//                    epilogue; pre_gelu is (N, IC), the input of the GELU whose output was this
//                    layer's input)
//                    dweight (OC, IC) += dout^T @ inp           (accumulates)
//                    dbias (OC) += column sums of dout (dbias may be null): our own
//                    deterministic two-stage column sum through dbias_scratch
//                    (matmul_bias_scratch_floats(OC) floats); where dout's rows are not whole
//                    16-byte vectors, cuBLASLt's BGRADB epilogue into dbias_scratch (float in the
//                    fp32 build, bf16 in the bf16 build: cuBLASLt takes no other), then added.
//                    With accumulate false, dweight and dbias are written, not added to: their
//                    old contents are never read (GEMM beta 0), so the first micro-step of a
//                    step needs no zeroed gradients.
// Generic:
//   matmul_strided_batched: for each i < batch,
//                    C_i (M, N) = alpha * op(A_i) @ op(B_i) + beta * C_i
//                    op(A_i) is (M, K): A_i stored (M, K) row-major with row stride lda, or
//                    (K, M) when trans_a. op(B_i) is (K, N): B_i stored (K, N), or (N, K) when
//                    trans_b. Pointers advance by stride_a/b/c elements per batch.
// Plans (descriptors, layouts, chosen algorithm) are cached per shape in the Context (its
// matmul_cache, which only matmul.cu reads). In the
// fp32 build ctx.tf32 selects TF32 tensor cores (PyTorch's 'high').
#pragma once
#include "context.cuh"
#include "precision.cuh"

namespace llmc {

void matmul_forward(const Context& ctx, floatX* out, const floatX* inp, const floatX* weight,
                    const floatX* bias, int N, int IC, int OC, floatX* pre_gelu = nullptr);
void matmul_forward_residual(const Context& ctx, floatX* out, const floatX* inp,
                             const floatX* weight, const floatX* bias, const floatX* residual,
                             int N, int IC, int OC);

// Floats of dbias_scratch matmul_backward needs for a bias gradient of OC values, and of
// gelu_dbias_scratch matmul_backward_input needs for N rows of IC.
size_t matmul_bias_scratch_floats(int OC);
size_t matmul_gelu_bias_scratch_floats(int N, int IC);
// The bias-gradient part alone: dbias (OC) += column sums of dout (N, OC) through `scratch`
// (OC a multiple of 16 bytes' worth of floatX, dout 16-byte aligned; benchmarks and tests).
void matmul_bias_backward(const Context& ctx, floatX* dbias, float* scratch, const floatX* dout,
                          int N, int OC, bool accumulate = true);

void matmul_backward(const Context& ctx, floatX* dinp, floatX* dweight, floatX* dbias,
                     float* dbias_scratch, const floatX* dout, const floatX* inp,
                     const floatX* weight, int N, int IC, int OC, const floatX* pre_gelu = nullptr,
                     bool accumulate = true);
// Its two halves (matmul_backward runs the first, then the second), for a caller that
// schedules them apart: the input gradient (dinp, with the DGELU epilogue given pre_gelu), and
// the weight and bias gradients. With on_branch (needs ctx.branches & kBranchGemms) the second
// first forks the branch stream (branch_fork) and runs there with the branch's workspace; the
// caller waits for it (branch_mark / branch_wait) before overwriting dout or inp, or reading
// dweight, dbias or dbias_scratch.
// With pre_gelu and gelu_dbias, where our own DGELU kernel applies (matmul_sm90.cuh), it also
// adds the column sums of dinp to gelu_dbias (the bias gradient of the layer whose output went
// through the GELU; written instead without accumulate) through gelu_dbias_scratch
// (matmul_gelu_bias_scratch_floats(N, IC)) and returns true; otherwise it leaves gelu_dbias
// alone and returns false.
bool matmul_backward_input(const Context& ctx, floatX* dinp, const floatX* dout,
                           const floatX* weight, int N, int IC, int OC,
                           const floatX* pre_gelu = nullptr, floatX* gelu_dbias = nullptr,
                           float* gelu_dbias_scratch = nullptr, bool accumulate = true);
void matmul_backward_weight(const Context& ctx, floatX* dweight, floatX* dbias,
                            float* dbias_scratch, const floatX* dout, const floatX* inp, int N,
                            int IC, int OC, bool on_branch = false, bool accumulate = true);

void matmul_strided_batched(const Context& ctx, floatX* C, const floatX* A, const floatX* B, int M,
                            int N, int K, bool trans_a, bool trans_b, int lda, int ldb, int ldc,
                            long long stride_a, long long stride_b, long long stride_c, int batch,
                            float alpha, float beta);

}  // namespace llmc
