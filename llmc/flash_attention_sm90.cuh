// flash_attention_sm90.cuh: the Hopper (sm_90a) path of flash attention (wgmma, TMA, warp
// specialization), private to flash_attention.cu, which dispatches to it at run time, and to the
// per-op test and benchmark, which run it beside the mma.sync path.
//
// Same contract as flash_attention_forward (flash_attention.cuh): qkv (B, T, 3C) bf16 read in
// place, out (B, T, C) bf16 and lse (B, NH, T) float overwritten, causal, scale 1/sqrt(HS).
// Preconditions beyond the mma.sync path's: HS 64 or 128, a device of compute capability 9.0
// and a build with sm_90a code (flash_attention_sm90_available).
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "context.cuh"
#include "device_utils.cuh"
#include "flash_attention.cuh"
#include "sm90.cuh"

namespace llmc {

// flash_attention_sm90_available (declared in flash_attention.cuh) is true when the sm_90a
// kernels can run this head size here: HS 64 or 128, the device is compute capability 9.0, the
// loaded image has the sm_90a kernels (a build for compute_90a), and LLMC_FLASH_SM90 is not 0
// in the environment (the switch that forces the mma.sync path).

// Forward variants (tile pipeline and block order), all computing the same values; variant 0 is
// the default. Names for the benchmark's legend.
int flash_attention_sm90_forward_variants();
const char* flash_attention_sm90_forward_variant_name(int variant);

// Checks flash_attention_sm90_available (fails with a message otherwise) and launches.
void flash_attention_sm90_forward(const Context& ctx, __nv_bfloat16* out, float* lse,
                                  const __nv_bfloat16* qkv, int B, int T, int NH, int HS,
                                  int variant);

// Backward (flash_attention_sm90_backward.cu): dq, dk, dv into dqkv (overwritten), the contract
// of flash_attention_backward, scratch of flash_attention_sm90_scratch_bytes; HS 64
// (flash_attention_sm90_backward_available: also false with LLMC_FLASH_SM90=fwd). With bias, it
// also writes the float partial rows of the qkv bias gradient, which flash_attention.cu's reduce
// kernel adds into dbias: their pointers and row counts are returned (null pointers without bias).
// Two kernels, dq then dk/dv, each with its variants (the same list for both; variant 0 is the
// default). `kernels` (kBackwardDq | kBackwardDkdv) launches one of them alone, for the
// benchmark's split: the dk/dv kernel reads the lse and D rows the dq kernel writes to scratch,
// so alone it reads those of the last dq launch on the same scratch. kBackwardFused instead runs
// the fused backward (flash_attention_sm90_backward.cu, "fused dq + dk/dv": one kernel computes
// dk, dv and a float dq accumulator, added in a fixed order), the variants ignored: dk, dv and
// the dk/dv bias partials are bitwise the two kernels' (the same GEMMs and sums), dq and its
// bias partials are summed in another order. With kBackwardStatsGiven besides kBackwardFused, the
// fused backward takes the row statistics (lse2 and D) as already written into scratch, where
// flash_attention_sm90_row_stats points (by row_stats_gemm_backward, matmul_sm90.cuh), instead of
// computing them; T must be a multiple of 64 (their rows are then unpadded).
struct BiasPartials {
    float* q;
    int rows_q;
    float* kv;
    int rows_kv;
};
constexpr unsigned kBackwardDq = 1, kBackwardDkdv = 2, kBackwardFused = 4, kBackwardStatsGiven = 8;
// Where the fused backward reads its row statistics in scratch: lse2 = lse * log2(e) and D =
// dout . out, each (B, NH, T) floats for T a multiple of 64.
void flash_attention_sm90_row_stats(void* scratch, int B, int T, int NH, int HS, float** lse2,
                                    float** d);
bool flash_attention_sm90_backward_available(const Context& ctx, int HS);
size_t flash_attention_sm90_scratch_bytes(int B, int T, int NH, int HS);
int flash_attention_sm90_backward_variants();
const char* flash_attention_sm90_backward_variant_name(int variant);
BiasPartials flash_attention_sm90_backward(const Context& ctx, __nv_bfloat16* dqkv, void* scratch,
                                           const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                                           const __nv_bfloat16* out, const float* lse, int B, int T,
                                           int NH, int HS, bool bias, int dq_variant = 0,
                                           int dkdv_variant = 0,
                                           unsigned kernels = kBackwardDq | kBackwardDkdv);

// ---- Shared by the kernels of flash_attention_sm90*.cu ------------------------------------------

// The launch bound is 384 (3 warpgroups) in sm_90a device code and 32 in other device code, where
// the kernels are empty: flash_attention_sm90_available reads it back (cudaFuncGetAttributes) to
// learn whether the loaded image has the sm_90a kernels, and a launch of an empty one fails.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LLMC_SM90_LAUNCH_BOUND 32
#else
#define LLMC_SM90_LAUNCH_BOUND 384
#endif

// Block order. A kernel's tiles are ranked per head, rank 0 the longest (the most inner tiles),
// and walked by one of:
enum ScheduleMode : int {
    kOneTileAcross = 0,  // CTA t: head t % heads, rank t / heads
    kPairs = 1,          // persistent: CTA c takes pairs c, c + grid, ... in head order, a pair
                         // being ranks u and n - 1 - u of one head (the same work for every u)
};
struct TileSchedule {
    int mode, heads, n;  // n: tiles per head
};
// Pairs unless the last round of pairs over the SMs is under this full (then one tile per CTA).
constexpr double kPairsBalance = 0.9;

// mode < 0: pairs or one tile per CTA (across) by kPairsBalance.
inline TileSchedule make_schedule(const Context& ctx, int mode, int heads, int n) {
    // schedule_tile counts in 32 bits (a 64-bit division is a long software routine on the
    // GPU, run by every thread once a tile): every tile and pair index, plus one round of CTAs,
    // must fit.
    LLMC_CHECK(
        (long long)heads * (n + 1) < (1LL << 31),
        "flash attention (sm90): %d heads x %d query tiles is too many tiles for one launch; "
        "use a smaller batch.",
        heads, n);
    TileSchedule s{mode, heads, n};
    if (s.mode < 0) {
        const double per_sm = (double)heads * ((n + 1) / 2) / ctx_num_sms(ctx);
        s.mode = per_sm / std::ceil(per_sm) >= kPairsBalance ? kPairs : kOneTileAcross;
    }
    return s;
}
inline long long schedule_grid(const Context& ctx, const TileSchedule& s) {
    const long long pairs = (long long)s.heads * ((s.n + 1) / 2);
    return s.mode == kPairs ? std::min<long long>(pairs, ctx_num_sms(ctx))
                            : (long long)s.heads * s.n;
}

#ifdef LLMC_SM90A_DEVICE
struct Tile {
    int bh, rank;
    bool done;   // no more work for this CTA
    bool valid;  // false: the second half of a middle pair (a tile paired with itself)
};

// The i-th tile of this CTA. Producer and consumers walk the same sequence.
__device__ __forceinline__ Tile schedule_tile(const TileSchedule& s, int i) {
    const int cta = blockIdx.x;
    if (s.mode != kPairs) {
        if (i > 0) return Tile{0, 0, true, false};
        return Tile{cta % s.heads, cta / s.heads, false, true};
    }
    // 32-bit (make_schedule checks the range): pair < heads * per_head + gridDim.x.
    const int per_head = (s.n + 1) / 2;
    const int pair = cta + (i / 2) * (int)gridDim.x;
    if (pair >= s.heads * per_head) return Tile{0, 0, true, false};
    const int bh = pair / per_head;
    const int u = pair - bh * per_head;
    if (i % 2 == 1 && u == s.n - 1 - u) return Tile{0, 0, false, false};
    return Tile{bh, i % 2 == 0 ? u : s.n - 1 - u, false, true};
}

// One arrival per consumer warp on an "empty" barrier, once the warp's wgmmas that read the
// stage have completed (a completed wgmma has completed for the whole warpgroup).
__device__ __forceinline__ void release(uint32_t bar, int lane) {
    if (lane == 0) sm90::mbar_arrive(bar);
}
#endif  // LLMC_SM90A_DEVICE

}  // namespace llmc
