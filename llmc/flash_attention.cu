// flash_attention.cu: fused causal attention (FlashAttention-2 style) on bf16 mma.sync, and the
// dispatch between these kernels and the Hopper forward of flash_attention_sm90.cu (FlashPath in
// flash_attention.cuh).
//
// Shapes: qkv (B, T, 3C), out (B, T, C), dqkv (B, T, 3C) bf16; lse, D (B, NH, T) float;
// C = NH * HS, scale = 1/sqrt(HS). Rows are split in tiles; a warp owns 16 (or 16*MT) rows.
//   forward : per query tile, loop over key tiles (diagonal first):  S = scale Q K^T (masked
//             s > t), online softmax in fp32 (running max m and sum l, exp2 with log2(e)
//             folded into the scale), O = O * exp(m_old - m_new) + P V with P rounded to bf16;
//             out = O / l, lse = m + log l.
//   backward: P = exp(S - lse) is recomputed from q, k and lse;  dP = dO V^T;  D_t = dO_t . O_t
//             (fp32);  dS = P (dP - D);  dV = P^T dO;  dK = scale dS^T Q;  dQ = scale dS K.
//             One kernel per query tile computes dQ (looping over key tiles) and D for its rows;
//             then one per key tile computes dK, dV (looping over query tiles): S and dP are
//             computed twice, the price of a deterministic dQ without atomics.
// GEMMs: mma.sync.m16n8k16 bf16 -> fp32; the A operand of a warp's fixed rows (Q in forward
// where it fits, K and V or Q and dO in backward) stays in registers, B operands come from shared
// memory through ldmatrix (.trans where the operand's k dimension runs along rows). Global ->
// shared by cp.async in 2 (or 3) stages with one barrier per tile (the barrier that makes tile i
// visible also ends every warp's reads of tile i - 1, whose stage the next prefetch takes);
// lse and D tiles too. Shared rows padded by 16 bytes so the 8 row addresses of an ldmatrix hit
// distinct banks. Partial tiles (any T >= 1) are zero-filled by cp.async; the causal mask hides
// keys >= T from every valid query row; query rows >= T are not stored and add nothing in
// backward (dQ gives them lse = +inf, so P = 0; in dK/dV their q, dO, lse and D are 0, so
// P dO = 0 and dS = 0).
// Preconditions (checked): HS % 16 == 0, HS <= 128, T >= 1, 16-byte aligned pointers.
// FLOPs (causal): forward 2*B*NH*T*T*HS, backward 2.5x that. Measured speed: docs/results.md;
// designs tried and dropped: docs/perf-log.md.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "arch.cuh"
#include "check.h"
#include "device_utils.cuh"
#include "flash_attention.cuh"
#include "flash_attention_sm90.cuh"
#include "nvtx.h"

namespace llmc {

namespace {

typedef __nv_bfloat16 bf16;

constexpr float kLn2 = 0.6931471805599453f;
constexpr size_t kScratchAlign = 256;

// ---- PTX wrappers -----------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// 16 bytes global -> shared; zero-filled (src not read) when !valid.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
// 4 bytes global -> shared, zero-filled when !valid (for per-row float vectors, whose rows
// need not be 16-byte aligned).
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// d += a (16x16, row) * b (16x8, col), fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// ---- Tile helpers -----------------------------------------------------------------------------
// A tile is ROWS rows of HS bf16 in shared memory with row stride HS + 8 (the padding).

__host__ __device__ constexpr int smem_stride(int hs) { return hs + 8; }
template <int HS>
__host__ __device__ constexpr int smem_stride() {
    return smem_stride(HS);
}

// Rows [r0, r0 + ROWS) of a (T, HS) slice with row stride ld -> tile; rows >= T zero-filled.
// Tiles of at most 2 passes over the block (the backward's inner tiles) are loaded by an
// unrolled loop: the run-time loop (i from threadIdx.x) compiles to a generic unrolled loop
// with remainder branches, a few hundred integer instructions per tile in the main loop's SASS.
// Longer loads keep it: unrolled, every pass's address stays live and the forward spills above
// HS=64.
template <int HS, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* g, int ld, int r0, int T) {
    constexpr int kChunks = HS / 8, kTotal = ROWS * kChunks;  // 16-byte chunks
    auto load_chunk = [&](int i) {
        const int r = i / kChunks, c = i % kChunks;
        const bool valid = r0 + r < T;
        const bf16* src = valid ? g + (long long)(r0 + r) * ld + c * 8 : g;
        cp_async16(tile + r * smem_stride<HS>() + c * 8, src, valid);
    };
    if constexpr (kTotal <= 2 * THREADS) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int i = threadIdx.x + j * THREADS;
            if (i < kTotal) load_chunk(i);
        }
    } else {
        for (int i = threadIdx.x; i < kTotal; i += THREADS) load_chunk(i);
    }
}

// A operands of a warp: MT m-tiles of 16 rows x HS, rows ra + 16*mt + (0..15) of a tile, as
// mma fragments (HS/16 k-steps of 4 registers each).
template <int HS, int MT>
__device__ __forceinline__ void load_a_frags(uint32_t (&af)[MT][HS / 16][4], const bf16* a, int ra,
                                             int lane) {
    constexpr int S = smem_stride<HS>();
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int kk = 0; kk < HS / 16; kk++) {
            ldmatrix_x4(af[mt][kk],
                        a + (ra + mt * 16 + (lane & 15)) * S + kk * 16 + (lane >> 4) * 8);
        }
    }
}

// acc[mt][n] (16 x 8 fragments, N = 8 * NT columns) += A (MT x 16 rows x HS, fragments af)
// times B^T, B the first N rows (x HS) of tile `b`: the "Q K^T" pattern. Each B fragment,
// loaded once by non-transposed ldmatrix, feeds all MT m-tiles.
template <int HS, int MT, int NT>
__device__ __forceinline__ void mma_abt(float (&acc)[MT][NT][4],
                                        const uint32_t (&af)[MT][HS / 16][4], const bf16* b,
                                        int lane) {
    constexpr int S = smem_stride<HS>();
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
#pragma unroll
        for (int n2 = 0; n2 < NT / 2; n2++) {
            uint32_t bfr[4];
            ldmatrix_x4(bfr, b + (n2 * 16 + (lane & 7) + ((lane >> 4) << 3)) * S + kk * 16 +
                                 ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_bf16(acc[mt][2 * n2], af[mt][kk], bfr[0], bfr[1]);
                mma_bf16(acc[mt][2 * n2 + 1], af[mt][kk], bfr[2], bfr[3]);
            }
        }
    }
}

// Two independent mma_abt products (acc1 += A1 B1^T, acc2 += A2 B2^T) interleaved, so that
// twice as many independent MMAs are in flight between dependent ones.
template <int HS, int MT, int NT>
__device__ __forceinline__ void mma_abt2(float (&acc1)[MT][NT][4],
                                         const uint32_t (&af1)[MT][HS / 16][4], const bf16* b1,
                                         float (&acc2)[MT][NT][4],
                                         const uint32_t (&af2)[MT][HS / 16][4], const bf16* b2,
                                         int lane) {
    constexpr int S = smem_stride<HS>();
    const int off = ((lane & 7) + ((lane >> 4) << 3)) * S + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
#pragma unroll
        for (int n2 = 0; n2 < NT / 2; n2++) {
            uint32_t f1[4], f2[4];
            ldmatrix_x4(f1, b1 + n2 * 16 * S + kk * 16 + off);
            ldmatrix_x4(f2, b2 + n2 * 16 * S + kk * 16 + off);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_bf16(acc1[mt][2 * n2], af1[mt][kk], f1[0], f1[1]);
                mma_bf16(acc2[mt][2 * n2], af2[mt][kk], f2[0], f2[1]);
                mma_bf16(acc1[mt][2 * n2 + 1], af1[mt][kk], f1[2], f1[3]);
                mma_bf16(acc2[mt][2 * n2 + 1], af2[mt][kk], f2[2], f2[3]);
            }
        }
    }
}

