#include "course/random.hpp"

#include <cstdlib>
#include <functional>
#include <random>

namespace course {

std::uint64_t seed_for(const std::string& name) {
  if (const char* env = std::getenv("COURSE_SEED"); env != nullptr && *env != '\0')
    return std::strtoull(env, nullptr, 10);
  // FNV-1a: stable across runs and platforms (std::hash is not guaranteed to be).
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) { h ^= c; h *= 1099511628211ull; }
  return h;
}

std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float lo, float hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

template <class T>
void fill_random(HostTensor<T>& t, std::uint64_t seed, double lo, double hi, double offset_per_leading) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto idx = t.unravel(i);
    const double shift = idx.empty() ? 0.0 : offset_per_leading * static_cast<double>(idx[0]);
    t.at(idx) = static_cast<T>(dist(gen) + shift);
  }
}

HostTensor<float> random_tensor(const Shape& shape, std::uint64_t seed, double lo, double hi) {
  HostTensor<float> t(shape);
  fill_random(t, seed, lo, hi);
  return t;
}

template void fill_random<float>(HostTensor<float>&, std::uint64_t, double, double, double);
template void fill_random<double>(HostTensor<double>&, std::uint64_t, double, double, double);

}  // namespace course
