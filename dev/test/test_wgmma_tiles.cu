// test_wgmma_tiles.cu: the Hopper building blocks of the sm_90a flash attention (llmc/sm90.cuh),
// each on its own on the GPU against the CPU, so that a failure of the attention kernels points
// at the piece that is wrong:
//   tma      one TMA tile load (make_row_tensor_map, tma_load_tile, an mbarrier with
//            transaction bytes), the shared-memory image read back raw and decoded with
//            sm90::swizzled_offset (the 128-byte swizzle the descriptors assume); rows past T
//            must be zeros, not the next batch's rows.
//   gemm_ss  S (64 x N) = A B^T by wgmma with both operands K-major from TMA tiles
//            (gemm_ss_kmajor: the descriptors' start address, k-slice offsets, column blocks,
//            the row offset of the second consumer warpgroup), read out through
//            sm90::frag_row / frag_col (the accumulator layout); N = 128 from 128-row tiles (the
//            forward's S), N = 64 from 64-row tiles (the backward's S, dP, S^T, dP^T).
//   gemm_rs  O (64 x HS) = P V by wgmma with P from registers (an accumulator-layout tile
//            converted by accumulator_to_a) and V MN-major from a TMA tile (gemm_rs_mnmajor: the
//            transpose bit, the leading byte offset of the column blocks), then once more with
//            accumulate on (O = 2 P V); K = 128 (the forward's P V), K = 64 (the backward's dS K,
//            P^T dO, dS^T Q).
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

using namespace llmc;

