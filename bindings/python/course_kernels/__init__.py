"""course_kernels: call the CUDA kernel course's ops -- the solution or your own -- from Python.

The package loads ``libcourse_bridge_solution.so`` / ``libcourse_bridge_exercise.so``
(built by the course's CMake, target ``course_bridge_solution`` / ``course_bridge_exercise``)
with ctypes. PyTorch is optional: pass torch CUDA tensors and get torch tensors back,
launched on torch's current stream; or pass any object with ``__cuda_array_interface__``
(CuPy, Numba, ``DeviceArray``).

Five lines::

    import torch, course_kernels as ck
    x = torch.randn(4096, 1024, device="cuda")
    y = ck.softmax(x, dim=-1)                              # the solution's top step
    mine = ck.softmax(x, dim=-1, step="warp_per_row", impl="exercise")   # your kernel
    torch.testing.assert_close(mine, torch.softmax(x, -1))

Ops (module): l2_norm, dot, softmax, matmul, matmul_tc (1); batched_gemm,
batched_gemm_ptr_array (2); attention, float32 or bfloat16 (3); softmax_backward,
linear_backward, attention_backward, float32 or bfloat16 (4). Every op takes ``step=`` (a
name from ``steps(op)``), ``impl="solution" | "exercise"``, ``out=`` and ``stream=``.

``attention`` is differentiable: for torch tensors that require grad it runs through
``AttentionFunction`` (module 3's forward, module 4's backward), so the course's attention
can train a PyTorch model.

Errors: argument problems found in Python raise TypeError / ValueError naming the
argument; the C++ validation's reports arrive as InvalidArgumentError (a ValueError), an
unwritten exercise stub as StubNotImplementedError (a NotImplementedError) naming the file
to edit, a step this GPU cannot run as UnsupportedError, CUDA failures as CudaError --
NoGpuError (a CudaError) when there is no GPU or driver at all. Step names, dtypes and
shapes are checked before anything is allocated, so they are reported as such without a
GPU too.

Finding the library: ``$COURSE_BRIDGE_LIB`` (a file or folder), else the checkout's
``build*/bindings/`` folders, newest first; ``library_path(impl)`` says which one.
"""
from __future__ import annotations

from typing import List, Tuple

from ._arrays import DeviceArray
from ._library import (ABI_VERSION, CourseError, CudaError, InvalidArgumentError, Library, LibraryNotFoundError,
                       NoGpuError, StubNotImplementedError, UnsupportedError, library, library_path)
from .ops import (DEFAULT_STEPS, attention, attention_backward, batched_gemm, batched_gemm_ptr_array, dot, l2_norm,
                  linear_backward, matmul, matmul_tc, softmax, softmax_backward)

__version__ = "0.1.0"

for _cls in (CourseError, CudaError, InvalidArgumentError, LibraryNotFoundError, NoGpuError, StubNotImplementedError,
             UnsupportedError, DeviceArray, Library):
    _cls.__module__ = __name__  # help() shows course_kernels.X, the public name
del _cls

__all__ = [
    "l2_norm", "dot", "softmax", "matmul", "matmul_tc", "batched_gemm", "batched_gemm_ptr_array", "attention",
    "softmax_backward", "linear_backward", "attention_backward",
    "ops", "steps", "available", "library", "library_path", "device_array",
    "CourseError", "InvalidArgumentError", "StubNotImplementedError", "UnsupportedError", "CudaError",
    "NoGpuError", "LibraryNotFoundError", "DeviceArray", "Library", "DEFAULT_STEPS", "ABI_VERSION",
    "AttentionFunction",
]


def __getattr__(name: str):
    """``AttentionFunction`` is a torch.autograd.Function: importing it imports torch, so it
    is loaded on first use (the package itself never imports torch)."""
    if name == "AttentionFunction":
        from .autograd import AttentionFunction
        return AttentionFunction
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def ops(impl: str = "solution") -> List[str]:
    """The op names the library knows, e.g. ['l2_norm', 'dot', 'softmax', ...]."""
    return library(impl).ops()


def steps(op: str, impl: str = "solution") -> List[Tuple[str, str]]:
    """(name, summary) of every step of `op`, in ladder order (from the C++ step table)."""
    lib = library(impl)
    return [(s, lib.step_summary(op, s)) for s in lib.steps(op)]


def available(op: str, impl: str = "solution") -> bool:
    """True if the `impl` library contains `op` (False while a module is still being written)."""
    return library(impl).op_available(op)


def device_array(shape, dtype: str = "float32", data: bytes = None, impl: str = "solution") -> DeviceArray:
    """A device allocation without torch (cudaMalloc through the bridge), optionally filled
    from host bytes; dtype "float32", "bfloat16", "int64" or "uint8"."""
    lib = library(impl)
    if data is None:
        return DeviceArray(lib, shape, dtype)
    return DeviceArray.from_bytes(lib, data, shape, dtype)

# Module 4's fused cross-entropy (self-contained block, see ops.cross_entropy).
from .ops import cross_entropy  # noqa: E402

__all__.append("cross_entropy")

# Module 4's AdamW and GELU, module 1's tensor-core matmul with the linear-layer options:
# adamw, gelu, gelu_backward (module 4); matmul_tc_ex, linear (module 1's matmul_tc options).
from .ops import adamw, gelu, gelu_backward, linear, matmul_tc_ex  # noqa: E402

__all__ += ["adamw", "gelu", "gelu_backward", "linear", "matmul_tc_ex"]

# Module 4's LayerNorm: layer_norm (forward, optionally the row statistics) and
# layer_norm_backward (dx, dgamma, dbeta), fp32 or bf16 activations with fp32 parameters.
from .ops import layer_norm, layer_norm_backward  # noqa: E402

__all__ += ["layer_norm", "layer_norm_backward"]
