"""The course's ops, callable on torch tensors (or any ``__cuda_array_interface__`` array).

Every function
  * checks device, dtype, shape and strides in Python and raises ``TypeError`` /
    ``ValueError`` naming the argument, and checks the step name against the op's step table
    (``InvalidArgumentError``) -- all before it allocates anything, so these mistakes are
    reported as such on a machine without a GPU too (where the first allocation raises
    ``NoGpuError``);
  * passes strides in elements to the C ABI, whose C++ validation reports anything else
    (alignment, overlaps, limits of a step) as ``InvalidArgumentError`` (a ``ValueError``);
  * runs on ``stream`` (default: torch's current stream for tensors, else the default stream);
  * returns new outputs (torch tensors for torch inputs, ``DeviceArray`` otherwise) unless
    ``out=`` gives them;
  * takes ``step=`` (a step name, see ``steps(op)``) and ``impl="solution" | "exercise"``;
  * allocates the step's scratch memory (if any) per call, unless ``workspace=`` gives a
    device array of at least ``workspace_bytes(op, step, ...)`` bytes (the C ABI's
    course_*_workspace_bytes; reuse one to keep allocations out of a timed loop).
"""
from __future__ import annotations

import struct
from typing import Any, List, Optional, Sequence, Tuple

from . import _arrays as A
from ._arrays import BFLOAT16, FLOAT32, Array
from ._library import InvalidArgumentError, library

# Default step of each op: the top of its ladder that runs on any supported GPU.
DEFAULT_STEPS = {
    "l2_norm": "vectorized",
    "dot": "vectorized",
    "softmax": "online_vectorized",
    "matmul": "warp_tiled",
    "matmul_tc": "mma_sync",
    "batched_gemm": "warp_tiled",  # fp32; bf16 inputs default to "tensor_core" ("wgmma" needs sm_90a)
    "attention": "fused",  # "fused_options" when rope, alibi or grouped-query attention is asked for
    "attention_bf16": "tc_flash2",  # bfloat16 q, k, v: the tensor-core steps
    "softmax_backward": "fused_vectorized",
    "linear_backward": "block_column_strip",
    "attention_backward": "flash",
    "attention_backward_bf16": "tc_pipelined",  # bfloat16 tensors: the tensor-core steps
}

# Ops whose steps are split by dtype (one op name each, as the C ABI lists them), so that
# a float32 step asked of bfloat16 tensors (or the reverse) can be named as such.
_DTYPE_TWIN = {"attention": "attention_bf16", "attention_bf16": "attention",
               "attention_backward": "attention_backward_bf16", "attention_backward_bf16": "attention_backward"}
DEFAULT_BF16_BGEMM_STEP = "tensor_core"


def _step(lib, step: Any, op: str, arg: str = "step") -> bytes:
    """The step's name (None: the op's default), checked against the op's step table."""
    if step is None:
        step = DEFAULT_STEPS[op]
    if not isinstance(step, str):
        raise TypeError(f"{arg}: expected a step name (str), got {type(step).__name__}; see steps({op!r})")
    try:
        lib.require_step(op, step)
    except InvalidArgumentError as e:
        message = str(e) if arg == "step" else f"{arg}: {e}"
        twin = _DTYPE_TWIN.get(op)
        if twin and step in lib.steps(twin):
            theirs = BFLOAT16 if twin.endswith("_bf16") else FLOAT32
            ours = FLOAT32 if theirs == BFLOAT16 else BFLOAT16
            message += f" (step {step} takes {theirs} tensors; these are {ours})"
        raise InvalidArgumentError(message) from None
    return step.encode()


def _dim(dim: int, ndim: int = 2) -> int:
    if not isinstance(dim, int) or not -ndim <= dim < ndim:
        raise ValueError(f"dim: {dim!r} is not a dimension of a {ndim}-D array")
    return dim % ndim


def _matrix(a: Array) -> Array:
    A.check_ndim(a, 2, what="(a row-major matrix)")
    A.check_unit_last_stride(a)
    return a


def _call(lib, name: str, like: Array, stream: Any, *args) -> None:
    with A.device_of(like):
        lib.call(name, *args, A.resolve_stream(stream, like))


# ---------------------------------------------------------------------------------------
# Module 1
# ---------------------------------------------------------------------------------------

def _scalar_out(lib, out: Any, like: Array) -> Array:
    if out is None:
        return A.empty(lib, (), FLOAT32, like, "out")
    r = A.as_array(out, "out")
    A.check_dtype(r, FLOAT32)
    A.check_writable(r)
    if r.numel != 1:
        raise ValueError(f"out: shape {r.shape}, expected one element")
    return r


def _reduce(op: str, x: Any, y: Any, step: Optional[str], impl: str, out: Any, stream: Any, workspace: Any):
    lib = library(impl)
    X = A.as_array(x, "x")
    arrays = [X]
    A.check_dtype(X, FLOAT32)
    A.check_ndim(X, 1)
    A.check_contiguous(X)
    if y is not None:
        Y = A.as_array(y, "y")
        A.check_dtype(Y, FLOAT32)
        A.check_shape(Y, X.shape, "x's shape")
        A.check_contiguous(Y)
        arrays.append(Y)
    s = _step(lib, step, op)
    R = _scalar_out(lib, out, X)
    A.check_same_device(*arrays, R)
    n = X.shape[0]
    ws = A.Scratch(lib, lib.workspace_bytes("course_reduce_workspace_bytes", n), X, workspace)
    if op == "l2_norm":
        _call(lib, "course_l2_norm", X, stream, s, X.ptr, n, R.ptr, ws.ptr, ws.nbytes)
    else:
        _call(lib, "course_dot", X, stream, s, X.ptr, arrays[1].ptr, n, R.ptr, ws.ptr, ws.nbytes)
    return R.obj


def l2_norm(x: Any, *, step: Optional[str] = None, impl: str = "solution", out: Any = None,
            stream: Any = None, workspace: Any = None) -> Any:
    """||x||_2 of a contiguous 1-D float32 array, as a 0-d array (or into ``out``, one element).

    Steps: atomic_naive, smem_tree, warp_shuffle, vectorized (default). x must be 16-byte
    aligned (fresh torch tensors are).
    """
    return _reduce("l2_norm", x, None, step, impl, out, stream, workspace)


def dot(x: Any, y: Any, *, step: Optional[str] = None, impl: str = "solution", out: Any = None,
        stream: Any = None, workspace: Any = None) -> Any:
    """x . y of two contiguous 1-D float32 arrays of one length, as a 0-d array (or into ``out``).

    Steps as l2_norm.
    """
    return _reduce("dot", x, y, step, impl, out, stream, workspace)


def softmax(x: Any, dim: int = -1, *, step: Optional[str] = None, impl: str = "solution", out: Any = None,
            stream: Any = None, workspace: Any = None) -> Any:
    """softmax(x) along ``dim`` of a 2-D float32 matrix (like ``torch.softmax(x, dim)``).

    x may have any row stride (a window of a wider matrix) but unit column stride. In
    place: ``out=x``. Steps: naive_three_pass, block_per_row, warp_per_row,
    online_vectorized (default), cluster_columns (dim 0 read once with thread-block
    clusters on sm_90; elsewhere, and for dim 1, as online_vectorized).
    """
    lib = library(impl)
    X = _matrix(A.as_array(x, "x"))
    A.check_dtype(X, FLOAT32)
    d = _dim(dim)
    rows, cols = X.shape
    s = _step(lib, step, "softmax")
    Y = A.output(lib, out, "out", (rows, cols), FLOAT32, X)
    A.check_same_device(X, Y)
    ws = A.Scratch(lib, lib.workspace_bytes("course_softmax_workspace_bytes", s, rows, cols, d), X, workspace)
    _call(lib, "course_softmax", X, stream, s, X.ptr, Y.ptr, rows, cols, A.leading_dim(X), A.leading_dim(Y), d,
          ws.ptr, ws.nbytes)
    return Y.obj


def _gemm_operands(a: Any, b: Any, dtype: str) -> Tuple[Array, Array, int, int, int]:
    Am = _matrix(A.as_array(a, "a"))
    Bm = _matrix(A.as_array(b, "b"))
    A.check_dtype(Am, dtype)
    A.check_dtype(Bm, dtype)
    (m, k), (k2, n) = Am.shape, Bm.shape
    if k2 != k:
        raise ValueError(f"b: shape {Bm.shape} does not match a's {Am.shape}: a is M x K, b must be K x N")
    return Am, Bm, m, n, k


