// gtest main for every course test binary: prints the device once and how to replay seeds.
#include "course/device.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const auto reason = course::no_gpu_reason())
    std::cout << "[course] " << reason->text("the GPU tests skip", "[course]   ") << "\n";
  else
    std::cout << "[course] device: " << course::device_summary() << "\n";
  if (const char* s = std::getenv("COURSE_SEED")) std::cout << "[course] COURSE_SEED=" << s << "\n";
  return RUN_ALL_TESTS();
}
