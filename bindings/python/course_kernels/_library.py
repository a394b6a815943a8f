"""Finding, loading and calling the C ABI libraries (bindings/include/course_bridge.h).

Search order for ``libcourse_bridge_<impl>.so``:

1. ``$COURSE_BRIDGE_LIB``: a library file or a folder holding the libraries (a file's own
   folder is searched for the other implementation);
2. ``<repository>/build*/bindings/`` (``build``, ``build-gpu``, ``build-ci``, ...), the most
   recently built first, where ``<repository>`` is the checkout this package lives in
   (an editable install), else the first folder above the current directory that holds
   ``bindings/include/course_bridge.h``.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
from ctypes import POINTER, c_char_p, c_float, c_int, c_int64, c_size_t, c_void_p
from pathlib import Path
from typing import Dict, List, Optional

ABI_VERSION = 1
IMPLS = ("solution", "exercise")
ENV_VAR = "COURSE_BRIDGE_LIB"
HEADER = Path("bindings") / "include" / "course_bridge.h"


class CourseError(RuntimeError):
    """Base class of every error the course kernels report."""


class InvalidArgumentError(CourseError, ValueError):
    """A bad size, stride, pointer, dtype, option or step name (status 1)."""


class StubNotImplementedError(CourseError, NotImplementedError):
    """An exercise stub not yet written, or an op missing from this build (status 2).
    The message names the file to edit."""


class UnsupportedError(CourseError):
    """This GPU or build cannot run the step, e.g. a Hopper-only step elsewhere (status 3)."""


class CudaError(CourseError):
    """A CUDA call or kernel launch failed (status 4)."""


class NoGpuError(CudaError):
    """No GPU to run on: no NVIDIA driver, or no device (status 6). The first line of the
    message says so; the CUDA runtime's own error follows on the next."""


class LibraryNotFoundError(CourseError, FileNotFoundError):
    """No built libcourse_bridge_<impl>.so was found (build it with CMake first)."""


_STATUS_ERRORS = {1: InvalidArgumentError, 2: StubNotImplementedError, 3: UnsupportedError, 4: CudaError,
                  6: NoGpuError}

_P = c_void_p
_I64 = c_int64
_STRIDES = POINTER(c_int64)

