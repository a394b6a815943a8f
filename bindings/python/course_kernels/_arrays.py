"""Device arrays in and out: torch tensors or anything with ``__cuda_array_interface__``.

torch is never imported here: a tensor is recognised through ``sys.modules["torch"]``,
which is present whenever a caller holds one.
"""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

from ._library import Library

FLOAT32 = "float32"
BFLOAT16 = "bfloat16"
ITEMSIZE = {FLOAT32: 4, BFLOAT16: 2, "int64": 8, "uint8": 1}

# __cuda_array_interface__ typestr -> dtype name. NumPy has no bfloat16: a 2-byte void
# ('<V2', what ml_dtypes reports) or uint16 array is read as raw bfloat16 bits.
_TYPESTR = {"<f4": FLOAT32, "<V2": BFLOAT16, "|V2": BFLOAT16, "<u2": BFLOAT16, "<i8": "int64", "|u1": "uint8"}
_TYPESTR_OF = {FLOAT32: "<f4", BFLOAT16: "<V2", "int64": "<i8", "uint8": "|u1"}


def _torch():
    return sys.modules.get("torch")


def is_torch_tensor(obj: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(obj, torch.Tensor)


def _torch_dtype(name: str):
    torch = _torch()
    return {FLOAT32: torch.float32, BFLOAT16: torch.bfloat16, "int64": torch.int64, "uint8": torch.uint8}[name]


@dataclass
class Array:
    """What the kernels need to know about one argument."""

    name: str  # the Python argument, for messages
    obj: Any
    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  # in elements
    dtype: str
    device: Any = None  # torch.device for tensors, None otherwise
    readonly: bool = False

    @property
    def is_torch(self) -> bool:
        return self.device is not None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def as_array(obj: Any, name: str) -> Array:
    """Reads a torch tensor or a __cuda_array_interface__ object; TypeError/ValueError otherwise."""
    if is_torch_tensor(obj):
        if obj.device.type != "cuda":
            raise ValueError(f"{name}: tensor is on {obj.device}; the course kernels need a CUDA tensor (.cuda())")
        torch = _torch()
        names = {torch.float32: FLOAT32, torch.bfloat16: BFLOAT16, torch.int64: "int64", torch.uint8: "uint8"}
        dtype = names.get(obj.dtype, str(obj.dtype).replace("torch.", ""))
        return Array(name, obj, obj.data_ptr(), tuple(obj.shape), tuple(obj.stride()), dtype, obj.device)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(f"{name}: expected a torch.Tensor or an object with __cuda_array_interface__, "
                        f"got {type(obj).__name__}")
    try:
        shape = tuple(int(s) for s in cai["shape"])
        typestr = cai["typestr"]
        ptr, readonly = cai["data"]
    except (KeyError, TypeError, ValueError) as e:
        raise TypeError(f"{name}: malformed __cuda_array_interface__ ({e!r})") from None
    if cai.get("mask") is not None:
        raise ValueError(f"{name}: masked arrays are not supported")
    dtype = _TYPESTR.get(typestr, f"typestr {typestr!r}")
    itemsize = ITEMSIZE.get(dtype) or int(typestr[2:] or 1)
    byte_strides = cai.get("strides")
    if byte_strides is None:  # C-contiguous
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    else:
        if any(b % itemsize for b in byte_strides):
            raise ValueError(f"{name}: strides {tuple(byte_strides)} (bytes) are not multiples of the "
                             f"{itemsize}-byte element")
        strides = tuple(int(b) // itemsize for b in byte_strides)
    return Array(name, obj, int(ptr or 0), shape, strides, dtype, None, bool(readonly))


def check_dtype(a: Array, *allowed: str) -> None:
    if a.dtype not in allowed:
        want = " or ".join(allowed)
        raise TypeError(f"{a.name}: dtype {a.dtype}, expected {want}")


def check_ndim(a: Array, *ndims: int, what: str = "") -> None:
    if a.ndim not in ndims:
        want = " or ".join(f"{n}-D" for n in ndims)
        raise ValueError(f"{a.name}: expected a {want} array{' ' + what if what else ''}, got shape {a.shape}")


def check_shape(a: Array, expected: Sequence[Optional[int]], what: str) -> None:
    """`expected` may hold None for "any"; `what` names the dims ("[B, H, N_q, d]")."""
    ok = len(a.shape) == len(expected) and all(e is None or e == s for e, s in zip(expected, a.shape))
    if not ok:
        shown = tuple("?" if e is None else e for e in expected)
        raise ValueError(f"{a.name}: shape {a.shape}, expected {what} = {shown}")


def check_unit_last_stride(a: Array) -> None:
    """The innermost dimension must be contiguous (every kernel reads rows)."""
    if a.ndim and a.shape[-1] > 1 and a.strides[-1] != 1:
        raise ValueError(f"{a.name}: the last dimension must be contiguous (stride 1), got strides {a.strides}; "
                         "pass .contiguous()")


def check_contiguous(a: Array) -> None:
    expected, acc = [], 1
    for s in reversed(a.shape):
        expected.append(acc)
        acc *= s
    if any(n > 1 and st != e for n, st, e in zip(a.shape, a.strides, reversed(expected))):
        raise ValueError(f"{a.name}: must be contiguous (strides {tuple(reversed(expected))}), got strides "
                         f"{a.strides}; pass .contiguous()")


def check_writable(a: Array) -> None:
    if a.readonly:
        raise ValueError(f"{a.name}: the output array is read-only")


def check_same_device(*arrays: Optional[Array]) -> None:
    devs = [(a.name, a.device) for a in arrays if a is not None and a.is_torch]
    for n, d in devs[1:]:
        if d != devs[0][1]:
            raise ValueError(f"{n}: on {d}, but {devs[0][0]} is on {devs[0][1]}; all tensors must be on one GPU")


def leading_dim(a: Array, axis: int = -2) -> int:
    """Row stride of a matrix stored row-major along the last axis (`axis`: the row axis);
    a single row's stride is meaningless, so its row length is reported."""
    if a.shape[axis] > 1:
        return a.strides[axis]
    return max(a.shape[-1], 1)


def stride_or(a: Array, axis: int, fallback: int) -> int:
    """The stride of `axis`, or `fallback` when that axis has one element (its stride is never used)."""
    return a.strides[axis] if a.shape[axis] > 1 else fallback


class DeviceArray:
    """A device allocation made by the bridge (cudaMalloc), for callers without torch.

    Exposes ``__cuda_array_interface__`` (v3), so CuPy, Numba and the course functions
    accept it. Freed when the object goes away (cudaFree synchronizes the device).
    """

    def __init__(self, lib: Library, shape: Sequence[int], dtype: str):
        self._lib = lib
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        n = 1
        for s in self.shape:
            n *= s
        self.nbytes = n * ITEMSIZE[dtype]
        ptr = ctypes.c_void_p(0)
        lib.call("course_malloc", self.nbytes, ctypes.byref(ptr))
        self.ptr = ptr.value or 0

    @classmethod
    def from_bytes(cls, lib: Library, data: bytes, shape: Sequence[int], dtype: str) -> "DeviceArray":
        arr = cls(lib, shape, dtype)
        if len(data) != arr.nbytes:
            raise ValueError(f"data: {len(data)} bytes for shape {arr.shape} of {dtype} ({arr.nbytes} bytes)")
        if arr.nbytes:
            lib.call("course_memcpy", arr.ptr, data, arr.nbytes)
        return arr

    def to_bytes(self) -> bytes:
        """A synchronous copy to the host."""
        buf = ctypes.create_string_buffer(self.nbytes)
        if self.nbytes:
            self._lib.call("course_memcpy", ctypes.addressof(buf), self.ptr, self.nbytes)
        return buf.raw

    def tolist(self) -> list:
        """The values as a flat list (float32 arrays; synchronous)."""
        if self.dtype != FLOAT32:
            raise TypeError("tolist() reads float32 arrays; use to_bytes()")
        n = self.nbytes // 4
        return list((ctypes.c_float * n).from_buffer_copy(self.to_bytes()))

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": _TYPESTR_OF[self.dtype], "data": (self.ptr, False), "version": 3,
                "strides": None}

    def __del__(self):
        ptr, self.ptr = getattr(self, "ptr", 0), 0
        if ptr:
            try:
                self._lib.call("course_free", ptr)
            except Exception:  # interpreter shutdown or a broken context: nothing to do
                pass

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, ptr=0x{self.ptr:x})"


