"""Shared fixtures: fake __cuda_array_interface__ objects and GPU/torch detection."""
import ctypes
import functools
import pathlib
import sys

import pytest

try:
    import course_kernels  # noqa: F401  (installed: pip install -e bindings/python)
except ImportError:  # run from the source tree without installing
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    import course_kernels  # noqa: F401


class FakeArray:
    """Anything with __cuda_array_interface__: a device pointer that is never dereferenced
    (the calls under test fail validation before any launch)."""

    _next = 1

    def __init__(self, shape, typestr="<f4", ptr=None, strides=None, readonly=False):
        if ptr is None:  # distinct, 256-byte aligned, far apart
            ptr = (1 << 40) + FakeArray._next * (1 << 32)
            FakeArray._next += 1
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, readonly),
                                         "version": 3, "strides": strides}


@pytest.fixture
def fake():
    return FakeArray


@functools.lru_cache(maxsize=None)
def gpu_reason():
    """None when a CUDA device is usable through the bridge, else why not."""
    import course_kernels as ck
    lib = ck.library("solution")
    ptr = ctypes.c_void_p(0)
    try:
        lib.call("course_malloc", 4, ctypes.byref(ptr))
    except ck.CudaError as e:
        return "no usable CUDA device: " + str(e).splitlines()[0]
    lib.call("course_free", ptr.value)
    return None


@functools.lru_cache(maxsize=None)
def torch_reason():
    """None when torch with CUDA is importable, else why not."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed (the GPU tests compare with torch)"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords:
            reason = gpu_reason() or torch_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"GPU test skipped: {reason}"))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device and PyTorch; skipped with the reason otherwise")
