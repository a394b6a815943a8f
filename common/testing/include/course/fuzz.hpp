#pragma once
/// @file fuzz.hpp
/// @brief Random-case hardening ("fuzz" tests): seeded case generators, a driver that runs
/// many random cases of one step against the CPU reference, and "[fuzz]" summary lines.
///
/// A fuzz test draws each case from the step's whole contract (sizes 1, primes, tile +- 1,
/// padded, interleaved and broadcast strides, large-magnitude and one-signed data), runs
/// it through the module's own checking helper and records the case's worst
/// error-to-bound ratio (CompareResult::worst_ratio: 1 is the edge of the tolerance).
///
/// Reproducible: case i of a test draws only from Rng(case_seed(seed, i)), where `seed` is
/// the test's printed seed, so one failing case replays alone:
///
///     COURSE_SEED=<seed> COURSE_FUZZ_ONLY=<i> ./m01_fuzz_basics_solution --gtest_filter=<test>
///
/// Environment:
///   COURSE_FUZZ_CASES  cases per test instead of the test's own count (a sanitizer run lowers it)
///   COURSE_FUZZ_ONLY   run only case i
///   COURSE_FUZZ_LOG    append each "[fuzz]" line to this file (scripts/gpu_check.sh sums them up)

#include "course/compare.hpp"
#include "course/error.hpp"
#include "course/impl.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <initializer_list>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace course::fuzz {

/// A small, portable generator (splitmix64): the same seed draws the same cases with any
/// compiler and standard library.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t bits();
  /// Uniform integer in [lo, hi] (lo <= hi).
  std::int64_t uniform(std::int64_t lo, std::int64_t hi);
  /// Uniform real in [lo, hi).
  double real(double lo, double hi);
  /// True with probability p.
  bool chance(double p) { return real(0.0, 1.0) < p; }
  /// Integer in [lo, hi] whose logarithm is uniform: small values as often as large ones.
  std::int64_t log_uniform(std::int64_t lo, std::int64_t hi);
  /// A size in [lo, hi] (lo >= 1) that favors the edges kernels get wrong: lo itself,
  /// primes, and m*tile - 1, m*tile, m*tile + 1 for each of `tiles` (m = 1..3); otherwise
  /// log-uniform.
  std::int64_t size(std::int64_t lo, std::int64_t hi, std::initializer_list<std::int64_t> tiles = {});
  /// A uniformly chosen element.
  template <class T>
  T pick(std::initializer_list<T> options) {
    return *(options.begin() + uniform(0, static_cast<std::int64_t>(options.size()) - 1));
  }
  template <class T>
  const T& pick(const std::vector<T>& options) {
    return options[static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(options.size()) - 1))];
  }

 private:
  std::uint64_t state_;
};

/// The seed of case `index` of a test whose seed is `test_seed`.
std::uint64_t case_seed(std::uint64_t test_seed, std::int64_t index);

/// The interval input values are drawn from.
struct ValueRange {
  double lo = -1.0, hi = 1.0;
  double magnitude() const;  ///< max(|lo|, |hi|)
  std::string str() const;   ///< "[-1, 1)"
};

/// Input values for one case: mostly [-1, 1), else a wide mixed-sign range up to
/// +-max_magnitude, a tiny one (down to 1e-4), one sign only ([0, M) or [-M, 0)), or far
/// from zero with one sign ([M, 1.5M): a large common offset).
ValueRange draw_values(Rng& rng, double max_magnitude);

/// Cases a test runs: $COURSE_FUZZ_CASES if set, else `default_count`.
int case_count(int default_count);

/// What the module's checking helper said about one case.
struct Verdict {
  double ratio = 0.0;    ///< worst |err| / bound over everything compared (inf: NaN/Inf or a wrong -inf)
  std::string failure;   ///< empty when the case passes
  bool ok() const { return failure.empty(); }
  /// Folds in one comparison (named `what` in the failure report).
  void add(const CompareResult& r, const std::string& what);
  /// Records a failure found by another check (padding written, a sum that is not 1, ...).
  void fail(const std::string& why);
};

/// Identifies a fuzz test in the "[fuzz]" lines: the op, the step (with any variant, e.g.
/// "online_vectorized/dim0") and the part (several parts of one step run as separate
/// tests, so ctest runs them in parallel).
struct Part {
  std::string op, step;
  int part = 0;         ///< part k runs case indices [k*count, (k+1)*count)
  int count = 0;        ///< cases in this part
  std::uint64_t seed = 0;
};

