"""The build folder, configuring it, building only the targets a command needs, and the
compiler's errors out of Ninja's log (a failed build stops the command: no test runs)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

from .common import ROOT, TTY, CourseError, rel, say


def build_dir_of(args) -> Tuple[Path, str]:
    """(build folder, preset): --build-dir, $COURSE_BUILD_DIR, or the folder of --preset /
    $PRESET / "default" (the preset is "" for a folder given by path)."""
    if getattr(args, "build_dir", None):
        return Path(args.build_dir).resolve(), ""
    if os.environ.get("COURSE_BUILD_DIR"):
        return Path(os.environ["COURSE_BUILD_DIR"]).resolve(), ""
    preset = getattr(args, "preset", None) or os.environ.get("PRESET") or "default"
    return (ROOT / ("build" if preset == "default" else f"build-{preset}")), preset


def ensure_nvcc_on_path() -> None:
    if not shutil.which("nvcc") and Path("/usr/local/cuda/bin/nvcc").exists():
        os.environ["PATH"] = "/usr/local/cuda/bin:" + os.environ.get("PATH", "")


def configure(build: Path, preset: str) -> None:
    if (build / "CMakeCache.txt").exists():
        return
    if not preset:
        raise CourseError(f"{build} is not a configured build folder (no CMakeCache.txt)")
    say(f"[course] configuring {rel(build)} (cmake --preset {preset})")
    r = subprocess.run(["cmake", "--preset", preset], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        say(r.stdout)
        raise CourseError("configure failed (above)")


def compiler_errors(log: str, limit: int = 60) -> str:
    """The failing commands' diagnostics from a Ninja log, without the command lines."""
    lines = log.splitlines()
    out: List[str] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("FAILED:"):
            out.append(lines[i])
            i += 1
            # Ninja echoes the failed command next: long, starts with a compiler or `cd`.
            if i < len(lines) and (len(lines[i]) > 160 or re.match(r"^(cd |/|\S*(nvcc|c\+\+|g\+\+|clang))", lines[i])):
                i += 1
            while i < len(lines) and not re.match(r"^\[\d+/\d+\]|^ninja: |^FAILED:", lines[i]):
                out.append(lines[i])
                i += 1
            continue
        i += 1
    if not out:  # not Ninja's format: show the tail
        out = [l for l in lines if l.strip()][-limit:]
    if len(out) > limit:
        out = out[:limit] + [f"... ({len(out) - limit} more lines: rerun `cmake --build` to see them all)"]
    return "\n".join(out)


def build_targets(build: Path, preset: str, targets: List[str]) -> None:
    """Builds only `targets`; on a compile error prints the compiler's lines and stops."""
    configure(build, preset)
    say(f"[course] building {' '.join(targets)}")
    cmd = ["cmake", "--build", str(build), "--target", *targets]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = []
    for line in proc.stdout:
        log.append(line)
        if TTY and re.match(r"^\[\d+/\d+\]", line):
            sys.stdout.write("\r\033[K  " + line.strip()[:110])
            sys.stdout.flush()
    proc.wait()
    if TTY:
        sys.stdout.write("\r\033[K")
    if proc.returncode != 0:
        say(compiler_errors("".join(log)))
        raise CourseError("[course] the build failed (compiler output above): fix it, then run the same "
                          "command again. No test ran: the old binaries do not count.")
