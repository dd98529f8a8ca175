// outlier.h: skipping outlier steps by the z-score of the gradient norm (--skip-outliers Z).
//
// The statistics are exponential moving averages over the applied steps (decay 1 - 1/W,
// --outlier-window W) of the global gradient norm and of its square; once kOutlierMinSteps steps
// are in them, the next step's ceiling is mean + Z * std, and a step whose norm exceeds it is
// skipped on the device (AdamW compares the squared norm with AdamWStepValues::max_norm_squared
// and leaves every array alone), like a non-finite one. Skipped steps do not enter the
// statistics, so a burst of spikes cannot raise its own ceiling. Only upward outliers count: a
// norm below the mean is never skipped. Host only; the statistics are saved in checkpoints so a
// resumed run makes the same decisions.
#pragma once
#include <cmath>
#include <limits>

namespace llmc {

constexpr long long kOutlierMinSteps = 20;

struct OutlierStats {
    double mean = 0.0;    // EMA of the norm
    double sq = 0.0;      // EMA of the squared norm
    long long count = 0;  // applied steps in the statistics
};

// The squared-norm ceiling of the next step (float, as the device compares it): +inf while the
// option is off (z <= 0) or fewer than kOutlierMinSteps steps are in the statistics.
inline float outlier_max_norm_squared(const OutlierStats& s, double z) {
    if (z <= 0.0 || s.count < kOutlierMinSteps) return std::numeric_limits<float>::infinity();
    const double var = s.sq - s.mean * s.mean;
    const double ceiling = s.mean + z * std::sqrt(var > 0.0 ? var : 0.0);
    return (float)(ceiling * ceiling);
}

// Adds the norm of an applied step (finite, not skipped); the first one sets both averages.
inline void outlier_update(OutlierStats* s, double norm, int window) {
    const double a = 1.0 / (window > 1 ? window : 2);
    if (s->count == 0) {
        s->mean = norm;
        s->sq = norm * norm;
    } else {
        s->mean += a * (norm - s->mean);
        s->sq += a * (norm * norm - s->sq);
    }
    s->count++;
}

}  // namespace llmc
