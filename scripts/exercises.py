#!/usr/bin/env python3
"""Exercise stubs generated from their solutions: the code a stub gives exists once.

A converted stub, exercises/<module>/<file>, is its solution, solutions/<module>/<file>,
with each step's idea taken out. Both files mark the parts that differ:

    // @step <name>    (the rest of the line is free text)
    ...                what the learner writes (stub) / the answer (solution)
    // @end

Everything outside those regions is given code, and its one source is the solution: the
stub's copy is generated from it (course::solution becoming course::exercise). Each file
keeps its own opening comment block (the @file banner) and its own region contents; the
n-th region of the stub pairs with the n-th of the solution and must carry the same name.

    python3 scripts/exercises.py check      # CI: every converted stub is what generate writes
    python3 scripts/exercises.py generate   # rewrite the converted stubs from their solutions
    python3 scripts/exercises.py list       # generated, shared, partly shared or hand-kept stubs

generate refuses (exit 1, naming file and line) to rewrite a stub whose lines outside its
regions are not what the solution generates there: those lines would be lost. Move what
belongs to the learner into a region, put given code in the solution, or pass --force.

A stub that includes its solution's kernels instead (module 4's attention_backward_tc.cu,
module 3's attention_tc.cu and attention_tc_hopper.cu) and writes only phases has one source
by construction and needs no markers. list tells such a stub from one that includes a
solution header but still keeps hand-kept copies of given code: for each stub that is not
generated it counts the code lines that also stand in a solution file of its module (its
"mirror lines", the code that can drift; comments, signatures -- the compiler checks those
against their callers -- and thin lines such as `}` or `__syncthreads();` do not count).
A stub that includes a solution file and has no mirror line is one source; one that has
some is "partly shared". Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ROOT / "exercises"
SOLUTIONS = ROOT / "solutions"
SUFFIXES = (".cu", ".cuh")

BEGIN = re.compile(r"^\s*// @step (\S+)")
END = re.compile(r"^\s*// @end\b")
SHARED_INCLUDE = re.compile(r'^#include "\.\./\.\./(solutions/[^"]+)"')
SIGNATURE = re.compile(r"\b__(device|global|host)__\b")
QUALIFIED_CALL = re.compile(r"[\w:]+::\w+(<.*>)?\(.*\);")  # a call into shared code, e.g. m04::validate_...(...);
TOKEN = re.compile(r"[A-Za-z_]\w*|\d+")


class MarkerError(Exception):
    pass


@dataclass
class Parsed:
    header: list[str]  # the opening comment block: each file's own
    given: list[list[str]] = field(default_factory=list)  # len(regions) + 1 chunks
    given_at: list[int] = field(default_factory=list)  # 0-based line index of each chunk's first line
    regions: list[tuple[str, list[str]]] = field(default_factory=list)  # (name, lines with markers)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def parse(path: Path) -> Parsed:
    lines = path.read_text().splitlines(keepends=True)
    n = 0
    while n < len(lines) and (lines[n].lstrip().startswith("//") or lines[n].startswith("#pragma once")):
        n += 1
    out = Parsed(header=lines[:n], given_at=[n])
    chunk: list[str] = []
    region: list[str] | None = None
    name = ""
    for i in range(n, len(lines)):
        line = lines[i]
        begin, end = BEGIN.match(line), END.match(line)
        if region is None:
            if end:
                raise MarkerError(f"{rel(path)}:{i + 1}: '// @end' without a '// @step <name>' above it")
            if begin:
                out.given.append(chunk)
                chunk, region, name = [], [line], begin.group(1)
            else:
                chunk.append(line)
        else:
            if begin:
                raise MarkerError(f"{rel(path)}:{i + 1}: '// @step {begin.group(1)}' inside region '{name}' "
                                  "(regions do not nest: close it with '// @end' first)")
            region.append(line)
            if end:
                out.regions.append((name, region))
                out.given_at.append(i + 1)
                region = None
    if region is not None:
        raise MarkerError(f"{rel(path)}: region '{name}' is never closed with '// @end'")
    out.given.append(chunk)
    return out


def to_exercise(line: str) -> str:
    return line.replace("course::solution", "course::exercise")


def pair(stub: Path, solution: Path) -> tuple[Parsed, Parsed]:
    s, p = parse(stub), parse(solution)
    names_s = [n for n, _ in s.regions]
    names_p = [n for n, _ in p.regions]
    if names_s != names_p:
        raise MarkerError(f"{rel(stub)} and {rel(solution)} mark different regions:\n"
                          f"  stub:     {' '.join(names_s) or '(none)'}\n"
                          f"  solution: {' '.join(names_p) or '(none)'}")
    return s, p


def generate(stub: Path, solution: Path) -> str:
    """The stub as it must be: its header and regions, the solution's given code."""
    s, p = pair(stub, solution)
    text = list(s.header)
    for k, chunk in enumerate(p.given):
        text += [to_exercise(line) for line in chunk]
        if k < len(s.regions):
            text += s.regions[k][1]
    return "".join(text)