def matmul(a: Any, b: Any, *, alpha: float = 1.0, beta: float = 0.0, step: Optional[str] = None,
           impl: str = "solution", out: Any = None, stream: Any = None) -> Any:
    """C = alpha * a @ b + beta * C, float32 (SGEMM; no TF32).

    a: M x K, b: K x N, row-major with any row strides. beta != 0 reads ``out`` (required).
    Steps: naive, coalesced, smem_tiled, register_1d, register_2d, vectorized, warp_tiled
    (default).
    """
    lib = library(impl)
    Am, Bm, m, n, k = _gemm_operands(a, b, FLOAT32)
    if beta != 0 and out is None:
        raise ValueError("beta: a nonzero beta reads C (C = alpha*a@b + beta*C): pass out=")
    s = _step(lib, step, "matmul")
    C = A.output(lib, out, "out", (m, n), FLOAT32, Am)
    A.check_same_device(Am, Bm, C)
    _call(lib, "course_matmul", Am, stream, s, Am.ptr, Bm.ptr, C.ptr, m, n, k,
          A.leading_dim(Am), A.leading_dim(Bm), A.leading_dim(C), float(alpha), float(beta))
    return C.obj


def matmul_tc(a: Any, b: Any, *, step: Optional[str] = None, impl: str = "solution", out: Any = None,
              stream: Any = None) -> Any:
    """C = a @ b on tensor cores: bfloat16 a (M x K) and b (K x N), float32 C (M x N).

    a and b: 16-byte aligned, row strides multiples of 8 elements. Steps: wmma, mma_sync (default),
    and on Hopper (sm_90a) wgmma, tma_warp_specialized, persistent, cluster_multicast, pingpong.
    """
    lib = library(impl)
    Am, Bm, m, n, k = _gemm_operands(a, b, BFLOAT16)
    s = _step(lib, step, "matmul_tc")
    C = A.output(lib, out, "out", (m, n), FLOAT32, Am)
    A.check_same_device(Am, Bm, C)
    _call(lib, "course_matmul_tc", Am, stream, s, Am.ptr, Bm.ptr, C.ptr, m, n, k,
          A.leading_dim(Am), A.leading_dim(Bm), A.leading_dim(C))
    return C.obj


# ---------------------------------------------------------------------------------------
# Module 2
# ---------------------------------------------------------------------------------------

def _operand_layout(a: Array) -> Tuple[bool, int]:
    """(transposed, row stride) of the logical matrix in a's last two dims: row-major when
    the last dim is contiguous; a transposed view of a row-major matrix when the one before is."""
    rows, cols = a.shape[-2], a.shape[-1]
    rs, cs = a.strides[-2], a.strides[-1]
    if cols == 1 or cs == 1:
        return False, rs if rows > 1 else max(cols, 1)
    if rows == 1 or rs == 1:
        return True, cs if cols > 1 else max(rows, 1)
    raise ValueError(f"{a.name}: one of the last two dimensions must be contiguous (stride 1), got strides "
                     f"{a.strides}; pass .contiguous()")


def _lead_strides(a: Array) -> Tuple[int, int]:
    """(batch, head) strides of a 2-, 3- or 4-D operand (0 for an absent or single-element dim)."""
    if a.ndim == 4:
        return A.stride_or(a, 0, 0), A.stride_or(a, 1, 0)
    if a.ndim == 3:
        return A.stride_or(a, 0, 0), 0
    return 0, 0


def batched_gemm(a: Any, b: Any, *, alpha: float = 1.0, step: Optional[str] = None, impl: str = "solution",
                 out: Any = None, stream: Any = None) -> Any:
    """C[..] = alpha * a[..] @ b[..] over [batch, heads] (module 2's strided batched GEMM).

    a: [.., M, K], b: [.., K, N] with the same leading dims: () , (batch,) or (batch, heads);
    C: [.., M, N] float32. a and b are float32 (steps smem_tiled, register_blocked,
    warp_tiled) or bfloat16 (tensor_core, wgmma on sm_90a). Transposed views are read in
    place: ``batched_gemm(q, k.transpose(-2, -1))`` is Q K^T without a copy
    (b_transposed); a transposed ``a`` (a_transposed) needs an fp32 step. Broadcast
    (expanded, stride 0) batch/head dims of a and b are allowed.
    """
    lib = library(impl)
    Am, Bm = A.as_array(a, "a"), A.as_array(b, "b")
    for x in (Am, Bm):
        A.check_ndim(x, 2, 3, 4, what="([.., rows, cols])")
        A.check_dtype(x, FLOAT32, BFLOAT16)
    if Bm.dtype != Am.dtype:
        raise TypeError(f"b: dtype {Bm.dtype}, but a is {Am.dtype}; both must be float32 or both bfloat16")
    if Am.shape[:-2] != Bm.shape[:-2]:
        raise ValueError(f"b: leading dims {Bm.shape[:-2]} differ from a's {Am.shape[:-2]}")
    (m, k), (k2, n) = Am.shape[-2:], Bm.shape[-2:]
    if k2 != k:
        raise ValueError(f"b: shape {Bm.shape} does not match a's {Am.shape}: a is [.., M, K], b must be [.., K, N]")
    a_t, lda = _operand_layout(Am)
    b_t, ldb = _operand_layout(Bm)
    lead = Am.shape[:-2]
    bf16 = Am.dtype == BFLOAT16
    s = _step(lib, (step or DEFAULT_BF16_BGEMM_STEP) if bf16 else step, "batched_gemm")
    C = A.output(lib, out, "out", (*lead, m, n), FLOAT32, Am)
    A.check_same_device(Am, Bm, C)
    batch = lead[0] if len(lead) >= 1 else 1
    heads = lead[1] if len(lead) >= 2 else 1
    name = "course_batched_gemm_strided_bf16" if bf16 else "course_batched_gemm_strided_f32"
    _call(lib, name, Am, stream, s, Am.ptr, Bm.ptr, C.ptr, m, n, k, batch, heads,
          A.strides3(*_lead_strides(Am), lda), A.strides3(*_lead_strides(Bm), ldb),
          A.strides3(*_lead_strides(C), A.leading_dim(C)), int(a_t), int(b_t), float(alpha))
    return C.obj


def _pointer_array(lib, ptrs: List[int], like: Array, name: str):
    """A device int64 array holding `ptrs` (kept alive by the caller until the call is done)."""
    if like.is_torch:
        torch = A._torch()
        return A.as_array(torch.tensor(ptrs, dtype=torch.int64, device=like.device), name)
    data = struct.pack(f"<{len(ptrs)}q", *ptrs)
    return A.as_array(A.DeviceArray.from_bytes(lib, data, (len(ptrs),), "int64"), name)


