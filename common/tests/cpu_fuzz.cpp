// CPU tests of the random-case driver (course/fuzz.hpp): reproducible draws, sizes that hit
// the edges, the "[fuzz]" lines, failure reports that say how to replay a case, and the
// bad-input helper. The GPU fuzz tests of the modules are built on these pieces.
#include "course/fuzz.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using course::fuzz::Rng;

TEST(FuzzRng, SameSeedSameDrawsAndRangesHold) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 1000; ++i) {
    const std::int64_t x = a.uniform(-3, 7);
    EXPECT_EQ(x, b.uniform(-3, 7));
    EXPECT_GE(x, -3);
    EXPECT_LE(x, 7);
    differs |= x != c.uniform(-3, 7);
    const double r = a.real(0.5, 2.0);
    b.real(0.5, 2.0);
    c.real(0.5, 2.0);
    EXPECT_GE(r, 0.5);
    EXPECT_LT(r, 2.0);
  }
  EXPECT_TRUE(differs) << "seeds 42 and 43 drew the same numbers";
}

TEST(FuzzRng, SizesHitTheEdgesAndStayInRange) {
  Rng rng(7);
  std::set<std::int64_t> seen;
  int ones = 0, primes = 0, near = 0;
  for (int i = 0; i < 4000; ++i) {
    const std::int64_t n = rng.size(1, 5000, {32, 128});
    ASSERT_GE(n, 1);
    ASSERT_LE(n, 5000);
    seen.insert(n);
    ones += n == 1;
    primes += course::fuzz::is_prime(n);
    near += n % 32 != 0 && course::fuzz::near_tile(n, {32, 128});
  }
  EXPECT_GT(ones, 200);    // lo itself: ~10%
  EXPECT_GT(primes, 600);  // listed primes plus the primes log-uniform draws hit
  EXPECT_GT(near, 300);    // m*tile +- 1
  EXPECT_GT(seen.size(), 500u);
  EXPECT_EQ(rng.size(3, 3, {4}), 3);
}

TEST(FuzzRng, ValueRangesAreOrderedAndVaried) {
  Rng rng(11);
  int one_signed = 0, wide = 0, tiny = 0;
  for (int i = 0; i < 2000; ++i) {
    const auto v = course::fuzz::draw_values(rng, 1e3);
    ASSERT_LT(v.lo, v.hi);
    ASSERT_LE(v.magnitude(), 1.5e3);
    one_signed += v.lo >= 0 || v.hi <= 0;
    wide += v.magnitude() >= 100;
    tiny += v.magnitude() < 0.1;
  }
  EXPECT_GT(one_signed, 400);
  EXPECT_GT(wide, 100);
  EXPECT_GT(tiny, 100);
}

TEST(FuzzHelpers, PrimesAndTiles) {
  EXPECT_TRUE(course::fuzz::is_prime(2));
  EXPECT_TRUE(course::fuzz::is_prime(65537));
  EXPECT_FALSE(course::fuzz::is_prime(1));
  EXPECT_FALSE(course::fuzz::is_prime(65535));
  EXPECT_TRUE(course::fuzz::near_tile(127, {64}));
  EXPECT_TRUE(course::fuzz::near_tile(129, {128}));
  EXPECT_FALSE(course::fuzz::near_tile(31, {64}));
  EXPECT_FALSE(course::fuzz::near_tile(100, {32}));
}

/// A case for the driver tests: a number drawn from the case's own generator.
struct ToyCase {
  std::int64_t n;
  std::string str() const { return "n=" + std::to_string(n); }
};

TEST(FuzzDriver, CasesAreReproducibleFromSeedAndIndex) {
  std::vector<std::int64_t> first, second;
  const course::fuzz::Part part{"toy", "step", 1, 20, 1234};
  for (auto* out : {&first, &second})
    EXPECT_TRUE(course::fuzz::run_cases(
        part, [](Rng& rng) { return ToyCase{rng.uniform(0, 1000000)}; },
        [&](const ToyCase& c, std::uint64_t) {
          out->push_back(c.n);
          return course::fuzz::Verdict{};
        }));
  EXPECT_EQ(first, second);
  ASSERT_EQ(first.size(), 20u);
  // Case i draws only from case_seed(seed, i): part 1 holds indices 20..39.
  Rng rng(course::fuzz::case_seed(1234, 25));
  EXPECT_EQ(first[5], rng.uniform(0, 1000000));
}

