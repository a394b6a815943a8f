#include "course/fuzz.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>

namespace course::fuzz {

std::uint64_t Rng::bits() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::int64_t Rng::uniform(std::int64_t lo, std::int64_t hi) {
  const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
  return lo + static_cast<std::int64_t>(span == 0 ? bits() : bits() % span);
}

double Rng::real(double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(bits() >> 11) * 0x1p-53;
}

std::int64_t Rng::log_uniform(std::int64_t lo, std::int64_t hi) {
  const double l = std::log(static_cast<double>(std::max<std::int64_t>(lo, 1)));
  const double h = std::log(static_cast<double>(hi) + 1.0);
  const auto v = static_cast<std::int64_t>(std::exp(real(l, h)));
  return std::clamp(v, lo, hi);
}

std::int64_t Rng::size(std::int64_t lo, std::int64_t hi, std::initializer_list<std::int64_t> tiles) {
  static const std::int64_t kPrimes[] = {2,    3,    5,    7,     11,    13,    17,    23,    31,    37,    47,
                                         61,   67,   97,   101,   127,   131,   193,   251,   257,   383,   509,
                                         521,  761,  1021, 1031,  1531,  2039,  2053,  4093,  4099,  8191,  8209,
                                         16381, 32749, 32771, 65521, 65537, 131071, 262139, 524287, 1048573};
  const std::int64_t kind = uniform(0, 99);
  if (kind < 10) return lo;
  if (kind < 28) {
    std::vector<std::int64_t> eligible;
    for (const std::int64_t p : kPrimes)
      if (p >= lo && p <= hi) eligible.push_back(p);
    if (!eligible.empty()) return pick(eligible);
  } else if (kind < 55 && tiles.size() > 0) {
    const std::int64_t t = *(tiles.begin() + uniform(0, static_cast<std::int64_t>(tiles.size()) - 1));
    const std::int64_t v = uniform(1, 3) * t + uniform(-1, 1);
    if (v >= lo && v <= hi) return v;
  }
  return log_uniform(lo, hi);
}

std::uint64_t case_seed(std::uint64_t test_seed, std::int64_t index) {
  Rng mix(test_seed ^ (0x632be59bd9b4e019ull * static_cast<std::uint64_t>(index + 1)));
  mix.bits();
  return mix.bits();
}

double ValueRange::magnitude() const { return std::max(std::fabs(lo), std::fabs(hi)); }

std::string ValueRange::str() const {
  std::ostringstream os;
  os.precision(3);
  os << "[" << lo << ", " << hi << ")";
  return os.str();
}

ValueRange draw_values(Rng& rng, double max_magnitude) {
  const double big = std::pow(10.0, rng.real(0.5, std::log10(std::max(max_magnitude, 10.0))));
  switch (rng.uniform(0, 9)) {
    case 0:
    case 1:
    case 2:
    case 3: return {-1.0, 1.0};
    case 4:
    case 5: return {-big, big};
    case 6: {
      const double tiny = std::pow(10.0, -rng.real(1.0, 4.0));
      return {-tiny, tiny};
    }
    case 7: return {0.0, big};
    case 8: return {-big, 0.0};
    default: return rng.chance(0.5) ? ValueRange{big, 1.5 * big} : ValueRange{-1.5 * big, -big};
  }
}

int case_count(int default_count) {
  if (const char* s = std::getenv("COURSE_FUZZ_CASES")) {
    const int n = std::atoi(s);
    if (n > 0) return n;
  }
  return default_count;
}

int cases_per_part() { return case_count(kCasesPerPart); }

int large_cases() { return std::min(case_count(kLargeCases), kLargeCases); }

Part make_part(const std::string& op, const std::string& step, int part_index, bool large, std::uint64_t seed) {
  return Part{op, step, large ? kParts : part_index, large ? large_cases() : cases_per_part(), seed};
}

std::string part_name(int part) { return part < kParts ? "part" + std::to_string(part) : "large"; }

std::string test_name(const std::string& step, const std::string& variant, int part) {
  return step + "_" + (variant.empty() ? "" : variant + "_") + part_name(part);
}

std::int64_t only_case() {
  if (const char* s = std::getenv("COURSE_FUZZ_ONLY")) return std::atoll(s);
  return -1;
}

std::string format_ratio(double r) {
  std::ostringstream os;
  os.precision(3);
  os << r;
  return os.str();
}

void Verdict::add(const CompareResult& r, const std::string& what) {
  ratio = std::max(ratio, r.worst_ratio);
  if (!r.ok()) fail(what + ": " + r.report());
}

void Verdict::fail(const std::string& why) {
  if (!failure.empty()) failure += "\n    ";
  failure += why;
  if (ratio < 1.0) ratio = std::max(ratio, 1.0);  // a failed case never reads as within budget
}

void Coverage::count(const std::string& feature, bool hit) {
  for (auto& [name, n] : hits_)
    if (name == feature) {
      n += hit ? 1 : 0;
      return;
    }
  hits_.emplace_back(feature, hit ? 1 : 0);
}

std::string Coverage::str() const {
  std::ostringstream os;
  os << "[fuzz] coverage " << name_ << ": " << cases_ << " cases";
  for (const auto& [name, n] : hits_)
    os << "; " << name << " " << (cases_ > 0 ? (100 * n + cases_ / 2) / cases_ : 0) << "%";
  return os.str();
}

::testing::AssertionResult Coverage::all_hit() const {
  std::string missing;
  for (const auto& [name, n] : hits_)
    if (n == 0) missing += (missing.empty() ? "" : ", ") + name;
  if (missing.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << name_ << ": no case drawn with " << missing;
}

std::int64_t draw_row_stride(Rng& rng, std::int64_t cols) {
  switch (rng.uniform(0, 3)) {
    case 0: return cols + rng.uniform(1, 9);
    case 1: return round_up(cols, 4) + 4 * rng.uniform(0, 3);
    default: return cols;
  }
}

std::int64_t draw_divisor(Rng& rng, std::int64_t h) {
  std::vector<std::int64_t> divisors;
  for (std::int64_t k = 1; k <= h; ++k)
    if (h % k == 0) divisors.push_back(k);
  return rng.pick(divisors);
}

bool is_prime(std::int64_t n) {
  if (n < 2) return false;
  for (std::int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

bool near_tile(std::int64_t n, std::initializer_list<std::int64_t> tiles) {
  for (const std::int64_t t : tiles)
    for (const std::int64_t v : {n - 1, n, n + 1})
      if (v >= t && v % t == 0) return true;
  return false;
}

namespace {

struct OpTotals {
  std::int64_t cases = 0, failed = 0;
  double worst = 0.0;
  std::string worst_step;
};

/// Per-op totals of this process, printed when the binary ends.
struct Summary : ::testing::Environment {
  std::mutex mu;
  std::map<std::string, OpTotals> ops;
  void TearDown() override {
    for (const auto& [op, t] : ops)
      std::cout << "[fuzz] summary op=" << op << ": " << t.cases << " cases, " << t.failed
                << " failed, worst error/bound " << format_ratio(t.worst) << " (step " << t.worst_step << ")\n";
  }
};

Summary& summary() {
  // gtest owns (and deletes) registered environments.
  static Summary* s = static_cast<Summary*>(::testing::AddGlobalTestEnvironment(new Summary));
  return *s;
}

}  // namespace

void report(const Part& part, std::int64_t cases, std::int64_t failed, double worst, const std::string& worst_case) {
  std::ostringstream line;
  line << "[fuzz] op=" << part.op << " step=" << part.step << " part=" << part.part << " cases=" << cases
       << " failed=" << failed << " worst=" << format_ratio(worst) << " seed=" << part.seed;
  if (!worst_case.empty()) line << " worst_case=" << worst_case;
  std::cout << line.str() << std::endl;
  if (const char* path = std::getenv("COURSE_FUZZ_LOG")) {
    if (std::FILE* f = std::fopen(path, "a")) {
      const std::string text = line.str() + "\n";
      std::fwrite(text.data(), 1, text.size(), f);  // one short append per test: lines stay whole
      std::fclose(f);
    }
  }
  Summary& s = summary();
  std::lock_guard<std::mutex> lock(s.mu);
  OpTotals& t = s.ops[part.op];
  t.cases += cases;
  t.failed += failed;
  if (!(worst <= t.worst)) {
    t.worst = worst;
    t.worst_step = part.step;
  }
}

}  // namespace course::fuzz
