#!/usr/bin/env python3
"""scripts/make_results.py's GPT sections and its second-GPU comparison runs, without a GPU or
matplotlib: m04_gpt --profile's groups, text bar chart and tables, the loss curve beside the
twin's (validation losses side by side), a compare_torch_*.json of another card, on small
synthetic files; then the whole page rebuilt from docs/data/ into a temporary folder with
--no-plots.

Run: python3 scripts/tests/test_make_results_gpt.py (CI: .ci/run).
"""
import json
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.dont_write_bytecode = True
sys.path.insert(0, str(HERE.parent))
import make_results as mr  # noqa: E402

PROFILE = """phase,ms_per_step,share
batch,0.5,0.05
fwd.ln1,1.0,0.10
fwd.qkv,2.0,0.20
fwd.attention,1.0,0.10
bwd.qkv,4.0,0.40
bwd.attention,1.0,0.10
adamw,0.5,0.05
"""


def curve(rows):
    """m04_gpt --csv text from (step, loss, val_loss or None) rows."""
    return "step,lr,loss,grad_norm,val_loss\n" + "".join(
        f"{s},0.001,{l:.6f},0.5000,{'' if v is None else f'{v:.6f}'}\n" for s, l, v in rows)


class GptSections(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())
        self.images = self.tmp / "images"
        self.images.mkdir()

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def write(self, name, text):
        (self.tmp / name).write_text(text)
        return self.tmp / name

    def test_groups_and_text_chart(self):
        rows = mr.read_gpt_profile(self.write("p.csv", PROFILE))
        groups = mr.gpt_profile_groups(rows)
        self.assertEqual([g[0] for g in groups], ["GEMMs", "attention", "LayerNorm", "other"])
        self.assertAlmostEqual(groups[0][1], 6.0)
        self.assertAlmostEqual(groups[0][2], 0.6)
        self.assertEqual([p for p, _, _ in groups[0][3]], ["bwd.qkv", "fwd.qkv"])  # largest first
        text = mr.gpt_profile_text(rows, width=8)
        self.assertIn("10.00 ms per step in all", text[0])
        self.assertIn("GEMMs                6.000   60.0%", text)
        self.assertIn("  bwd.qkv            4.000   40.0%  ########", text)  # the largest: full width
        self.assertIn("  fwd.qkv            2.000   20.0%  ####", text)

    def test_profile_section(self):
        bf16 = self.write("gpt_profile_bf16.csv", PROFILE)
        runs = self.write("gpt_runs.txt", "gpt_profile_bf16.csv: GPU X, m04_gpt --profile\nother.csv: no\n")
        lines = mr.gpt_profile_section([("bf16", bf16), ("fp32", None)], self.images, False, runs)
        self.assertIn("## GPT: where a training step's time goes", lines)
        self.assertIn("- `gpt_profile_bf16.csv`: GPU X, m04_gpt --profile", lines)
        self.assertFalse(any("other.csv" in l for l in lines))
        self.assertIn("| GEMMs | 6.000 | 60.0% |", lines)
        self.assertIn("| **step** | **10.000** | 100% |", lines)
        self.assertIn("| bwd.attention | attention | 1.000 | 10.0% |", lines)
        self.assertFalse(any("gpt_profile.png" in l for l in lines))  # no image drawn, none linked
        self.assertEqual(mr.gpt_profile_section([("bf16", None), ("fp32", None)], self.images, False), [])

    def test_curves_section(self):
        course = self.write("m04_gpt_curve.csv", curve([(1, 4.0, None), (2, 3.0, 3.1), (3, 2.0, None), (4, 1.5, 1.6)]))
        twin = self.write("gpt_twin_curve.csv", curve([(1, 4.1, None), (2, 3.1, 3.05), (3, 2.1, None), (4, 1.4, 1.63)]))
        train, val = mr.read_curve(course)
        self.assertEqual(train[0], (1, 4.0))
        self.assertEqual(val, {2: 3.1, 4: 1.6})
        lines = mr.gpt_curves_section(course, twin, self.images, False)
        self.assertIn("| 2 | 3.1000 | 3.0500 | +0.0500 | no |", lines)
        self.assertIn("| 4 | 1.6000 | 1.6300 | -0.0300 | no |", lines)
        twin2 = self.write("t2.csv", curve([(2, 3.0, 3.09), (4, 1.4, 1.61)]))
        self.assertIn("| 4 | 1.6000 | 1.6100 | -0.0100 | yes |", mr.gpt_curves_section(course, twin2, self.images, False))
        self.assertEqual(mr.gpt_curves_section(course, None, self.images, False), [])
        self.assertEqual(mr.smoothed([1.0, 3.0, 5.0, 7.0], 2), [1.0, 2.0, 4.0, 6.0])

    def test_extra_compare_run(self):
        # A compare_torch_*.json of another GPU: its own section, its GPU named, ratios to its own cuDNN.
        docs = self.tmp / "extra"
        (docs / "data").mkdir(parents=True)
        row = lambda impl, name, shape, v: {"op": "attention_bf16", "shape": shape, "impl": impl,  # noqa: E731
                                            ("step" if impl == "solution" else "backend"): name, "value": v}
        rows = [row("pytorch", "flash", "B4_H16_N4096_d128", 350.0), row("pytorch", "cudnn", "B4_H16_N4096_d128", 650.0),
                row("solution", "tc_overlap", "B4_H16_N4096_d128", 617.5)]
        (docs / "data" / "compare_torch_gpu2.json").write_text(
            json.dumps({"title": "A second card", "env": {"gpu": "GPU TWO"}, "results": rows}))
        lines = mr.extra_compare_sections(docs, self.images, False)
        page = "\n".join(lines)
        self.assertIn("## A second card", page)
        self.assertIn("gpu GPU TWO", page)
        self.assertIn("| 128 | no | 4096 | 350.0 | 650.0 | 617.5 (0.95) |", page)
        self.assertIn('<a id="results_pytorch_gpu2"></a>', page)
        self.assertNotIn("backward", page)  # no backward rows, no backward table
        # Backward rows get their own table under the forward's.
        bwd = [dict(r, op="attention_backward_bf16", value=r["value"] / 2) for r in rows]
        (docs / "data" / "compare_torch_gpu2.json").write_text(
            json.dumps({"title": "A second card", "env": {"gpu": "GPU TWO"}, "results": rows + bwd}))
        page = "\n".join(mr.extra_compare_sections(docs, self.images, False))
        self.assertIn("The backward (`attention_backward_bf16`)", page)
        self.assertIn("| 128 | no | 4096 | 175.0 | 325.0 | 308.8 (0.95) |", page)
        self.assertEqual(mr.extra_compare_sections(self.tmp / "none", self.images, False), [])

    def test_other_ops_of_an_extra_run(self):
        # Ops other than attention: one line per shape, the fastest of each side by time.
        row = lambda impl, name, ms, v: {"op": "softmax", "shape": "16384x4096_dim0", "impl": impl,  # noqa: E731
                                         ("step" if impl == "solution" else "backend"): name, "ms": ms, "value": v,
                                         "unit": "GB/s"}
        rows = [row("pytorch", "torch", 20.0, 26.7), row("solution", "naive", 4.0, 134.0),
                row("solution", "cluster_columns", 0.25, 2449.2)]
        lines = mr.other_ops_table(rows)
        self.assertEqual(len(lines), 3)
        self.assertIn("| softmax | 16384x4096_dim0 | GB/s | `torch` | 26.7 | 20.000 | `cluster_columns` | 2449.2 | 0.250 | "
                      "80.00 |", lines[2])
        self.assertEqual(mr.other_ops_table(rows[1:]), [])  # no PyTorch row: no line

    def test_page_rebuilds_from_docs_data(self):
        # The real page, from the stored data, into a copy (no plots): the GPT profile section is there.
        docs = self.tmp / "docs"
        shutil.copytree(ROOT / "docs" / "data", docs / "data")
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_results.py"), "--no-plots", "--docs",
                              str(docs)], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        page = (docs / "results.md").read_text()
        if (docs / "data" / "gpt_profile_bf16.csv").exists():
            self.assertIn("## GPT: where a training step's time goes", page)
        text = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_results.py"), "--gpt-profile-text",
                               str(self.write("p.csv", PROFILE))], capture_output=True, text=True)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("bwd.qkv", text.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
