#include "course/testing.hpp"

#include <iostream>


namespace course::testing {

namespace {
std::string current_test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return "no-test";
  return std::string(info->test_suite_name()) + "." + info->name();
}
}  // namespace

std::uint64_t test_seed() {
  const std::uint64_t seed = seed_for(current_test_name());
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  std::cout << "[course] " << current_test_name() << ": seed " << seed << " (replay: COURSE_SEED=" << seed
            << ")\n";
  return seed;
}

void GpuTest::SetUp() {
  if (const auto reason = no_gpu_reason()) GTEST_SKIP() << reason->text("this GPU test skips");
  seed_ = test_seed();
}

::testing::AssertionResult Matches(const CompareResult& r) {
  if (r.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.report() << "\n  (replay with the COURSE_SEED the test printed)";
}

}  // namespace course::testing