// mma_abt with A read from shared memory (MT m-tiles from row ra of tile `a`) one k-step at a
// time, for warps whose A fragments would not fit in registers next to their accumulators.
template <int HS, int MT, int NT>
__device__ __forceinline__ void mma_abt_smem(float (&acc)[MT][NT][4], const bf16* a, int ra,
                                             const bf16* b, int lane) {
    constexpr int S = smem_stride<HS>();
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
        uint32_t af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            ldmatrix_x4(af[mt], a + (ra + mt * 16 + (lane & 15)) * S + kk * 16 + (lane >> 4) * 8);
        }
#pragma unroll
        for (int n2 = 0; n2 < NT / 2; n2++) {
            uint32_t bfr[4];
            ldmatrix_x4(bfr, b + (n2 * 16 + (lane & 7) + ((lane >> 4) << 3)) * S + kk * 16 +
                                 ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_bf16(acc[mt][2 * n2], af[mt], bfr[0], bfr[1]);
                mma_bf16(acc[mt][2 * n2 + 1], af[mt], bfr[2], bfr[3]);
            }
        }
    }
}

// acc[mt] (16 x HS) += P[mt] (16 x K, fp32 fragments of an mma_abt result, rounded to bf16
// here) times V (the first K rows x HS of tile `v`): the "P V" pattern, V through
// ldmatrix.trans, each V fragment feeding all MT m-tiles.
template <int HS, int MT, int KT>
__device__ __forceinline__ void mma_pv(float (&acc)[MT][HS / 8][4], const float (&p)[MT][KT][4],
                                       const bf16* v, int lane) {
    constexpr int S = smem_stride<HS>();
#pragma unroll
    for (int k2 = 0; k2 < KT / 2; k2++) {
        uint32_t af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            af[mt][0] = pack_bf16(p[mt][2 * k2][0], p[mt][2 * k2][1]);
            af[mt][1] = pack_bf16(p[mt][2 * k2][2], p[mt][2 * k2][3]);
            af[mt][2] = pack_bf16(p[mt][2 * k2 + 1][0], p[mt][2 * k2 + 1][1]);
            af[mt][3] = pack_bf16(p[mt][2 * k2 + 1][2], p[mt][2 * k2 + 1][3]);
        }
#pragma unroll
        for (int n2 = 0; n2 < HS / 16; n2++) {
            uint32_t bfr[4];
            ldmatrix_x4_trans(bfr, v + (k2 * 16 + (lane & 15)) * S + n2 * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_bf16(acc[mt][2 * n2], af[mt], bfr[0], bfr[1]);
                mma_bf16(acc[mt][2 * n2 + 1], af[mt], bfr[2], bfr[3]);
            }
        }
    }
}

// Epilogues stage a block's float accumulator tiles in shared memory (rows padded to HS + 8
// floats against bank conflicts), then write them out as bf16 rows by 16-byte stores
// (store_staged_rows) and, for the qkv bias partials, add them up by column in row order
// (sum_staged_columns). Storing straight from the fragments took scattered 4-byte stores, and in
// the dK/dV kernel left no registers for the column sums (it spilled). A tile of ROWS rows
// (ROWS * (HS + 8) floats) fits in the shared memory of two of the kernel's bf16 tiles of ROWS
// rows, which it reuses (asserted at each launch): the caller puts a barrier before the staging
// (every warp done with its tiles) and one after it.
template <int HS>
constexpr int kStagedLd = smem_stride<HS>();

// One m-tile of 16 rows (mma m16n8 fragments: this thread has columns n*8 + 2*(lane % 4) +
// {0, 1} of rows lane / 4 and lane / 4 + 8), rows lane / 4 times mul_lo and lane / 4 + 8 times
// mul_hi; `rows` points at the tile row of this thread's first row.
template <int HS>
__device__ __forceinline__ void stage_mtile(float* rows, const float (&acc)[HS / 8][4],
                                            float mul_lo, float mul_hi, int lane) {
    constexpr int LD = kStagedLd<HS>;
#pragma unroll
    for (int n = 0; n < HS / 8; n++) {
        const int c = n * 8 + 2 * (lane % 4);
        *reinterpret_cast<float2*>(rows + c) = make_float2(acc[n][0] * mul_lo, acc[n][1] * mul_lo);
        *reinterpret_cast<float2*>(rows + 8 * LD + c) =
            make_float2(acc[n][2] * mul_hi, acc[n][3] * mul_hi);
    }
}

// Every warp's 16*MT rows of one accumulator, times mul.
template <int HS, int WARPS, int MT>
__device__ __forceinline__ void stage_tile(float* tile, const float (&acc)[MT][HS / 8][4],
                                           float mul, int warp, int lane) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        stage_mtile<HS>(tile + (warp * 16 * MT + mt * 16 + lane / 4) * kStagedLd<HS>, acc[mt], mul,
                        mul, lane);
    }
}

// Row r < ROWS of staged tile a < NA, where r0 + r < T -> row r0 + r of g + a * part (row
// stride ld), as bf16.
template <int HS, int ROWS, int THREADS, int NA = 1>
__device__ __forceinline__ void store_staged_rows(bf16* g, long long ld, const float* tile, int r0,
                                                  int T, int part = 0) {
    constexpr int LD = kStagedLd<HS>, CHUNKS = HS / 8;
    for (int i = threadIdx.x; i < NA * ROWS * CHUNKS; i += THREADS) {
        const int a = i / (ROWS * CHUNKS), r = (i / CHUNKS) % ROWS, c = (i % CHUNKS) * 8;
        if (r0 + r < T) {
            const float* src = tile + (a * ROWS + r) * LD + c;
            const float4 lo = *reinterpret_cast<const float4*>(src);
            const float4 hi = *reinterpret_cast<const float4*>(src + 4);
            *reinterpret_cast<uint4*>(g + a * part + (long long)(r0 + r) * ld + c) =
                make_uint4(pack_bf16(lo.x, lo.y), pack_bf16(lo.z, lo.w), pack_bf16(hi.x, hi.y),
                           pack_bf16(hi.z, hi.w));
        }
    }
}

// dst[a][c] = sum over the ROWS rows (in order) of column c of staged tile a, for a < NA.
template <int HS, int ROWS, int THREADS, int NA>
__device__ __forceinline__ void sum_staged_columns(float* const (&dst)[NA], const float* tile) {
    constexpr int LD = kStagedLd<HS>;
    for (int i = threadIdx.x; i < NA * HS; i += THREADS) {
        const int a = i / HS, c = i % HS;
        const float* t = tile + a * ROWS * LD + c;
        float total = 0.0f;
#pragma unroll 8
        for (int r = 0; r < ROWS; r++) total += t[r * LD];
        dst[a][c] = total;
    }
}

// Block order. Causal work is uneven: the last query tile of a head has T/BR times the key tiles
// of the first (for dK/dV the first key tile has the most query tiles), and each kernel starts
// a head's longest tile first. Blocks are dispatched in order of their linear index, x varying
// fastest. With the tile in x, a head's tiles run side by side and share its K and V (or Q and
// dO) in L2; with the head in x (`across`), every head's longest tile starts before any head's
// shorter ones, and the shortest fill the last wave. A grid of a few waves wants the second (no
// head's longest tile is left for the end), a long grid the first (the L2 reuse of K and V), so
// `across` is used up to kAcrossWaves waves (figures: docs/perf-log.md).
constexpr int kAcrossWaves = 2;
struct BlockOrder {
    dim3 grid;
    bool across;
};
BlockOrder block_order(const Context& ctx, int heads, int tiles, int blocks_per_sm) {
    const bool across =
        (long long)heads * tiles <= (long long)kAcrossWaves * ctx_num_sms(ctx) * blocks_per_sm;
    return {across ? dim3(heads, tiles) : dim3(tiles, heads), across};
}
// The block's head (b * NH + h) and tile, for either order. (The tile count is ceil(T / tile
// rows), computed from T where needed: a value kept from here to the epilogue costs registers.)
struct BlockIndex {
    int bh, tile;
};
template <bool ACROSS>
__device__ __forceinline__ BlockIndex block_index() {
    if constexpr (ACROSS) return {(int)blockIdx.x, (int)blockIdx.y};
    return {(int)blockIdx.y, (int)blockIdx.x};
}