def lost_lines(stub: Path, solution: Path) -> list[tuple[int, str]]:
    """(1-based line, text) of every non-blank stub line outside the regions that generate
    would drop or replace: it is not what the solution gives at that place. Lines the
    solution adds are no loss; a line that only moves between the stub's given chunks is
    counted, since generate puts the solution's chunk, not the stub's, at each place."""
    s, p = pair(stub, solution)
    lost = []
    for have, start, want in zip(s.given, s.given_at, p.given):
        want = [to_exercise(line) for line in want]
        ops = difflib.SequenceMatcher(None, have, want, autojunk=False).get_opcodes()
        for tag, i1, i2, _, _ in ops:
            if tag in ("replace", "delete"):
                lost += [(start + i + 1, have[i].rstrip("\n")) for i in range(i1, i2) if have[i].strip()]
    return lost


def code_lines(text: str) -> list[tuple[int, str]]:
    """(1-based line, normalised text) of the lines of code that could be a hand-kept copy of
    given code. Left out: blank lines, comments, preprocessor lines, `namespace` and `using`
    lines, lines naming `solution::` (they use the shared code), a whole-line call of a
    qualified function (a call into shared code), function signatures (`template <...>`,
    lines with __device__/__global__/__host__, an unindented `name(...)` header, up to the
    line ending in `{` or `;`: the compiler checks a signature against its callers), and
    thin lines of fewer than three names and numbers (`}`, `return;`, `__syncthreads();`)."""
    out = []
    in_signature = False
    for i, line in enumerate(text.splitlines()):
        s = line.strip()
        if not s or s.startswith(("//", "/*", "*", "#")):
            continue
        s = re.sub(r"\s*//.*$", "", s)
        starts = s.startswith("template") or SIGNATURE.search(s) or (
            not line[:1].isspace() and "(" in s and not s.endswith(";"))
        if in_signature or starts:
            in_signature = not s.endswith(("{", ";", "}"))
            continue
        if "solution::" in s or s.startswith(("using ", "namespace ")) or QUALIFIED_CALL.fullmatch(s):
            continue
        if len(TOKEN.findall(s)) < 3:
            continue
        out.append((i + 1, re.sub(r"\s+", " ", s).replace("course::solution", "course::exercise")))
    return out


def mirror_lines(stub: Path) -> list[int]:
    """The stub's code lines (code_lines) that also stand in a solution file of its module."""
    pool: set[str] = set()
    for solution in sorted((SOLUTIONS / stub.parent.relative_to(EXERCISES)).glob("*")):
        if solution.suffix in SUFFIXES:
            pool.update(text for _, text in code_lines(solution.read_text()))
    return [n for n, text in code_lines(stub.read_text()) if text in pool]


