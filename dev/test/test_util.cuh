// test_util.cuh: the helpers every per-op GPU test (dev/test/test_*.cu) shares.
//
//   skip_if_no_device()        (test_device.h) exits 77 with "SKIP <reason>" when this machine
//                              has no GPU to test, fails when it has one that CUDA cannot start
//   Rng                        seeded generator (SplitMix64): the same numbers on every machine
//   fill_uniform / fill_normal host vectors of float from an Rng
//   round_to_floatx(h)         rounds host values to what floatX holds, so the CPU reference
//                              sees exactly the inputs the GPU sees
//   DeviceBuffer<T>            owning cudaMalloc'd array (tests may allocate, launchers may not)
//   upload / download          host float <-> device floatX or float (converting), int as is
//   poison(d)                  fills device memory with 0xFF bytes: NaN for float and bf16, -1
//                              for int, so an element a kernel fails to write shows up
// upload and poison end with a device synchronize: they run on the legacy default stream, which
// ctx.stream (created non-blocking) would not otherwise wait for. download synchronizes first.
//   max_abs(v)                 the largest |value| of a host vector (0 for an empty one)
//   check_close(...)           max abs / rel error and the worst element; counts pass or fail
//   check_within(...)          the same against a bound per element
//   check_bitwise_equal(...)   run-to-run determinism; counts pass or fail
//   test_summary(name)         prints "NAME: N passed, M failed" and returns the exit code
//
// An element passes check_close when |got - ref| <= atol + rtol * |ref| (NaN never passes);
// comparing zero elements fails, as it is almost surely a mistake in the test.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "check.h"
#include "precision.cuh"
#include "test_device.h"

// bf16 keeps 8 significant bits: round-to-nearest is off by at most half an ulp, 2^-8 of the
// value. Test tolerances in the bf16 build are written in terms of this.
constexpr float kBf16RoundingRel = 1.0f / 256.0f;