def empty(lib: Library, shape: Sequence[int], dtype: str, like: Array, name: str) -> Array:
    """A new contiguous output on `like`'s device: torch when `like` is a tensor, else a DeviceArray."""
    if like.is_torch:
        obj = _torch().empty(tuple(shape), dtype=_torch_dtype(dtype), device=like.device)
    else:
        obj = DeviceArray(lib, shape, dtype)
    return as_array(obj, name)


def output(lib: Library, out: Any, name: str, shape: Sequence[int], dtype: str, like: Array,
           contiguous: bool = False) -> Array:
    """`out` checked (shape, dtype, writable, unit last stride or full contiguity), or a new array."""
    if out is None:
        return empty(lib, shape, dtype, like, name)
    a = as_array(out, name)
    check_dtype(a, dtype)
    check_shape(a, shape, "the result's shape")
    check_writable(a)
    if contiguous:
        check_contiguous(a)
    else:
        check_unit_last_stride(a)
    return a


class Scratch:
    """Workspace of `nbytes` on `like`'s device (nothing when 0); kept alive by the caller.

    `given` (the ops' ``workspace=`` argument: any device array, e.g. a torch uint8 tensor)
    is used instead of a new allocation; its size is checked by the C++ validation."""

    def __init__(self, lib: Library, nbytes: int, like: Array, given: Any = None):
        self.nbytes = int(nbytes)
        self._keep = None
        self.ptr = 0
        if given is not None:
            self._keep = as_array(given, "workspace")
            check_contiguous(self._keep)
            check_writable(self._keep)
            self.ptr = self._keep.ptr
            self.nbytes = self._keep.numel * ITEMSIZE.get(self._keep.dtype, 1)
        elif self.nbytes:
            self._keep = empty(lib, (self.nbytes,), "uint8", like, "workspace")
            self.ptr = self._keep.ptr


def resolve_stream(stream: Any, like: Array) -> int:
    """The cudaStream_t to launch on: `stream` (an int handle, a torch.cuda.Stream, a CuPy
    stream) or, when None, torch's current stream for tensors and the default stream (0)
    otherwise."""
    if stream is None:
        if like.is_torch:
            return _torch().cuda.current_stream(like.device).cuda_stream
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    handle = getattr(stream, "handle", None)  # Numba
    if handle is not None:
        return int(getattr(handle, "value", handle) or 0)
    raise TypeError(f"stream: expected an int handle, a torch.cuda.Stream or a CuPy/Numba stream, "
                    f"got {type(stream).__name__}")


class device_of:
    """Context manager: makes `like`'s GPU current for the call (torch tensors only)."""

    def __init__(self, like: Array):
        self._ctx = _torch().cuda.device(like.device) if like.is_torch else None

    def __enter__(self):
        if self._ctx is not None:
            self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        if self._ctx is not None:
            return self._ctx.__exit__(*exc)
        return False


def strides3(*values: int):
    """A ctypes int64[3] stride triple."""
    return (ctypes.c_int64 * 3)(*values)
