// bench_l2.cu: what L2 delivers to the SMs on this GPU when every SM loads at once, by the
// tensor copy engine (TMA, as the GEMMs load their operands) and by plain loads, against DRAM
// (docs/perf-log.md, "GELU products": a 128 x 128 tile at K = 768 takes ~11 TB/s of operands
// at 700 TFLOP/s).
//
//   build/bf16/dev/bench/bench_l2 [--runs N]
//
// Rows (each the median of N timed launches after 3 warm-ups, events on one stream):
//   TMA boxes, resident: one persistent CTA per SM loads 64-column x 128-row bf16 boxes (16 KiB,
//     128-byte swizzled, the GEMM's operand box) of a rows x 768 matrix by the tensor copy
//     engine into a ring of 4, 8 or 12 stages (64-192 KiB in flight per SM); a consumer warp
//     only waits for each stage and frees it. With a matrix of 12 MiB (8192 rows) every CTA
//     reads the whole matrix over and over from L2; with 768 MiB (524288 rows) every box comes
//     from DRAM once (the same kernel, for scale).
//   LSU loads, resident: every thread of 4 blocks per SM reads 16-byte words of a 12 MiB buffer
//     with ld.global.cg (cached in L2 only; up to 8 in flight a thread), each block walking the
//     whole buffer.
//   copy (cudaMemcpyAsync D2D, 1 GiB): DRAM's read + write rate, as bench_ops measures it.
// GB/s counts the bytes delivered to the SMs (TMA: boxes x 16 KiB; LSU: words x 16 B).
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "check.h"
#include "sm90.cuh"

using namespace llmc;

namespace {

constexpr int kCols = 768, kBoxRows = 128, kBoxCols = 64, kWarmup = 3;
constexpr uint32_t kBoxBytes = kBoxRows * kBoxCols * 2;
constexpr int kBoxesPerCta = 2048;  // boxes each CTA loads per launch
constexpr int kLsuBlocksPerSm = 4, kLsuThreads = 512, kLsuPasses = 16;

// Producer (thread 0) and consumer (warp 1) of a kStages ring of boxes; box i of this CTA is
// (row block, column block) = ((blockIdx.x + i * gridDim.x) % row_blocks, i % 12), so that the
// CTAs in flight read different rows and every box of the matrix is visited.
template <int kStages>
__global__ void __launch_bounds__(64, 1)
    tma_boxes_kernel(const __grid_constant__ CUtensorMap map, int row_blocks, int* sink) {
#ifdef LLMC_SM90A_DEVICE
    using namespace sm90;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t bars = base + kStages * kBoxBytes;
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (kStages + s); };
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; s++) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), 1);
        }
        fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        prefetch_tensor_map(&map);
        for (int i = 0; i < kBoxesPerCta; i++) {
            const int s = i % kStages;
            mbar_wait(empty(s), ((i / kStages) & 1) ^ 1);
            mbar_arrive_expect_tx(full(s), kBoxBytes);
            const int rb = (int)((blockIdx.x + (long long)i * gridDim.x) % row_blocks);
            tma_load_4d(base + s * kBoxBytes, &map, full(s), (i % (kCols / kBoxCols)) * kBoxCols, 0,
                        rb * kBoxRows, 0);
        }
    } else if (threadIdx.x == 32) {
        uint32_t seen = 0;
        for (int i = 0; i < kBoxesPerCta; i++) {
            const int s = i % kStages;
            mbar_wait(full(s), (i / kStages) & 1);
            seen ^= *reinterpret_cast<const volatile uint32_t*>(
                smem_raw + (base - smem_u32(smem_raw)) + s * kBoxBytes);
            mbar_arrive(empty(s));
        }
        if (seen == 0x12345678u) *sink = (int)seen;  // keeps the reads live
    }
#endif
}

// Each block reads the whole buffer kLsuPasses times (16-byte words, L2 only), each pass
// starting at another place so that the blocks in flight read different lines.
__global__ void __launch_bounds__(kLsuThreads)
    lsu_loads_kernel(const uint4* __restrict__ buf, size_t words, int* sink) {
    uint32_t acc = 0;
    for (int p = 0; p < kLsuPasses; p++) {
        const size_t start = ((size_t)(blockIdx.x * kLsuPasses + p) * 4096) % words;
#pragma unroll 8
        for (size_t k = threadIdx.x; k < words; k += kLsuThreads) {
            const size_t w = start + k < words ? start + k : start + k - words;
            uint4 v;
            asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                         : "l"(buf + w));
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
    }
    if (acc == 0x12345678u) *sink = (int)acc;
}

__global__ void fill_kernel(uint32_t* p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        p[i] = (uint32_t)(i * 2654435761u) | 1u;  // odd words: never zero
    }
}