# Every exported function: name -> (restype, argtypes). Mirrors course_bridge.h.
_SIGNATURES = {
    "course_bridge_abi_version": (c_int, []),
    "course_bridge_impl": (c_char_p, []),
    "course_last_error": (c_char_p, []),
    "course_list_ops": (c_char_p, []),
    "course_list_steps": (c_char_p, [c_char_p]),
    "course_step_summary": (c_char_p, [c_char_p, c_char_p]),
    "course_op_available": (c_int, [c_char_p]),
    "course_malloc": (c_int, [c_size_t, POINTER(c_void_p)]),
    "course_free": (c_int, [_P]),
    "course_memcpy": (c_int, [_P, _P, c_size_t]),
    "course_stream_synchronize": (c_int, [_P]),
    "course_reduce_workspace_bytes": (c_int, [_I64, POINTER(c_size_t)]),
    "course_l2_norm": (c_int, [c_char_p, _P, _I64, _P, _P, c_size_t, _P]),
    "course_dot": (c_int, [c_char_p, _P, _P, _I64, _P, _P, c_size_t, _P]),
    "course_softmax_workspace_bytes": (c_int, [c_char_p, _I64, _I64, c_int, POINTER(c_size_t)]),
    "course_softmax": (c_int, [c_char_p, _P, _P, _I64, _I64, _I64, _I64, c_int, _P, c_size_t, _P]),
    "course_matmul": (c_int, [c_char_p, _P, _P, _P, _I64, _I64, _I64, _I64, _I64, _I64, c_float, c_float, _P]),
    "course_matmul_tc": (c_int, [c_char_p, _P, _P, _P, _I64, _I64, _I64, _I64, _I64, _I64, _P]),
    "course_batched_gemm_strided_f32": (c_int, [c_char_p, _P, _P, _P, _I64, _I64, _I64, _I64, _I64, _STRIDES,
                                                _STRIDES, _STRIDES, c_int, c_int, c_float, _P]),
    "course_batched_gemm_strided_bf16": (c_int, [c_char_p, _P, _P, _P, _I64, _I64, _I64, _I64, _I64, _STRIDES,
                                                 _STRIDES, _STRIDES, c_int, c_int, c_float, _P]),
    "course_batched_gemm_ptr_array_f32": (c_int, [c_char_p, _P, _P, _P, _I64, _I64, _I64, _I64, _I64, _I64, _I64,
                                                  _I64, c_int, c_int, c_float, _P]),
    "course_batched_gemm_ptr_array_bf16": (c_int, [c_char_p, _P, _P, _P, _I64, _I64, _I64, _I64, _I64, _I64, _I64,
                                                   _I64, c_int, c_int, c_float, _P]),
    "course_attention_workspace_bytes": (c_int, [c_char_p, _I64, _I64, _I64, _I64, POINTER(c_size_t)]),
    "course_attention_forward": (c_int, [c_char_p, _P, _P, _P, _P, _P, _I64, _I64, _I64, _I64, _I64, _I64,
                                         _STRIDES, _STRIDES, _STRIDES, _STRIDES, c_float, c_int, c_int, c_float,
                                         c_int, _P, c_size_t, _P]),
    "course_attention_forward_bf16": (c_int, [c_char_p, _P, _P, _P, _P, _P, _I64, _I64, _I64, _I64, _I64, _I64,
                                              _STRIDES, _STRIDES, _STRIDES, _STRIDES, c_float, c_int, _P]),
    "course_softmax_backward_workspace_bytes": (c_int, [c_char_p, _I64, _I64, c_int, POINTER(c_size_t)]),
    "course_softmax_backward": (c_int, [c_char_p, _P, _P, _P, _I64, _I64, _I64, _I64, _I64, c_int, _P, c_size_t,
                                        _P]),
    "course_linear_backward": (c_int, [c_char_p, _P, _P, _P, _P, _P, _P, _I64, _I64, _I64, _I64, _I64, _I64, _I64,
                                       _I64, _P]),
    "course_attention_backward_workspace_bytes": (c_int, [c_char_p, _I64, _I64, _I64, _I64, POINTER(c_size_t)]),
    "course_attention_backward": (c_int, [c_char_p, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I64, _I64, _I64, _I64,
                                          _I64, _I64, _STRIDES, _STRIDES, _STRIDES, _STRIDES, _STRIDES, _STRIDES,
                                          _STRIDES, _STRIDES, c_float, c_int, _P, c_size_t, _P]),
    "course_attention_backward_bf16_workspace_bytes": (c_int, [c_char_p, _I64, _I64, _I64, _I64, _I64,
                                                               POINTER(c_size_t)]),
    "course_attention_backward_bf16": (c_int, [c_char_p, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I64, _I64, _I64,
                                               _I64, _I64, _I64, _STRIDES, _STRIDES, _STRIDES, _STRIDES, _STRIDES,
                                               _STRIDES, _STRIDES, _STRIDES, c_float, c_int, _P, c_size_t, _P]),
}


def library_filename(impl: str) -> str:
    """The file name of one implementation's library on this platform."""
    if sys.platform == "win32":
        return f"course_bridge_{impl}.dll"
    return f"libcourse_bridge_{impl}.so"


def repository_root() -> Optional[Path]:
    """The course checkout: the one this package lives in, else one above the current directory."""
    here = Path(__file__).resolve()
    for base in (here.parents[3] if len(here.parents) > 3 else None, *Path.cwd().resolve().parents, Path.cwd()):
        if base is not None and (base / HEADER).is_file():
            return base
    return None


def candidate_paths(impl: str) -> List[Path]:
    """Where the library of `impl` may be, in search order (existing files only)."""
    name = library_filename(impl)
    found: List[Path] = []
    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env).expanduser()
        if p.is_file() and p.name == name:
            found.append(p)
        folder = p if p.is_dir() else p.parent
        if (folder / name).is_file() and folder / name not in found:
            found.append(folder / name)
    root = repository_root()
    if root is not None:
        built = [d / "bindings" / name for d in root.glob("build*") if (d / "bindings" / name).is_file()]
        found += sorted(built, key=lambda f: f.stat().st_mtime, reverse=True)
    return found


def _searched(impl: str) -> str:
    root = repository_root()
    where = [f"${ENV_VAR} ({os.environ.get(ENV_VAR) or 'unset'})"]
    where.append(f"{root}/build*/bindings/" if root else "no course checkout found above this package or the "
                 "current directory")
    return "; ".join(where)