// ---- Forward ----------------------------------------------------------------------------------

// Grid: B*NH heads by query tiles, in either order ("Block order"), WARPS*32 threads; a block
// owns BR = 16*MT*WARPS query rows (a warp 16*MT of them) and walks key tiles of BC rows from
// the diagonal down to 0. Q_IN_REGS keeps the warp's Q fragments in registers (else they are
// read from shared memory per k-step);
// MIN_BLOCKS is the blocks per SM the register cap aims at.
template <int HS, int WARPS, int MT, int BC, int MIN_BLOCKS, bool Q_IN_REGS, int STAGES,
          bool ACROSS>
__global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
    flash_attention_forward_kernel(bf16* __restrict__ out,        // (B, T, C)
                                   float* __restrict__ lse,       // (B, NH, T)
                                   const bf16* __restrict__ qkv,  // (B, T, 3C)
                                   int T, int NH, float scale_log2) {
    constexpr int WR = 16 * MT, BR = WR * WARPS, THREADS = WARPS * 32, S = smem_stride<HS>();
    constexpr int NT = BC / 8;  // score fragments per m-tile
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* q_s = reinterpret_cast<bf16*>(smem_raw);  // [BR][S]
    bf16* k_s = q_s + BR * S;                       // [STAGES][BC][S]
    bf16* v_s = k_s + STAGES * BC * S;              // [STAGES][BC][S]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const BlockIndex bi = block_index<ACROSS>();
    const int qb = (T + BR - 1) / BR - 1 - bi.tile;  // longest rows first (see "Block order")
    const int bh = bi.bh, b = bh / NH, h = bh % NH;
    const int C = NH * HS, C3 = 3 * C;
    const bf16* q_g = qkv + (long long)b * T * C3 + h * HS;
    const bf16* k_g = q_g + C;
    const bf16* v_g = q_g + 2 * C;
    const int q0 = qb * BR;
    const int n_kb = (min(T, q0 + BR) + BC - 1) / BC;

    load_tile<HS, BR, THREADS>(q_s, q_g, C3, q0, T);
    // Key tiles it = 0 .. STAGES - 2 ahead, one commit group each (the first with Q).
#pragma unroll
    for (int j = 0; j < STAGES - 1; j++) {
        if (j < n_kb) {
            load_tile<HS, BC, THREADS>(k_s + j * BC * S, k_g, C3, (n_kb - 1 - j) * BC, T);
            load_tile<HS, BC, THREADS>(v_s + j * BC * S, v_g, C3, (n_kb - 1 - j) * BC, T);
        }
        cp_async_commit();
    }

    float o[MT][HS / 8][4] = {};
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    uint32_t qf[Q_IN_REGS ? MT : 1][Q_IN_REGS ? HS / 16 : 1][4];
    const int warp_row0 = q0 + warp * WR;
    const int row_lo = warp_row0 + lane / 4;  // this thread's rows: row_lo + 16 mt + 8 i

    for (int it = 0; it < n_kb; it++) {
        const int kb = n_kb - 1 - it, stage = it % STAGES;
        // Tile it has landed once at most STAGES - 2 newer groups are pending. After the
        // barrier every warp is also done with tile it - 1, whose stage the prefetch reuses:
        // one barrier per tile.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (it + STAGES - 1 < n_kb) {
            const int ps = (it + STAGES - 1) % STAGES, r0 = (kb - STAGES + 1) * BC;
            load_tile<HS, BC, THREADS>(k_s + ps * BC * S, k_g, C3, r0, T);
            load_tile<HS, BC, THREADS>(v_s + ps * BC * S, v_g, C3, r0, T);
        }
        cp_async_commit();
        if constexpr (Q_IN_REGS) {
            if (it == 0) load_a_frags<HS, MT>(qf, q_s, warp * WR, lane);
        }

        const int k0 = kb * BC;
        // Key tiles entirely above this warp's rows (only on the diagonal when BR > BC) add 0.
        if (k0 <= warp_row0 + WR - 1) {
            float s[MT][NT][4] = {};
            if constexpr (Q_IN_REGS) {
                mma_abt<HS, MT, NT>(s, qf, k_s + stage * BC * S, lane);
            } else {
                mma_abt_smem<HS, MT, NT>(s, q_s, warp * WR, k_s + stage * BC * S, lane);
            }
            const bool diagonal = k0 + BC - 1 > warp_row0;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                // The mask costs integer and select instructions: only diagonal tiles pay them.
                if (diagonal) {
#pragma unroll
                    for (int n = 0; n < NT; n++) {
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int key = k0 + n * 8 + 2 * (lane % 4) + (e & 1);
                            const int row = row_lo + mt * 16 + (e >> 1) * 8;
                            if (key > row) s[mt][n][e] = -INFINITY;
                        }
                    }
                }
                float alpha[2];
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    float mx = -INFINITY;
#pragma unroll
                    for (int n = 0; n < NT; n++) {
                        mx = fmaxf(mx, fmaxf(s[mt][n][2 * i], s[mt][n][2 * i + 1]));
                    }
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float m_new = fmaxf(m[mt][i], mx * scale_log2);
                    // A row whose keys so far are all masked keeps m = -inf: subtract 0 instead
                    // (its p are all 0).
                    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
                    alpha[i] = fast_exp2(m[mt][i] - m_ref);
                    m[mt][i] = m_new;
                    l[mt][i] *= alpha[i];
#pragma unroll
                    for (int n = 0; n < NT; n++) {
                        s[mt][n][2 * i] = fast_exp2(s[mt][n][2 * i] * scale_log2 - m_ref);
                        s[mt][n][2 * i + 1] = fast_exp2(s[mt][n][2 * i + 1] * scale_log2 - m_ref);
                        l[mt][i] += s[mt][n][2 * i] + s[mt][n][2 * i + 1];
                    }
                }
#pragma unroll
                for (int n = 0; n < HS / 8; n++) {
                    o[mt][n][0] *= alpha[0];
                    o[mt][n][1] *= alpha[0];
                    o[mt][n][2] *= alpha[1];
                    o[mt][n][3] *= alpha[1];
                }
            }
            mma_pv<HS, MT, NT>(o, s, v_s + stage * BC * S, lane);
        }
    }

    float* tile = reinterpret_cast<float*>(smem_raw);  // the epilogue's staged O (BR rows)
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float inv[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            l[mt][i] += __shfl_xor_sync(0xffffffffu, l[mt][i], 1);
            l[mt][i] += __shfl_xor_sync(0xffffffffu, l[mt][i], 2);
            inv[i] = 1.0f / l[mt][i];
        }
        const int r = row_lo + mt * 16;
        stage_mtile<HS>(tile + (r - q0) * kStagedLd<HS>, o[mt], inv[0], inv[1], lane);
        if (lane % 4 == 0) {
            float* lse_bh = lse + (long long)bh * T;
            if (r < T) lse_bh[r] = (m[mt][0] + log2f(l[mt][0])) * kLn2;
            if (r + 8 < T) lse_bh[r + 8] = (m[mt][1] + log2f(l[mt][1])) * kLn2;
        }
    }
    __syncthreads();
    store_staged_rows<HS, BR, THREADS>(out + (long long)b * T * C + h * HS, C, tile, q0, T);
}

// ---- Backward ---------------------------------------------------------------------------------

// The qkv bias gradient rides on the backward (dbias != null): each block writes the column sums
// of its rows' dq (or dk and dv) into one row of float partials, from the float accumulators
// before they are rounded to bf16, and qkv_bias_reduce_kernel adds the partial rows in order.
// That replaces a separate column-sum pass over dqkv (B*T x 3C bf16, read once more per layer).
// Every pass's block covers at least kBiasMinRows rows (asserted at launch),
// so B * ceil(T / kBiasMinRows) partial rows per part fit the scratch.
constexpr int kBiasMinRows = 64;

