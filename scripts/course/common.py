"""What every part of the tool shares: the repository root, where messages go, the
learner-facing error (CourseError), and a short excerpt of a long message."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TTY = sys.stdout.isatty()

# Where messages go: stdout, or stderr while stdout carries JSON (list --json).
_messages = sys.stdout


def messages_to(stream) -> None:
    """Sends every later `say` to `stream` (list --json: stderr)."""
    global _messages
    _messages = stream


def say(msg: str = "") -> None:
    print(msg, file=_messages, flush=True)


def rel(path) -> str:
    """A path relative to the repository root when it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


class CourseError(Exception):
    """A message for the learner; exits with status 1 (2 for usage errors)."""

    def __init__(self, msg: str, status: int = 1):
        super().__init__(msg)
        self.status = status


def gpu_absent() -> str:
    """'' when `nvidia-smi -L` lists a GPU; else what the system said (course.sh's have_gpu
    and no_gpu_note ask the same)."""
    if not shutil.which("nvidia-smi"):
        return "nvidia-smi: command not found"
    r = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode == 0 and "GPU" in r.stdout:
        return ""
    return "nvidia-smi: " + (r.stdout.strip().splitlines() or ["(no output)"])[0]


def first_lines(text: str, k: int) -> str:
    lines = [l for l in text.splitlines() if l.strip()]
    return "\n".join(lines[:k]) + (f"\n... ({len(lines) - k} more lines)" if len(lines) > k else "")
