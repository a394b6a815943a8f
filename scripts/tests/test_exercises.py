#!/usr/bin/env python3
"""scripts/exercises.py on a small tree in a temporary folder: generate writes what check
expects, and refuses -- exit 1, naming the stub's file and line -- to drop stub lines outside
the regions unless --force is given; list tells a stub that includes its solution's kernels
and writes only phases (one source) from one that includes a solution header but keeps
copies of given code (partly shared) and from a hand-kept one. No build, no GPU; well under
a second.
Run: python3 scripts/tests/test_exercises.py (CI: .ci/run, next to `exercises.py check`).
"""
import contextlib
import io
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True
sys.path.insert(0, str(HERE.parent))
import exercises  # noqa: E402

SOLUTION = """\
/// @file op.cu
/// @brief Solution: the op.

#include "op.hpp"

namespace course::solution {

// given: a helper
int helper(int x) { return x + 1; }

__global__ void kernel(float* out) {
  // @step naive  the answer
  out[0] = 1.f;
  // @end
}

void launch() {
  // @step naive
  kernel<<<1, 1>>>(nullptr);
  // @end
}

}  // namespace course::solution
"""

STUB = """\
/// @file op.cu
/// @brief YOUR op: a different banner, kept.

#include "op.hpp"

namespace course::exercise {

// given: a helper
int helper(int x) { return x + 1; }

__global__ void kernel(float* out) {
  // @step naive  the learner's TODO
  // TODO(step 1)
  // @end
}

void launch() {
  // @step naive
  throw NotImplemented("op step naive", __FILE__);
  // @end
}

}  // namespace course::exercise
"""