// dbias (3C) += column sums of the partial rows (= without accumulate): the q columns c < C from
// part_q (rows_q, C), the k and v columns from part_kv (rows_kv, 2C). Block: 32 columns x
// kBiasGroups groups; group y adds rows y, y + kBiasGroups, ... in order, then group 0 adds the
// groups in order.
constexpr int kBiasGroups = 32;
__global__ void __launch_bounds__(32 * kBiasGroups)
    qkv_bias_reduce_kernel(bf16* __restrict__ dbias, const float* __restrict__ part_q, int rows_q,
                           const float* __restrict__ part_kv, int rows_kv, int C, bool accumulate) {
    const int col = blockIdx.x * 32 + threadIdx.x;
    const bool q = col < C;
    const float* p = q ? part_q + col : part_kv + (col - C);
    const float total = column_sum_by_groups<kBiasGroups>(
        p, q ? rows_q : rows_kv, q ? (size_t)C : 2 * (size_t)C, col < 3 * C);
    if (threadIdx.y != 0 || col >= 3 * C) return;
    write_grad(dbias + col, total, accumulate);
}

// Per-row values of a query tile into shared memory by cp.async (a plain load would stall the
// loading warp, and with it the whole block at the next barrier, for a global-memory latency per
// tile): lse (natural log) and D. Rows >= T get 0; they add nothing anyway, since their q and dO
// rows are zero-filled too (S = 0, P = 1, dP = 0, D = 0: P dO = 0 and dS = 0).
template <int ROWS, int THREADS>
__device__ __forceinline__ void load_row_stats(float* lse_s, float* d_s, const float* lse,
                                               const float* D, int r0, int T) {
#pragma unroll
    for (int j = 0; j < (2 * ROWS + THREADS - 1) / THREADS; j++) {
        const int i = threadIdx.x + j * THREADS;
        if ((2 * ROWS) % THREADS != 0 && i >= 2 * ROWS) break;
        const int r = i % ROWS;
        const bool valid = r0 + r < T;
        const float* src = i < ROWS ? lse : D;
        cp_async4((i < ROWS ? lse_s : d_s) + r, valid ? src + r0 + r : src, valid);
    }
}

// dQ for one query tile of BR = 16*MT*WARPS rows (a warp 16*MT of them, its Q and dO
// fragments in registers); loops over key tiles of BC rows from the diagonal down to 0.
// It also computes D_t = dO_t . O_t for its rows (fp32) and stores it for the dK/dV kernel,
// which runs after it.
template <int HS, int WARPS, int MT, int BC, int MIN_BLOCKS, int STAGES, bool ACROSS>
__global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
    flash_attention_backward_dq_kernel(bf16* __restrict__ dqkv,        // (B, T, 3C)
                                       float* __restrict__ D,          // (B, NH, T)
                                       const bf16* __restrict__ qkv,   // (B, T, 3C)
                                       const bf16* __restrict__ dout,  // (B, T, C)
                                       const bf16* __restrict__ out,   // (B, T, C)
                                       const float* __restrict__ lse,  // (B, NH, T)
                                       float* __restrict__ bias_part,  // (B * tiles, C) or null
                                       int T, int NH, float scale, float scale_log2) {
    constexpr int WR = 16 * MT, BR = WR * WARPS, THREADS = WARPS * 32, S = smem_stride<HS>();
    constexpr int NT = BC / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* q_s = reinterpret_cast<bf16*>(smem_raw);  // [BR][S]
    bf16* do_s = q_s + BR * S;                      // [BR][S]
    bf16* k_s = do_s + BR * S;                      // [STAGES][BC][S]
    bf16* v_s = k_s + STAGES * BC * S;              // [STAGES][BC][S]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const BlockIndex bi = block_index<ACROSS>();
    const int qb = (T + BR - 1) / BR - 1 - bi.tile;  // longest rows first (see "Block order")
    const int bh = bi.bh, b = bh / NH, h = bh % NH;
    const int C = NH * HS, C3 = 3 * C;
    const bf16* q_g = qkv + (long long)b * T * C3 + h * HS;
    const bf16* k_g = q_g + C;
    const bf16* v_g = q_g + 2 * C;
    const long long o_off = (long long)b * T * C + h * HS;  // dout and out
    const int q0 = qb * BR;
    const int n_kb = (min(T, q0 + BR) + BC - 1) / BC;

    load_tile<HS, BR, THREADS>(q_s, q_g, C3, q0, T);
    load_tile<HS, BR, THREADS>(do_s, dout + o_off, C, q0, T);
#pragma unroll
    for (int j = 0; j < STAGES - 1; j++) {  // as in the forward
        if (j < n_kb) {
            load_tile<HS, BC, THREADS>(k_s + j * BC * S, k_g, C3, (n_kb - 1 - j) * BC, T);
            load_tile<HS, BC, THREADS>(v_s + j * BC * S, v_g, C3, (n_kb - 1 - j) * BC, T);
        }
        cp_async_commit();
    }

    const int warp_row0 = q0 + warp * WR;
    const int row_lo = warp_row0 + lane / 4;  // this thread's rows: row_lo + 16 mt + 8 i
    float row_lse[MT][2], row_d[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int r = row_lo + 16 * mt + 8 * i;
            row_lse[mt][i] = r < T ? lse[(long long)bh * T + r] * kLog2e : INFINITY;
        }
    }
    // D of the warp's rows, while the first tiles load: lanes 2r and 2r + 1 sum the two halves
    // of row r's HS channels, then each thread fetches its rows' sums.
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int r = warp_row0 + mt * 16 + lane / 2, c0 = (lane & 1) * (HS / 2);
        float sum = 0.0f;
        if (r < T) {
            const long long at = o_off + (long long)r * C + c0;
#pragma unroll
            for (int c = 0; c < HS / 2; c += 8) {
                const uint4 x = *reinterpret_cast<const uint4*>(dout + at + c);
                const uint4 y = *reinterpret_cast<const uint4*>(out + at + c);
                const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
                const __nv_bfloat162* y2 = reinterpret_cast<const __nv_bfloat162*>(&y);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const float2 xf = __bfloat1622float2(x2[j]), yf = __bfloat1622float2(y2[j]);
                    sum += xf.x * yf.x + xf.y * yf.y;
                }
            }
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        if ((lane & 1) == 0 && r < T) D[(long long)bh * T + r] = sum;
        row_d[mt][0] = __shfl_sync(0xffffffffu, sum, 2 * (lane / 4));
        row_d[mt][1] = __shfl_sync(0xffffffffu, sum, 2 * (lane / 4) + 16);
    }
    float dq[MT][HS / 8][4] = {};
    uint32_t qf[MT][HS / 16][4], dof[MT][HS / 16][4];  // the warp's Q and dO rows, A operands

    for (int it = 0; it < n_kb; it++) {
        const int kb = n_kb - 1 - it, stage = it % STAGES;
        cp_async_wait<STAGES - 2>();  // one barrier per tile, as in the forward
        __syncthreads();
        if (it + STAGES - 1 < n_kb) {
            const int ps = (it + STAGES - 1) % STAGES, r0 = (kb - STAGES + 1) * BC;
            load_tile<HS, BC, THREADS>(k_s + ps * BC * S, k_g, C3, r0, T);
            load_tile<HS, BC, THREADS>(v_s + ps * BC * S, v_g, C3, r0, T);
        }
        cp_async_commit();
        const bf16* kt = k_s + stage * BC * S;
        const bf16* vt = v_s + stage * BC * S;

        if (it == 0) {
            load_a_frags<HS, MT>(qf, q_s, warp * WR, lane);
            load_a_frags<HS, MT>(dof, do_s, warp * WR, lane);
        }
        const int k0 = kb * BC;
        // Key tiles entirely above this warp's rows (only on the diagonal when BR > BC) add 0.
        if (k0 <= warp_row0 + WR - 1) {
            float p[MT][NT][4] = {}, dp[MT][NT][4] = {};
            mma_abt2<HS, MT, NT>(p, qf, kt, dp, dof, vt, lane);
            const bool diagonal = k0 + BC - 1 > warp_row0;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
#pragma unroll
                for (int n = 0; n < NT; n++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        p[mt][n][e] = fast_exp2(p[mt][n][e] * scale_log2 - row_lse[mt][e >> 1]);
                    }
                }
                if (diagonal) {  // the mask only on tiles that cross the diagonal
#pragma unroll
                    for (int n = 0; n < NT; n++) {
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int key = k0 + n * 8 + 2 * (lane % 4) + (e & 1);
                            if (key > row_lo + 16 * mt + 8 * (e >> 1)) p[mt][n][e] = 0.0f;
                        }
                    }
                }
