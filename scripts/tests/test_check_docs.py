#!/usr/bin/env python3
"""scripts/check_docs.py on a small site in a temporary folder: a page shaped like Doxygen
1.9.4's output is clean, and a planted defect of each kind -- a literal <tt> in a heading,
a stray backtick in prose, a link from the front page to an empty "File Reference" page --
fails the check, exit 1, naming the page and the kind; code (<code>, <pre>, fragments)
may hold backticks. No Doxygen, no build; well under a second.
Run: python3 scripts/tests/test_check_docs.py (CI: .ci/run, before the real site is checked).
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
import check_docs  # noqa: E402

PAGE = """<!DOCTYPE html>
<html><head><title>Course: {title}</title></head>
<body>
<div class="header"><div class="headertitle"><div class="title">{title}</div></div></div>
<div class="contents">
{body}
</div>
</body></html>
"""

CLEAN_INDEX = PAGE.format(title="Course index", body="""
<h2>Module 3: <code>mma.sync</code> and <code>ldmatrix</code></h2>
<p>Read <a href="md_module03_README.html">the lesson</a> first. In code a backtick is fine:</p>
<pre class="fragment">echo `date`</pre>
<div class="fragment"><div class="line">s = `x`;</div></div>
""")

LESSON = PAGE.format(title="Module 3", body="<p>The lesson, with words in it.</p>")
EMPTY_FILE_PAGE = PAGE.format(title="results.md File Reference", body="")


class Site(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="check-docs-test-")
        self.html = Path(self.tmp.name)
        self.write("index.html", CLEAN_INDEX)
        self.write("md_module03_README.html", LESSON)
        self.write("results_8md.html", EMPTY_FILE_PAGE)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, text):
        (self.html / name).write_text(text)

    def plant(self, old, new, page="index.html"):
        text = (self.html / page).read_text()
        self.assertIn(old, text)
        self.write(page, text.replace(old, new, 1))

    def run_check(self):
        out = io.StringIO()
        saved = sys.argv
        sys.argv = ["check_docs.py", str(self.html)]
        try:
            with contextlib.redirect_stdout(out):
                rc = check_docs.main()
        finally:
            sys.argv = saved
        return rc, out.getvalue()

    def test_clean_site_passes(self):
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)
        self.assertIn("[check_docs] ok: 3 pages", out)

    def test_literal_tt_in_a_heading(self):
        # What Doxygen 1.9.4 makes of `mma.sync` in a Markdown heading: the tag escaped.
        self.plant("<code>mma.sync</code>", "&lt;tt&gt;mma.sync&lt;/tt&gt;")
        rc, out = self.run_check()
        self.assertEqual(rc, 1)
        self.assertIn("index.html:", out)
        self.assertIn(": tt: Module 3: <tt>mma.sync</tt>", out)
        self.assertIn("FAILED: 3 pages", out)

    def test_stray_backtick_in_prose(self):
        self.plant("first.", 'first (`"quoted"`).')
        rc, out = self.run_check()
        self.assertEqual(rc, 1)
        self.assertIn(": backtick: ", out)
        self.assertNotIn("date", out, "a backtick inside <pre> or a fragment is code, not a defect")

    def test_link_to_an_empty_file_page(self):
        self.plant("first.", 'first; numbers: <a href="results_8md.html">results.md</a>.')
        rc, out = self.run_check()
        self.assertEqual(rc, 1)
        self.assertIn('empty: "results.md" links to results_8md.html, an empty File Reference page', out)

    def test_each_kind_counted(self):
        self.plant("<code>mma.sync</code>", "&lt;tt&gt;mma.sync&lt;/tt&gt;")
        self.plant("first.", 'first `x. See <a href="results_8md.html">results.md</a>.')
        rc, out = self.run_check()
        self.assertEqual(rc, 1)
        self.assertIn("1 backtick, 1 empty, 1 tt", out)


if __name__ == "__main__":
    unittest.main(verbosity=1)