namespace {

typedef __nv_bfloat16 bf16;

constexpr int kT = 200;  // rows per batch of the test tensor: tiles at row 128 run past it
constexpr int kB = 2, kHeads = 3;

template <int HS, int ROWS>
__host__ __device__ constexpr uint32_t tile_bytes() {
    return ROWS * HS * 2;
}

// One TMA tile to load: its map (box of ROWS rows), head, first row and batch.
struct TileRef {
    int head, row0, b;
};

#ifdef LLMC_SM90A_DEVICE
using namespace sm90;

// Tile a (A_ROWS rows, from map_a) at the 1024-aligned base and, with B_ROWS > 0, tile b (B_ROWS
// rows, from map_b) after it; returns the base once the data has landed (all threads).
template <int HS, int A_ROWS, int B_ROWS>
__device__ uint32_t load_tiles(unsigned char* smem_raw, const CUtensorMap* map_a, TileRef a,
                               const CUtensorMap* map_b, TileRef b) {
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t bar = base + tile_bytes<HS, A_ROWS>() + tile_bytes<HS, B_ROWS>();
    if (threadIdx.x == 0) {
        mbar_init(bar, 1);
        fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(bar, tile_bytes<HS, A_ROWS>() + tile_bytes<HS, B_ROWS>());
        tma_load_tile<HS, A_ROWS>(base, map_a, bar, a.head, a.row0, a.b);
        if constexpr (B_ROWS > 0) {
            tma_load_tile<HS, B_ROWS>(base + tile_bytes<HS, A_ROWS>(), map_b, bar, b.head, b.row0,
                                      b.b);
        }
    }
    mbar_wait_warp(bar, 0);
    return base;
}
#endif

// The raw shared-memory image of one tile of ROWS rows -> image.
template <int HS, int ROWS>
__global__ void __launch_bounds__(128)
    tma_image_kernel(const __grid_constant__ CUtensorMap map, uint4* image, TileRef t) {
#ifdef LLMC_SM90A_DEVICE
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = load_tiles<HS, ROWS, 0>(smem_raw, &map, t, &map, t);
    const uint4* src = reinterpret_cast<const uint4*>(smem_raw + (base - smem_u32(smem_raw)));
    for (uint32_t i = threadIdx.x; i < tile_bytes<HS, ROWS>() / 16; i += blockDim.x) {
        image[i] = src[i];
    }
#endif
}

// s (64 x N, row-major) = rows [64 cw, 64 cw + 64) of tile A (128 rows) times the first N rows
// of tile B (B_ROWS rows) transposed: gemm_ss_kmajor as the kernels call it.
template <int HS, int B_ROWS, int N>
__global__ void __launch_bounds__(128) gemm_ss_kernel(const __grid_constant__ CUtensorMap map_a,
                                                      const __grid_constant__ CUtensorMap map_b,
                                                      float* s, TileRef a, TileRef b, int cw) {
#ifdef LLMC_SM90A_DEVICE
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = load_tiles<HS, 128, B_ROWS>(smem_raw, &map_a, a, &map_b, b);
    float d[N / 2] = {};
    fence_operands(d);
    wgmma_fence();
    gemm_ss_kmajor<N, HS / 16>(d, base, 128, 64 * cw, base + tile_bytes<HS, 128>(), B_ROWS, false);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(d);
    for (int e = 0; e < N / 2; e++)
        s[frag_row(threadIdx.x, e) * N + frag_col(threadIdx.x, e)] = d[e];
#endif
}

// o (64 x HS, row-major) = 2 P V: P (64 x ROWS, row-major) through the accumulator layout and
// accumulator_to_a, V a tile of ROWS rows; two GEMMs, the second accumulating.
template <int HS, int ROWS>
__global__ void __launch_bounds__(128)
    gemm_rs_kernel(const __grid_constant__ CUtensorMap map, const float* p, float* o, TileRef v) {
#ifdef LLMC_SM90A_DEVICE
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = load_tiles<HS, ROWS, 0>(smem_raw, &map, v, &map, v);
    float s[ROWS / 2];
    for (int e = 0; e < ROWS / 2; e++) {
        s[e] = p[frag_row(threadIdx.x, e) * ROWS + frag_col(threadIdx.x, e)];
    }
    uint32_t a[ROWS / 4];
    accumulator_to_a(a, s);
    float d[HS / 2] = {};
    for (int pass = 0; pass < 2; pass++) {
        fence_operands(d);
        fence_operands(a);
        wgmma_fence();
        gemm_rs_mnmajor<HS, ROWS / 16>(d, a, base, ROWS, pass == 1);
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
    LLMC_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// Two tiles of 128 rows, the barrier, the alignment slack.
template <int HS>
constexpr size_t smem_bytes() {
    return 2 * tile_bytes<HS, 128>() + 1024 + 64;
}

// The test tensor (kB, kT, kHeads, HS): integers in [-3, 3], and its TMA maps (boxes of 128 and
// 64 rows).
struct Tensor {
    int HS;
    std::vector<float> x;
    CUtensorMap map128, map64;
    float at(int b, int t, int head, int c) const {
        if (t >= kT) return 0.0f;  // what TMA fills rows past T with
        return x[(((size_t)b * kT + t) * kHeads + head) * HS + c];
    }
    const CUtensorMap& map(int rows) const { return rows == 128 ? map128 : map64; }
};

template <int HS, int ROWS>
void test_tma(const Context& ctx, const Tensor& x, TileRef t) {
    set_smem(tma_image_kernel<HS, ROWS>, smem_bytes<HS>());
    DeviceBuffer<unsigned char> image(tile_bytes<HS, ROWS>());
    tma_image_kernel<HS, ROWS><<<1, 128, smem_bytes<HS>(), ctx.stream>>>(
        x.map(ROWS), reinterpret_cast<uint4*>(image.get()), t);
    LLMC_CUDA_CHECK_LAST();
    const std::vector<unsigned char> raw = download_bytes(image.get(), tile_bytes<HS, ROWS>());
    std::vector<float> got(ROWS * HS), ref(ROWS * HS);
    for (int r = 0; r < ROWS; r++) {
        for (int c = 0; c < HS; c++) {
            bf16 v;
            std::memcpy(&v, raw.data() + sm90::swizzled_offset(ROWS, r, c), sizeof(v));
            got[r * HS + c] = __bfloat162float(v);
            ref[r * HS + c] = x.at(t.b, t.row0 + r, t.head, c);
        }
    }
    char name[96];
    std::snprintf(name, sizeof(name), "tma HS=%d box %d head %d rows %d.. b%d", HS, ROWS, t.head,
                  t.row0, t.b);
    check_close(name, got, ref, 0.0f, 0.0f);
}

template <int HS, int B_ROWS, int N>
void test_gemm_ss(const Context& ctx, const Tensor& x, TileRef a, TileRef b, int cw) {
    set_smem(gemm_ss_kernel<HS, B_ROWS, N>, smem_bytes<HS>());
    DeviceBuffer<float> s(64 * N);
    gemm_ss_kernel<HS, B_ROWS, N>
        <<<1, 128, smem_bytes<HS>(), ctx.stream>>>(x.map(128), x.map(B_ROWS), s.get(), a, b, cw);
    LLMC_CUDA_CHECK_LAST();
    const std::vector<float> got = download(s.get(), s.size());
    std::vector<float> ref(64 * N);
    for (int i = 0; i < 64; i++) {
        for (int j = 0; j < N; j++) {
            double acc = 0.0;
            for (int c = 0; c < HS; c++) {
                acc += (double)x.at(a.b, a.row0 + 64 * cw + i, a.head, c) *
                       x.at(b.b, b.row0 + j, b.head, c);
            }
            ref[i * N + j] = (float)acc;
        }
    }
    char name[96];
    std::snprintf(name, sizeof(name), "gemm_ss HS=%d N=%d rows %d+%d, B %d.. of %d b%d", HS, N,
                  a.row0, 64 * cw, b.row0, B_ROWS, b.b);
    check_close(name, got, ref, 0.0f, 0.0f);
}

template <int HS, int ROWS>
void test_gemm_rs(const Context& ctx, const Tensor& x, TileRef v, uint64_t seed) {
    set_smem(gemm_rs_kernel<HS, ROWS>, smem_bytes<HS>());
    Rng rng(seed);
    std::vector<float> p(64 * ROWS);
    for (float& e : p) e = (float)(rng.randint(5) - 2);
    DeviceBuffer<float> p_d(p.size()), o_d(64 * HS);
    upload(p_d.get(), p);
    gemm_rs_kernel<HS, ROWS>
        <<<1, 128, smem_bytes<HS>(), ctx.stream>>>(x.map(ROWS), p_d.get(), o_d.get(), v);
    LLMC_CUDA_CHECK_LAST();
    const std::vector<float> got = download(o_d.get(), o_d.size());
    std::vector<float> ref(64 * HS);
    for (int i = 0; i < 64; i++) {
        for (int c = 0; c < HS; c++) {
            double acc = 0.0;
            for (int k = 0; k < ROWS; k++) {
                acc += (double)p[i * ROWS + k] * x.at(v.b, v.row0 + k, v.head, c);
            }
            ref[i * HS + c] = (float)(2.0 * acc);
        }
    }
    char name[96];
    std::snprintf(name, sizeof(name), "gemm_rs HS=%d K=%d rows %d.. b%d (2 P V)", HS, ROWS, v.row0,
                  v.b);
    check_close(name, got, ref, 0.0f, 0.0f);
}

// The tiles of the kernels: 128-row Q, K, V tiles (forward), 64-row inner tiles (backward), with
// rows past T in some of them.
template <int HS>
void test_head_size(const Context& ctx, uint64_t seed) {
    Tensor x{HS, std::vector<float>((size_t)kB * kT * kHeads * HS), {}, {}};
    Rng rng(seed);
    for (float& v : x.x) v = (float)(rng.randint(7) - 3);
    DeviceBuffer<bf16> xd(x.x.size());
    upload(xd.get(), x.x);
    x.map128 = make_row_tensor_map(xd.get(), kB, kT, kHeads, HS, 128);
    x.map64 = make_row_tensor_map(xd.get(), kB, kT, kHeads, HS, 64);
    test_tma<HS, 128>(ctx, x, TileRef{1, 0, 0});
    test_tma<HS, 128>(ctx, x, TileRef{2, 128, 0});  // rows 200..255 past T: zeros, not batch 1's
    test_tma<HS, 64>(ctx, x, TileRef{0, 192, 0});   // rows 200..255 past T
    test_tma<HS, 64>(ctx, x, TileRef{1, 72, 1});
    for (int cw = 0; cw < 2; cw++) {
        test_gemm_ss<HS, 128, 128>(ctx, x, TileRef{0, 0, 0}, TileRef{1, 0, 0}, cw);
        test_gemm_ss<HS, 128, 128>(ctx, x, TileRef{0, 128, 1}, TileRef{1, 72, 1}, cw);
        test_gemm_ss<HS, 64, 64>(ctx, x, TileRef{0, 0, 1}, TileRef{2, 64, 1}, cw);
        test_gemm_ss<HS, 64, 64>(ctx, x, TileRef{2, 128, 0}, TileRef{1, 192, 0}, cw);
    }
    test_gemm_rs<HS, 128>(ctx, x, TileRef{2, 0, 1}, seed + 1);
    test_gemm_rs<HS, 128>(ctx, x, TileRef{2, 128, 0}, seed + 2);  // zero rows of V past T
    test_gemm_rs<HS, 64>(ctx, x, TileRef{1, 64, 0}, seed + 3);
    test_gemm_rs<HS, 64>(ctx, x, TileRef{0, 192, 1}, seed + 4);
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