#pragma unroll
                for (int n = 0; n < NT; n++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        dp[mt][n][e] = p[mt][n][e] * (dp[mt][n][e] - row_d[mt][e >> 1]);
                    }
                }
            }
            mma_pv<HS, MT, NT>(dq, dp, kt, lane);
        }
    }
    // Epilogue: dq (times scale) staged, stored, and with bias_part summed by column (rows >= T
    // hold 0: their lse is +inf, so P = 0).
    float* tile = reinterpret_cast<float*>(smem_raw);  // [BR][LD]
    __syncthreads();
    stage_tile<HS, WARPS, MT>(tile, dq, scale, warp, lane);
    __syncthreads();
    store_staged_rows<HS, BR, THREADS>(dqkv + (long long)b * T * C3 + h * HS, C3, tile, q0, T);
    if (bias_part != nullptr) {
        float* const dst[1] = {bias_part + ((long long)b * ((T + BR - 1) / BR) + qb) * C + h * HS};
        sum_staged_columns<HS, BR, THREADS, 1>(dst, tile);
    }
}

// dK, dV for one key tile of BC = 16*MT*WARPS rows; loops over query tiles of BR rows from the
// diagonal to T. A warp owns 16*MT keys: S^T = K Q^T and dP^T = V dO^T put keys on the
// fragment rows, so P^T and dS^T are directly the A operands of dV += P^T dO and
// dK += dS^T Q. KEEP_KV keeps the warp's K and V fragments in registers (else they are read
// from shared memory per k-step).
template <int HS, int WARPS, int MT, int BR, int MIN_BLOCKS, bool KEEP_KV, int STAGES, bool ACROSS>
__global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
    flash_attention_backward_dkdv_kernel(bf16* __restrict__ dqkv,        // (B, T, 3C)
                                         const bf16* __restrict__ qkv,   // (B, T, 3C)
                                         const bf16* __restrict__ dout,  // (B, T, C)
                                         const float* __restrict__ lse,  // (B, NH, T)
                                         const float* __restrict__ D,    // (B, NH, T)
                                         float* __restrict__ bias_part,  // (B * tiles, 2C) or null
                                         int T, int NH, float scale, float scale_log2) {
    constexpr int WK = 16 * MT, BC = WK * WARPS, THREADS = WARPS * 32, S = smem_stride<HS>();
    constexpr int NT = BR / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* k_s = reinterpret_cast<bf16*>(smem_raw);                    // [BC][S]
    bf16* v_s = k_s + BC * S;                                         // [BC][S]
    bf16* q_s = v_s + BC * S;                                         // [STAGES][BR][S]
    bf16* do_s = q_s + STAGES * BR * S;                               // [STAGES][BR][S]
    float* lse_s = reinterpret_cast<float*>(do_s + STAGES * BR * S);  // [STAGES][BR]
    float* d_s = lse_s + STAGES * BR;                                 // [STAGES][BR]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const BlockIndex bi = block_index<ACROSS>();
    const int kb = bi.tile;  // low key tiles have the most query tiles (see "Block order")
    const int bh = bi.bh, b = bh / NH, h = bh % NH;
    const int C = NH * HS, C3 = 3 * C;
    const bf16* q_g = qkv + (long long)b * T * C3 + h * HS;
    const bf16* do_g = dout + (long long)b * T * C + h * HS;
    const float* lse_g = lse + (long long)bh * T;
    const float* d_g = D + (long long)bh * T;
    const int k0 = kb * BC;
    const int qb_first = k0 / BR, n_qb = (T + BR - 1) / BR;

    load_tile<HS, BC, THREADS>(k_s, q_g + C, C3, k0, T);
    load_tile<HS, BC, THREADS>(v_s, q_g + 2 * C, C3, k0, T);
    // Query tiles qb_first .. qb_first + STAGES - 2 ahead, one commit group each (the first
    // with K and V).
    auto load_query_tile = [&](int qb, int st) {
        load_tile<HS, BR, THREADS>(q_s + st * BR * S, q_g, C3, qb * BR, T);
        load_tile<HS, BR, THREADS>(do_s + st * BR * S, do_g, C, qb * BR, T);
        load_row_stats<BR, THREADS>(lse_s + st * BR, d_s + st * BR, lse_g, d_g, qb * BR, T);
    };
#pragma unroll
    for (int j = 0; j < STAGES - 1; j++) {
        if (qb_first + j < n_qb) load_query_tile(qb_first + j, j);
        cp_async_commit();
    }

    float dk[MT][HS / 8][4] = {}, dv[MT][HS / 8][4] = {};
    const int warp_key0 = k0 + warp * WK;
    const int key_lo = warp_key0 + lane / 4;  // this thread's keys: key_lo + 16 mt + 8 i
    uint32_t kf[KEEP_KV ? MT : 1][KEEP_KV ? HS / 16 : 1][4];
    uint32_t vf[KEEP_KV ? MT : 1][KEEP_KV ? HS / 16 : 1][4];

    for (int qb = qb_first; qb < n_qb; qb++) {
        const int stage = (qb - qb_first) % STAGES;
        cp_async_wait<STAGES - 2>();  // one barrier per tile, as in the forward
        __syncthreads();
        if (qb + STAGES - 1 < n_qb) {
            load_query_tile(qb + STAGES - 1, (qb - qb_first + STAGES - 1) % STAGES);
        }
        cp_async_commit();
        if constexpr (KEEP_KV) {
            if (qb == qb_first) {
                load_a_frags<HS, MT>(kf, k_s, warp * WK, lane);
                load_a_frags<HS, MT>(vf, v_s, warp * WK, lane);
            }
        }
        const bf16* qt = q_s + stage * BR * S;
        const bf16* dot = do_s + stage * BR * S;
        const float* lse_t = lse_s + stage * BR;
        const float* d_t = d_s + stage * BR;
        const int q0 = qb * BR;

        // Query tiles entirely before this warp's keys (only near the diagonal when BC > BR)
        // add 0.
        if (warp_key0 <= q0 + BR - 1) {
            float p[MT][NT][4] = {}, dp[MT][NT][4] = {};
            if constexpr (KEEP_KV) {
                mma_abt2<HS, MT, NT>(p, kf, qt, dp, vf, dot, lane);
            } else {
                mma_abt_smem<HS, MT, NT>(p, k_s, warp * WK, qt, lane);
                mma_abt_smem<HS, MT, NT>(dp, v_s, warp * WK, dot, lane);
            }
            // This thread's query columns are the same for every key row: their lse (in log2
            // units) and D once, as float2 (columns 2 (lane % 4) and the next).
            float2 lse2[NT], dd[NT];
#pragma unroll
            for (int n = 0; n < NT; n++) {
                lse2[n] = *reinterpret_cast<const float2*>(lse_t + n * 8 + 2 * (lane % 4));
                lse2[n].x *= kLog2e;
                lse2[n].y *= kLog2e;
                dd[n] = *reinterpret_cast<const float2*>(d_t + n * 8 + 2 * (lane % 4));
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
#pragma unroll
                for (int n = 0; n < NT; n++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        p[mt][n][e] =
                            fast_exp2(p[mt][n][e] * scale_log2 - ((e & 1) ? lse2[n].y : lse2[n].x));
                    }
                }
            }
            if (q0 < warp_key0 + WK - 1) {  // the mask only on tiles that cross the diagonal
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
#pragma unroll
                    for (int n = 0; n < NT; n++) {
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int qi = n * 8 + 2 * (lane % 4) + (e & 1);
                            const int key = key_lo + 16 * mt + (e >> 1) * 8;
                            if (key > q0 + qi) p[mt][n][e] = 0.0f;
                        }
                    }
                }
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
#pragma unroll
                for (int n = 0; n < NT; n++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        dp[mt][n][e] = p[mt][n][e] * (dp[mt][n][e] - ((e & 1) ? dd[n].y : dd[n].x));
                    }
                }
            }
            mma_pv<HS, MT, NT>(dv, p, dot, lane);
            mma_pv<HS, MT, NT>(dk, dp, qt, lane);
        }
    }

    // Epilogue: dk (times scale) and dv staged, stored, and with bias_part summed by column
    // (keys >= T hold 0: masked for every query < T, and queries >= T have dO = 0 and D = 0).
    float* tile = reinterpret_cast<float*>(smem_raw);  // [2][BC][LD]: dk, dv
    __syncthreads();
    stage_tile<HS, WARPS, MT>(tile, dk, scale, warp, lane);
    stage_tile<HS, WARPS, MT>(tile + BC * kStagedLd<HS>, dv, 1.0f, warp, lane);
    __syncthreads();
    bf16* dk_g = dqkv + (long long)b * T * C3 + C + h * HS;
    store_staged_rows<HS, BC, THREADS, 2>(dk_g, C3, tile, k0, T, C);
    if (bias_part != nullptr) {
        float* row = bias_part + ((long long)b * ((T + BC - 1) / BC) + kb) * 2 * C + h * HS;
        float* const dst[2] = {row, row + C};
        sum_staged_columns<HS, BC, THREADS, 2>(dst, tile);
    }
}