def ranges(numbers: list[int], gap: int = 8) -> str:
    """[3, 4, 5, 9, 30] -> '3-9, 30': runs of lines, a gap of up to `gap` lines joined."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n - spans[-1][1] <= gap:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


@dataclass
class Unconverted:
    stub: Path
    includes: list[str]  # the solution files it includes (repository paths)
    mirror: list[int]  # its mirror lines (mirror_lines)


def classify() -> tuple[list[tuple[Path, Path]], list[Unconverted], list[Unconverted], list[Unconverted]]:
    """(converted stub, its solution) pairs; stubs that include a solution file and keep no
    mirror line (one source by construction); stubs that include a solution file but keep
    mirror lines (partly shared); stubs that include none (hand-kept)."""
    converted, shared, partly, hand = [], [], [], []
    for stub in sorted(p for p in EXERCISES.rglob("*") if p.suffix in SUFFIXES):
        text = stub.read_text()
        solution = SOLUTIONS / stub.relative_to(EXERCISES)
        if any(BEGIN.match(line) for line in text.splitlines()):
            if not solution.exists():
                raise MarkerError(f"{rel(stub)} has '// @step' regions but no solution {rel(solution)}")
            converted.append((stub, solution))
            continue
        includes = [m.group(1) for m in map(SHARED_INCLUDE.match, text.splitlines()) if m]
        entry = Unconverted(stub, includes, mirror_lines(stub))
        if not includes:
            hand.append(entry)
        elif entry.mirror:
            partly.append(entry)
        else:
            shared.append(entry)
    return converted, shared, partly, hand


def coverage(converted, shared, partly, hand) -> None:
    print(f"[exercises] generated from their solutions ({len(converted)}):")
    for stub, solution in converted:
        n = len(parse(solution).regions)
        print(f"    {rel(stub)}  <- {rel(solution)}  ({n} regions)")
    lines = lambda m: f"{len(m)} code line{'' if len(m) == 1 else 's'} that also stand{'s' if len(m) == 1 else ''}"  # noqa: E731
    module = lambda e: f"solutions/{e.stub.parent.relative_to(EXERCISES)}/"  # noqa: E731
    if shared:
        print(f"[exercises] include their solution's kernels and write only phases, one source by construction "
              f"({len(shared)}):")
        for e in shared:
            print(f"    {rel(e.stub)}  (includes {', '.join(e.includes)})")
    if partly:
        print(f"[exercises] partly shared: include a solution header, but keep hand-kept copies of given code, "
              f"not checked ({len(partly)}):")
        for e in partly:
            print(f"    {rel(e.stub)}  (includes {', '.join(e.includes)}; keeps {lines(e.mirror)} "
                  f"in {module(e)}, in lines {ranges(e.mirror)})")
    print(f"[exercises] still hand-kept copies, not checked ({len(hand)}):")
    for e in hand:
        print(f"    {rel(e.stub)}  ({lines(e.mirror).replace(' that', '')} in {module(e)})")


def cmd_check(args) -> int:
    converted, shared, partly, hand = classify()
    bad = 0
    for stub, solution in converted:
        want = generate(stub, solution)
        have = stub.read_text()
        if want == have:
            continue
        bad += 1
        print(f"[exercises] DRIFT: {rel(stub)} is not what its solution generates "
              f"(the given code lives in {rel(solution)}):", file=sys.stderr)
        diff = list(difflib.unified_diff(have.splitlines(), want.splitlines(), f"{rel(stub)} (checked in)",
                                         f"{rel(stub)} (generated)", n=1, lineterm=""))
        for line in diff[: args.lines]:
            print("    " + line, file=sys.stderr)
        if len(diff) > args.lines:
            print(f"    ... {len(diff) - args.lines} more diff lines", file=sys.stderr)
    coverage(converted, shared, partly, hand)
    if bad:
        print(f"[exercises] {bad} stub(s) drifted. Fix the given code in the solution (or a region in "
              "the stub), then: python3 scripts/exercises.py generate", file=sys.stderr)
        return 1
    print(f"[exercises] OK: {len(converted)} generated stubs match their solutions")
    return 0


def cmd_generate(args) -> int:
    converted = classify()[0]
    wanted = {Path(f).resolve() for f in args.files}
    refused = 0
    for stub, solution in converted:
        if wanted and stub not in wanted and solution not in wanted:
            continue
        text = generate(stub, solution)
        if text == stub.read_text():
            continue
        lost = lost_lines(stub, solution)
        if lost and not args.force:
            refused += 1
            print(f"[exercises] REFUSED: {rel(stub)} left as it is: {len(lost)} line(s) outside its regions are "
                  f"not what {rel(solution)} gives there, and generating would drop them:", file=sys.stderr)
            for line, content in lost[: args.lines]:
                print(f"    {rel(stub)}:{line}: {content.strip()}", file=sys.stderr)
            if len(lost) > args.lines:
                print(f"    ... {len(lost) - args.lines} more", file=sys.stderr)
            continue
        stub.write_text(text)
        print(f"[exercises] wrote {rel(stub)}" + (f" (--force: dropped {len(lost)} line(s) of the stub "
                                                  "outside its regions)" if lost else ""))
    if refused:
        print(f"[exercises] {refused} stub(s) not written. For each line above: what the learner needs goes into a "
              "region (the same '// @step' region in both files), a fix to given code goes into the solution; "
              "when every listed line may go, rerun with --force.", file=sys.stderr)
        return 1
    return 0


def cmd_list(args) -> int:
    coverage(*classify())
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="fail when a converted stub differs from what generate writes")
    c.add_argument("--lines", type=int, default=40, help="diff lines shown per stub (default 40)")
    c.set_defaults(fn=cmd_check)
    g = sub.add_parser("generate", help="rewrite converted stubs from their solutions")
    g.add_argument("files", nargs="*", help="only these stubs (or the stubs of these solutions)")
    g.add_argument("--force", action="store_true",
                   help="write even when stub lines outside the regions would be dropped (they are listed)")
    g.add_argument("--lines", type=int, default=40, help="dropped lines listed per stub (default 40)")
    g.set_defaults(fn=cmd_generate)
    sub.add_parser("list", help="which stubs are generated, shared, partly shared or hand-kept").set_defaults(
        fn=cmd_list)
    args = ap.parse_args()
    try:
        return args.fn(args)
    except MarkerError as e:
        print(f"[exercises] {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