def batched_gemm_ptr_array(a: Sequence[Any], b: Sequence[Any], *, alpha: float = 1.0, step: Optional[str] = None,
                           impl: str = "solution", out: Optional[Sequence[Any]] = None,
                           stream: Any = None) -> List[Any]:
    """C[i] = alpha * a[i] @ b[i] for lists of matrices that live anywhere (pointer-array API).

    All a[i] share one shape, dtype and layout (row stride, transposition); likewise b[i].
    The pointer arrays are built on the host and copied to the device on each call (the
    set-up cost module 2's lesson measures). Returns the list of C[i] (float32, M x N).
    """
    lib = library(impl)
    if len(a) == 0 or len(a) != len(b):
        raise ValueError(f"a, b: need two non-empty lists of one length, got {len(a)} and {len(b)}")
    As = [A.as_array(x, f"a[{i}]") for i, x in enumerate(a)]
    Bs = [A.as_array(x, f"b[{i}]") for i, x in enumerate(b)]
    for group in (As, Bs):
        for x in group:
            A.check_ndim(x, 2, what="(a matrix)")
            A.check_dtype(x, FLOAT32, BFLOAT16)
            if x.dtype != As[0].dtype:
                raise TypeError(f"{x.name}: dtype {x.dtype}, but a[0] is {As[0].dtype}")
            if x.shape != group[0].shape or _operand_layout(x) != _operand_layout(group[0]):
                raise ValueError(f"{x.name}: shape {x.shape} / strides {x.strides} differ from "
                                 f"{group[0].name}'s {group[0].shape} / {group[0].strides}")
    (m, k), (k2, n) = As[0].shape, Bs[0].shape
    if k2 != k:
        raise ValueError(f"b[0]: shape {Bs[0].shape} does not match a[0]'s {As[0].shape}")
    a_t, lda = _operand_layout(As[0])
    b_t, ldb = _operand_layout(Bs[0])
    bf16 = As[0].dtype == BFLOAT16
    s = _step(lib, (step or DEFAULT_BF16_BGEMM_STEP) if bf16 else step, "batched_gemm")
    if out is None:
        Cs = [A.empty(lib, (m, n), FLOAT32, As[0], f"out[{i}]") for i in range(len(As))]
    else:
        if len(out) != len(As):
            raise ValueError(f"out: {len(out)} matrices for {len(As)} products")
        Cs = [A.output(lib, c, f"out[{i}]", (m, n), FLOAT32, As[0]) for i, c in enumerate(out)]
    ldc = A.leading_dim(Cs[0])
    for c in Cs:
        if A.leading_dim(c) != ldc:
            raise ValueError(f"{c.name}: row stride {A.leading_dim(c)} differs from out[0]'s {ldc}")
    A.check_same_device(*As, *Bs, *Cs)
    pa = _pointer_array(lib, [x.ptr for x in As], As[0], "a_ptrs")
    pb = _pointer_array(lib, [x.ptr for x in Bs], As[0], "b_ptrs")
    pc = _pointer_array(lib, [x.ptr for x in Cs], As[0], "c_ptrs")
    name = "course_batched_gemm_ptr_array_bf16" if bf16 else "course_batched_gemm_ptr_array_f32"
    _call(lib, name, As[0], stream, s, pa.ptr, pb.ptr, pc.ptr, m, n, k, len(As), 1, lda,
          ldb, ldc, int(a_t), int(b_t), float(alpha))
    return [c.obj for c in Cs]


# ---------------------------------------------------------------------------------------
# Module 3
# ---------------------------------------------------------------------------------------

def _attention_tensor(x: Any, name: str, dtype: Sequence[str]) -> Array:
    t = A.as_array(x, name)
    A.check_ndim(t, 4, what="[batch, heads, seq, head_dim]")
    A.check_dtype(t, *dtype)
    A.check_unit_last_stride(t)
    return t


def _attn_strides(t: Array):
    """{batch, head, seq} strides; a single-element dim gets a stride the kernels accept."""
    return A.strides3(A.stride_or(t, 0, 0), A.stride_or(t, 1, 0), A.stride_or(t, 2, t.shape[3]))


def _qkv(q: Any, k: Any, v: Any, dtypes: Sequence[str]) -> Tuple[Array, Array, Array]:
    Q = _attention_tensor(q, "q", dtypes)
    K = _attention_tensor(k, "k", dtypes)
    V = _attention_tensor(v, "v", dtypes)
    for x in (K, V):
        if x.dtype != Q.dtype:
            raise TypeError(f"{x.name}: dtype {x.dtype}, but q is {Q.dtype}")
    B, H, Nq, d = Q.shape
    A.check_shape(K, (B, None, None, d), "[batch, kv_heads, seq_k, head_dim] matching q")
    A.check_shape(V, K.shape, "k's shape")
    return Q, K, V


def _lse_out(lib, lse_out: Any, shape, like: Array) -> Array:
    return A.output(lib, lse_out, "lse_out", shape, FLOAT32, like, contiguous=True)


def _requires_grad(*xs: Any) -> bool:
    """True when autograd must see this call: torch tensors, grad mode on, one needing a gradient."""
    torch = A._torch()
    return torch is not None and torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in xs)


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: Optional[float] = None, rope: bool = False,
              rope_theta: float = 10000.0, alibi: bool = False, return_lse: bool = False,
              step: Optional[str] = None, backward_step: Optional[str] = None, impl: str = "solution",
              out: Any = None, lse_out: Any = None, stream: Any = None, workspace: Any = None) -> Any:
    """softmax(scale * q k^T [+ ALiBi] [causal]) v: module 3's attention forward.

    float32 q, k, v run the fp32 ladder; bfloat16 ones the tensor-core steps
    (``steps("attention_bf16")``: bf16 O, fp32 lse and accumulation; head_dim 32, 64, 96 or
    128; strides multiples of 8 elements; no rope or alibi).
    q: [B, H, N_q, d]; k, v: [B, H_kv, N_k, d] (H_kv divides H: grouped-query attention),
    the dims ``torch.nn.functional.scaled_dot_product_attention`` uses; any strides with a
    contiguous last dim (so a [B, N, H, d] tensor passed as ``x.transpose(1, 2)`` is read in
    place). scale None: 1/sqrt(d). The causal mask is aligned to the BOTTOM-RIGHT corner
    (query i sees key j <= i + N_k - N_q); it equals SDPA's ``is_causal`` when N_q == N_k.
    Returns O [B, H, N_q, d] in q's dtype, and lse [B, H, N_q] (float32, natural log) too
    when ``return_lse`` or ``lse_out`` is given. float32 steps: naive, tiled_online, causal,
    fused (default), fused_options (default when rope, alibi or H_kv < H); bfloat16 steps:
    tc_mma .. tc_flash2 (default).

    Differentiable: when q, k or v is a torch tensor that requires grad (and grad mode is
    on), the call goes through ``AttentionFunction``: ``backward()`` runs module 4's
    attention backward (``backward_step``: default tc_pipelined for bfloat16, flash for
    float32) on the saved q, k, v, O and lse. That path returns O alone and takes no
    ``out``, ``lse_out``, ``return_lse``, ``rope``, ``alibi`` or ``workspace``.
    """
    if _requires_grad(q, k, v):
        from .autograd import attention_with_grad
        given = {"out": out, "lse_out": lse_out, "workspace": workspace}
        for name, value in (*given.items(), ("return_lse", return_lse), ("rope", rope), ("alibi", alibi)):
            if value is not None and value is not False:
                raise ValueError(f"{name}: not with autograd (q, k or v requires grad): the differentiable "
                                 "attention returns a new O and has no RoPE or ALiBi backward; call it under "
                                 "torch.no_grad() for the plain op")
        return attention_with_grad(q, k, v, causal=causal, scale=scale, step=step, backward_step=backward_step,
                                   impl=impl)
    lib = library(impl)
    Q, K, V = _qkv(q, k, v, (FLOAT32, BFLOAT16))
    B, H, Nq, d = Q.shape
    Hkv, Nk = K.shape[1], K.shape[2]
    bf16 = Q.dtype == BFLOAT16
    if bf16:
        for flag, on in (("rope", rope), ("alibi", alibi)):
            if on:
                raise ValueError(f"{flag}: the tensor-core (bfloat16) steps have no {flag}; use float32 inputs "
                                 "and step fused_options")
        if workspace is not None:
            raise ValueError("workspace: the tensor-core (bfloat16) steps need none")
    elif step is None and (rope or alibi or Hkv != H):
        step = "fused_options"
    s = _step(lib, step, "attention_bf16" if bf16 else "attention")
    if backward_step is not None:  # checked now, so that a wrong name does not wait for backward()
        _step(lib, backward_step, "attention_backward_bf16" if bf16 else "attention_backward", "backward_step")
    O = A.output(lib, out, "out", (B, H, Nq, d), Q.dtype, Q)
    L = _lse_out(lib, lse_out, (B, H, Nq), Q) if (return_lse or lse_out is not None) else None
    A.check_same_device(Q, K, V, O, L)
    lse_ptr = L.ptr if L is not None else None
    if bf16:
        _call(lib, "course_attention_forward_bf16", Q, stream, s, Q.ptr, K.ptr, V.ptr, O.ptr, lse_ptr, B, H, Hkv,
              Nq, Nk, d, _attn_strides(Q), _attn_strides(K), _attn_strides(V), _attn_strides(O),
              float(scale or 0.0), int(causal))
        return (O.obj, L.obj) if L is not None else O.obj
    ws = A.Scratch(lib, lib.workspace_bytes("course_attention_workspace_bytes", s, B, H, Nq, Nk), Q, workspace)
    _call(lib, "course_attention_forward", Q, stream, s, Q.ptr, K.ptr, V.ptr, O.ptr, lse_ptr, B, H, Hkv, Nq, Nk, d,
          _attn_strides(Q), _attn_strides(K), _attn_strides(V), _attn_strides(O),
          float(scale or 0.0), int(causal), int(rope), float(rope_theta), int(alibi), ws.ptr, ws.nbytes)
    return (O.obj, L.obj) if L is not None else O.obj


