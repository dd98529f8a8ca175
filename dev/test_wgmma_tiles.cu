// test_wgmma_tiles.cu: the Hopper building blocks of the sm_90a flash attention (llmc/sm90.cuh),
// each on its own on the GPU against the CPU, so that a failure of the attention kernels points
// at the piece that is wrong:
//   tma      one TMA tile load (make_row_tensor_map, tma_load_tile, an mbarrier with
//            transaction bytes), the shared-memory image read back raw and decoded with
//            sm90::swizzled_offset (the 128-byte swizzle the descriptors assume); rows past T
//            must be zeros, not the next batch's rows.
//   gemm_ss  S (64 x 128) = A B^T by wgmma with both operands K-major from TMA tiles
//            (gemm_ss_kmajor: the descriptors' start address, k-slice offsets, column blocks,
//            the row offset of the second consumer warpgroup), read out through
//            sm90::frag_row / frag_col (the accumulator layout).
//   gemm_rs  O (64 x HS) = P V by wgmma with P from registers (an accumulator-layout tile
//            converted by accumulator_to_a) and V MN-major from a TMA tile (gemm_rs_mnmajor: the
//            transpose bit, the leading byte offset of the column blocks), then once more with
//            accumulate on (O = 2 P V).
// For HS = 64 and 128. Inputs are small integers, exact in bf16, and every product sum is exact
// in fp32, so every check is exact (atol 0): any layout error shows as a wrong element, printed
// with its index (row * columns + column). Prints SKIP off Hopper or without sm_90a code.
#include <cstdio>
#include <cstring>
#include <vector>

#include "context.cuh"
#include "flash_attention.cuh"
#include "sm90.cuh"
#include "test_util.cuh"

