// sm90.cuh: Hopper (sm_90a) building blocks of the flash attention kernels and their layout test
// (dev/test/test_wgmma_tiles): TMA tensor maps and tile loads, mbarriers, named barriers, register
// reallocation, wgmma shared-memory descriptors and the wgmma instructions, and the register
// layouts these imply. Written from the PTX ISA and the CUDA driver API reference.
//
// Shared-memory tiles: a tile of R rows by 64*k bf16 columns is k column blocks of R rows x 128
// bytes, each block 1024-byte aligned, written by TMA with the 128-byte swizzle: the 16-byte
// chunk c of row r lies at chunk c ^ (r % 8) of its 128-byte line. The swizzle is a function of
// the shared address bits (bits 4-6 XOR bits 7-9), which wgmma applies the same way to the
// addresses its descriptors generate, so a descriptor whose pattern starts at a 1024-byte
// boundary (base offset 0) reads back exactly what TMA wrote.
//   K-major operand (the reduction dimension k along the 128-byte rows: Q and K in Q K^T): 8-row
//   core groups 1024 bytes apart (the stride byte offset), the leading byte offset unused; the
//   k-th 16-column slice starts 32*(k % 4) bytes into the row of column block k / 4.
//   MN-major operand (k along rows: V in P V, the wgmma transpose bit set): 8-row (k) groups
//   1024 bytes apart (stride byte offset), 64-column (n) blocks R*128 bytes apart (leading byte
//   offset); the k-th 16-row slice starts at row 16k.
// Register layouts of m64nNk16 (thread t of the warpgroup's 128, element e): the fp32
// accumulator and the bf16 A fragment (8 elements in 4 registers, low half first) both hold
//   row = 16*(t/32) + 8*((e/2) % 2) + (t%32)/4,   col = 8*(e/4) + 2*(t%4) + e%2.
// So the accumulator elements 8j..8j+7 of a score tile S (columns 16j..16j+15) rounded to bf16
// in pairs are the A fragment of P's k-slice j: S feeds P V without a shuffle.
#pragma once
#include <cuda.h>  // CUtensorMap and its enums (types only; no libcuda link, see make_row_tensor_map)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llmc {

// Host: a TMA descriptor of bf16 rows: element (b, t, head, c) at
// base + (((b * T + t) * heads + head) * cols + c), viewed as the 4D tensor (cols, heads, T, B)
// with boxes of 64 columns x 1 head x box_rows rows x 1 batch, 128-byte swizzled. Rows t >= T of
// a box are zero-filled: they never read the next batch's rows. cols a multiple of 64, base
// 16-byte aligned. The encoder comes from the driver through cudaGetDriverEntryPointByVersion.
CUtensorMap make_row_tensor_map(const void* base, int B, int T, int heads, int cols, int box_rows);

// Host: whether this binary holds the sm_90a image of `kernel` (builds for other GPUs do not;
// a failed query is cleared and reads as no).
template <typename Kernel>
bool has_sm90a_image(Kernel kernel) {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return attr.binaryVersion == 90;
}

namespace sm90 {

// Bytes of one 128-byte-swizzled column block row, and of its repeating 8-row pattern.
constexpr int kRowBytes = 128;
constexpr int kSwizzleAtom = 1024;

// Column block of 64 bf16 values (128 bytes) and the swizzled byte offset of element (r, c)
// in a tile of `rows` rows: what TMA writes and wgmma reads (the test checks it).
__host__ __device__ constexpr uint32_t swizzled_offset(int rows, int r, int c) {
    return (uint32_t)((c / 64) * rows * kRowBytes + r * kRowBytes +
                      ((((c % 64) / 8) ^ (r % 8)) * 16) + (c % 8) * 2);
}

// Row and column of accumulator (or A fragment) element e of warpgroup thread t (file comment).
__host__ __device__ constexpr int frag_row(int t, int e) {
    return 16 * (t / 32) + 8 * ((e / 2) % 2) + (t % 32) / 4;
}
__host__ __device__ constexpr int frag_col(int t, int e) {
    return 8 * (e / 4) + 2 * (t % 4) + e % 2;
}

}  // namespace sm90

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Only sm_90a device code has the instructions below; every caller is guarded the same way.
#define LLMC_SM90A_DEVICE 1

namespace sm90 {

// A wait that outlives this is a deadlock (a lost TMA or a barrier miscount): the kernel stops
// at a breakpoint, which without a debugger fails the launch ("unspecified launch failure")
// instead of hanging the process. Not __trap(): a trap anywhere in a warpgroup's branch makes
// ptxas allocate that branch's registers by the kernel's launch bound (168 at 384 threads)
// instead of its setmaxnreg budget, and the consumers spill.
constexpr uint64_t kWaitTimeoutNs = 10ull * 1000 * 1000 * 1000;
__device__ __forceinline__ void wait_timed_out() { __brkpt(); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ uint64_t global_timer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// ---- mbarriers (shared-memory 64-bit barriers with a transaction count) -----------------------

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes the initialized barriers visible to the async proxy (TMA) before any thread uses them.
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// One arrival that also expects `bytes` of TMA transactions in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    return done != 0;
}
// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so a
// wait for parity 1 passes at once: producers wait on "empty" barriers with the parity flipped.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    if (mbar_try_wait(bar, parity)) return;
    const uint64_t start = global_timer_ns();
    while (!mbar_try_wait(bar, parity)) {
        if (global_timer_ns() - start > kWaitTimeoutNs) wait_timed_out();
    }
}

