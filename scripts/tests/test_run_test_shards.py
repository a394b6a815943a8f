#!/usr/bin/env python3
"""scripts/run_test_shards.py on a small CMake project in a temporary folder: two GoogleTest
binaries registered with gtest_discover_tests (passing, skipped, failing and parameterized
tests; one test that aborts its process) and two plain ctest tests (one passes, one exits
77 = skipped). The runner must report what ctest reports -- the same totals, the same
skipped and failed names, exit status 8 -- and fail every test of the aborted shard that
never finished. Also with --regex. Needs cmake and GoogleTest (as the course's build does);
about 20 s on two cores.
Run: python3 scripts/tests/test_run_test_shards.py (CI: .ci/run).
"""
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNNER = HERE.parent / "run_test_shards.py"

CMAKE = """cmake_minimum_required(VERSION 3.25)
project(shards CXX)
find_package(GTest REQUIRED)
include(GoogleTest)
enable_testing()
foreach(name fine crashy)
  add_executable(${name} ${name}.cpp)
  target_link_libraries(${name} PRIVATE GTest::gtest_main)
  gtest_discover_tests(${name} TEST_PREFIX "${name}." DISCOVERY_MODE PRE_TEST)
endforeach()
add_test(NAME script_passes COMMAND ${CMAKE_COMMAND} -E true)
add_test(NAME script_skips COMMAND sh -c "exit 77")
set_tests_properties(script_skips PROPERTIES SKIP_RETURN_CODE 77)
"""

FINE = """#include <gtest/gtest.h>
TEST(Pass, One) { EXPECT_EQ(1, 1); }
TEST(Pass, Two) { EXPECT_TRUE(true); }
TEST(Skip, One) { GTEST_SKIP() << "not written yet"; }
TEST(Fail, One) { EXPECT_EQ(1, 2) << "planted"; }
class Param : public ::testing::TestWithParam<int> {};
TEST_P(Param, Even) { EXPECT_EQ(GetParam() % 2, 0) << "odd parameter"; }
INSTANTIATE_TEST_SUITE_P(Steps, Param, ::testing::Values(0, 2, 3, 4));
"""

CRASHY = """#include <cstdlib>
#include <gtest/gtest.h>
TEST(Crash, A_Before) { EXPECT_EQ(1, 1); }
TEST(Crash, B_Aborts) { std::abort(); }
TEST(Crash, C_After) { EXPECT_EQ(1, 1); }
"""


@unittest.skipUnless(shutil.which("cmake") and shutil.which("ctest"), "needs cmake and ctest")
class RunTestShardsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        src = Path(cls.tmp.name) / "src"
        src.mkdir()
        (src / "CMakeLists.txt").write_text(CMAKE)
        (src / "fine.cpp").write_text(FINE)
        (src / "crashy.cpp").write_text(CRASHY)
        cls.build = Path(cls.tmp.name) / "build"
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        for cmd in (["cmake", "-S", str(src), "-B", str(cls.build), *gen],
                    ["cmake", "--build", str(cls.build), "-j", "2"]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise unittest.SkipTest(f"the small GoogleTest project does not build here: {r.stdout[-800:]}{r.stderr[-800:]}")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_runner(self, *extra):
        out = Path(self.tmp.name) / "out"
        r = subprocess.run([sys.executable, str(RUNNER), "--build", str(self.build), "--jobs", "2",
                            "--per-shard", "3", "--out", str(out), *extra], capture_output=True, text=True)
        return r.returncode, r.stdout

    @staticmethod
    def names(text, kind):
        return sorted(re.findall(r"^\s*\d+ - (\S+) \(" + kind + r"\)$", text, re.M))

    def test_reports_what_ctest_reports(self):
        rc, text = self.run_runner()
        self.assertEqual(rc, 8, text)
        self.assertIn("69% tests passed, 4 tests failed out of 13", text)
        # ctest on the same build, one process per test: the same skips and failures, except
        # the test after the abort, which only the shared process loses.
        ref = subprocess.run(["ctest", "--test-dir", str(self.build), "-j", "2"], capture_output=True,
                             text=True).stdout
        self.assertEqual(self.names(text, "Skipped"), self.names(ref, "Skipped"))
        self.assertEqual(self.names(text, "Skipped"), ["fine.Skip.One", "script_skips"])
        ctest_failed = sorted(re.findall(r"^\s*\d+ - (\S+) \((?:Failed|Subprocess aborted)\)$", ref, re.M))
        self.assertEqual(self.names(text, "Failed"), sorted(ctest_failed + ["crashy.Crash.C_After"]))
        # Parameterized names are ctest's (the value), not GoogleTest's (the index): value 3 fails.
        self.assertEqual(ctest_failed, ["crashy.Crash.B_Aborts", "fine.Fail.One", "fine.Steps/Param.Even/3"])
        self.assertIn("Shards that crashed or timed out", text)
        self.assertIn("while running Crash.B_Aborts", (Path(self.tmp.name) / "out" / "tests.log").read_text())
        # Only the two script tests go through ctest; every GoogleTest case runs in a shard.
        self.assertEqual(sorted(re.findall(r"\] (\S+): \w+ \(ctest\)$", text, re.M)), ["script_passes", "script_skips"])

    def test_a_regex_selects_tests(self):
        rc, text = self.run_runner("--regex", r"^fine\.(Pass|Skip)")
        self.assertEqual(rc, 0, text)
        self.assertIn("100% tests passed, 0 tests failed out of 3", text)
        self.assertEqual(self.names(text, "Skipped"), ["fine.Skip.One"])


class GtestCaseTest(unittest.TestCase):
    """Both forms of gtest_discover_tests' test command name one binary and one case."""

    def setUp(self):
        sys.path.insert(0, str(RUNNER.parent))
        import run_test_shards
        self.case = run_test_shards.gtest_case

    def test_direct_form(self):  # CMake up to 4.2
        self.assertEqual(self.case(["/b/t", "--gtest_filter=S/P.X/0", "--gtest_also_run_disabled_tests"]),
                         ("/b/t", "S/P.X/0"))

    def test_launcher_form(self):  # CMake 4.3 and later
        cmd = ["cmake", "-D", "TEST_EXECUTABLE=/b/t", "-D", "TEST_EXECUTOR=", "-D", "TEST_FILTER=A.B",
               "-D", "TEST_XML_OUTPUT=", "-D", "TEST_EXTRA_ARGS=", "-P", "/m/GoogleTest/LaunchTest.cmake"]
        self.assertEqual(self.case(cmd), ("/b/t", "A.B"))
        self.assertEqual(self.case([a.replace("EXECUTOR=", "EXECUTOR=qemu") for a in cmd]), (None, None))

    def test_not_one_case(self):
        self.assertEqual(self.case(["sh", "-c", "exit 77"]), (None, None))
        self.assertEqual(self.case(["/b/t", "--gtest_filter=A.*"]), (None, None))
        self.assertEqual(self.case([]), (None, None))


if __name__ == "__main__":
    unittest.main(verbosity=2)