namespace {

typedef __nv_bfloat16 bf16;

constexpr int kRows = 128;  // rows of every tile (the attention kernel's kBM and kBN)
constexpr int kT = 200;     // rows per batch of the test tensor: tiles at row 128 run past it
constexpr int kB = 2, kHeads = 3;

template <int HS>
__host__ __device__ constexpr uint32_t tile_bytes() {
    return kRows * HS * 2;
}

#ifdef LLMC_SM90A_DEVICE
using namespace sm90;

// Loads `count` tiles (head heads[i], rows row0s[i], batch batches[i]) into consecutive tile
// slots of shared memory; returns the 1024-aligned base. All threads return after the data has
// landed.
template <int HS>
__device__ uint32_t load_tiles(unsigned char* smem_raw, const CUtensorMap* map, int count,
                               const int* heads, const int* row0s, const int* batches) {
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t bar = base + 2 * tile_bytes<HS>();
    if (threadIdx.x == 0) {
        mbar_init(bar, 1);
        fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(bar, count * tile_bytes<HS>());
        for (int i = 0; i < count; i++) {
            tma_load_tile<HS, kRows>(base + i * tile_bytes<HS>(), map, bar, heads[i], row0s[i],
                                     batches[i]);
        }
    }
    mbar_wait_warp(bar, 0);
    return base;
}
#endif

// The raw shared-memory image of one tile (head, row0, b) -> image (tile_bytes bytes).
template <int HS>
__global__ void __launch_bounds__(128) tma_image_kernel(const __grid_constant__ CUtensorMap map,
                                                        uint4* image, int head, int row0, int b) {
#ifdef LLMC_SM90A_DEVICE
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = load_tiles<HS>(smem_raw, &map, 1, &head, &row0, &b);
    const uint4* src = reinterpret_cast<const uint4*>(smem_raw + (base - smem_u32(smem_raw)));
    for (uint32_t i = threadIdx.x; i < tile_bytes<HS>() / 16; i += blockDim.x) image[i] = src[i];
#endif
}

// s (64 x 128, row-major) = rows [64 cw, 64 cw + 64) of tile A times tile B^T.
template <int HS>
__global__ void __launch_bounds__(128)
    gemm_ss_kernel(const __grid_constant__ CUtensorMap map, float* s, int a_head, int a_row0,
                   int b_head, int b_row0, int batch, int cw) {
#ifdef LLMC_SM90A_DEVICE
    extern __shared__ unsigned char smem_raw[];
    const int heads[2] = {a_head, b_head}, row0s[2] = {a_row0, b_row0}, batches[2] = {batch, batch};
    const uint32_t base = load_tiles<HS>(smem_raw, &map, 2, heads, row0s, batches);
    float d[64] = {};
    fence_operands(d);
    wgmma_fence();
    gemm_ss_kmajor<kRows, HS / 16>(d, base, kRows, 64 * cw, base + tile_bytes<HS>(), kRows, false);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(d);
    for (int e = 0; e < 64; e++) {
        s[frag_row(threadIdx.x, e) * kRows + frag_col(threadIdx.x, e)] = d[e];
    }
#endif
}

// o (64 x HS, row-major) = 2 P V: P (64 x 128, row-major) through the accumulator layout and
// accumulator_to_a, V the tile (v_head, v_row0, batch); two GEMMs, the second accumulating.
template <int HS>
__global__ void __launch_bounds__(128)
    gemm_rs_kernel(const __grid_constant__ CUtensorMap map, const float* p, float* o, int v_head,
                   int v_row0, int batch) {
#ifdef LLMC_SM90A_DEVICE
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = load_tiles<HS>(smem_raw, &map, 1, &v_head, &v_row0, &batch);
    float s[64];
    for (int e = 0; e < 64; e++)
        s[e] = p[frag_row(threadIdx.x, e) * kRows + frag_col(threadIdx.x, e)];
    uint32_t a[32];
    accumulator_to_a(a, s);
    float d[HS / 2] = {};
    for (int pass = 0; pass < 2; pass++) {
        fence_operands(d);
        fence_operands(a);
        wgmma_fence();
        gemm_rs_mnmajor<HS, kRows / 16>(d, a, base, kRows, pass == 1);
        wgmma_commit();
        wgmma_wait<0>();
        fence_operands(d);
    }
    for (int e = 0; e < HS / 2; e++) {
        o[frag_row(threadIdx.x, e) * HS + frag_col(threadIdx.x, e)] = d[e];
    }
#endif
}

template <typename Kernel>
void set_smem(Kernel kernel, size_t bytes) {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// The test tensor (kB, kT, kHeads, HS): integers in [-3, 3].
struct Tensor {
    int HS;
    std::vector<float> x;
    float at(int b, int t, int head, int c) const {
        if (t >= kT) return 0.0f;  // what TMA fills rows past T with
        return x[(((size_t)b * kT + t) * kHeads + head) * HS + c];
    }
};

template <int HS>
void test_tma(const Context& ctx, const Tensor& x, const CUtensorMap& map, int head, int row0,
              int b) {
    const size_t smem = tile_bytes<HS>() * 2 + 1024 + 64;
    set_smem(tma_image_kernel<HS>, smem);
    DeviceBuffer<unsigned char> image(tile_bytes<HS>());
    tma_image_kernel<HS>
        <<<1, 128, smem, ctx.stream>>>(map, reinterpret_cast<uint4*>(image.get()), head, row0, b);
    CUDA_CHECK_LAST();
    const std::vector<unsigned char> raw = download_bytes(image.get(), tile_bytes<HS>());
    std::vector<float> got(kRows * HS), ref(kRows * HS);
    for (int r = 0; r < kRows; r++) {
        for (int c = 0; c < HS; c++) {
            bf16 v;
            std::memcpy(&v, raw.data() + sm90::swizzled_offset(kRows, r, c), sizeof(v));
            got[r * HS + c] = __bfloat162float(v);
            ref[r * HS + c] = x.at(b, row0 + r, head, c);
        }
    }
    char name[96];
    std::snprintf(name, sizeof(name), "tma HS=%d head %d rows %d.. batch %d", HS, head, row0, b);
    check_close(name, got, ref, 0.0f, 0.0f);
}

template <int HS>
void test_gemm_ss(const Context& ctx, const Tensor& x, const CUtensorMap& map, int a_row0,
                  int b_row0, int batch, int cw) {
    const size_t smem = tile_bytes<HS>() * 2 + 1024 + 64;
    set_smem(gemm_ss_kernel<HS>, smem);
    DeviceBuffer<float> s(64 * kRows);
    gemm_ss_kernel<HS><<<1, 128, smem, ctx.stream>>>(map, s.get(), 0, a_row0, 1, b_row0, batch, cw);
    CUDA_CHECK_LAST();
    const std::vector<float> got = download(s.get(), s.size());
    std::vector<float> ref(64 * kRows);
    for (int i = 0; i < 64; i++) {
        for (int j = 0; j < kRows; j++) {
            double acc = 0.0;
            for (int c = 0; c < HS; c++) {
                acc +=
                    (double)x.at(batch, a_row0 + 64 * cw + i, 0, c) * x.at(batch, b_row0 + j, 1, c);
            }
            ref[i * kRows + j] = (float)acc;
        }
    }
    char name[96];
    std::snprintf(name, sizeof(name), "gemm_ss HS=%d rows %d+%d, keys %d.. b%d", HS, a_row0,
                  64 * cw, b_row0, batch);
    check_close(name, got, ref, 0.0f, 0.0f);
}

template <int HS>
void test_gemm_rs(const Context& ctx, const Tensor& x, const CUtensorMap& map, int v_row0,
                  int batch, uint64_t seed) {
    const size_t smem = tile_bytes<HS>() * 2 + 1024 + 64;
    set_smem(gemm_rs_kernel<HS>, smem);
    Rng rng(seed);
    std::vector<float> p(64 * kRows);
    for (float& v : p) v = (float)(rng.randint(5) - 2);
    DeviceBuffer<float> p_d(p.size()), o_d(64 * HS);
    upload(p_d.get(), p);
    gemm_rs_kernel<HS><<<1, 128, smem, ctx.stream>>>(map, p_d.get(), o_d.get(), 2, v_row0, batch);
    CUDA_CHECK_LAST();
    const std::vector<float> got = download(o_d.get(), o_d.size());
    std::vector<float> ref(64 * HS);
    for (int i = 0; i < 64; i++) {
        for (int c = 0; c < HS; c++) {
            double acc = 0.0;
            for (int k = 0; k < kRows; k++)
                acc += (double)p[i * kRows + k] * x.at(batch, v_row0 + k, 2, c);
            ref[i * HS + c] = (float)(2.0 * acc);
        }
    }
    char name[96];
    std::snprintf(name, sizeof(name), "gemm_rs HS=%d keys %d.. b%d (2 P V)", HS, v_row0, batch);
    check_close(name, got, ref, 0.0f, 0.0f);
}

template <int HS>
void test_head_size(const Context& ctx, uint64_t seed) {
    Tensor x{HS, std::vector<float>((size_t)kB * kT * kHeads * HS)};
    Rng rng(seed);
    for (float& v : x.x) v = (float)(rng.randint(7) - 3);
    DeviceBuffer<bf16> xd(x.x.size());
    upload(xd.get(), x.x);
    const CUtensorMap map = make_row_tensor_map(xd.get(), kB, kT, kHeads, HS, kRows);
    test_tma<HS>(ctx, x, map, 1, 0, 0);
    test_tma<HS>(ctx, x, map, 2, 128, 0);  // rows 200..255 past T: zeros, not batch 1's rows
    test_tma<HS>(ctx, x, map, 0, 72, 1);
    for (int cw = 0; cw < 2; cw++) {
        test_gemm_ss<HS>(ctx, x, map, 0, 0, 0, cw);
        test_gemm_ss<HS>(ctx, x, map, 128, 72, 1, cw);  // zero rows of A past T
    }
    test_gemm_rs<HS>(ctx, x, map, 0, 1, seed + 1);
    test_gemm_rs<HS>(ctx, x, map, 128, 0, seed + 2);  // zero rows of V past T
}

}  // namespace

int main() {
    skip_if_no_device();
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/false);
    if (!flash_attention_sm90_available(ctx, 64)) {
        std::printf(
            "SKIP the sm_90a building blocks need a compute capability 9.0 GPU (this is %d.%d), "
            "a build for sm_90a and LLMC_FLASH_SM90 unset or 1\n",
            ctx.props.major, ctx.props.minor);
        return 0;
    }
    test_head_size<64>(ctx, 11);
    test_head_size<128>(ctx, 12);
    return test_summary("test_wgmma_tiles");
}
