#!/usr/bin/env python3
"""Check that every measured number quoted in the course agrees with docs/results.md.

usage: scripts/check_numbers.py [--page docs/results.md] [--list] [--update]

The results page (scripts/make_results.py, from one GPU run) is the only source of
measured numbers. Banners, READMEs and lessons quote its rows in one greppable form:

    Measured (results: softmax/solution/online_vectorized/16384x4096): 4027.0 GB/s = 0.95 of copy

  - ROW is the benchmark row op/impl/step/shape (impl: solution or library); the page's
    section is "## <module>: <op> (<shape>)". Braces list several rows, in order:
    softmax/solution/naive_three_pass/{65536x1024,4096x32768}: then each number is a
    list "a / b" with one entry per row.
  - The quote is one or more comma-separated parts: "VALUE UNIT", "VALUE UNIT = RATIO of
    REF" or "RATIO of REF"; UNIT is the page's (GB/s, TFLOP/s, us); REF is "copy" (the
    page's sol/copy column), a library row of the same table (cub_reduce, cublas_sgemm,
    ...) or another row op/impl/step/shape.
  - "pending" stands for a row the page does not have yet; once the page has it, quote it.

In a Markdown table, a header cell holding "(results: TEMPLATE)" makes the cells under it
quotes of TEMPLATE with {step} replaced by the first `word` of the row's first cell (a word
impl/step also replaces the impl). Such a cell is a quote (its unit may be left out), "-",
"pending" or empty.

A number agrees when it equals the page's at the coarser of the two printed precisions
(4017 and 4016.6 agree; 4016.5 and 4016.6 do not); a ratio to a row that is not in the
page's columns is computed from the page's two values, allowing for their rounding.
A line with "Measured (" or "Measured:" must quote a row or say pending, and a
number after "measured" with a unit must be a quote: no measured number lives anywhere
else. Exit 1 with file:line, the quoted number and the page's for every disagreement.

--update rewrites, in place, every disagreeing number to the page's: a value at the
quote's number of decimals, a ratio recomputed from the page as the check computes it
(at the quote's decimals), and a "pending" whose rows the page now has becomes their
values (with the unit, except in a table whose header names it). It prints
file:line: old -> new for each change, then checks again.
"""
import argparse
import itertools
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCANNED = ["solutions", "exercises", "module*", "docs/lessons", "docs/index.md", "README.md"]
SUFFIXES = {".md", ".cu", ".cuh", ".hpp", ".cpp", ".h"}
UNITS = ("GB/s", "TFLOP/s", "us")

NUM = r"\d+(?:\.\d+)?"
NUMLIST = rf"{NUM}(?: / {NUM})*"
REF = r"[A-Za-z0-9_.{},=/-]*[A-Za-z0-9_}]"
PART = (rf"(?:(?P<ratios_only>{NUMLIST}) of (?P<ref_only>{REF})"
        rf"|(?P<values>{NUMLIST})(?: (?P<unit>{'|'.join(re.escape(u) for u in UNITS)}))?"
        rf"(?: = (?P<ratios>{NUMLIST}) of (?P<ref>{REF}))?)")
PART_RE = re.compile(PART)
QUOTE_RE = re.compile(r"\(results: (?P<row>[^)\s]+)\):\s*")
HEADER_RE = re.compile(r"\(results: (?P<row>[^)\s]+)\)")
SECTION_RE = re.compile(r"^## (m\d+): (\S+) \((.+)\)\s*$")
LIBRARY_RE = re.compile(r"`([^`]+)` = (\S+) ")
COMPARED_RE = re.compile(r"the table compares with `([^`]+)`")


class Page:
    """docs/results.md's tables: rows[(op, impl, step, shape)] = {"value", "unit", "lib",
    "copy"} (numbers kept as printed strings, '-' for none) and the library each table
    compares with."""

    def __init__(self, path):
        self.rows, self.compared, self.sections = {}, {}, {}
        op = shape = unit = None
        for line in path.read_text().splitlines():
            m = SECTION_RE.match(line)
            if m:
                module, op, shape = m.groups()
                self.sections[(op, shape)] = f"## {module}: {op} ({shape})"
                unit = None
                continue
            if line.startswith("#"):
                op = shape = None
                continue
            if op is None:
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
            if cells and cells[0] == "step":
                unit = cells[1].removeprefix("solution ")
            elif cells and unit and not cells[0].startswith("---") and len(cells) == 6:
                self.rows[(op, "solution", cells[0], shape)] = {
                    "value": cells[1], "unit": unit, "lib": cells[4], "copy": cells[5]}
            elif line.startswith("Library rows:"):
                for name, value in LIBRARY_RE.findall(line):
                    self.rows[(op, "library", name, shape)] = {"value": value, "unit": unit, "lib": "-", "copy": "-"}
                c = COMPARED_RE.search(line)
                if c:
                    self.compared[(op, shape)] = c.group(1)

    def has(self, key):
        return key in self.rows and self.rows[key]["value"] != "-"