// ---- Launch -----------------------------------------------------------------------------------

// Tile shapes. Each pass keeps a few variants compiled so that dev/bench/bench_attention --variants
// can time them in one run and dev/test/test_flash_attention checks each; variant 0, the default,
// was the fastest at HS=64 on an H100 (the shapes tried and dropped: docs/perf-log.md). Fields:
// warps per block, m-tiles of 16 rows per warp (the rows whose fragments are the A operands), inner
// tile rows, blocks per SM the register cap aims at, A fragments kept in registers, cp.async
// stages. Above HS=64 the accumulators need the registers: every variant is the one shape that
// does not spill there.
struct Tiles {
    int warps, mt, inner, min_blocks;
    bool a_in_regs;
    int stages = 2;  // cp.async stages of the inner tiles (prefetch distance stages - 1)
};

constexpr int kForwardVariants = 3;
constexpr int kDqVariants = 3;
constexpr int kDkdvVariants = 3;
// The fused Hopper backward (kSm90Fused): one variant (the performance log has the dropped ones).
constexpr int kSm90FusedVariants = 1;
// kAuto takes the fused backward from this many 128-key tiles per SM (performance log: it lost
// to the two kernels at d12 B=4, 2.9 tiles per SM, and won at B=64, 46.5).
constexpr int kFusedMinTilesPerSm = 16;

constexpr Tiles tuned_forward_tiles(int v, int hs) {
    if (hs > 64) return Tiles{4, 2, 32, 1, false};
    switch (v) {
        case 1:
            return Tiles{4, 2, 64, 1, true};
        case 2:
            return Tiles{8, 1, 64, 2, false, 3};
        default:
            return Tiles{8, 1, 64, 2, false};
    }
}

constexpr Tiles tuned_dq_tiles(int v, int hs) {
    if (hs > 64) return Tiles{4, 1, 32, 2, true};
    switch (v) {
        case 1:
            return Tiles{4, 1, 32, 3, true, 3};
        case 2:
            return Tiles{8, 1, 64, 1, true, 3};
        default:
            return Tiles{4, 1, 32, 3, true};
    }
}

constexpr Tiles tuned_dkdv_tiles(int v, int hs) {
    if (hs > 64) return Tiles{4, 1, 32, 2, false};
    switch (v) {
        case 1:
            return Tiles{4, 1, 64, 2, false, 3};
        case 2:
            return Tiles{8, 1, 64, 1, true, 3};
        default:
            return Tiles{4, 1, 32, 3, true};
    }
}

// Shared memory of a block of each pass: its own rows (Q; Q and dO; K and V) and `stages` inner
// tiles of the other operands (K and V; K and V; Q and dO with their lse and D values).
constexpr size_t forward_smem(Tiles t, int hs) {
    return (size_t)(16 * t.mt * t.warps + 2 * t.stages * t.inner) * smem_stride(hs) * sizeof(bf16);
}
constexpr size_t dq_smem(Tiles t, int hs) {
    return (size_t)(2 * 16 * t.mt * t.warps + 2 * t.stages * t.inner) * smem_stride(hs) *
           sizeof(bf16);
}
constexpr size_t dkdv_smem(Tiles t, int hs) {
    return (size_t)(2 * 16 * t.mt * t.warps + 2 * t.stages * t.inner) * smem_stride(hs) *
               sizeof(bf16) +
           2 * t.stages * t.inner * sizeof(float);
}

// The shapes per architecture. The tuned shapes above are sm_90's. Elsewhere a shape keeps its
// tiles and its min_blocks is lowered to the blocks the SM can hold (shared memory, threads): a
// register cap for blocks that cannot be resident costs registers for nothing. Where ptxas
// still spills at that cap, arch_*_tiles change the shape; those shapes are chosen to compile
// without spills (`make arch-check`), not measured.
// The launchers take kCudaArch's shapes (arch.cuh: the architecture being compiled), unless a
// test build asks for another's (make FLASH_TILES_ARCH=XX): the shapes are plain mma.sync code
// that runs on any GPU from sm_80, so one GPU can check every architecture's shapes.
#ifdef LLMC_FLASH_TILES_ARCH
constexpr int kTilesArch = LLMC_FLASH_TILES_ARCH;
#else
constexpr int kTilesArch = kCudaArch;
#endif
constexpr Tiles fit_to_sm(Tiles t, size_t smem) {
    const int fit = blocks_that_fit(kTilesArch, 32 * t.warps, (long long)smem);
    if (fit < t.min_blocks) t.min_blocks = fit < 1 ? 1 : fit;
    return t;
}

// Blackwell (sm_100, sm_120): ptxas spills the forward's accumulators of 64-key tiles at sm_90's
// register caps, and above HS=64 those of 32 rows per warp even at 255 registers: 32-key tiles,
// and above HS=64 8 warps of 16 rows (the same 128 rows per block).
constexpr Tiles arch_forward_tiles(int v, int hs) {
    Tiles t = tuned_forward_tiles(v, hs);
    if (kTilesArch >= 100) {
        if (hs > 64) return Tiles{8, 1, 32, 1, false};
        t.inner = 32;
    }
    return t;
}
constexpr Tiles arch_dq_tiles(int v, int hs) { return tuned_dq_tiles(v, hs); }
// sm_80 and sm_100: the default dK/dV shape (K and V in registers) spills at 3 blocks per SM.
constexpr Tiles arch_dkdv_tiles(int v, int hs) {
    Tiles t = tuned_dkdv_tiles(v, hs);
    if ((kTilesArch == 80 || kTilesArch >= 100) && hs <= 64 && v == 0) t.min_blocks = 2;
    return t;
}

constexpr Tiles forward_tiles(int v, int hs) {
    return fit_to_sm(arch_forward_tiles(v, hs), forward_smem(arch_forward_tiles(v, hs), hs));
}
constexpr Tiles dq_tiles(int v, int hs) {
    return fit_to_sm(arch_dq_tiles(v, hs), dq_smem(arch_dq_tiles(v, hs), hs));
}
constexpr Tiles dkdv_tiles(int v, int hs) {
    return fit_to_sm(arch_dkdv_tiles(v, hs), dkdv_smem(arch_dkdv_tiles(v, hs), hs));
}

// A variant's name, from its shape at HS=64 (above, every variant is the same shape).
const char* variant_name(FlashPass pass, int v) {
    static char names[kForwardVariants + kDqVariants + kDkdvVariants][80];
    const bool kv = pass == FlashPass::kDkdv;  // the warps own keys, the inner tiles are queries
    const int first = pass == FlashPass::kForward ? 0
                      : pass == FlashPass::kDq    ? kForwardVariants
                                                  : kForwardVariants + kDqVariants;
    char* name = names[first + v];
    if (name[0] == '\0') {
        const Tiles t = pass == FlashPass::kForward ? forward_tiles(v, 64)
                        : pass == FlashPass::kDq    ? dq_tiles(v, 64)
                                                    : dkdv_tiles(v, 64);
        std::snprintf(name, sizeof(names[0]), "%dw x%d %s, %d %s, %d/SM%s%s", t.warps, 16 * t.mt,
                      kv ? "keys" : "rows", t.inner, kv ? "q" : "keys", t.min_blocks,
                      t.a_in_regs ? "" : (kv ? ", KV smem" : ", Q smem"),
                      t.stages == 3 ? ", 3 stages" : "");
    }
    return name;
}

