"""What a test's result means, and a step's state from its tests' results.

A result comes from a gtest run (runner.py) or a ctest JUnit file (junit.py); a skip is
classified by its message (not implemented yet, no GPU, unsupported here). The state rule,
state_of, uses the reach log: which tests were once seen reaching a stub.
"""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from .common import first_lines, rel

_NO_GPU_RE = re.compile(r"no (usable )?(CUDA device|NVIDIA GPU)|need(s)? an NVIDIA GPU", re.I)


@dataclass
class TestResult:
    name: str
    kind: str  # passed failed not_implemented no_gpu unsupported skipped crashed
    message: str = ""
    output: str = ""


def classify_skip(message: str) -> str:
    if "not implemented yet" in message:
        return "not_implemented"
    if "unsupported here" in message:
        return "unsupported"
    if _NO_GPU_RE.search(message):
        return "no_gpu"
    return "skipped"


def skip_message(lines: List[str]) -> str:
    for i, l in enumerate(lines):
        if re.search(r":\d+: Skipped$", l) or l.strip() == "Skipped":
            return "\n".join(x for x in lines[i + 1:] if x.strip()).strip()
    return "\n".join(lines).strip()


STATE_LABEL = {
    "done": "done",
    "failing": "failing",
    "in_progress": "in progress",
    "not_started": "not started",
    "needs_gpu": "needs a GPU",
    "unsupported": "unsupported here",
    "skipped": "skipped",
    "no_tests": "no tests",
}


@dataclass
class StepState:
    state: str
    detail: str = ""
    results: List[TestResult] = field(default_factory=list)
    file: str = ""  # the file to edit (from NotImplemented)

    def count(self, kind: str) -> int:
        return sum(1 for r in self.results if r.kind == kind)


class ReachLog:
    """The exercise tests seen skipping with NotImplemented, with the stub each one reached
    (the exception's first words, "softmax step block_per_row (dim = 1: ...)"). Kept in
    <build>/course/reaches_stub.json by every run: a test that passes on an untouched stub
    (argument checks, rejected layouts) never appears in it."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.stubs: Dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:
            self.stubs = {}
        if not isinstance(self.stubs, dict):
            self.stubs = {}
        self._lock = threading.Lock()

    def add(self, results: List[TestResult]) -> Dict[str, str]:
        """Logs the results' NotImplemented tests (saved at once); returns the whole log."""
        new = {r.name: r.message.split(" -- edit")[0] for r in results if r.kind == "not_implemented"}
        with self._lock:
            if any(self.stubs.get(k) != v for k, v in new.items()):
                self.stubs.update(new)
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.write_text(json.dumps(self.stubs, indent=0, sort_keys=True) + "\n")
            return dict(self.stubs)


def state_of(results: List[TestResult], reached: Optional[Dict[str, str]] = None, step: str = "") -> StepState:
    """done: every test passes (or skips for a reason other than a missing GPU or stub);
    failing: one fails or crashes; needs a GPU: some skipped because there is no device;
    in progress: some skip with NotImplemented, and one that passes once reached a stub of
    this step (`reached`: ReachLog.add, test -> the stub it reached, which names its step);
    not started: some skip with NotImplemented and no passing test is such progress -- those
    that pass on an untouched stub check arguments before any launch, or reach another
    step's code."""
    reached = reached or {}
    st = StepState("no_tests", results=results)
    if not results:
        st.detail = "no exercise test belongs to this step"
        return st
    n = len(results)
    bad = [r for r in results if r.kind in ("failed", "crashed")]
    ni = [r for r in results if r.kind == "not_implemented"]
    if ni:
        m = re.search(r"-- edit (\S+)", ni[0].message)
        st.file = rel(m.group(1)) if m else ""
    passed = st.count("passed")
    progress = [r for r in results if r.kind == "passed" and r.name in reached and step in reached[r.name]]
    if bad:
        st.state = "failing"
        st.detail = f"{len(bad)} of {n} tests fail; first: {bad[0].name}\n" + first_lines(bad[0].message, 8)
    elif ni and progress:
        st.state, st.detail = "in_progress", f"{passed} of {n} tests pass, {len(ni)} not implemented yet"
    elif ni:
        st.state, st.detail = "not_started", ni[0].message.split(" -- edit")[0]
    elif st.count("no_gpu"):
        st.state = "needs_gpu"
        st.detail = f"{st.count('no_gpu')} of {n} tests need an NVIDIA GPU" + (
            f" ({passed} CPU tests pass)" if passed else "")
    elif passed:
        other = n - passed
        st.state = "done"
        st.detail = f"{passed} tests pass" + (f", {other} skipped: " + next(
            r.message for r in results if r.kind != "passed").splitlines()[0] if other else "")
    elif st.count("unsupported"):
        st.state, st.detail = "unsupported", next(r.message for r in results if r.kind == "unsupported")
    else:
        st.state, st.detail = "skipped", results[0].message.splitlines()[0] if results[0].message else ""
    return st