/// Prints and logs "[fuzz] op=... step=... part=... cases=... failed=... worst=..." and keeps
/// the numbers for the per-op summary printed when the binary ends.
void report(const Part& part, std::int64_t cases, std::int64_t failed, double worst, const std::string& worst_case);

/// Runs the cases of `part`: case i is gen(rng_i) checked by check(case, seed_i) -> Verdict.
/// Each failure message names the case (Case::str()) and how to replay it. Exercise stubs
/// (NotImplemented) and steps this GPU cannot run (Unsupported) propagate, for
/// COURSE_SKIP_IF_NOT_IMPLEMENTED. A CUDA error ends the run (the context may be lost).
template <class Gen, class Check>
::testing::AssertionResult run_cases(const Part& part, Gen&& gen, Check&& check);

/// How often a generator hits each feature of a contract (size 1, a prime, padding, ...):
/// a CPU-only test draws a step's cases, counts them, prints the shares and fails if a
/// feature never occurs.
class Coverage {
 public:
  explicit Coverage(std::string name) : name_(std::move(name)) {}
  void count(const std::string& feature, bool hit);
  void next_case() { ++cases_; }
  /// "[fuzz] coverage <name>: 512 cases; size 1: 9%, prime: 21%, ..."
  std::string str() const;
  /// Fails naming every feature that no case hit.
  ::testing::AssertionResult all_hit() const;

 private:
  std::string name_;
  std::int64_t cases_ = 0;
  std::vector<std::pair<std::string, std::int64_t>> hits_;
};

// ------------------------------------------------------- a step's tests -----
// Every op's random cases run as parameterized tests over (step, [variant,] part): parts
// 0 .. kParts-1 draw cases_per_part() cases each (one gtest test per part, so ctest runs
// them in parallel) and part kParts is the op's *Large* test, with large_cases() cases.

constexpr int kParts = 4;           ///< gtest tests per step: ctest runs them in parallel
constexpr int kCasesPerPart = 128;  ///< 4 x 128 = 512 random cases per step
constexpr int kLargeCases = 3;      ///< large cases per step (own test, *Large*)
/// Cases a generator's CPU-only coverage test draws per step (plus kLargeCases large ones).
constexpr int kCasesPerStep = kParts * kCasesPerPart;

/// Cases in each of parts 0 .. kParts-1: case_count(kCasesPerPart).
int cases_per_part();
/// Cases in the large part: case_count(kLargeCases), but never more than kLargeCases.
int large_cases();
/// The Part a test runs: part `part_index` of `op` / `step`, or the large part.
Part make_part(const std::string& op, const std::string& step, int part_index, bool large, std::uint64_t seed);

/// "part0" .. "part3", or "large" for part kParts: how every fuzz test's name ends.
std::string part_name(int part);
/// A fuzz test's name: "<step>_<variant>_<part>", e.g. "naive_three_pass_dim0_part0"
/// ("<step>_<part>" when the variant is empty: "naive_part0", "flash_large").
std::string test_name(const std::string& step, const std::string& variant, int part);
/// The name of a (step, part) test, for INSTANTIATE_TEST_SUITE_P: "naive_part0".
template <class Step>
std::string step_part_name(const ::testing::TestParamInfo<std::tuple<StepInfo<Step>, int>>& info) {
  return test_name(std::get<0>(info.param).name, "", std::get<1>(info.param));
}

/// The name of a test over a step alone (an op's bad-input sweep): the step's name.
template <class Step>
std::string step_name(const ::testing::TestParamInfo<StepInfo<Step>>& info) {
  return info.param.name;
}

/// The part parameters: parts 0 .. kParts-1, and the large part alone.
inline auto parts() { return ::testing::Range(0, kParts); }
inline auto large_part() { return ::testing::Values(kParts); }

/// Instantiates a step's two fuzz suites, "Steps/<Fixture>" over Combine(params..., parts())
/// and "Steps/<LargeFixture>" over Combine(params..., large_part()), both named by name_fn:
///
///     COURSE_FUZZ_INSTANTIATE(FuzzMatmul, FuzzMatmulLarge, step_part_name<MatmulStep>,
///                             ::testing::ValuesIn(course::m01::kMatmulSteps));
#define COURSE_FUZZ_INSTANTIATE(Fixture, LargeFixture, name_fn, ...)                                           \
  INSTANTIATE_TEST_SUITE_P(Steps, Fixture, ::testing::Combine(__VA_ARGS__, ::course::fuzz::parts()), name_fn); \
  INSTANTIATE_TEST_SUITE_P(Steps, LargeFixture, ::testing::Combine(__VA_ARGS__, ::course::fuzz::large_part()), name_fn)

// Pieces every generator uses.