class Tree(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="exercises-test-")
        root = Path(self.tmp.name)
        self.saved = exercises.ROOT, exercises.EXERCISES, exercises.SOLUTIONS
        exercises.ROOT, exercises.EXERCISES, exercises.SOLUTIONS = root, root / "exercises", root / "solutions"
        self.stub = root / "exercises" / "m" / "op.cu"
        self.solution = root / "solutions" / "m" / "op.cu"
        for path, text in ((self.stub, STUB), (self.solution, SOLUTION)):
            path.parent.mkdir(parents=True)
            path.write_text(text)

    def tearDown(self):
        exercises.ROOT, exercises.EXERCISES, exercises.SOLUTIONS = self.saved
        self.tmp.cleanup()

    def run_tool(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        saved = sys.argv
        sys.argv = ["exercises.py", *argv]
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = exercises.main()
        finally:
            sys.argv = saved
        return rc, out.getvalue(), err.getvalue()

    def edit(self, path, old, new):
        text = path.read_text()
        self.assertIn(old, text)
        path.write_text(text.replace(old, new, 1))

    def test_in_sync(self):
        self.assertEqual(self.run_tool("check")[0], 0)
        rc, out, _ = self.run_tool("generate")
        self.assertEqual((rc, out), (0, ""))
        self.assertEqual(self.stub.read_text(), STUB)

    def test_solution_adds_given_code(self):
        # New given code in the solution: nothing of the stub is lost, so generate writes.
        self.edit(self.solution, "int helper", "int twice(int x) { return 2 * x; }\nint helper")
        self.assertEqual(self.run_tool("check")[0], 1)
        rc, out, err = self.run_tool("generate")
        self.assertEqual(rc, 0, err)
        self.assertIn("wrote exercises/m/op.cu", out)
        self.assertIn("int twice(int x)", self.stub.read_text())
        self.assertEqual(self.run_tool("check")[0], 0)

    def test_refuses_to_drop_learner_text(self):
        # A learner-facing line outside the regions (as in a stub being converted).
        self.edit(self.stub, "void launch() {", "// TODO(step 1): launch one thread.\nvoid launch() {")
        before = self.stub.read_text()
        line = before.splitlines().index("// TODO(step 1): launch one thread.") + 1
        rc, out, err = self.run_tool("generate")
        self.assertEqual(rc, 1)
        self.assertEqual(out, "")
        self.assertIn(f"exercises/m/op.cu:{line}: // TODO(step 1): launch one thread.", err)
        self.assertIn("--force", err)
        self.assertEqual(self.stub.read_text(), before, "a refused stub must be left untouched")

        rc, out, _ = self.run_tool("generate", "--force")
        self.assertEqual(rc, 0)
        self.assertIn("--force: dropped 1 line(s)", out)
        self.assertEqual(self.stub.read_text(), STUB)

    def test_refuses_to_overwrite_a_fix_made_in_the_stub(self):
        # Given code fixed in the stub instead of the solution: check fails, generate refuses.
        self.edit(self.stub, "return x + 1;", "return x + 2;")
        rc, _, err = self.run_tool("check")
        self.assertEqual(rc, 1)
        self.assertIn("DRIFT: exercises/m/op.cu", err)
        rc, _, err = self.run_tool("generate")
        self.assertEqual(rc, 1)
        self.assertIn("exercises/m/op.cu:9: int helper(int x) { return x + 2; }", err)
        self.assertIn("return x + 2;", self.stub.read_text())

    def test_blank_lines_and_regions_are_no_loss(self):
        # A dropped blank line and a changed region body are not refused.
        self.edit(self.stub, "}\n\nvoid launch", "}\n\n\nvoid launch")
        self.edit(self.stub, "  // TODO(step 1)\n", "  // TODO(step 1): write out[0].\n")
        rc, _, err = self.run_tool("generate")
        self.assertEqual(rc, 0, err)
        self.assertIn("// TODO(step 1): write out[0].", self.stub.read_text())
        self.assertEqual(self.run_tool("check")[0], 0)

    def test_only_the_named_files(self):
        self.edit(self.stub, "void launch() {", "// mine\nvoid launch() {")
        rc, out, err = self.run_tool("generate", str(self.solution.parent / "other.cu"))
        self.assertEqual((rc, out, err), (0, "", ""))

    def test_region_names_must_pair(self):
        self.edit(self.stub, "// @step naive\n  throw", "// @step tiled\n  throw")
        rc, _, err = self.run_tool("generate")
        self.assertEqual(rc, 1)
        self.assertIn("mark different regions", err)


HEADER = """\
/// @file op_tc.cuh
/// @brief Solution: the op's kernel on a Phases parameter.

namespace course::solution {
template <class Phases>
__global__ void kernel(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = Phases::value(i);
}
}  // namespace course::solution
"""

PHASES_ONLY = """\
/// @file op_tc.cu
/// @brief YOUR op: only the phase.

#include "../../solutions/m/op_tc.cuh"

namespace course::exercise {
struct Phases {
  /// TODO 1: the value of element i.
  __device__ static float value(int i) { return 0.f * i; }
};
void launch(float* out, int n) { solution::kernel<Phases><<<1, 32>>>(out, n); }
}  // namespace course::exercise
"""

KEEPS_A_COPY = """\
/// @file op_tc2.cu
/// @brief YOUR op: a kernel of its own beside the shared header.

#include "../../solutions/m/op_tc.cuh"

namespace course::exercise {
__global__ void kernel(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 0.f;  // TODO 1
}
}  // namespace course::exercise
"""


class Listing(Tree):
    def setUp(self):
        super().setUp()
        root = Path(self.tmp.name)
        (root / "solutions" / "m" / "op_tc.cuh").write_text(HEADER)
        (root / "exercises" / "m" / "op_tc.cu").write_text(PHASES_ONLY)
        (root / "exercises" / "m" / "op_tc2.cu").write_text(KEEPS_A_COPY)
        hand = KEEPS_A_COPY.replace('#include "../../solutions/m/op_tc.cuh"', '#include "op.hpp"')
        (root / "exercises" / "m" / "op_hand.cu").write_text(hand)

    def test_shared_partly_and_hand_kept(self):
        converted, shared, partly, hand = exercises.classify()
        self.assertEqual([s.name for s, _ in converted], ["op.cu"])
        self.assertEqual([e.stub.name for e in shared], ["op_tc.cu"])
        self.assertEqual(shared[0].includes, ["solutions/m/op_tc.cuh"])
        # The copied index line of the kernel; not its signature, not `}`, not the changed guard.
        self.assertEqual([e.stub.name for e in partly], ["op_tc2.cu"])
        self.assertEqual(partly[0].mirror, [8])
        self.assertEqual([(e.stub.name, e.mirror) for e in hand], [("op_hand.cu", [8])])
        rc, out, _ = self.run_tool("list")
        self.assertEqual(rc, 0)
        self.assertIn("one source by construction (1):\n    exercises/m/op_tc.cu  (includes solutions/m/op_tc.cuh)",
                      out)
        self.assertIn("exercises/m/op_tc2.cu  (includes solutions/m/op_tc.cuh; keeps 1 code line that also stands "
                      "in solutions/m/, in lines 8)", out)
        self.assertIn("exercises/m/op_hand.cu  (1 code line also stands in solutions/m/)", out)

    def test_ranges(self):
        self.assertEqual(exercises.ranges([3, 4, 5, 9, 30]), "3-9, 30")
        self.assertEqual(exercises.ranges([]), "")


if __name__ == "__main__":
    unittest.main(verbosity=1)