double median_ms(cudaStream_t stream, int runs, const std::function<void()>& op) {
    for (int i = 0; i < kWarmup; i++) op();
    std::vector<cudaEvent_t> ev(2 * runs);
    for (auto& e : ev) LLMC_CUDA_CHECK(cudaEventCreate(&e));
    for (int i = 0; i < runs; i++) {
        LLMC_CUDA_CHECK(cudaEventRecord(ev[2 * i], stream));
        op();
        LLMC_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], stream));
    }
    LLMC_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> ms(runs);
    for (int i = 0; i < runs; i++) {
        LLMC_CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    }
    for (auto& e : ev) cudaEventDestroy(e);
    std::sort(ms.begin(), ms.end());
    return ms[runs / 2];
}

void row(const char* name, double bytes, double ms) {
    std::printf("| %-44s | %10.1f | %9.3f | %9.0f |\n", name, bytes / 1e6, ms,
                bytes / (ms * 1e-3) / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
    int runs = 20;
    for (int i = 1; i < argc; i++) {
        if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) {
            runs = std::atoi(argv[++i]);
        } else {
            std::fprintf(stderr, "usage: %s [--runs N]\n", argv[0]);
            return 2;
        }
    }
    if (runs < 1) {
        std::fprintf(stderr, "error: --runs must be at least 1\n");
        return 2;
    }
    int dev = 0;
    cudaDeviceProp props{};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&props, dev) != cudaSuccess) {
        std::printf("SKIP bench_l2: no CUDA device\n");
        return 77;
    }
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, tma_boxes_kernel<4>) != cudaSuccess ||
        attr.binaryVersion != 90) {
        (void)cudaGetLastError();
        std::printf(
            "SKIP bench_l2: needs an sm_90 GPU and a build for it (GPU_ARCH=sm_90a; this "
            "GPU is sm_%d%d)\n",
            props.major, props.minor);
        return 77;
    }
    cudaStream_t stream;
    LLMC_CUDA_CHECK(cudaStreamCreate(&stream));
    int* sink;
    LLMC_CUDA_CHECK(cudaMalloc(&sink, sizeof(int)));
    const int sms = props.multiProcessorCount;
    std::printf("bench_l2: %s, %d SMs, L2 %d MiB\n", props.name, sms, props.l2CacheSize >> 20);
    std::printf("| %-44s | %10s | %9s | %9s |\n", "op", "MB", "median ms", "GB/s");

    const size_t big_rows = 524288, resident_rows = 8192;
    void* mat;
    LLMC_CUDA_CHECK(cudaMalloc(&mat, big_rows * kCols * 2));
    fill_kernel<<<1024, 256, 0, stream>>>(static_cast<uint32_t*>(mat), big_rows * kCols / 2);
    LLMC_CUDA_CHECK(cudaGetLastError());

    // Three ring depths (16 KiB a stage in flight per SM): a rate that grows with the depth is
    // bound by each load's latency, one that does not by the path from L2.
    auto tma_rows = [&](auto kernel, int stages) {
        const size_t smem = stages * kBoxBytes + 2 * stages * 8 + 1024;
        LLMC_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        for (size_t rows : {resident_rows, big_rows}) {
            const CUtensorMap map = make_row_tensor_map(mat, 1, (int)rows, 1, kCols, kBoxRows);
            const int row_blocks = (int)(rows / kBoxRows);
            const double ms = median_ms(stream, runs, [&] {
                kernel<<<sms, 64, smem, stream>>>(map, row_blocks, sink);
                LLMC_CUDA_CHECK(cudaGetLastError());
            });
            char name[96];
            std::snprintf(name, sizeof(name), "TMA boxes, %d stages, %s (%.0f MiB)", stages,
                          rows == resident_rows ? "resident" : "from DRAM",
                          rows * kCols * 2.0 / (1 << 20));
            row(name, (double)sms * kBoxesPerCta * kBoxBytes, ms);
        }
    };
    tma_rows(tma_boxes_kernel<4>, 4);
    tma_rows(tma_boxes_kernel<8>, 8);
    tma_rows(tma_boxes_kernel<12>, 12);

    const size_t lsu_words = resident_rows * kCols * 2 / 16;
    const double lsu_ms = median_ms(stream, runs, [&] {
        lsu_loads_kernel<<<sms * kLsuBlocksPerSm, kLsuThreads, 0, stream>>>(
            static_cast<const uint4*>(mat), lsu_words, sink);
        LLMC_CUDA_CHECK(cudaGetLastError());
    });
    row("LSU loads (ld.global.cg), resident (12 MiB)",
        (double)sms * kLsuBlocksPerSm * kLsuPasses * lsu_words * 16, lsu_ms);

    const size_t copy_bytes = size_t(1) << 30;
    void *src, *dst;
    LLMC_CUDA_CHECK(cudaMalloc(&src, copy_bytes));
    LLMC_CUDA_CHECK(cudaMalloc(&dst, copy_bytes));
    LLMC_CUDA_CHECK(cudaMemsetAsync(src, 1, copy_bytes, stream));
    const double copy_ms = median_ms(stream, runs, [&] {
        LLMC_CUDA_CHECK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, stream));
    });
    row("copy (cudaMemcpyAsync D2D, 1 GiB; read + write)", 2.0 * copy_bytes, copy_ms);

    cudaFree(src);
    cudaFree(dst);
    cudaFree(mat);
    cudaFree(sink);
    cudaStreamDestroy(stream);
    return 0;
}