/// v rounded up to a multiple of m.
inline std::int64_t round_up(std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; }
/// A row stride for rows of `cols` elements: packed (half the time), padded by 1..9 (no
/// vector path fits), or rounded up to a multiple of 4 and padded by 0..12 (float4 paths).
std::int64_t draw_row_stride(Rng& rng, std::int64_t cols);
/// A divisor of h: 1 (multi-query), h (multi-head) or one in between (grouped-query).
std::int64_t draw_divisor(Rng& rng, std::int64_t h);
/// A never-dereferenced "device" address for validation-only checks: slots 1 TiB apart,
/// 256-byte aligned, plus `offset_elems` elements.
template <class T>
T* fake_address(int slot, std::int64_t offset_elems = 0) {
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(slot) << 40) + offset_elems;
}

bool is_prime(std::int64_t n);
/// n is m*t - 1, m*t or m*t + 1 for one of the tiles t (m >= 1).
bool near_tile(std::int64_t n, std::initializer_list<std::int64_t> tiles);

// ----------------------------------------------------------------- details -----
/// @cond FUZZ_DETAILS

std::int64_t only_case();  ///< $COURSE_FUZZ_ONLY, or -1
std::string format_ratio(double r);

template <class Gen, class Check>
::testing::AssertionResult run_cases(const Part& part, Gen&& gen, Check&& check) {
  std::ostringstream failures;
  std::int64_t ran = 0, failed = 0;
  double worst = 0.0;
  std::string worst_case;
  const std::int64_t only = only_case();
  const std::int64_t first = static_cast<std::int64_t>(part.part) * part.count;
  for (std::int64_t i = first; i < first + part.count; ++i) {
    if (only >= 0 && i != only) continue;
    Rng rng(case_seed(part.seed, i));
    const auto c = gen(rng);
    Verdict v;
    bool stop = false;
    try {
      v = check(c, rng.bits());
    } catch (const NotImplemented&) {
      throw;
    } catch (const Unsupported&) {
      throw;
    } catch (const CudaError& e) {
      v.fail(std::string("CUDA error (the remaining cases are not run): ") + e.what());
      stop = true;
    } catch (const std::exception& e) {
      v.fail(std::string("threw: ") + e.what());
    }
    ++ran;
    if (!(v.ratio <= worst)) {
      worst = v.ratio;
      worst_case = "#" + std::to_string(i) + " " + c.str();
    }
    if (!v.ok()) {
      if (failed < 10)
        failures << "\n  case #" << i << " [" << c.str() << "]: " << v.failure << "\n    replay: COURSE_SEED="
                 << part.seed << " COURSE_FUZZ_ONLY=" << i;
      ++failed;
    }
    if (stop) break;
  }
  report(part, ran, failed, worst, worst_case);
  if (failed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << part.op << " / " << part.step << ": " << failed << " of " << ran
                                       << " random cases failed (seed " << part.seed << ")" << failures.str()
                                       << (failed > 10 ? "\n  ..." : "");
}

// ------------------------------------------------------- bad-input sweeps -----

/// @endcond

/// Runs `call`, which must throw course::InvalidArgument (or course::Unsupported) whose
/// message contains `needle` (the argument's name, quoted as the message quotes it), and
/// then checks that the CUDA context is healthy: cudaDeviceSynchronize() and
/// cudaGetLastError() both return cudaSuccess. NotImplemented propagates.
template <class Call>
::testing::AssertionResult rejects(Call&& call, const std::string& needle) {
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  try {
    call();
    result = ::testing::AssertionFailure() << "accepted; expected InvalidArgument naming " << needle;
  } catch (const NotImplemented&) {
    throw;
  } catch (const InvalidArgument& e) {
    if (std::string(e.what()).find(needle) == std::string::npos)
      result = ::testing::AssertionFailure() << "the message does not name " << needle << ": " << e.what();
  } catch (const Unsupported& e) {
    if (std::string(e.what()).find(needle) == std::string::npos)
      result = ::testing::AssertionFailure() << "the message does not name " << needle << ": " << e.what();
  } catch (const std::exception& e) {
    result = ::testing::AssertionFailure() << "threw something else than InvalidArgument: " << e.what();
  }
  const cudaError_t sync = cudaDeviceSynchronize();
  const cudaError_t last = cudaGetLastError();
  if (sync != cudaSuccess || last != cudaSuccess) {
    if (result) result = ::testing::AssertionFailure();
    result << "\n  the CUDA context is not healthy afterwards: cudaDeviceSynchronize -> " << cudaGetErrorString(sync)
           << ", cudaGetLastError -> " << cudaGetErrorString(last);
  }
  return result;
}

}  // namespace course::fuzz