# ---------------------------------------------------------------------------------------
# Module 4
# ---------------------------------------------------------------------------------------

def softmax_backward(y: Any, dy: Any, dim: int = -1, *, step: Optional[str] = None, impl: str = "solution",
                     out: Any = None, stream: Any = None, workspace: Any = None) -> Any:
    """dx = y * (dy - sum(dy * y, dim)): the gradient of softmax along ``dim`` from its output y.

    y, dy: 2-D float32, unit column stride, any row strides. In place: ``out=dy``.
    Steps: two_pass, warp_per_row, fused_vectorized (default).
    """
    lib = library(impl)
    Y = _matrix(A.as_array(y, "y"))
    DY = _matrix(A.as_array(dy, "dy"))
    A.check_dtype(Y, FLOAT32)
    A.check_dtype(DY, FLOAT32)
    A.check_shape(DY, Y.shape, "y's shape")
    d = _dim(dim)
    rows, cols = Y.shape
    s = _step(lib, step, "softmax_backward")
    DX = A.output(lib, out, "out", (rows, cols), FLOAT32, Y)
    A.check_same_device(Y, DY, DX)
    ws = A.Scratch(lib, lib.workspace_bytes("course_softmax_backward_workspace_bytes", s, rows, cols, d), Y,
                   workspace)
    _call(lib, "course_softmax_backward", Y, stream, s, Y.ptr, DY.ptr, DX.ptr, rows, cols, A.leading_dim(Y),
          A.leading_dim(DY), A.leading_dim(DX), d, ws.ptr, ws.nbytes)
    return DX.obj


def linear_backward(x: Any, w: Any, dy: Any, *, need_dx: bool = True, need_dw: bool = True, need_db: bool = True,
                    step: Optional[str] = None, impl: str = "solution", out: Optional[Sequence[Any]] = None,
                    stream: Any = None) -> Tuple[Any, Any, Any]:
    """Gradients of Y = x @ w + b: (dX = dy @ w^T, dW = x^T @ dy, db = dy.sum(0)), float32.

    x: M x K (may be None when not need_dw), w: K x N (may be None when not need_dx),
    dy: M x N; unit column strides, any row strides. A gradient not needed is returned as
    None. ``out=(dx, dw, db)`` (entries may be None). ``step`` picks the bias-gradient
    kernel: column_per_thread, block_column_strip (default).
    """
    lib = library(impl)
    DY = _matrix(A.as_array(dy, "dy"))
    A.check_dtype(DY, FLOAT32)
    M, N = DY.shape
    X = W = None
    if x is not None:
        X = _matrix(A.as_array(x, "x"))
        A.check_dtype(X, FLOAT32)
    if w is not None:
        W = _matrix(A.as_array(w, "w"))
        A.check_dtype(W, FLOAT32)
    if need_dw and X is None:
        raise ValueError("x: needed for dW = x^T @ dy (or pass need_dw=False)")
    if need_dx and W is None:
        raise ValueError("w: needed for dX = dy @ w^T (or pass need_dx=False)")
    K = X.shape[1] if X is not None else W.shape[0]
    if X is not None:
        A.check_shape(X, (M, K), "[M, K] (M from dy)")
    if W is not None:
        A.check_shape(W, (K, N), "[K, N] (K from x, N from dy)")
    s = _step(lib, step, "linear_backward")
    outs = list(out) if out is not None else [None, None, None]
    if len(outs) != 3:
        raise ValueError("out: expected (dx, dw, db)")
    DX = A.output(lib, outs[0], "out[0] (dx)", (M, K), FLOAT32, DY) if need_dx else None
    DW = A.output(lib, outs[1], "out[1] (dw)", (K, N), FLOAT32, DY) if need_dw else None
    DB = A.output(lib, outs[2], "out[2] (db)", (N,), FLOAT32, DY, contiguous=True) if need_db else None
    A.check_same_device(DY, X, W, DX, DW, DB)
    ld = lambda t: A.leading_dim(t) if t is not None else 0  # noqa: E731 (0: dense)
    ptr = lambda t: t.ptr if t is not None else None  # noqa: E731
    _call(lib, "course_linear_backward", DY, stream, s, ptr(X), ptr(W), DY.ptr,
          ptr(DX), ptr(DW), ptr(DB), M, K, N, ld(X), ld(W), ld(DY), ld(DX), ld(DW))
    return tuple(t.obj if t is not None else None for t in (DX, DW, DB))


def _like_q(x: Any, name: str, Q: Array) -> Array:
    """o or dout: q's dtype and shape, contiguous last dim."""
    t = A.as_array(x, name)
    A.check_ndim(t, 4, what="[batch, heads, seq_q, head_dim]")
    if t.dtype != Q.dtype:
        raise TypeError(f"{name}: dtype {t.dtype}, but q is {Q.dtype}; q, k, v, o and dout share one dtype")
    A.check_shape(t, Q.shape, "q's shape")
    A.check_unit_last_stride(t)
    return t


def attention_backward(q: Any, k: Any, v: Any, o: Any, dout: Any, lse: Any, *, causal: bool = False,
                       scale: Optional[float] = None, step: Optional[str] = None, impl: str = "solution",
                       out: Optional[Sequence[Any]] = None, stream: Any = None,
                       workspace: Any = None) -> Tuple[Any, Any, Any]:
    """(dq, dk, dv) of module 3's attention, from the forward's o and lse and dout = dL/do.

    Shapes and strides as ``attention``: q, o, dout [B, H, N_q, d]; k, v [B, H_kv, N_k, d];
    lse [B, H, N_q] float32 contiguous (``attention(..., return_lse=True)``). causal and
    scale must be the forward's. With H_kv < H, dk and dv sum over each group's query heads.
    float32 q, k, v, o, dout: steps naive, flash (default), flash_deterministic.
    bfloat16 q, k, v, o, dout (lse stays float32): the tensor-core steps
    (``steps("attention_backward_bf16")``: tc_mma, tc_pipelined (default), tc_deterministic,
    tc_split_dq, the last two bit-identical run to run; on Hopper builds for sm_90a tc_wgmma
    and its bit-identical versions tc_wgmma_deterministic and tc_wgmma_split_dq),
    bfloat16 gradients with fp32 accumulation; head_dim 64 or 128, strides multiples of 8
    elements. The gradients come back in the inputs' dtype.
    """
    lib = library(impl)
    Q, K, V = _qkv(q, k, v, (FLOAT32, BFLOAT16))
    B, H, Nq, d = Q.shape
    Hkv, Nk = K.shape[1], K.shape[2]
    O = _like_q(o, "o", Q)
    DO = _like_q(dout, "dout", Q)
    L = A.as_array(lse, "lse")
    A.check_dtype(L, FLOAT32)
    A.check_shape(L, (B, H, Nq), "[B, H, N_q]")
    A.check_contiguous(L)
    bf16 = Q.dtype == BFLOAT16
    s = _step(lib, step, "attention_backward_bf16" if bf16 else "attention_backward")
    outs = list(out) if out is not None else [None, None, None]
    if len(outs) != 3:
        raise ValueError("out: expected (dq, dk, dv)")
    DQ = A.output(lib, outs[0], "out[0] (dq)", Q.shape, Q.dtype, Q)
    DK = A.output(lib, outs[1], "out[1] (dk)", K.shape, Q.dtype, Q)
    DV = A.output(lib, outs[2], "out[2] (dv)", K.shape, Q.dtype, Q)
    A.check_same_device(Q, K, V, O, DO, L, DQ, DK, DV)
    if bf16:  # the tensor-core steps keep an fp32 dQ accumulator: their workspace grows with d
        with A.device_of(Q):  # the split steps' dQ copies depend on the SM count of the device the call runs on
            nbytes = lib.workspace_bytes("course_attention_backward_bf16_workspace_bytes", s, B, H, Nq, Nk, d)
    else:
        nbytes = lib.workspace_bytes("course_attention_backward_workspace_bytes", s, B, H, Nq, Nk)
    ws = A.Scratch(lib, nbytes, Q, workspace)
    _call(lib, "course_attention_backward_bf16" if bf16 else "course_attention_backward", Q, stream, s, Q.ptr,
          K.ptr, V.ptr, O.ptr, DO.ptr, L.ptr, DQ.ptr, DK.ptr, DV.ptr, B, H, Hkv, Nq, Nk, d, _attn_strides(Q),
          _attn_strides(K), _attn_strides(V), _attn_strides(O), _attn_strides(DO), _attn_strides(DQ),
          _attn_strides(DK), _attn_strides(DV), float(scale or 0.0), int(causal), ws.ptr, ws.nbytes)
    return DQ.obj, DK.obj, DV.obj


