"""The course's attention as a differentiable PyTorch op: forward and backward both run
the course's kernels, so the attention of a PyTorch model can be the course's.

    import torch, course_kernels as ck
    q, k, v = (torch.randn(2, 8, 1000, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    o = ck.attention(q, k, v, causal=True)   # module 3's tc_flash2, through AttentionFunction
    o.sum().backward()                       # module 4's tc_pipelined: q.grad, k.grad, v.grad

What autograd keeps between the two passes is what FlashAttention keeps: Q, K, V, the
output O and the fp32 logsumexp of each score row (lse, O(N)) -- never the N x N
probabilities, which the backward recomputes from lse tile by tile.

Importing this module imports torch (the rest of the package does not).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.autograd.function import once_differentiable

# (Not `from . import ops`: the package's ops() function shadows the submodule's name.)
from .ops import attention as _attention, attention_backward as _attention_backward


def kernel_ready(t: torch.Tensor) -> torch.Tensor:
    """`t` itself when the kernels can read it in place, else a contiguous copy.

    In place means: last dim contiguous, every other stride (of a dim longer than 1) a
    multiple of 16 bytes -- one cp.async / float4 load -- with rows at least head_dim
    apart, and the data 16-byte aligned. Contiguous [B, H, N, d] tensors and [B, N, H, d]
    ones passed as ``x.transpose(1, 2)`` qualify (for d a multiple of 8); a gradient that
    autograd hands over expanded (all strides 0, as ``o.sum().backward()`` does) is copied.
    """
    d = t.shape[-1]
    unit = 16 // t.element_size()
    ok = t.data_ptr() % 16 == 0 and (t.shape[-1] == 1 or t.stride(-1) == 1)
    for dim, (n, stride) in enumerate(zip(t.shape[:-1], t.stride()[:-1])):
        if n > 1:
            ok = ok and stride % unit == 0 and (dim < t.dim() - 2 or stride >= d)
    return t if ok else t.clone(memory_format=torch.contiguous_format)  # (contiguous() may return t)


class AttentionFunction(torch.autograd.Function):
    """O = softmax(scale * Q K^T [causal]) V; backward: dQ, dK, dV by the course's kernels.

    ``AttentionFunction.apply(q, k, v, causal, scale, step, backward_step, impl)``; ``ck.attention``
    calls it for tensors that require grad. q: [B, H, N_q, d], k, v: [B, H_kv, N_k, d] CUDA
    tensors of one dtype: bfloat16 (forward ``step`` default tc_flash2, backward
    ``backward_step`` default tc_pipelined; d 64 or 128) or float32 (fused / fused_options,
    flash). Layouts as ``kernel_ready`` says; others are copied first. Bottom-right causal
    mask (SDPA's ``is_causal`` when N_q == N_k); H_kv < H is grouped-query attention, and dK,
    dV then sum over each group's query heads.
    """

    @staticmethod
    def forward(ctx, q, k, v, causal: bool = False, scale: Optional[float] = None, step: Optional[str] = None,
                backward_step: Optional[str] = None, impl: str = "solution"):
        q, k, v = (kernel_ready(t) for t in (q, k, v))
        # The plain op (autograd is off inside forward): it validates everything, the
        # backward step's name included, before it allocates O.
        o, lse = _attention(q, k, v, causal=causal, scale=scale, step=step, backward_step=backward_step,
                            impl=impl, return_lse=True)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.options = dict(causal=causal, scale=scale, step=backward_step, impl=impl)
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _attention_backward(q, k, v, o, kernel_ready(dout), lse, **ctx.options)
        need = ctx.needs_input_grad  # one entry per argument apply() was given: q, k, v, then options
        return tuple(g if n else None for g, n in zip((dq, dk, dv), need)) + (None,) * (len(need) - 3)


def attention_with_grad(q, k, v, *, causal: bool = False, scale: Optional[float] = None, step: Optional[str] = None,
                        backward_step: Optional[str] = None, impl: str = "solution") -> torch.Tensor:
    """``ck.attention`` for tensors that require grad: AttentionFunction.apply with keywords."""
    return AttentionFunction.apply(q, k, v, causal, scale, step, backward_step, impl)