def expand(pattern):
    """softmax/solution/s/{a,b} -> [softmax/solution/s/a, softmax/solution/s/b]."""
    pieces = re.split(r"(\{[^{}]*\})", pattern)
    choices = [p[1:-1].split(",") if p.startswith("{") else [p] for p in pieces]
    return ["".join(c) for c in itertools.product(*choices)]


def decimals(s):
    return len(s.split(".")[1]) if "." in s else 0


def fmt(x, like):
    """x printed with as many decimals as the string like."""
    return f"{float(x):.{decimals(like)}f}"


def numbers(m, group):
    """Spans of the numbers of a matched 'a / b' list, in the matched text."""
    return [(m.start(group) + n.start(), m.start(group) + n.end()) for n in re.finditer(NUM, m.group(group))]


def agrees(quoted, page, extra=0.0):
    """quoted equals page at the coarser printed precision (plus extra for computed ratios)."""
    tol = 0.5 * 10 ** -min(decimals(quoted), decimals(page)) + extra + 1e-9
    return abs(float(quoted) - float(page)) <= tol


class Checker:
    def __init__(self, page):
        self.page, self.errors, self.quotes, self.pending = page, [], 0, 0
        self.fixes = []  # (path, line number, start, end, new text): what --update writes
        self.spot = None  # (path, line number, map from the quote's text to the line's columns)

    def fail(self, where, msg):
        self.errors.append(f"{where}: {msg}")

    def fix(self, span, new):
        """The quote's text at span (a, b) should read new."""
        path, n, at = self.spot
        self.fixes.append((path, n, at[span[0]], at[span[1] - 1] + 1, new))

    def update(self):
        """Writes self.fixes into the files; returns the lines 'file:line: old -> new'."""
        done = []
        for path, group in itertools.groupby(sorted(set(self.fixes)), key=lambda f: f[0]):
            group, lines = list(group), path.read_bytes().decode().splitlines(keepends=True)
            done += [f"{path.relative_to(ROOT)}:{n}: {lines[n - 1][a:b]} -> {new}" for _, n, a, b, new in group]
            for _, n, a, b, new in reversed(group):  # right to left: the columns still hold
                lines[n - 1] = lines[n - 1][:a] + new + lines[n - 1][b:]
            path.write_bytes("".join(lines).encode())
        return done

    def ratio(self, where, key, ref, quoted, span):
        """Checks `quoted of ref` for the row key; span: where quoted is in the quote."""
        op, impl, step, shape = key
        row = self.page.rows[key]
        if ref == "copy" or (impl == "solution" and ref == self.page.compared.get((op, shape))):
            page_value = row["copy" if ref == "copy" else "lib"]
            if page_value == "-":
                self.fail(where, f"{'/'.join(key)}: the page has no {ref} ratio")
            elif not agrees(quoted, page_value):
                self.fail(where, f"{'/'.join(key)}: {quoted} of {ref}, the page says {page_value}")
                self.fix(span, fmt(page_value, quoted))
            return
        ref_key = tuple(ref.split("/")) if "/" in ref else (op, "library", ref, shape)
        if len(ref_key) != 4 or not self.page.has(ref_key):
            self.fail(where, f"{'/'.join(key)}: '{ref}' is not copy, a library row of this table, or a row "
                             "op/impl/step/shape on the page")
            return
        a, b = row["value"], self.page.rows[ref_key]["value"]
        if row["unit"] != self.page.rows[ref_key]["unit"]:
            self.fail(where, f"{'/'.join(key)} and {ref} have different units")
            return
        r = float(a) / float(b)
        rounding = r * (0.5 * 10 ** -decimals(a) / float(a) + 0.5 * 10 ** -decimals(b) / float(b))
        if not agrees(quoted, f"{r:.{max(decimals(quoted), 2)}f}", rounding):
            self.fail(where, f"{'/'.join(key)}: {quoted} of {ref}, the page's {a} / {b} = {r:.3f}")
            self.fix(span, fmt(r, quoted))

    def quote(self, where, pattern, text, whole, spot, next_line="", header=""):
        """Checks one quote of the rows `pattern` (braces allowed); text follows the colon.
        whole: the quote must be all of text (a table cell). next_line: the line after it,
        which must not carry on the quote (a quote lives on one line). spot: (path, line
        number, column of text in the line), for --update. header: the table's header line."""
        keys = [tuple(r.split("/")) for r in expand(pattern)]
        if any(len(k) != 4 for k in keys):
            self.fail(where, f"'{pattern}' is not op/impl/step/shape")
            return
        lead, text = len(text) - len(text.lstrip()), text.strip()
        stars = {i for m in re.finditer(r"\*\*", text) for i in (m.start(), m.start() + 1)}
        # the column in the line of each character of the text read below
        self.spot = spot[:2] + ([spot[2] + lead + i for i in range(len(text)) if i not in stars],)
        text = text.replace("**", "")
        if text.startswith("pending"):
            self.pending += 1
            for k in keys:
                if self.page.has(k):
                    self.fail(where, f"{'/'.join(k)} is on the page now ({self.page.rows[k]['value']} "
                                     f"{self.page.rows[k]['unit']}): quote it instead of 'pending'")
            if all(self.page.has(k) for k in keys):
                unit = self.page.rows[keys[0]]["unit"]
                bare = whole and re.search(rf"(?<![\w/]){re.escape(unit)}\b", header)
                self.fix((0, len("pending")), " / ".join(self.page.rows[k]["value"] for k in keys)
                         + ("" if bare else f" {unit}"))
            return
        missing = [k for k in keys if not self.page.has(k)]
        if missing:
            near = sorted("/".join(k) for k in self.page.rows if k[0] == missing[0][0] and k[3] == missing[0][3])
            self.fail(where, f"{'/'.join(missing[0])} is not on the page (write 'pending' until it is)"
                             + (f"; that section has {', '.join(near)}" if near else ""))
            return
        pos, parts = 0, 0
        while True:
            m = PART_RE.match(text, pos)
            if not m:
                break
            parts += 1
            if m.group("values") and not m.group("unit") and not whole:
                self.fail(where, f"'{m.group(0)}': give the unit ({', '.join(UNITS)}); only table cells may leave it out")
            self.part(where, keys, m)
            pos = m.end()
            if not text.startswith(", ", pos) or not PART_RE.match(text, pos + 2):
                break
            pos += 2
        rest = text[pos:]
        if parts == 0 or (whole and rest.strip()) or re.match(r"\s*(=|of\b|/ |\d)", rest):
            self.fail(where, f"cannot read the quote '{text}': write 'VALUE UNIT', 'VALUE UNIT = RATIO of REF' "
                             "or 'RATIO of REF', parts separated by ', ', lists as 'a / b'")
        elif re.match(rf"(= |{NUMLIST} (of |{'|'.join(re.escape(u) for u in UNITS)}))",
                      next_line.lstrip(" /*#|-")):
            self.fail(where, "the quote goes on on the next line: keep a quote on one line")
        self.quotes += 1

    def part(self, where, keys, m):
        values, ratios = m.group("values"), m.group("ratios") or m.group("ratios_only")
        ref = m.group("ref") or m.group("ref_only")
        for name, numlist in (("value", values), ("ratio", ratios)):
            if numlist and len(numlist.split(" / ")) != len(keys):
                self.fail(where, f"{len(numlist.split(' / '))} {name}s for {len(keys)} rows")
                return
        refs = expand(ref) if ref else []
        if ref and len(refs) not in (1, len(keys)):
            self.fail(where, f"{len(refs)} references for {len(keys)} rows")
            return
        for i, key in enumerate(keys):
            row = self.page.rows[key]
            if values:
                v = values.split(" / ")[i]
                if m.group("unit") not in (None, row["unit"]):
                    self.fail(where, f"{'/'.join(key)}: unit {m.group('unit')}, the page's is {row['unit']}")
                elif not agrees(v, row["value"]):
                    self.fail(where, f"{'/'.join(key)}: {v} {row['unit']}, the page says {row['value']}")
                    self.fix(numbers(m, "values")[i], fmt(row["value"], v))
            if ratios:
                self.ratio(where, key, refs[i] if len(refs) > 1 else refs[0], ratios.split(" / ")[i],
                           numbers(m, "ratios" if m.group("ratios") else "ratios_only")[i])

    def file(self, path):
        rel = path.relative_to(ROOT)
        lines = path.read_text(errors="replace").splitlines()
        columns, header = {}, ""  # Markdown table being read: column -> row template, its header line
        for n, line in enumerate(lines, 1):
            where = f"{rel}:{n}"
            cells, starts = table_cells(line)
            if cells is None:
                columns = {}
            elif not columns and any(HEADER_RE.search(c) for c in cells) and n < len(lines) \
                    and re.match(r"\s*\|\s*:?-{3,}", lines[n]):  # a header: a | --- | line follows
                columns = {i: HEADER_RE.search(c).group("row") for i, c in enumerate(cells) if HEADER_RE.search(c)}
                header = line
                continue
            elif columns and not cells[0].startswith("---"):
                step = re.search(r"`([^`]+)`", cells[0])
                for i, template in columns.items():
                    cell = cells[i] if i < len(cells) else ""
                    if cell in ("", "-"):
                        continue
                    if not step:
                        self.fail(where, "a row of a results table needs its step as the first `word`")
                        break
                    parts = template.split("/")
                    impl, _, word = step.group(1).rpartition("/")
                    if len(parts) == 4:
                        parts[1], parts[2] = impl or parts[1], parts[2].replace("{step}", word)
                    self.quote(where, "/".join(parts), cell, whole=True, spot=(path, n, starts[i]), header=header)
                continue
            for m in QUOTE_RE.finditer(line):
                self.quote(where, m.group("row"), line[m.end():], whole=False, spot=(path, n, m.end()),
                           next_line=lines[n] if n < len(lines) else "")
            if re.search(r"\bMeasured( \(|:)", line) and not line.lstrip().startswith("#") \
                    and "(results:" not in line and "pending" not in line:
                self.fail(where, "a 'Measured' line must quote a results row: Measured (results: op/impl/step/shape): "
                                 "VALUE UNIT, or say pending")
            m = re.search(rf"\bmeasured:? ~?{NUM}(?:-{NUM})? ?(GB/s|TB/s|TFLOP/s|ms|us)\b", line, re.I)
            if m:
                self.fail(where, f"'{m.group(0)}': quote the results row instead of copying the number")