// Above 48 KiB of dynamic shared memory a kernel must opt in. Done once per kernel (a static
// initializer), so launches inside CUDA graph capture make no attribute calls.
template <typename Kernel>
bool set_smem(Kernel kernel, size_t bytes) {
    LLMC_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return true;
}

template <int HS, int V>
void forward_hs(const Context& ctx, bf16* out, float* lse, const bf16* qkv, int B, int T, int NH) {
    constexpr Tiles t = forward_tiles(V, HS);
    constexpr int BR = 16 * t.mt * t.warps, BC = t.inner;
    constexpr size_t smem = forward_smem(t, HS);
    static_assert(smem <= max_smem_per_block(kCudaArch), "the tiles exceed the SM's shared memory");
    static_assert(BR * kStagedLd<HS> * sizeof(float) <= smem,
                  "the epilogue stages O as float in the kernel's shared memory");
    auto* const tile_in_x = flash_attention_forward_kernel<HS, t.warps, t.mt, BC, t.min_blocks,
                                                           t.a_in_regs, t.stages, false>;
    auto* const across = flash_attention_forward_kernel<HS, t.warps, t.mt, BC, t.min_blocks,
                                                        t.a_in_regs, t.stages, true>;
    static const bool smem_set = set_smem(tile_in_x, smem) && set_smem(across, smem);
    (void)smem_set;
    const float scale_log2 = kLog2e / sqrtf((float)HS);
    const BlockOrder o = block_order(ctx, B * NH, (T + BR - 1) / BR, t.min_blocks);
    (o.across ? across : tile_in_x)<<<o.grid, t.warps * 32, smem, ctx.stream>>>(out, lse, qkv, T,
                                                                                NH, scale_log2);
    LLMC_CUDA_CHECK_LAST();
}

// Both backward passes return the bias partial rows they write: B * (blocks along T).
template <int HS, int V>
int backward_dq_hs(const Context& ctx, bf16* dqkv, float* D, const bf16* dout, const bf16* qkv,
                   const bf16* out, const float* lse, float* bias_part, int B, int T, int NH) {
    constexpr Tiles t = dq_tiles(V, HS);
    static_assert(t.a_in_regs, "the dQ kernel keeps Q and dO in registers");
    constexpr int BR = 16 * t.mt * t.warps, BC = t.inner;
    static_assert(BR >= kBiasMinRows, "bias partial rows are sized for blocks of >= 64 rows");
    constexpr size_t smem = dq_smem(t, HS);
    static_assert(smem <= max_smem_per_block(kCudaArch), "the tiles exceed the SM's shared memory");
    static_assert(BR * kStagedLd<HS> * sizeof(float) <= smem,
                  "the epilogue stages dq as float in the kernel's shared memory");
    auto* const tile_in_x =
        flash_attention_backward_dq_kernel<HS, t.warps, t.mt, BC, t.min_blocks, t.stages, false>;
    auto* const across =
        flash_attention_backward_dq_kernel<HS, t.warps, t.mt, BC, t.min_blocks, t.stages, true>;
    static const bool smem_set = set_smem(tile_in_x, smem) && set_smem(across, smem);
    (void)smem_set;
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = kLog2e * scale;
    const int blocks_t = (T + BR - 1) / BR;
    const BlockOrder o = block_order(ctx, B * NH, blocks_t, t.min_blocks);
    (o.across ? across : tile_in_x)<<<o.grid, t.warps * 32, smem, ctx.stream>>>(
        dqkv, D, qkv, dout, out, lse, bias_part, T, NH, scale, scale_log2);
    LLMC_CUDA_CHECK_LAST();
    return B * blocks_t;
}

template <int HS, int V>
int backward_dkdv_hs(const Context& ctx, bf16* dqkv, const float* D, const bf16* dout,
                     const bf16* qkv, const float* lse, float* bias_part, int B, int T, int NH) {
    constexpr Tiles t = dkdv_tiles(V, HS);
    constexpr int BC = 16 * t.mt * t.warps, BR = t.inner;
    static_assert(BC >= kBiasMinRows, "bias partial rows are sized for blocks of >= 64 keys");
    constexpr size_t smem = dkdv_smem(t, HS);
    static_assert(smem <= max_smem_per_block(kCudaArch), "the tiles exceed the SM's shared memory");
    static_assert(2 * BC * kStagedLd<HS> * sizeof(float) <= smem,
                  "the epilogue stages dk and dv as float in the kernel's shared memory");
    auto* const tile_in_x =
        flash_attention_backward_dkdv_kernel<HS, t.warps, t.mt, BR, t.min_blocks, t.a_in_regs,
                                             t.stages, false>;
    auto* const across = flash_attention_backward_dkdv_kernel<HS, t.warps, t.mt, BR, t.min_blocks,
                                                              t.a_in_regs, t.stages, true>;
    static const bool smem_set = set_smem(tile_in_x, smem) && set_smem(across, smem);
    (void)smem_set;
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = kLog2e * scale;
    const int blocks_t = (T + BC - 1) / BC;
    const BlockOrder o = block_order(ctx, B * NH, blocks_t, t.min_blocks);
    (o.across ? across : tile_in_x)<<<o.grid, t.warps * 32, smem, ctx.stream>>>(
        dqkv, qkv, dout, lse, D, bias_part, T, NH, scale, scale_log2);
    LLMC_CUDA_CHECK_LAST();
    return B * blocks_t;
}

// Calls f(std::integral_constant<int, V>{}) for V = v in [0, N).
template <int N, typename F>
void with_variant(int v, F f) {
    if constexpr (N > 0) {
        if (v == N - 1) return f(std::integral_constant<int, N - 1>{});
        with_variant<N - 1>(v, f);
    }
}

void check_args(const char* op, int B, int T, int NH, int HS, const void* const* ptrs, int n) {
    LLMC_CHECK(B > 0 && T > 0 && NH > 0, "%s: B, T and NH must be positive (got %d, %d, %d).", op,
               B, T, NH);
    LLMC_CHECK(HS > 0 && HS % 16 == 0 && HS <= 128,
               "%s: the head size C/NH = %d is not supported; flash attention needs a multiple "
               "of 16 no larger than 128.",
               op, HS);
    LLMC_CHECK((long long)B * NH * T < (1LL << 31) && (long long)T * 3 * NH * HS < (1LL << 31),
               "%s: B*NH*T and T*3C must fit in an int (B=%d T=%d NH=%d HS=%d).", op, B, T, NH, HS);
    for (int i = 0; i < n; i++) {
        LLMC_CHECK(ptrs[i] != nullptr && reinterpret_cast<uintptr_t>(ptrs[i]) % 16 == 0,
                   "%s: every buffer must be a non-null 16-byte aligned pointer (argument %d).", op,
                   i);
    }
}

// Calls f(std::integral_constant<int, HS>{}) for the supported head sizes (check_args has
// already refused the others).
template <typename F>
void with_head_size(const char* op, int HS, F f) {
    switch (HS) {
        case 16:
            return f(std::integral_constant<int, 16>{});
        case 32:
            return f(std::integral_constant<int, 32>{});
        case 48:
            return f(std::integral_constant<int, 48>{});
        case 64:
            return f(std::integral_constant<int, 64>{});
        case 80:
            return f(std::integral_constant<int, 80>{});
        case 96:
            return f(std::integral_constant<int, 96>{});
        case 112:
            return f(std::integral_constant<int, 112>{});
        case 128:
            return f(std::integral_constant<int, 128>{});
        default:
            LLMC_FAIL("%s: unreachable head size %d.", op, HS);
    }
}

// D, then the bias partials of the dq pass (rows_max, C) and of the dk/dv pass (rows_max, 2C).
size_t aligned_bytes(size_t bytes) {
    return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
}
size_t bias_part_rows_max(int B, int T) {
    return (size_t)B * ((T + kBiasMinRows - 1) / kBiasMinRows);
}

}  // namespace

