// chunk_map.h: some elements of a tensor-major flat buffer, picked as one equal chunk of every
// equal slice of each tensor: the elements an update or a norm over part of the parameters
// reads (ZeRO-1's shard of a rank, which llmc/shard_map.h builds). Each tensor k is `slice[k]`-
// element slices from offset[k]; chunk `part` of each slice is taken; the picked elements,
// concatenated in buffer order, are the local numbering:
//   local index j in tensor k:  l = (j - local_offset[k]) / chunk[k],  w = the remainder,
//   global index = offset[k] + l * slice[k] + part * chunk[k] + w.
// A plain struct of at most kChunkMaxTensors entries: it goes to kernels by value.
#pragma once
#include <cstddef>

#if defined(__CUDACC__)
#define LLMC_HOST_DEVICE __host__ __device__
#else
#define LLMC_HOST_DEVICE
#endif

namespace llmc {

constexpr int kChunkMaxTensors = 16;

struct ChunkMap {
    int count = 0;                              // tensors
    int part = 0;                               // which chunk of each slice is taken
    size_t offset[kChunkMaxTensors];            // global element offset of the tensor
    size_t slice[kChunkMaxTensors];             // elements per slice
    size_t chunk[kChunkMaxTensors];             // elements taken from each slice
    size_t local_offset[kChunkMaxTensors + 1];  // [count] = local total
    int decayed[kChunkMaxTensors];              // AdamW's weight decay applies to the tensor

    LLMC_HOST_DEVICE size_t local_total() const { return local_offset[count]; }
    // The tensor of local index j: the last whose local offset is <= j (unrolled: constant
    // indices keep the table in a kernel's parameter bank).
    LLMC_HOST_DEVICE int tensor_of(size_t j) const {
        int k = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
        for (int i = 1; i < kChunkMaxTensors; i++)
            if (i < count && j >= local_offset[i]) k = i;
        return k;
    }
    LLMC_HOST_DEVICE size_t global_index(int k, size_t j) const {
        const size_t in_tensor = j - local_offset[k];
        const size_t l = in_tensor / chunk[k];
        return offset[k] + l * slice[k] + (size_t)part * chunk[k] + (in_tensor - l * chunk[k]);
    }
};

}  // namespace llmc
