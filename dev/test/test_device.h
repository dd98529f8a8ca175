// test_device.h: whether this machine can run a GPU test, decided once at its start.
//
//   skip_if_no_device()  returns when device 0 can run the kernels. Otherwise:
//     - CUDA sees no device and nvidia-smi lists no GPU: prints "SKIP <reason>", exits 77
//       (kSkipExitCode), which scripts/test/run_tests.sh and scripts/test/device_check.sh count as
//       SKIP;
//     - nvidia-smi lists a GPU but CUDA cannot start (a driver older than the toolkit, a
//       container without /dev/nvidia*): prints "FAIL <the CUDA error and what to check>",
//       exits 1, since a machine with a GPU should run the tests;
//     - the GPUs are hidden by CUDA_VISIBLE_DEVICES: SKIP, naming the variable;
//     - device 0 is older than compute capability 8.0: SKIP, naming the minimum.
// Exit 77 is the GNU/automake convention for a skipped test.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

constexpr int kSkipExitCode = 77;

// GPUs that `nvidia-smi -L` lists (lines "GPU 0: ..."); 0 without nvidia-smi.
inline int nvidia_smi_gpu_count() {
    FILE* p = popen("nvidia-smi -L 2>/dev/null", "r");
    if (p == nullptr) return 0;
    int count = 0;
    char line[512];
    while (std::fgets(line, sizeof(line), p) != nullptr) {
        if (std::strncmp(line, "GPU ", 4) == 0) count++;
    }
    pclose(p);
    return count;
}

inline void skip_if_no_device() {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaSuccess && count > 0) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major < 8) {
            std::printf(
                "SKIP GPU 0 (%s) has compute capability %d.%d; the kernels need 8.0 or newer\n",
                prop.name, prop.major, prop.minor);
            std::exit(kSkipExitCode);
        }
        return;
    }
    const char* why = err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0";
    const int listed = nvidia_smi_gpu_count();
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (listed == 0) {
        std::printf("SKIP no CUDA device (%s) and nvidia-smi lists no GPU\n", why);
        std::exit(kSkipExitCode);
    }
    if (visible != nullptr && (err == cudaErrorNoDevice || count == 0)) {
        std::printf("SKIP CUDA_VISIBLE_DEVICES='%s' hides the %d GPU(s) nvidia-smi lists\n",
                    visible, listed);
        std::exit(kSkipExitCode);
    }
    std::printf(
        "FAIL nvidia-smi lists %d GPU(s) but CUDA cannot start (%s): check that the driver "
        "supports CUDA %d.%d (nvidia-smi's \"CUDA Version\" must be at least that) and that "
        "/dev/nvidia* exist (in a container: run it with the GPUs, e.g. docker --gpus all)\n",
        listed, why, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    std::exit(1);
}
