// launch.cuh: how our kernels are launched, with programmatic dependent launch (PDL) when the
// context asks for it (ctx.pdl, LLMC_PDL=1; Hopper and later).
//
// launch_kernel(ctx, stream, kernel, grid, block, smem, args...) is kernel<<<grid, block, smem,
// stream>>>(args...), checked; with ctx.pdl the launch carries
// cudaLaunchAttributeProgrammaticStreamSerialization, so the kernel's blocks may be scheduled
// before the previous kernel on the stream has finished (inside a CUDA graph: a programmatic
// edge). Every kernel launched this way begins with pdl_wait() (griddepcontrol.wait: returns once
// the previous grid has finished and its memory is visible), before any load or store, so it
// never reads an input early or overwrites what its predecessor still reads; then
// pdl_launch_dependents() lets the next PDL kernel be scheduled as this one's blocks retire. What
// overlaps is the launch and block scheduling, not the work. Without the attribute both are
// no-ops.
#pragma once
#include <utility>

#include "context.cuh"

namespace llmc {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <typename... Params, typename... Args>
void launch_kernel(const Context& ctx, cudaStream_t stream, void (*kernel)(Params...), dim3 grid,
                   dim3 block, size_t smem, Args&&... args) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = ctx.pdl ? attr : nullptr;
    config.numAttrs = ctx.pdl ? 1 : 0;
    LLMC_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
    LLMC_CUDA_CHECK_LAST();
}

}  // namespace llmc