# ---------------------------------------------------------------------------------------
# Module 4: fused cross-entropy (self-contained block; the lead may fold the signature into
# _library._SIGNATURES and the step check into _step once op_table() lists "cross_entropy")
# ---------------------------------------------------------------------------------------

CROSS_ENTROPY_STEPS = ("three_pass", "online", "row_on_chip")
CROSS_ENTROPY_DEFAULT_STEP = "row_on_chip"  # joins DEFAULT_STEPS once the C ABI lists the op


def _cross_entropy_fn(lib):
    """course_cross_entropy with its ctypes signature (mirrors course_bridge.h)."""
    import ctypes
    fn = lib.raw("course_cross_entropy")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                   ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, ctypes.c_float, ctypes.c_void_p]
    return fn


def cross_entropy(logits: Any, targets: Any, *, ignore_index: int = -100, dloss: float = 1.0, grad: bool = True,
                  out: Any = None, step: Optional[str] = None, impl: str = "solution",
                  stream: Any = None) -> Tuple[Any, Any, Any, Any]:
    """Fused softmax cross-entropy with its gradient: ``(loss_mean, losses, dlogits, num_valid)``.

    logits: 2-D CUDA torch tensor, float32 or bfloat16, unit column stride, any row stride.
    targets: 1-D int32 (int64 is converted, one small copy) with a class in [0, vocab) or
    ``ignore_index``. loss_mean: float32 [1], the mean over counted rows (0 when none; PyTorch
    gives NaN); losses: float32 [rows], 0 on ignored rows; num_valid: int32 [1];
    dlogits = (softmax - onehot) * dloss / num_valid, logits' dtype, or None when ``grad`` is
    False. ``out=logits`` writes dlogits in place. A target outside [0, vocab) that is not
    ignore_index gives NaN for its row. Steps: three_pass, online, row_on_chip (default).
    """
    s = CROSS_ENTROPY_DEFAULT_STEP if step is None else step
    if not isinstance(s, str):
        raise TypeError(f"step: expected a step name (str), got {type(s).__name__}")
    if s not in CROSS_ENTROPY_STEPS:
        raise InvalidArgumentError(f"cross_entropy: argument 'step' = \"{s}\": is not a step of cross_entropy; "
                                   f"the steps are: {', '.join(CROSS_ENTROPY_STEPS)}")
    lib = library(impl)
    L = _matrix(A.as_array(logits, "logits"))
    A.check_dtype(L, FLOAT32, BFLOAT16)
    if not L.is_torch:
        raise TypeError("logits: cross_entropy takes torch tensors")
    torch = A._torch()
    if not A.is_torch_tensor(targets):
        raise TypeError(f"targets: expected a torch.Tensor, got {type(targets).__name__}")
    rows, vocab = L.shape
    if targets.dim() != 1 or targets.shape[0] != rows:
        raise ValueError(f"targets: shape {tuple(targets.shape)}, expected ({rows},)")
    if targets.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"targets: dtype {targets.dtype}, expected torch.int32 or torch.int64")
    t32 = targets.to(device=logits.device, dtype=torch.int32).contiguous()
    D = None
    if grad:
        D = L if out is not None and A.as_array(out, "out").ptr == L.ptr else \
            A.output(lib, out, "out", (rows, vocab), L.dtype, L)
        A.check_same_device(L, D)
    losses = torch.empty(max(rows, 1), dtype=torch.float32, device=logits.device)[:rows]
    mean = torch.empty(1, dtype=torch.float32, device=logits.device)
    count = torch.empty(1, dtype=torch.int32, device=logits.device)
    _cross_entropy_fn(lib)
    _call(lib, "course_cross_entropy", L, stream, s.encode(), int(L.dtype == BFLOAT16), L.ptr, t32.data_ptr(),
          losses.data_ptr(), mean.data_ptr(), count.data_ptr(), D.ptr if D is not None else None, rows, vocab,
          A.leading_dim(L), A.leading_dim(D) if D is not None else vocab, int(ignore_index), float(dloss))
    return mean, losses, (D.obj if D is not None else None), count


# ---------------------------------------------------------------------------------------
# Module 4's AdamW and GELU; module 1's tensor-core matmul with its linear-layer options
# (C ABI: course_adamw, course_gelu_forward / _backward, course_matmul_tc_ex)
# ---------------------------------------------------------------------------------------

import ctypes as _ctypes  # noqa: E402  (this block is self-contained)

from . import _library as _L  # noqa: E402

# The C signatures of this block's functions (course_bridge.h); read when a library loads.
_L._SIGNATURES.update({
    "course_adamw_workspace_bytes": (_ctypes.c_int, [_ctypes.c_char_p, _ctypes.c_int64,
                                                     _ctypes.POINTER(_ctypes.c_int64),
                                                     _ctypes.POINTER(_ctypes.c_size_t)]),
    "course_adamw": (_ctypes.c_int, [_ctypes.c_char_p, _ctypes.c_int64, _ctypes.c_void_p, _ctypes.c_void_p,
                                     _ctypes.c_void_p, _ctypes.c_void_p, _ctypes.c_void_p,
                                     _ctypes.POINTER(_ctypes.c_int64), _ctypes.POINTER(_ctypes.c_int),
                                     _ctypes.c_float, _ctypes.c_float, _ctypes.c_float, _ctypes.c_float,
                                     _ctypes.c_float, _ctypes.c_int64, _ctypes.c_float, _ctypes.c_void_p,
                                     _ctypes.c_void_p, _ctypes.c_size_t, _ctypes.c_void_p]),
    "course_gelu_forward": (_ctypes.c_int, [_ctypes.c_char_p, _ctypes.c_void_p, _ctypes.c_void_p, _ctypes.c_int64,
                                            _ctypes.c_int, _ctypes.c_void_p]),
    "course_gelu_backward": (_ctypes.c_int, [_ctypes.c_char_p, _ctypes.c_void_p, _ctypes.c_void_p,
                                             _ctypes.c_void_p, _ctypes.c_int64, _ctypes.c_int, _ctypes.c_int,
                                             _ctypes.c_void_p]),
    "course_matmul_tc_ex": (_ctypes.c_int, [_ctypes.c_char_p, _ctypes.c_void_p, _ctypes.c_void_p, _ctypes.c_void_p,
                                            _ctypes.c_void_p, _ctypes.c_int64, _ctypes.c_int64, _ctypes.c_int64,
                                            _ctypes.c_int64, _ctypes.c_int64, _ctypes.c_int64, _ctypes.c_int,
                                            _ctypes.c_int, _ctypes.c_void_p, _ctypes.c_void_p, _ctypes.c_int,
                                            _ctypes.c_void_p, _ctypes.c_int64, _ctypes.c_int, _ctypes.c_void_p]),
})

DEFAULT_STEPS.update({"adamw": "multi_tensor", "gelu": "vectorized", "gelu_backward": "vectorized"})


def _dtype_name(dtype: Any, arg: str) -> str:
    """"float32" or "bfloat16" from a name or a torch dtype (torch.bfloat16 -> "bfloat16")."""
    name = str(dtype).replace("torch.", "")
    name = {"fp32": FLOAT32, "float": FLOAT32, "bf16": BFLOAT16}.get(name, name)
    if name not in (FLOAT32, BFLOAT16):
        raise TypeError(f"{arg}: {dtype!r} is not float32 or bfloat16")
    return name


def _tensor_list(xs: Any, name: str, n: Optional[int] = None) -> list:
    if isinstance(xs, (str, bytes)) or not hasattr(xs, "__len__"):
        raise TypeError(f"{name}: expected a list of arrays, got {type(xs).__name__}")
    if n is not None and len(xs) != n:
        raise ValueError(f"{name}: {len(xs)} entries, but params has {n}")
    return list(xs)