def table_cells(line):
    """A Markdown table line's stripped cells and the column where each starts; (None, None)
    for another line."""
    if not line.lstrip().startswith("|"):
        return None, None
    s = line.strip()
    pos = len(line) - len(line.lstrip()) + len(s) - len(s.lstrip("|"))
    cells, starts = [], []
    for c in s.strip("|").split("|"):
        cells.append(c.strip())
        starts.append(pos + len(c) - len(c.lstrip()))
        pos += len(c) + 1
    return cells, starts


def scanned_files():
    for entry in SCANNED:
        for base in sorted(ROOT.glob(entry)):
            files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
            yield from (p for p in files if p.suffix in SUFFIXES)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--page", type=pathlib.Path, default=ROOT / "docs" / "results.md")
    ap.add_argument("--list", action="store_true", help="print the page's row names and exit")
    ap.add_argument("--update", action="store_true",
                    help="rewrite every disagreeing quote to the page's numbers, then check again")
    args = ap.parse_args()
    page = Page(args.page)
    if args.list:
        print("\n".join("/".join(k) + f"  {v['value']} {v['unit']}" for k, v in page.rows.items()))
        return 0
    files = list(scanned_files())
    checker = Checker(page)
    for path in files:
        checker.file(path)
    if args.update:
        changes = checker.update()
        print("\n".join(changes + [f"[check_numbers] updated {len(changes)} numbers in "
                                    f"{len({c.split(':')[0] for c in changes})} files"]))
        checker = Checker(page)
        for path in files:
            checker.file(path)
    for e in checker.errors:
        print(e)
    status = "FAILED" if checker.errors else "ok"
    print(f"[check_numbers] {status}: {checker.quotes} quotes checked, {checker.pending} pending, in {len(files)} files "
          f"against {len(page.rows)} rows of {args.page.name}; {len(checker.errors)} problems")
    return 1 if checker.errors else 0


if __name__ == "__main__":
    sys.exit(main())
