#pragma once
/// @file random.hpp
/// @brief Seeded random inputs. Never zeros, ones or arange alone: they hide indexing bugs.

#include "course/tensor.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace course {

/// The seed for a test or demo: $COURSE_SEED if set, else a hash of `name`.
/// Printed by the harness so a failure can be replayed.
std::uint64_t seed_for(const std::string& name);

/// `n` values uniform in [lo, hi).
std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float lo = -1.f, float hi = 1.f);

/// Fill every logical element of `t` with uniform values in [lo, hi).
/// Each element draws from the generator in logical order, so every batch and
/// head holds different data. With `offset_per_leading` != 0 each index of the
/// leading dimension also gets its own shift (b * offset_per_leading), which
/// makes a batch swap visible even in statistics such as the mean.
template <class T>
void fill_random(HostTensor<T>& t, std::uint64_t seed, double lo = -1.0, double hi = 1.0,
                 double offset_per_leading = 0.0);

/// A HostTensor of `shape` filled by fill_random.
HostTensor<float> random_tensor(const Shape& shape, std::uint64_t seed, double lo = -1.0, double hi = 1.0);

}  // namespace course