// mbar_wait for code that goes on to warp-collective instructions (wgmma, bar.sync, shuffles):
// the lanes leave the polling loop independently, __syncwarp reconverges them.
__device__ __forceinline__ void mbar_wait_warp(uint32_t bar, uint32_t parity) {
    mbar_wait(bar, parity);
    __syncwarp();
}

// ---- TMA ----------------------------------------------------------------------------------------

__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// Box at coordinates (c0, c1, c2, c3) of `map` -> shared memory at dst; completes `bytes` (the
// whole box, zero-filled parts included) of transactions on barrier `bar`.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}

// Rows [row0, row0 + ROWS) of head `head` of batch b, all COLS columns, from a map of
// make_row_tensor_map (box 64 x ROWS) -> a tile of COLS / 64 column blocks at dst.
template <int COLS, int ROWS>
__device__ __forceinline__ void tma_load_tile(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                              int head, int row0, int b) {
#pragma unroll
    for (int cb = 0; cb < COLS / 64; cb++) {
        tma_load_4d(dst + cb * ROWS * kRowBytes, map, bar, cb * 64, head, row0, b);
    }
}

// ---- Bulk copies shared -> global, and flags between CTAs ---------------------------------------

// Orders this thread's earlier generic-proxy shared-memory writes before later async-proxy
// (bulk copy, wgmma) reads of them; each writing thread fences before the synchronization.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// The same for global memory: an async-proxy operation issued after it sees what this thread
// observed (a flag acquired) through the generic proxy.
__device__ __forceinline__ void fence_proxy_async_global() {
    asm volatile("fence.proxy.async.global;" ::: "memory");
}
// bytes (a multiple of 16, both addresses 16-byte aligned) shared -> global: a plain copy, or an
// element-wise float add into what global holds. Both join the thread's current bulk group.
__device__ __forceinline__ void bulk_store(void* dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
    asm volatile(
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst),
        "r"(src), "r"(bytes)
        : "memory");
}
__device__ __forceinline__ void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Shared memory at src -> the box at coordinates (c0, c1, c2, c3) of `map` (the inverse of
// tma_load_4d; parts of the box outside the tensor are not written). Joins the thread's current
// bulk group; the writers of src fence_proxy_async_shared before the synchronization that
// precedes it.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1,
                                             int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
            reinterpret_cast<uint64_t>(map)),
        "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}
// Waits until the thread's bulk groups have read their shared memory (it may be written again).
__device__ __forceinline__ void bulk_wait_read_all() {
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
// Waits until the thread's bulk groups have completed, their global writes included (completion
// is followed by an implicit async-to-generic proxy fence: a release after it publishes them).
__device__ __forceinline__ void bulk_wait_all() {
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
// Spins until *flag == value (an acquire at GPU scope); traps after kWaitTimeoutNs.
__device__ __forceinline__ void flag_wait_equal(const int* flag, int value) {
    const uint64_t start = global_timer_ns();
    while (true) {
        int v;
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
        if (v == value) return;
        if (global_timer_ns() - start > kWaitTimeoutNs) wait_timed_out();
    }
}
// *flag += 1 with release semantics at GPU scope.
__device__ __forceinline__ void flag_release_increment(int* flag) {
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(flag) : "memory");
}

// ---- Named barriers and register reallocation ---------------------------------------------------

// bar.sync waits until `threads` threads (its own included) have arrived at barrier `id`;
// bar.arrive counts this thread's arrival and goes on. Id 0 is __syncthreads'.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Per-thread register budget of the executing warpgroup (every thread of it executes this).
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}

// ---- wgmma --------------------------------------------------------------------------------------

