#!/usr/bin/env python3
"""The state rule of scripts/course/ (states.py), checked without a GPU on recorded GPU results.

data/gpu_atomic_naive_only.junit.xml: every exercise test on an H100 with only
reductions/atomic_naive written. There an unwritten step's argument checks pass (they run
before the stub throws NotImplemented): the rule must still call it "not started".
Run: python3 scripts/tests/test_course_states.py (CI: .ci/test_course_tool.sh).
"""
import json
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOL = HERE.parent / "course"  # the package: python3 scripts/course ...
RECORDED = HERE / "data" / "gpu_atomic_naive_only.junit.xml"
sys.dont_write_bytecode = True
sys.path.insert(0, str(HERE.parent))
import course.states as course  # noqa: E402  (TestResult, state_of)


def list_states(junit: Path, build: Path) -> dict:
    """`python3 scripts/course list --results junit --json`: step id -> (state, tests, passed)."""
    out = subprocess.run([sys.executable, str(TOOL), "list", "--json", "--results", str(junit), "--build-dir",
                          str(build)], check=True, stdout=subprocess.PIPE, text=True).stdout
    return {s["id"]: (s["state"], s["tests"], s["passed"]) for s in json.loads(out) if s["tests"]}


def written(junit: Path, dest: Path, message_part: str) -> Path:
    """A copy of `junit` in which the tests skipped with a NotImplemented message containing
    `message_part` pass, as if the learner had written that code."""
    tree = ET.parse(junit)
    for case in tree.getroot().iter("testcase"):
        if message_part in (case.findtext("system-out") or ""):
            case.attrib["status"] = "run"
            for child in list(case):
                case.remove(child)
    tree.write(dest)
    return dest


class RecordedGpuRun(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="course-states-")
        self.build = Path(self.tmp.name) / "build"
        self.states = list_states(RECORDED, self.build)

    def tearDown(self):
        self.tmp.cleanup()

    def test_unwritten_steps_are_not_started(self):
        self.assertEqual(self.states.pop("reductions/atomic_naive")[0], "done")
        self.assertGreater(len(self.states), 40)
        wrong = {k: v for k, v in self.states.items() if v[0] != "not_started"}
        self.assertEqual(wrong, {})
        # The trap the rule avoids: most unwritten steps do have passing tests.
        self.assertGreater(sum(1 for _, _, passed in self.states.values() if passed), 40)

    def test_part_written_is_in_progress_then_done(self):
        # block_per_row has a dim-1 and a dim-0 kernel: write dim 1 only, then both. The
        # first run (setUp) logged which tests reach the stubs.
        one = written(RECORDED, Path(self.tmp.name) / "dim1.xml", "block_per_row (dim = 1")
        states = list_states(one, self.build)
        self.assertEqual(states["softmax/block_per_row"][0], "in_progress")
        self.assertEqual(states["softmax/warp_per_row"][0], "not_started")
        both = written(one, Path(self.tmp.name) / "both.xml", "block_per_row (dim = 0")
        self.assertEqual(list_states(both, self.build)["softmax/block_per_row"][0], "done")

    def test_without_the_log_no_step_is_in_progress(self):
        # A fresh build folder (no log): a part-written step reads "not started", never the reverse.
        one = written(RECORDED, Path(self.tmp.name) / "dim1.xml", "block_per_row (dim = 1")
        states = list_states(one, Path(self.tmp.name) / "fresh")
        self.assertNotIn("in_progress", {v[0] for v in states.values()})


class Rule(unittest.TestCase):
    R = course.TestResult

    def test_states(self):
        ni = self.R("S.a/x", "not_implemented", "not implemented yet: op step x -- edit exercises/m/x.cu")
        checks = self.R("S.bad/x", "passed")
        kernel = self.R("S.k/x", "passed")
        cases = [
            ([ni, checks], {}, "not_started"),
            ([ni, kernel], {"S.k/x": "not implemented yet: op step x (part 1)"}, "in_progress"),
            ([ni, kernel], {"S.k/x": "not implemented yet: op step w"}, "not_started"),  # another step's stub
            ([ni, self.R("S.f/x", "failed", "boom")], {}, "failing"),
            ([kernel, checks], {}, "done"),
            ([checks, self.R("S.g/x", "no_gpu", "no NVIDIA GPU found")], {}, "needs_gpu"),
            ([], {}, "no_tests"),
        ]
        for results, log, want in cases:
            self.assertEqual(course.state_of(results, log, "x").state, want, (want, log))


if __name__ == "__main__":
    unittest.main(verbosity=1)