TEST(FuzzDriver, FailuresNameTheCaseAndTheReplayAndTheWorstRatioIsReported) {
  const char* log_path = "cpu_fuzz_test_log.txt";
  std::remove(log_path);
  setenv("COURSE_FUZZ_LOG", log_path, 1);
  const course::fuzz::Part part{"toy", "step_a", 0, 50, 99};
  const auto result = course::fuzz::run_cases(
      part, [](Rng& rng) { return ToyCase{rng.uniform(0, 9)}; },
      [](const ToyCase& c, std::uint64_t) {
        course::fuzz::Verdict v;
        v.ratio = 0.01 * static_cast<double>(c.n);
        if (c.n == 7) v.fail("seven is wrong");
        if (c.n == 8) throw std::runtime_error("eight threw");
        return v;
      });
  unsetenv("COURSE_FUZZ_LOG");
  ASSERT_FALSE(result);
  const std::string msg = result.message();
  EXPECT_NE(msg.find("seven is wrong"), std::string::npos) << msg;
  EXPECT_NE(msg.find("threw: eight threw"), std::string::npos) << msg;
  EXPECT_NE(msg.find("COURSE_SEED=99 COURSE_FUZZ_ONLY="), std::string::npos) << msg;
  EXPECT_NE(msg.find("[n=7]"), std::string::npos) << msg;
  std::ifstream log(log_path);
  std::string line;
  ASSERT_TRUE(std::getline(log, line));
  EXPECT_EQ(line.rfind("[fuzz] op=toy step=step_a part=0 cases=50 failed=", 0), 0u) << line;
  EXPECT_NE(line.find(" worst=1 "), std::string::npos) << line;  // a failed case counts as >= 1
  std::remove(log_path);
}

TEST(FuzzDriver, OnlyRunsTheNamedCase) {
  setenv("COURSE_FUZZ_ONLY", "13", 1);
  int runs = 0;
  const course::fuzz::Part part{"toy", "step", 0, 20, 5};
  EXPECT_TRUE(course::fuzz::run_cases(
      part, [](Rng& rng) { return ToyCase{rng.uniform(0, 9)}; },
      [&](const ToyCase&, std::uint64_t) {
        ++runs;
        return course::fuzz::Verdict{};
      }));
  unsetenv("COURSE_FUZZ_ONLY");
  EXPECT_EQ(runs, 1);
}

TEST(FuzzDriver, CaseCountFromTheEnvironment) {
  EXPECT_EQ(course::fuzz::case_count(128), 128);
  setenv("COURSE_FUZZ_CASES", "4", 1);
  EXPECT_EQ(course::fuzz::case_count(128), 4);
  unsetenv("COURSE_FUZZ_CASES");
}

TEST(FuzzDriver, StubsPropagate) {
  const course::fuzz::Part part{"toy", "step", 0, 3, 1};
  EXPECT_THROW(course::fuzz::run_cases(
                   part, [](Rng&) { return ToyCase{1}; },
                   [](const ToyCase&, std::uint64_t) -> course::fuzz::Verdict {
                     throw course::NotImplemented("toy", "toy.cu");
                   }),
               course::NotImplemented);
}

TEST(FuzzRejects, NamedRejectionPassesOtherwiseFails) {
  // No kernel runs here; the context checks pass trivially or report why they cannot
  // (no device): only the rejection part is asserted.
  const auto named = course::fuzz::rejects(
      [] { course::require_arg(false, "op", "n", -1, "must be >= 0"); }, "'n' = -1");
  const auto wrong_name = course::fuzz::rejects(
      [] { course::require_arg(false, "op", "m", -1, "must be >= 0"); }, "'n'");
  const auto accepted = course::fuzz::rejects([] {}, "'n'");
  EXPECT_EQ(std::string(wrong_name.message()).find("does not name 'n'") != std::string::npos, true)
      << wrong_name.message();
  EXPECT_NE(std::string(accepted.message()).find("accepted"), std::string::npos) << accepted.message();
  EXPECT_EQ(std::string(named.message()).find("does not name"), std::string::npos) << named.message();
}

}  // namespace