class Library:
    """One loaded implementation (solution or exercise) of the C ABI."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._dll = ctypes.CDLL(str(self.path))
        self.missing = []  # functions added to the ABI after this library was built
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(self._dll, name, None)
            if fn is None:
                self.missing.append(name)
                continue
            fn.restype = restype
            fn.argtypes = argtypes
        version = self._dll.course_bridge_abi_version()
        if version != ABI_VERSION:
            raise CourseError(f"{self.path}: C ABI version {version}, this package speaks version {ABI_VERSION}; "
                              "rebuild the library or update the package")
        self.impl: str = self._dll.course_bridge_impl().decode()
        self._step_names: Dict[str, frozenset] = {}

    def __repr__(self) -> str:
        return f"<course_kernels.Library {self.impl} at {self.path}>"

    def raw(self, name: str):
        """The ctypes function `name` (argtypes set), for callers that check arguments themselves."""
        return getattr(self._dll, name)

    def last_error(self) -> str:
        return self._dll.course_last_error().decode(errors="replace")

    def call(self, name: str, *args) -> None:
        """Calls `name`; a non-zero status raises the matching CourseError with the C message."""
        if name in self.missing:
            raise CourseError(f"{self.path} has no {name}: rebuild course_bridge_{self.impl}")
        status = getattr(self._dll, name)(*args)
        if status != 0:
            raise _STATUS_ERRORS.get(status, CourseError)(f"[{self.impl}] {self.last_error()}")

    def ops(self) -> List[str]:
        return self._dll.course_list_ops().decode().split(",")

    def steps(self, op: str) -> List[str]:
        names = self._dll.course_list_steps(op.encode())
        if names is None:
            raise InvalidArgumentError(self.last_error())
        return [n for n in names.decode().split(",") if n]

    def step_summary(self, op: str, step: str) -> str:
        summary = self._dll.course_step_summary(op.encode(), step.encode())
        if summary is None:
            raise InvalidArgumentError(self.last_error())
        return summary.decode()

    def require_step(self, op: str, step: str) -> None:
        """Raises InvalidArgumentError unless `step` is a step of `op`: the check the C++ side
        makes first, made here before any output or workspace is allocated (so a wrong name
        is reported as such on a machine without a GPU too). The message is the C++ one."""
        names = self._step_names.get(op)
        if names is None:
            names = self._step_names[op] = frozenset(self.steps(op))
        if step not in names:
            self._dll.course_step_summary(op.encode(), step.encode())  # fails, leaving the message
            raise InvalidArgumentError(f"[{self.impl}] {self.last_error()}")

    def op_available(self, op: str) -> bool:
        """True if this build contains `op`; unknown ops raise InvalidArgumentError."""
        state = self._dll.course_op_available(op.encode())
        if state < 0:
            raise InvalidArgumentError(f"unknown op {op!r}; the ops are: {', '.join(self.ops())}")
        return state == 1

    def workspace_bytes(self, name: str, *args) -> int:
        """Calls a course_*_workspace_bytes function; returns the byte count."""
        out = c_size_t(0)
        self.call(name, *args, ctypes.byref(out))
        return out.value


_lock = threading.Lock()
_loaded: Dict[str, Library] = {}


def library(impl: str = "solution") -> Library:
    """The loaded library of `impl` ("solution" or "exercise"), loaded once per process."""
    if impl not in IMPLS:
        raise ValueError(f"impl: {impl!r} is not one of {', '.join(map(repr, IMPLS))}")
    with _lock:
        if impl not in _loaded:
            paths = candidate_paths(impl)
            if not paths:
                raise LibraryNotFoundError(
                    f"{library_filename(impl)} not found (searched {_searched(impl)}). Build it: "
                    f"cmake --build build --target course_bridge_{impl}  (or set ${ENV_VAR})")
            lib = Library(paths[0])
            if lib.impl != impl:
                raise CourseError(f"{paths[0]} implements {lib.impl!r}, not {impl!r}")
            _loaded[impl] = lib
        return _loaded[impl]


def library_path(impl: str = "solution") -> Path:
    """Path of the library `library(impl)` loads (or would load)."""
    if impl in _loaded:
        return _loaded[impl].path
    paths = candidate_paths(impl)
    if not paths:
        raise LibraryNotFoundError(f"{library_filename(impl)} not found (searched {_searched(impl)})")
    return paths[0]