// SplitMix64: tiny, fast, and identical everywhere (std:: distributions are not).
struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed) : state(seed) {}
    uint64_t next_u64() {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [0, 1) with 24 random bits.
    float uniform() { return (float)(next_u64() >> 40) * (1.0f / 16777216.0f); }
    float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
    // Uniform integer in [0, n).
    int randint(int n) { return (int)((next_u64() >> 33) % (uint64_t)n); }
    // Standard normal (Box-Muller).
    float normal() {
        const double u1 = ((double)(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
        const double u2 = (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0);
        return (float)(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
};

inline void fill_uniform(std::vector<float>& h, Rng& rng, float lo, float hi) {
    for (float& x : h) x = rng.uniform(lo, hi);
}
inline void fill_normal(std::vector<float>& h, Rng& rng, float mean, float stddev) {
    for (float& x : h) x = mean + stddev * rng.normal();
}

// After this, converting h to floatX and back is exact.
inline void round_to_floatx(std::vector<float>& h) {
    for (float& x : h) x = llmc::to_float(llmc::from_float<llmc::floatX>(x));
}

template <typename T>
class DeviceBuffer {
  public:
    explicit DeviceBuffer(size_t count) : count_(count) {
        LLMC_CUDA_CHECK(cudaMalloc(&ptr_, (count > 0 ? count : 1) * sizeof(T)));
    }
    ~DeviceBuffer() { cudaFree(ptr_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    T* get() const { return ptr_; }
    size_t size() const { return count_; }

  private:
    T* ptr_ = nullptr;
    size_t count_ = 0;
};

// Host float -> device T (float or floatX), converting; n elements from h.
template <typename T>
void upload(T* dst, const float* h, size_t n) {
    std::vector<T> tmp(n);
    for (size_t i = 0; i < n; i++) tmp[i] = llmc::from_float<T>(h[i]);
    LLMC_CUDA_CHECK(cudaMemcpy(dst, tmp.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    LLMC_CUDA_CHECK(cudaDeviceSynchronize());
}
template <typename T>
void upload(T* dst, const std::vector<float>& h) {
    upload(dst, h.data(), h.size());
}
inline void upload(int* dst, const std::vector<int>& h) {
    LLMC_CUDA_CHECK(cudaMemcpy(dst, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice));
    LLMC_CUDA_CHECK(cudaDeviceSynchronize());
}

// Device T (float or floatX) -> host float, n elements. Synchronizes the device first, so
// results of work on any stream are complete.
template <typename T>
std::vector<float> download(const T* src, size_t n) {
    LLMC_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> tmp(n);
    LLMC_CUDA_CHECK(cudaMemcpy(tmp.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = llmc::to_float(tmp[i]);
    return h;
}

// Raw bytes of device memory (for bitwise comparisons).
inline std::vector<unsigned char> download_bytes(const void* src, size_t bytes) {
    LLMC_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<unsigned char> h(bytes);
    LLMC_CUDA_CHECK(cudaMemcpy(h.data(), src, bytes, cudaMemcpyDeviceToHost));
    return h;
}

template <typename T>
void poison(T* dst, size_t n) {
    LLMC_CUDA_CHECK(cudaMemset(dst, 0xFF, n * sizeof(T)));
    LLMC_CUDA_CHECK(cudaDeviceSynchronize());
}

// Pass / fail counts of the running test program.
struct TestCounts {
    int passed = 0;
    int failed = 0;
};
inline TestCounts& test_counts() {
    static TestCounts counts;
    return counts;
}
inline bool record_result(bool ok) {
    (ok ? test_counts().passed : test_counts().failed)++;
    return ok;
}

// Compares n values, element i passing when |got - ref| <= tol(i) (NaN never passes); prints one
// line with the worst element (largest error relative to its tolerance), ending with `tol_text`,
// and counts the result.
inline bool check_elements(const char* name, const float* got, const float* ref, size_t n,
                           const std::function<double(size_t)>& tol, const char* tol_text) {
    double max_abs = 0.0, max_rel = 0.0, worst_ratio = -1.0;
    size_t worst = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double diff = std::fabs((double)got[i] - (double)ref[i]);
        const double t = tol(i);
        const double rel = diff / std::fmax(std::fabs((double)ref[i]), 1e-30);
        // A NaN or inf in got or ref makes diff NaN or inf: count it and make it the worst.
        const bool ok = diff <= t;
        const double ratio = ok ? diff / std::fmax(t, 1e-300) : INFINITY;
        if (!ok) bad++;
        if (std::isfinite(diff)) {
            max_abs = std::fmax(max_abs, diff);
            max_rel = std::fmax(max_rel, rel);
        }
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            worst = i;
        }
    }
    const bool ok = bad == 0 && n > 0;
    std::printf("  %-44s n=%-10zu max_abs=%.3e max_rel=%.3e worst[%zu] got=%.8g ref=%.8g %s %s",
                name, n, max_abs, max_rel, worst, n > 0 ? got[worst] : 0.0,
                n > 0 ? ref[worst] : 0.0, tol_text, ok ? "ok" : "FAIL");
    if (bad > 0) std::printf(" (%zu bad)", bad);
    std::printf("\n");
    return record_result(ok);
}

// Element i passes when |got - ref| <= atol + rtol * |ref|.
inline bool check_close(const char* name, const float* got, const float* ref, size_t n, float atol,
                        float rtol) {
    char text[64];
    std::snprintf(text, sizeof(text), "(atol=%.1e rtol=%.1e)", atol, rtol);
    return check_elements(
        name, got, ref, n, [&](size_t i) { return atol + rtol * std::fabs((double)ref[i]); }, text);
}
inline bool check_close(const char* name, const std::vector<float>& got,
                        const std::vector<float>& ref, float atol, float rtol) {
    LLMC_CHECK(got.size() == ref.size(), "%s: sizes differ (%zu vs %zu)", name, got.size(),
               ref.size());
    return check_close(name, got.data(), ref.data(), got.size(), atol, rtol);
}

// Element i passes when |got - ref| <= bound[i]: a bound per element, which the caller derives
// (from the magnitudes a result was summed from, for instance).
inline bool check_within(const char* name, const std::vector<float>& got,
                         const std::vector<float>& ref, const std::vector<double>& bound) {
    LLMC_CHECK(got.size() == ref.size() && ref.size() == bound.size(),
               "%s: sizes differ (%zu, %zu, %zu)", name, got.size(), ref.size(), bound.size());
    return check_elements(
        name, got.data(), ref.data(), got.size(), [&](size_t i) { return bound[i]; },
        "(bound per element)");
}

// True when both byte strings are identical; prints the first differing byte otherwise.
inline bool check_bitwise_equal(const char* name, const std::vector<unsigned char>& a,
                                const std::vector<unsigned char>& b) {
    size_t first = a.size() == b.size() ? a.size() : 0;
    for (size_t i = 0; i < a.size() && i < b.size(); i++) {
        if (a[i] != b[i]) {
            first = i;
            break;
        }
    }
    const bool ok = a.size() == b.size() && first == a.size();
    if (ok) {
        std::printf("  %-44s %zu bytes bitwise identical ok\n", name, a.size());
    } else {
        std::printf("  %-44s FAIL: runs differ (first at byte %zu of %zu)\n", name, first,
                    a.size());
    }
    return record_result(ok);
}

// Prints the summary line and returns main's exit code.
inline int test_summary(const char* test_name) {
    const TestCounts& c = test_counts();
    std::printf("%s: %d passed, %d failed\n", test_name, c.passed, c.failed);
    return c.failed == 0 && c.passed > 0 ? 0 : 1;
}

inline float max_abs(const std::vector<float>& v) {
    float m = 0.0f;
    for (float x : v) m = std::fmax(m, std::fabs(x));
    return m;
}