def adamw(params: Sequence[Any], grads: Sequence[Any], exp_avgs: Sequence[Any], exp_avg_sqs: Sequence[Any], *,
          t: int, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
          weight_decay: float = 1e-2, decay_mask: Optional[Sequence[bool]] = None, max_norm: float = 0.0,
          bf16_copies: Optional[Sequence[Any]] = None, return_norm: bool = False, norm_out: Any = None,
          step: Optional[str] = None, impl: str = "solution", stream: Any = None, workspace: Any = None) -> Any:
    """One AdamW step over a list of float32 tensors, in place: module 4's ``adamw``.

    The math and its order are ``torch.optim.AdamW``'s (decoupled weight decay, the fused
    kernel's order), preceded -- when ``max_norm > 0`` -- by
    ``torch.nn.utils.clip_grad_norm_(grads, max_norm)``'s scale, applied on the fly
    (``grads`` are only read) and computed on the GPU without a host synchronization.
    params[i], grads[i], exp_avgs[i] (first moment), exp_avg_sqs[i] (second moment): float32,
    contiguous, one shape per i; any number of elements, any 4-byte-aligned start (views into
    one flat buffer are fine). ``t`` (>= 1) is the step number of this update: the bias
    corrections are 1 - beta^t (torch counts the same way: its first step has t = 1).
    ``decay_mask[i]`` False: no weight decay on that tensor (biases, LayerNorm); default all
    True. ``bf16_copies[i]`` (None or a bfloat16 array of params[i]'s shape) receives the
    updated params rounded to bfloat16 in the same pass. Returns None, or with
    ``return_norm`` / ``norm_out`` (one float32 element) the global gradient norm before
    clipping, as a device scalar (what clip_grad_norm_ returns). Steps: per_tensor,
    multi_tensor (default).
    """
    lib = library(impl)
    ps = _tensor_list(params, "params")
    if not ps:
        raise ValueError("params: an empty list (nothing to update)")
    n = len(ps)
    lists = {"params": ps, "grads": _tensor_list(grads, "grads", n), "exp_avgs": _tensor_list(exp_avgs, "exp_avgs", n),
             "exp_avg_sqs": _tensor_list(exp_avg_sqs, "exp_avg_sqs", n)}
    arrays = {}
    for name, xs in lists.items():
        arrays[name] = []
        for i, x in enumerate(xs):
            a = A.as_array(x, f"{name}[{i}]")
            A.check_dtype(a, FLOAT32)
            A.check_contiguous(a)
            if name != "params":
                A.check_shape(a, arrays["params"][i].shape, f"params[{i}]'s shape")
            if name != "grads":
                A.check_writable(a)
            arrays[name].append(a)
    copies = [None] * n
    if bf16_copies is not None:
        for i, x in enumerate(_tensor_list(bf16_copies, "bf16_copies", n)):
            if x is None:
                continue
            a = A.as_array(x, f"bf16_copies[{i}]")
            A.check_dtype(a, BFLOAT16)
            A.check_contiguous(a)
            A.check_shape(a, arrays["params"][i].shape, f"params[{i}]'s shape")
            A.check_writable(a)
            copies[i] = a
    if decay_mask is None:
        decay = [1] * n
    else:
        decay = [int(bool(d)) for d in _tensor_list(decay_mask, "decay_mask", n)]
    if not isinstance(t, int) or isinstance(t, bool):
        raise TypeError(f"t: expected the step number (int >= 1), got {type(t).__name__}")
    try:
        beta1, beta2 = (float(b) for b in betas)
    except (TypeError, ValueError):
        raise TypeError(f"betas: expected (beta1, beta2), got {betas!r}") from None
    s = _step(lib, step, "adamw")
    like = arrays["params"][0]
    norm = None
    if norm_out is not None:
        norm = A.as_array(norm_out, "norm_out")
        A.check_dtype(norm, FLOAT32)
        A.check_writable(norm)
        if norm.numel != 1:
            raise ValueError(f"norm_out: shape {norm.shape}, expected one element")
    all_arrays = [a for name in lists for a in arrays[name]] + [c for c in copies if c is not None]
    A.check_same_device(*all_arrays, norm)
    sizes = (_ctypes.c_int64 * n)(*(a.numel for a in arrays["params"]))
    if norm is None and return_norm:
        norm = _scalar_out(lib, None, like)
    ws = A.Scratch(lib, lib.workspace_bytes("course_adamw_workspace_bytes", s, n, sizes), like, workspace)
    ptrs = lambda name: (_ctypes.c_void_p * n)(*(a.ptr or None for a in arrays[name]))  # noqa: E731
    bf16_ptrs = (_ctypes.c_void_p * n)(*(c.ptr if c is not None else None for c in copies)) \
        if any(c is not None for c in copies) else None
    _call(lib, "course_adamw", like, stream, s, n, ptrs("params"), ptrs("grads"), ptrs("exp_avgs"),
          ptrs("exp_avg_sqs"), bf16_ptrs, sizes, (_ctypes.c_int * n)(*decay), float(lr), beta1, beta2, float(eps),
          float(weight_decay), t, float(max_norm), norm.ptr if norm is not None else None, ws.ptr, ws.nbytes)
    return norm.obj if norm is not None else None


def _elementwise(x: Any, name: str) -> Array:
    a = A.as_array(x, name)
    A.check_dtype(a, FLOAT32, BFLOAT16)
    A.check_contiguous(a)
    return a


def _like(x: Any, name: str, ref: Array) -> Array:
    a = A.as_array(x, name)
    if a.dtype != ref.dtype:
        raise TypeError(f"{name}: dtype {a.dtype}, but {ref.name} is {ref.dtype}")
    A.check_shape(a, ref.shape, f"{ref.name}'s shape")
    A.check_contiguous(a)
    return a


def gelu(x: Any, *, step: Optional[str] = None, impl: str = "solution", out: Any = None,
         stream: Any = None) -> Any:
    """gelu(x) in GPT-2's tanh approximation: ``F.gelu(x, approximate='tanh')`` (module 4).

    x: any shape, contiguous, float32 or bfloat16 (fp32 arithmetic, one rounding). In place:
    ``out=x``. Steps: scalar, vectorized (default).
    """
    lib = library(impl)
    X = _elementwise(x, "x")
    s = _step(lib, step, "gelu")
    Y = A.output(lib, out, "out", X.shape, X.dtype, X, contiguous=True)
    A.check_same_device(X, Y)
    _call(lib, "course_gelu_forward", X, stream, s, X.ptr, Y.ptr, X.numel, int(X.dtype == BFLOAT16))
    return Y.obj


def gelu_backward(x: Any, dy: Any, *, accumulate: bool = False, step: Optional[str] = None,
                  impl: str = "solution", out: Any = None, stream: Any = None) -> Any:
    """dx = dy * gelu'(x) (tanh approximation): ``torch.ops.aten.gelu_backward(dy, x,
    approximate='tanh')``; with ``accumulate``, ``out += dy * gelu'(x)`` (``out`` required).

    x, dy: one shape and dtype (float32 or bfloat16), contiguous. In place: ``out=dy``.
    Steps: scalar, vectorized (default).
    """
    lib = library(impl)
    X = _elementwise(x, "x")
    DY = _like(dy, "dy", X)
    if accumulate and out is None:
        raise ValueError("accumulate: adds into dx (dx += dy * gelu'(x)): pass out=")
    s = _step(lib, step, "gelu_backward")
    DX = A.output(lib, out, "out", X.shape, X.dtype, X, contiguous=True)
    A.check_same_device(X, DY, DX)
    _call(lib, "course_gelu_backward", X, stream, s, X.ptr, DY.ptr, DX.ptr, X.numel, int(X.dtype == BFLOAT16),
          int(bool(accumulate)))
    return DX.obj