// Shared-memory operand descriptor, 128-byte swizzle, base offset 0 (the swizzle pattern starts
// at a 1024-byte boundary: tiles are 1024-byte aligned and slices move the start by multiples
// of 32 bytes inside a row, or by whole 8-row groups).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t leading_bytes,
                                               uint32_t stride_bytes) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((leading_bytes & 0x3FFFF) >> 4) << 16) |
           ((uint64_t)((stride_bytes & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}
// K-major operand: rows [row0, row0 + 64 or N) of a tile of `rows` rows, k-slice `ks` (columns
// 16 ks .. 16 ks + 15). The leading byte offset is unused in this mode (encoded as 1).
__device__ __forceinline__ uint64_t kmajor_desc(uint32_t tile, int rows, int row0, int ks) {
    return sw128_desc(tile + (ks / 4) * rows * kRowBytes + row0 * kRowBytes + (ks % 4) * 32, 16,
                      kSwizzleAtom);
}
// MN-major operand (transposed): k rows [16 ks, 16 ks + 16) of a tile of `rows` rows, all of its
// columns (64-column blocks rows * 128 bytes apart).
__device__ __forceinline__ uint64_t mnmajor_desc(uint32_t tile, int rows, int ks) {
    return sw128_desc(tile + 16 * ks * kRowBytes, rows * kRowBytes, kSwizzleAtom);
}

// Orders this warpgroup's register accesses before the wgmma ops that follow (needed before the
// first wgmma and whenever accumulator or A-fragment registers were touched in between).
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most N committed groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// The compiler sees wgmma results as written when the instruction issues; this pins every
// register of `r` after the preceding wgmma_wait (and before a following issue), so no read or
// write of them moves across.
template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_operands(uint32_t (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(r[i])::"memory");
}

// d (64 x N fp32, N/2 registers) = A B + (scale_d ? d : 0), bf16 inputs; A and B from shared
// memory (_ss) or A from 4 registers (_rs, the layout of the file comment). TRANS_* = 1 for an
// MN-major operand.
template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                   int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t desc_a,
                                                    uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

// m64n256k16 (128 accumulator registers a thread): the two-warpgroup 128 x 256 tiles of the plain
// GEMM (matmul_sm90_plain.cu).
template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n256k16_ss(float (&d)[128], uint64_t desc_a,
                                                    uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, "
        "%88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, "
        "%104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, "
        "%120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, %131, %132;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
          "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
          "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
          "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
          "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
          "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
          "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
          "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_B>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t* a,
                                                   uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B));
}

template <int TRANS_B>
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], const uint32_t* a,
                                                    uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B));
}

template <int N, int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                         int scale_d) {
    static_assert(N == 64 || N == 128, "wgmma_ss: N is 64 or 128");
    if constexpr (N == 64) {
        wgmma_m64n64k16_ss<TRANS_A, TRANS_B>(d, desc_a, desc_b, scale_d);
    } else {
        wgmma_m64n128k16_ss<TRANS_A, TRANS_B>(d, desc_a, desc_b, scale_d);
    }
}

template <int N, int TRANS_B>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t* a, uint64_t desc_b,
                                         int scale_d) {
    static_assert(N == 64 || N == 128, "wgmma_rs: N is 64 or 128");
    if constexpr (N == 64) {
        wgmma_m64n64k16_rs<TRANS_B>(d, a, desc_b, scale_d);
    } else {
        wgmma_m64n128k16_rs<TRANS_B>(d, a, desc_b, scale_d);
    }
}

// ---- Tile GEMMs (one warpgroup) -----------------------------------------------------------------

// d (64 x N) = A B^T + (accumulate ? d : 0), K = 16 * KSTEPS: A rows [a_row0, a_row0 + 64) of
// a K-major tile of a_rows rows, B the first N rows of a K-major tile of b_rows rows (the
// "Q K^T" pattern). Issues KSTEPS wgmmas; the caller fences, commits and waits.
template <int N, int KSTEPS>
__device__ __forceinline__ void gemm_ss_kmajor(float (&d)[N / 2], uint32_t a_tile, int a_rows,
                                               int a_row0, uint32_t b_tile, int b_rows,
                                               bool accumulate) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ks++) {
        wgmma_ss<N, 0, 0>(d, kmajor_desc(a_tile, a_rows, a_row0, ks),
                          kmajor_desc(b_tile, b_rows, 0, ks), accumulate || ks > 0);
    }
}

// d (64 x N) = A B + (accumulate ? d : 0), K = 16 * KSTEPS: A in registers (4 per k-step, the
// layout of the file comment), B the first 16 * KSTEPS rows and all N columns of an MN-major
// tile of b_rows rows (the "P V" pattern).
template <int N, int KSTEPS>
__device__ __forceinline__ void gemm_rs_mnmajor(float (&d)[N / 2], const uint32_t (&a)[4 * KSTEPS],
                                                uint32_t b_tile, int b_rows, bool accumulate) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ks++) {
        wgmma_rs<N, 1>(d, &a[4 * ks], mnmajor_desc(b_tile, b_rows, ks), accumulate || ks > 0);
    }
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// An accumulator tile (64 x 8R/4 fp32, R registers) rounded to bf16 as the A fragments of the
// next GEMM (64 x the same columns as k): elements 2r, 2r + 1 -> register r.
template <int R>
__device__ __forceinline__ void accumulator_to_a(uint32_t (&a)[R / 2], const float (&d)[R]) {
#pragma unroll
    for (int r = 0; r < R / 2; r++) a[r] = pack_bf16(d[2 * r], d[2 * r + 1]);
}

}  // namespace sm90

#endif  // sm_90a device code

}  // namespace llmc
