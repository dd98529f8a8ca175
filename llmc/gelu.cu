// gelu.cu: GELU forward (tanh approximation) as an elementwise pass.
//
// Shapes: inp, out (n) floatX, n = N * 4C in the model.
//   out[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),  x = inp[i] in float.  Overwrites
//   out. bytes = 2 * sizeof(floatX) * n
// Preconditions: out does not partially overlap inp. 16-byte vector accesses when both are
// 16-byte aligned; the n % kVecX tail and unaligned buffers go one element per thread.
#include "device_utils.cuh"
#include "gelu.cuh"
#include "launch.cuh"
#include "nvtx.h"

namespace llmc {

namespace {

constexpr int kThreads = 256;

// One pack of kVec elements per thread per iteration, grid-stride over the packs.
template <int kVec>
__global__ void __launch_bounds__(kThreads)
    gelu_forward_elementwise_kernel(floatX* __restrict__ out,        // (n)
                                    const floatX* __restrict__ inp,  // (n)
                                    size_t packs) {
    pdl_wait();
    pdl_launch_dependents();
    for (size_t p = (size_t)blockIdx.x * kThreads + threadIdx.x; p < packs;
         p += (size_t)gridDim.x * kThreads) {
        const Vec<floatX, kVec> x = load_vec<kVec>(inp + p * kVec);
        Vec<floatX, kVec> y;
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            y.v[k] = from_float<floatX>(gelu_tanh(to_float(x.v[k])));
        }
        store_vec<kVec>(out + p * kVec, y);
    }
}

template <int kVec>
void launch_gelu(const Context& ctx, floatX* out, const floatX* inp, size_t packs) {
    // Enough blocks to fill the device a few times over; the loop covers the rest.
    const size_t wanted = (packs + kThreads - 1) / kThreads;
    const size_t cap = (size_t)ctx_num_sms(ctx) * 16;
    const int blocks = (int)(wanted < cap ? wanted : cap);
    launch_kernel(ctx, ctx.stream, gelu_forward_elementwise_kernel<kVec>, blocks, kThreads, 0, out,
                  inp, packs);
}

}  // namespace

void gelu_forward(const Context& ctx, floatX* out, const floatX* inp, size_t n) {
    NvtxRange range("gelu_forward");
    LLMC_CHECK(n > 0 && out != nullptr && inp != nullptr,
               "gelu_forward: needs n > 0 (got %zu) and both buffers", n);
    if (aligned16(out) && aligned16(inp)) {
        const size_t packs = n / kVecX;
        if (packs > 0) launch_gelu<kVecX>(ctx, out, inp, packs);
        const size_t done = packs * kVecX;
        if (done < n) launch_gelu<1>(ctx, out + done, inp + done, n - done);
    } else {
        launch_gelu<1>(ctx, out, inp, n);
    }
}

}  // namespace llmc