def _tc_ex(lib, s: bytes, Am: Array, a_t: bool, lda: int, Bm: Array, b_t: bool, ldb: int, m: int, n: int, k: int,
           bias: Any, gelu: bool, pre_gelu_out: Any, return_pre_gelu: bool, residual: Any, accumulate: bool,
           out_dtype: Any, out: Any, stream: Any) -> Any:
    """The checks and the call both matmul_tc_ex and linear make: everything after the operands."""
    if out_dtype is not None:
        dt = _dtype_name(out_dtype, "out_dtype")
    elif out is not None:
        dt = A.as_array(out, "out").dtype
        if dt not in (FLOAT32, BFLOAT16):
            raise TypeError(f"out: dtype {dt}, expected float32 or bfloat16")
    else:
        dt = FLOAT32
    if accumulate:
        if out is None:
            raise ValueError("accumulate: adds into C (C += a @ b): pass out=")
        if dt != FLOAT32:
            raise ValueError("accumulate: needs a float32 output (a bfloat16 sum would round at every step)")
        if residual is not None:
            raise ValueError("residual: not with accumulate (accumulate already adds C)")
    if (pre_gelu_out is not None or return_pre_gelu) and not gelu:
        raise ValueError("pre_gelu_out: the pre-activation is only written with gelu=True")
    Bias = None
    if bias is not None:
        Bias = A.as_array(bias, "bias")
        A.check_dtype(Bias, FLOAT32)
        A.check_shape(Bias, (n,), "[N]")
        A.check_contiguous(Bias)
    R = None
    if residual is not None:
        R = A.as_array(residual, "residual")
        A.check_dtype(R, dt)
        A.check_shape(R, (m, n), "[M, N]")
        A.check_unit_last_stride(R)
    P = None
    if pre_gelu_out is not None:
        P = A.as_array(pre_gelu_out, "pre_gelu_out")
        A.check_dtype(P, BFLOAT16)
        A.check_shape(P, (m, n), "[M, N]")
        A.check_unit_last_stride(P)
        A.check_writable(P)
    C = A.output(lib, out, "out", (m, n), dt, Am)
    ldc = A.leading_dim(C)
    if P is None and return_pre_gelu:
        P = A.empty(lib, (m, n), BFLOAT16, Am, "pre_gelu_out")
    if P is not None and m > 1 and A.leading_dim(P) != ldc:
        raise ValueError(f"pre_gelu_out: row stride {A.leading_dim(P)} differs from out's {ldc} (the kernel "
                         "writes both with one leading dimension)")
    A.check_same_device(Am, Bm, C, Bias, R, P)
    _call(lib, "course_matmul_tc_ex", Am, stream, s, Am.ptr, Bm.ptr, C.ptr if dt == FLOAT32 else None,
          C.ptr if dt == BFLOAT16 else None, m, n, k, lda, ldb, ldc, int(a_t), int(b_t),
          Bias.ptr if Bias is not None else None, P.ptr if P is not None else None, int(bool(gelu)),
          R.ptr if R is not None else None, A.leading_dim(R) if R is not None else 0, int(bool(accumulate)))
    return (C.obj, P.obj) if P is not None else C.obj


def matmul_tc_ex(a: Any, b: Any, *, bias: Any = None, gelu: bool = False, pre_gelu_out: Any = None,
                 return_pre_gelu: bool = False, residual: Any = None, accumulate: bool = False,
                 out_dtype: Any = None, step: Optional[str] = None, impl: str = "solution", out: Any = None,
                 stream: Any = None) -> Any:
    """C = a @ b [+ bias] [gelu] [+ residual] on tensor cores, with module 1's linear-layer options.

    a (M x K) and b (K x N): bfloat16, each row-major OR a transposed view of a row-major
    matrix (``x.t()``): read in place as a_transposed / b_transposed, never copied. Storage
    16-byte aligned, row strides multiples of 8 elements. The epilogue, on each fp32
    accumulator: ``+ bias[j]`` (float32 [N]); with ``gelu``, the pre-activation is written to
    ``pre_gelu_out`` (bfloat16 [M, N], out's row stride; ``return_pre_gelu`` allocates it) and
    GELU (tanh) applied; ``+ residual`` (out's dtype, [M, N]; may be ``out`` itself: the
    residual stream updated in place); then C = v, or C += v with ``accumulate`` (float32
    ``out`` required). Output dtype: ``out_dtype`` ("float32"/"bfloat16" or a torch dtype),
    else ``out``'s, else float32. Returns C, or (C, pre_gelu) when the pre-activation is asked
    for. Options need step mma_sync (default); other steps raise UnsupportedError naming the
    first option. The linear layer's five products:
      Y = X W^T + b            ``linear(x, w, b)``  (= matmul_tc_ex(x, w.t(), bias=b, out_dtype=bf16))
      dX = dY W                ``matmul_tc_ex(dy, w, out_dtype=torch.bfloat16)``
      dW += dY^T X             ``matmul_tc_ex(dy.t(), x, accumulate=True, out=dw)``  (dw float32)
    """
    lib = library(impl)
    Am, Bm = A.as_array(a, "a"), A.as_array(b, "b")
    for x in (Am, Bm):
        A.check_ndim(x, 2, what="(a matrix)")
        A.check_dtype(x, BFLOAT16)
    (m, k), (k2, n) = Am.shape, Bm.shape
    if k2 != k:
        raise ValueError(f"b: shape {Bm.shape} does not match a's {Am.shape}: a is M x K, b must be K x N")
    a_t, lda = _operand_layout(Am)
    b_t, ldb = _operand_layout(Bm)
    s = _step(lib, step, "matmul_tc")
    return _tc_ex(lib, s, Am, a_t, lda, Bm, b_t, ldb, m, n, k, bias, gelu, pre_gelu_out, return_pre_gelu, residual,
                  accumulate, out_dtype, out, stream)


def linear(x: Any, w: Any, bias: Any = None, *, gelu: bool = False, residual: Any = None,
           out_dtype: Any = None, pre_gelu_out: Any = None, return_pre_gelu: bool = False,
           step: Optional[str] = None, impl: str = "solution", out: Any = None, stream: Any = None) -> Any:
    """y = x @ w^T [+ bias] [gelu] [+ residual]: ``F.linear`` on the course's tensor-core matmul.

    x: [M, K] bfloat16 (row-major, or a transposed view); w: [N, K] bfloat16, stored
    [out_features, in_features] as PyTorch stores it (read in place: b_transposed); bias:
    float32 [N] (added to the fp32 accumulator). Output dtype: ``out_dtype``, else ``out``'s,
    else bfloat16.
    ``gelu``: ``F.gelu(..., approximate='tanh')`` in the epilogue (``return_pre_gelu`` /
    ``pre_gelu_out``: also the bfloat16 pre-activation, what GELU's backward reads);
    ``residual``: ``residual + F.linear(x, w, bias)``, in place with ``out=residual``. The
    backward products are ``matmul_tc_ex`` calls (see there). Step: mma_sync (default).
    """
    lib = library(impl)
    X, W = A.as_array(x, "x"), A.as_array(w, "w")
    for t in (X, W):
        A.check_ndim(t, 2, what="(a matrix)")
        A.check_dtype(t, BFLOAT16)
    (m, k), (n, k2) = X.shape, W.shape
    if k2 != k:
        raise ValueError(f"w: shape {W.shape} does not match x's {X.shape}: x is [M, K], w must be [N, K]")
    a_t, lda = _operand_layout(X)
    w_t, ldw = _operand_layout(W)  # w row-major [N, K] is B = w^T stored N x K: b_transposed
    s = _step(lib, step, "matmul_tc")
    if out_dtype is None and out is None:
        out_dtype = BFLOAT16
    return _tc_ex(lib, s, X, a_t, lda, W, not w_t, ldw, m, n, k, bias, gelu, pre_gelu_out, return_pre_gelu,
                  residual, False, out_dtype, out, stream)


# ---------------------------------------------------------------------------------------
# Module 4's LayerNorm (C ABI: course_layer_norm_forward, course_layer_norm_backward and
# its workspace query; op names "layer_norm" and "layer_norm_backward")
# ---------------------------------------------------------------------------------------

import math  # noqa: E402  (this block is self-contained)