size_t flash_attention_scratch_bytes(int B, int T, int NH, int HS) {
    const size_t mma =
        aligned_bytes((size_t)B * NH * T * sizeof(float)) +
        aligned_bytes(bias_part_rows_max(B, T) * 3 * (size_t)NH * HS * sizeof(float));
    return std::max(mma, flash_attention_sm90_scratch_bytes(B, T, NH, HS));
}

int flash_attention_variants(FlashPass pass, FlashPath path) {
    LLMC_CHECK(path != FlashPath::kAuto, "flash_attention_variants: name a path, not kAuto.");
    if (path == FlashPath::kSm90 || path == FlashPath::kSm90Fused) {
        if (pass == FlashPass::kForward) return flash_attention_sm90_forward_variants();
        return path == FlashPath::kSm90 ? flash_attention_sm90_backward_variants()
                                        : kSm90FusedVariants;
    }
    switch (pass) {
        case FlashPass::kForward:
            return kForwardVariants;
        case FlashPass::kDq:
            return kDqVariants;
        default:
            return kDkdvVariants;
    }
}

const char* flash_attention_variant_name(FlashPass pass, int variant, FlashPath path) {
    LLMC_CHECK(variant >= 0 && variant < flash_attention_variants(pass, path),
               "flash_attention_variant_name: no variant %d.", variant);
    if (path == FlashPath::kSm90 || path == FlashPath::kSm90Fused) {
        if (pass == FlashPass::kForward) return flash_attention_sm90_forward_variant_name(variant);
        if (path == FlashPath::kSm90Fused) {
            return "fused: dq, dk and dv in one kernel, dq added into a float accumulator in a "
                   "fixed order; P^T and dS^T as register operands of dv and dk, two K and V "
                   "buffers";
        }
        return flash_attention_sm90_backward_variant_name(variant);
    }
    return variant_name(pass, variant);
}

void flash_attention_forward(const Context& ctx, bf16* out, float* lse, const bf16* qkv, int B,
                             int T, int NH, int HS, int variant, FlashPath path) {
    NvtxRange range("flash_attention_forward");
    const void* ptrs[] = {out, lse, qkv};
    check_args("flash_attention_forward", B, T, NH, HS, ptrs, 3);
    LLMC_CHECK(path != FlashPath::kAuto || variant == 0,
               "flash_attention_forward: variant %d needs a named path.", variant);
    if (path == FlashPath::kSm90 || path == FlashPath::kSm90Fused ||
        (path == FlashPath::kAuto && flash_attention_sm90_available(ctx, HS))) {
        flash_attention_sm90_forward(ctx, out, lse, qkv, B, T, NH, HS, variant);
        return;
    }
    LLMC_CHECK(variant >= 0 && variant < kForwardVariants,
               "flash_attention_forward: no variant %d.", variant);
    with_head_size("flash_attention_forward", HS, [&](auto hs) {
        with_variant<kForwardVariants>(variant, [&](auto v) {
            forward_hs<decltype(hs)::value, decltype(v)::value>(ctx, out, lse, qkv, B, T, NH);
        });
    });
}

bool flash_attention_fused_backward_chosen(const Context& ctx, int B, int T, int NH, int HS) {
    if (ctx.flash_fused_backward == 0 || !flash_attention_sm90_backward_available(ctx, HS)) {
        return false;
    }
    const long long tiles = (long long)B * NH * ((T + 127) / 128);
    return ctx.flash_fused_backward == 2 ||
           tiles >= (long long)kFusedMinTilesPerSm * ctx_num_sms(ctx);
}

bool flash_attention_backward_row_stats(const Context& ctx, void* scratch, int B, int T, int NH,
                                        int HS, float** lse2, float** d) {
    if (T % 64 != 0 || !flash_attention_fused_backward_chosen(ctx, B, T, NH, HS)) return false;
    flash_attention_sm90_row_stats(scratch, B, T, NH, HS, lse2, d);
    return true;
}

// dQ first: its kernel also writes D, which the dK/dV kernel reads.
void flash_attention_backward(const Context& ctx, bf16* dqkv, void* scratch, const bf16* dout,
                              const bf16* qkv, const bf16* out, const float* lse, int B, int T,
                              int NH, int HS, int dq_variant, int dkdv_variant, bf16* dbias,
                              FlashPath path, bool accumulate_dbias, bool row_stats_given) {
    NvtxRange range("flash_attention_backward");
    const void* ptrs[] = {dqkv, scratch, dout, qkv, out, lse};
    check_args("flash_attention_backward", B, T, NH, HS, ptrs, 6);
    LLMC_CHECK(path != FlashPath::kAuto || (dq_variant == 0 && dkdv_variant == 0),
               "flash_attention_backward: variants %d / %d need a named path.", dq_variant,
               dkdv_variant);
    const int C = NH * HS;
    if (path == FlashPath::kSm90 || path == FlashPath::kSm90Fused ||
        (path == FlashPath::kAuto && flash_attention_sm90_backward_available(ctx, HS))) {
        const bool fused =
            path == FlashPath::kSm90Fused ||
            (path == FlashPath::kAuto && flash_attention_fused_backward_chosen(ctx, B, T, NH, HS));
        LLMC_CHECK(!fused || (dq_variant == 0 && dkdv_variant < kSm90FusedVariants),
                   "flash_attention_backward: the fused backward's variant is the dk/dv one "
                   "(0 or 1; dq 0), not %d / %d.",
                   dq_variant, dkdv_variant);
        const BiasPartials parts =
            flash_attention_sm90_backward(ctx, dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS,
                                          dbias != nullptr, dq_variant, dkdv_variant,
                                          (fused ? kBackwardFused : kBackwardDq | kBackwardDkdv) |
                                              (row_stats_given ? kBackwardStatsGiven : 0u));
        if (dbias != nullptr) {
            qkv_bias_reduce_kernel<<<(3 * C + 31) / 32, dim3(32, kBiasGroups), 0, ctx.stream>>>(
                dbias, parts.q, parts.rows_q, parts.kv, parts.rows_kv, C, accumulate_dbias);
            LLMC_CUDA_CHECK_LAST();
        }
        return;
    }
    LLMC_CHECK(!row_stats_given,
               "flash_attention_backward: given row statistics need the fused Hopper backward");
    LLMC_CHECK(dq_variant >= 0 && dq_variant < kDqVariants && dkdv_variant >= 0 &&
                   dkdv_variant < kDkdvVariants,
               "flash_attention_backward: no variant %d / %d.", dq_variant, dkdv_variant);
    float* D = static_cast<float*>(scratch);
    float* part_q = nullptr;
    float* part_kv = nullptr;
    if (dbias != nullptr) {
        part_q = reinterpret_cast<float*>(static_cast<unsigned char*>(scratch) +
                                          aligned_bytes((size_t)B * NH * T * sizeof(float)));
        part_kv = part_q + bias_part_rows_max(B, T) * C;
    }
    int rows_q = 0, rows_kv = 0;  // partial rows written: B * (blocks along T) of each pass
    with_head_size("flash_attention_backward", HS, [&](auto hs) {
        constexpr int kHS = decltype(hs)::value;
        with_variant<kDqVariants>(dq_variant, [&](auto v) {
            rows_q = backward_dq_hs<kHS, decltype(v)::value>(ctx, dqkv, D, dout, qkv, out, lse,
                                                             part_q, B, T, NH);
        });
        with_variant<kDkdvVariants>(dkdv_variant, [&](auto v) {
            rows_kv = backward_dkdv_hs<kHS, decltype(v)::value>(ctx, dqkv, D, dout, qkv, lse,
                                                                part_kv, B, T, NH);
        });
    });
    if (dbias != nullptr) {
        qkv_bias_reduce_kernel<<<(3 * C + 31) / 32, dim3(32, kBiasGroups), 0, ctx.stream>>>(
            dbias, part_q, rows_q, part_kv, rows_kv, C, accumulate_dbias);
        LLMC_CUDA_CHECK_LAST();
    }
}

}  // namespace llmc