_L._SIGNATURES.update({
    "course_layer_norm_forward": (_ctypes.c_int, [_ctypes.c_char_p, _ctypes.c_int, _ctypes.c_void_p, _ctypes.c_void_p,
                                                  _ctypes.c_void_p, _ctypes.c_void_p, _ctypes.c_void_p,
                                                  _ctypes.c_void_p, _ctypes.c_int64, _ctypes.c_int64,
                                                  _ctypes.c_int64, _ctypes.c_int64, _ctypes.c_float,
                                                  _ctypes.c_void_p]),
    "course_layer_norm_backward_workspace_bytes": (_ctypes.c_int, [_ctypes.c_char_p, _ctypes.c_int64,
                                                                   _ctypes.c_int64,
                                                                   _ctypes.POINTER(_ctypes.c_size_t)]),
    "course_layer_norm_backward": (_ctypes.c_int, [_ctypes.c_char_p, _ctypes.c_int, _ctypes.c_void_p,
                                                   _ctypes.c_void_p, _ctypes.c_void_p, _ctypes.c_void_p,
                                                   _ctypes.c_void_p, _ctypes.c_void_p, _ctypes.c_void_p,
                                                   _ctypes.c_void_p, _ctypes.c_int64, _ctypes.c_int64,
                                                   _ctypes.c_int64, _ctypes.c_int64, _ctypes.c_int64, _ctypes.c_int,
                                                   _ctypes.c_int, _ctypes.c_void_p, _ctypes.c_size_t,
                                                   _ctypes.c_void_p]),
})

DEFAULT_STEPS.update({"layer_norm": "pipelined", "layer_norm_backward": "pipelined"})


def _f32_vector(v: Any, name: str, n: int, what: str) -> Array:
    """A contiguous float32 vector of n elements (gamma, beta: [C]; mean, rstd: [rows])."""
    a = A.as_array(v, name)
    A.check_dtype(a, FLOAT32)
    A.check_shape(a, (n,), what)
    A.check_contiguous(a)
    return a


def _f32_vector_out(out: Any, name: str, n: int, what: str) -> Optional[Array]:
    """A given float32 output vector, checked (None when not given: allocated after every check)."""
    if out is None:
        return None
    a = _f32_vector(out, name, n, what)
    A.check_writable(a)
    return a


def _given_output(out: Any, name: str, shape, dtype: str) -> Optional[Array]:
    """A given matrix output, checked like A.output does (None when not given)."""
    return None if out is None else A.output(None, out, name, shape, dtype, None)


def layer_norm(x: Any, gamma: Any, beta: Any, *, eps: float = 1e-5, step: Optional[str] = None,
               return_stats: bool = False, impl: str = "solution", out: Any = None, mean_out: Any = None,
               rstd_out: Any = None, stream: Any = None) -> Any:
    """y = LayerNorm(x) * gamma + beta over the last dimension: ``F.layer_norm(x, (C,), gamma, beta, eps)``
    (biased variance), module 4's ``layer_norm_forward``.

    x: rows x C (2-D; reshape(-1, C) a [B, T, C] tensor), float32 or bfloat16, unit column
    stride, any row stride; y (``out``) has x's dtype. gamma, beta: float32 [C], contiguous,
    whatever x's dtype (the GPT's mixed mode: bf16 activations, fp32 parameters).
    Returns y, or ``(y, mean, rstd)`` (float32 [rows]: the row means and 1 / sqrt(var + eps),
    what ``layer_norm_backward`` reads) with ``return_stats`` or ``mean_out`` / ``rstd_out``.
    Steps: thread_per_row, warp_per_row, vectorized, pipelined (default).
    """
    lib = library(impl)
    X = _matrix(A.as_array(x, "x"))
    A.check_dtype(X, FLOAT32, BFLOAT16)
    rows, C = X.shape
    G = _f32_vector(gamma, "gamma", C, "[C] (C from x)")
    Bt = _f32_vector(beta, "beta", C, "[C] (C from x)")
    if (mean_out is None) != (rstd_out is None):
        raise ValueError("mean_out, rstd_out: give both or neither (the kernel writes both statistics)")
    e = float(eps)
    if not math.isfinite(e) or e < 0:
        raise ValueError(f"eps: {eps!r}, expected a finite value >= 0")
    s = _step(lib, step, "layer_norm")
    Y = _given_output(out, "out", (rows, C), X.dtype)
    M = _f32_vector_out(mean_out, "mean_out", rows, "[rows] (rows from x)")
    R = _f32_vector_out(rstd_out, "rstd_out", rows, "[rows] (rows from x)")
    A.check_same_device(X, G, Bt, Y, M, R)
    Y = A.empty(lib, (rows, C), X.dtype, X, "out") if Y is None else Y
    M = A.empty(lib, (rows,), FLOAT32, X, "mean_out") if M is None else M
    R = A.empty(lib, (rows,), FLOAT32, X, "rstd_out") if R is None else R
    _call(lib, "course_layer_norm_forward", X, stream, s, int(X.dtype == BFLOAT16), X.ptr, Y.ptr, G.ptr, Bt.ptr,
          M.ptr, R.ptr, rows, C, A.leading_dim(X), A.leading_dim(Y), e)
    if return_stats or mean_out is not None:
        return Y.obj, M.obj, R.obj
    return Y.obj


def layer_norm_backward(x: Any, dy: Any, mean: Any, rstd: Any, gamma: Any, *, step: Optional[str] = None,
                        dx: Any = None, accumulate_dx: bool = False, dgamma: Any = None, dbeta: Any = None,
                        accumulate_dparams: bool = False, impl: str = "solution", stream: Any = None,
                        workspace: Any = None) -> Tuple[Any, Any, Any]:
    """(dx, dgamma, dbeta) of ``layer_norm``: what autograd gives for ``F.layer_norm(x, (C,), gamma,
    beta)`` from dy = dL/dy, module 4's ``layer_norm_backward``.

    x, dy: rows x C, one dtype (float32 or bfloat16), unit column stride, any row strides;
    mean, rstd: float32 [rows] from ``layer_norm(..., return_stats=True)``; gamma: float32 [C].
    dx (x's dtype, rows x C) is written, or added to with ``accumulate_dx`` (``dx`` required:
    the residual stream's gradient); dgamma, dbeta (float32 [C]) are written, or added to with
    ``accumulate_dparams`` (both required: gradient accumulation over micro-batches). Outputs
    must not overlap the inputs (no in place). Steps: atomic_params (fp32 atomics:
    dgamma, dbeta differ in the last bits from run to run), partial_sums and pipelined (default)
    (deterministic; scratch of ``workspace_bytes`` from course_layer_norm_backward_workspace_bytes).
    """
    lib = library(impl)
    X = _matrix(A.as_array(x, "x"))
    A.check_dtype(X, FLOAT32, BFLOAT16)
    rows, C = X.shape
    DY = _matrix(A.as_array(dy, "dy"))
    if DY.dtype != X.dtype:
        raise TypeError(f"dy: dtype {DY.dtype}, but x is {X.dtype}; x, dy and dx share one dtype")
    A.check_shape(DY, X.shape, "x's shape")
    Mn = _f32_vector(mean, "mean", rows, "[rows] (rows from x)")
    Rs = _f32_vector(rstd, "rstd", rows, "[rows] (rows from x)")
    G = _f32_vector(gamma, "gamma", C, "[C] (C from x)")
    if accumulate_dx and dx is None:
        raise ValueError("accumulate_dx: adds into dx (dx += the gradient): pass dx=")
    if accumulate_dparams and (dgamma is None or dbeta is None):
        raise ValueError("accumulate_dparams: adds into dgamma and dbeta: pass both dgamma= and dbeta=")
    s = _step(lib, step, "layer_norm_backward")
    DX = _given_output(dx, "dx", (rows, C), X.dtype)
    DG = _f32_vector_out(dgamma, "dgamma", C, "[C] (C from x)")
    DB = _f32_vector_out(dbeta, "dbeta", C, "[C] (C from x)")
    A.check_same_device(X, DY, Mn, Rs, G, DX, DG, DB)
    DX = A.empty(lib, (rows, C), X.dtype, X, "dx") if DX is None else DX
    DG = A.empty(lib, (C,), FLOAT32, X, "dgamma") if DG is None else DG
    DB = A.empty(lib, (C,), FLOAT32, X, "dbeta") if DB is None else DB
    ws = A.Scratch(lib, lib.workspace_bytes("course_layer_norm_backward_workspace_bytes", s, rows, C), X, workspace)
    _call(lib, "course_layer_norm_backward", X, stream, s, int(X.dtype == BFLOAT16), X.ptr, DY.ptr, DX.ptr, G.ptr,
          Mn.ptr, Rs.ptr, DG.ptr, DB.ptr, rows, C, A.leading_dim(X), A.leading_dim(DY), A.leading_dim(DX),
          int(bool(accumulate_dx)), int(bool(accumulate_dparams)), ws.ptr, ws.nbytes)
    return DX.obj, DG.obj, DB.obj
