#!/usr/bin/env python3
"""Every course op beside its PyTorch equivalent, on the same tensors, with one timer.

usage: scripts/compare_torch.py [--ops OPS] [--quick] [--impl solution,exercise] [--steps REGEX] [--out FILE]

For each op and shape of the C++ benchmarks, times the course's steps (solution; exercise
steps that are written) and the PyTorch equivalents, and checks the accuracy of every
result against a float64 reference:
  l2_norm, dot            torch.linalg.vector_norm, torch.dot
  softmax                 torch.softmax
  matmul (fp32)           torch.matmul, TF32 off
  matmul_tc (bf16)        torch.mm with fp32 output when torch has out_dtype, else torch.matmul (bf16 out)
  batched_gemm            torch.matmul on [B, H, N, d] (Q K^T and P V), fp32 (TF32 off) and bf16
  attention (fp32)        SDPA, each backend (flash, cudnn, efficient, math; a backend that
                          refuses a case is recorded with its reason)
  attention_bf16          the tensor-core steps beside SDPA's backends: d in {64, 128},
                          N in {1024, ..., 16384}, B = 16384 / N, H = 2048 / d, causal and not
  attention_backward      autograd through SDPA (efficient, math), fp32
  attention_backward_bf16 the tensor-core backward steps beside SDPA's flash and cudnn
                          backward, the backward alone: SDPA's forward runs once outside the
                          timer and torch.autograd.grad(out, (q, k, v), dO, retain_graph=True)
                          is timed; the course's attention_backward is timed on the O and
                          lse of its tc_flash2 forward. Shapes as attention_bf16
  attention_fwdbwd_bf16   forward + backward: SDPA's autograd against ck.attention's
                          (tc_flash2, then each backward step), torch.autograd.grad of both
  softmax_backward        torch._softmax_backward_data
  linear_backward         dy @ w.T, x.T @ dy, dy.sum(0)
  adamw                   clip_grad_norm_(foreach=True) + torch.optim.AdamW(fused=True) on the GPT
                          parameter lists of bench_adamw.cpp (gpt6_d384, gpt12_d768; _bf16: plus a
                          bf16 copy of the parameters), the same flat buffers, 10 ms timer spin
  gelu                    ops gelu and gelu_backward, 16384 x 1536 fp32 and bf16: F.gelu(x,
                          approximate='tanh'); torch.ops.aten.gelu_backward(dy, x, approximate='tanh'),
                          and with accumulate dx.add_(aten.gelu_backward(...))
  linear_bf16             bench_linear_tc.cpp's linear products (16384 tokens, d_model 384) on every
                          step with the epilogue options (mma_sync, the Hopper steps): F.linear
                          (bias), F.gelu(F.linear) and torch._addmm_activation(use_gelu),
                          x + F.linear, dy @ w, and dW += dY^T X into fp32 (addmm/mm with
                          out_dtype where torch has it)
  layer_norm              ops layer_norm, layer_norm_backward and layer_norm_fwdbwd, 16384 x {384, 768}
                          fp32 and bf16 (the course's gamma, beta fp32 always): F.layer_norm; the
                          backward alone, torch.autograd.grad(y, (x, w, b), dy, retain_graph=True) on
                          one forward graph; forward + backward, torch.autograd.grad(F.layer_norm(..),
                          (x, w, b), dy); bf16 also "torch_upcast", F.layer_norm(x.float(), ..).to(bf16)
                          (autocast's fp32 LayerNorm). See bench_layer_norm below
Timer: CUDA events around each call, a 256 MiB L2 flush and a short GPU spin before it
(queued work that hides the host's launch overhead), warm-up, median of the repetitions.
Accuracy rule: max error vs float64 <= factor x the same-precision computation's max
error + floor (factor 2, backward 3: the FlashAttention rule). The same-precision
computation is PyTorch's result (fp32 attention: the math backend), for bf16 attention
the plain pipeline with P rounded to bf16 (FlashAttention's reference); attention errors
are measured on sampled heads. A failing case is
recorded with its error and the run goes on. Prints a short table last; --out writes JSON
for scripts/make_results.py.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import platform
import re
import subprocess
import sys
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bindings" / "python"))  # works without installing the package too

OPS = ["l2_norm", "dot", "softmax", "matmul", "matmul_tc", "batched_gemm", "attention", "attention_bf16",
       "attention_backward", "attention_backward_bf16", "attention_fwdbwd_bf16", "softmax_backward",
       "linear_backward", "cross_entropy", "adamw", "gelu", "linear_bf16", "layer_norm"]

torch = None  # imported in main(), so that --help works without PyTorch
ck = None
F = None


# ---------------------------------------------------------------------------------------
# Timer and bookkeeping
# ---------------------------------------------------------------------------------------

class Timer:
    """CUDA-event timing, L2 flushed before every call, median over repetitions.

    Before each timed call the GPU is given queued work (the 256 MiB flush, then a spin
    kernel of `pad_ms`), so the host's launch overhead (Python argument checks, ctypes,
    torch's dispatcher) overlaps it and is not counted: the events bracket GPU time only.
    The flush writes (zero_), as triton's do_bench does, so every call starts with the L2
    full of dirty lines; a kernel whose misses must write those back first pays for it
    (module 1's lesson, "The L2's state").
    """

    def __init__(self, warmup_ms: float, rep_ms: float, min_reps: int = 5, max_reps: int = 200,
                 pad_ms: float = 0.3):
        self.warmup_ms, self.rep_ms, self.min_reps, self.max_reps = warmup_ms, rep_ms, min_reps, max_reps
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        self.spin = getattr(torch.cuda, "_sleep", None)
        self.spin_cycles = 0
        if self.spin is not None:  # calibrate cycles per millisecond
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.spin(1 << 20)
            start.record()
            self.spin(1 << 22)
            end.record()
            torch.cuda.synchronize()
            self.spin_cycles = int((1 << 22) * pad_ms / max(start.elapsed_time(end), 1e-3))

    def _prepare(self):
        self.flush.zero_()
        if self.spin_cycles:
            self.spin(self.spin_cycles)

    def __call__(self, fn) -> float:
        """Median milliseconds of fn()."""
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            self.flush.zero_()
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate = max(start.elapsed_time(end) / 3, 1e-3)
        for _ in range(max(1, int(self.warmup_ms / estimate))):
            fn()
        reps = min(self.max_reps, max(self.min_reps, int(self.rep_ms / estimate)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            self._prepare()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
        return times[len(times) // 2]


class ContextLost(RuntimeError):
    """The CUDA context is unusable (e.g. an illegal address): nothing more can run."""


class Run:
    def __init__(self, args):
        self.args = args
        self.timer = Timer(args.warmup_ms, args.rep_ms)
        self.rows = []
        self.impls = [i.strip() for i in args.impl.split(",") if i.strip()]
        self.steps = re.compile(args.steps) if args.steps else None

    def record(self, **row):
        self.rows.append(row)
        status = row.get("error") or (f"{row['ms']:.3f} ms  {row['value']:.1f} {row['unit']}"
                                      + (f"  err {row['err']:.2e}" if row.get("err") is not None else ""))
        who = row.get("step") or row.get("backend")
        print(f"  {row['op']:<18} {row['shape']:<26} {row['impl']:<9} {who:<22} {status}", flush=True)

    def measure(self, op, shape, impl, who, fn, work, unit, check=None, note=None, kind="step"):
        """Times fn (after one checked call) and records a row. `work` is FLOPs or bytes;
        `check(result)` returns the max error vs float64 (or None)."""
        row = {"op": op, "shape": shape, "impl": impl, ("step" if kind == "step" else "backend"): who,
               "kind": kind, "unit": unit}
        if note:
            row["note"] = note
        failure = None
        try:
            result = fn()
            torch.cuda.synchronize()
            err = check(result) if check else None
            del result
            ms = self.timer(fn)
            value = work / (ms * 1e-3) / (1e12 if unit == "TFLOP/s" else 1e9)
            row.update(ms=ms, value=value, err=err)
        except Exception as e:  # noqa: BLE001 -- every failure is recorded, the run goes on
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:600]
            if os.environ.get("COMPARE_TORCH_TRACE"):
                traceback.print_exc()
            failure = e
        self.record(**row)
        if failure is not None:
            healthy(failure)
        return row

    def course_steps(self, op, wanted=None):
        """(impl, step) pairs to run: every step of the op (or `wanted`), solution and exercise."""
        out = []
        for impl in self.impls:
            try:
                if op not in ck.ops(impl) or not ck.available(op, impl):
                    continue
                names = [s for s, _ in ck.steps(op, impl)]
            except Exception:  # noqa: BLE001 -- a missing library is reported by the first call
                names = [s for s, _ in ck.steps(op)]
            for s in names:
                if (wanted is None or wanted(s)) and (self.steps is None or self.steps.fullmatch(s)):
                    out.append((impl, s))
        return out

    def run_course(self, op, shape, impl, step, fn, work, unit, check):
        row = self.measure(op, shape, impl, step, fn, work, unit, check)
        if impl == "exercise" and "StubNotImplementedError" in (row.get("error") or ""):
            row["error"] = "exercise stub not written yet"
        return row


def healthy(exc):
    """Frees cached memory; raises ContextLost when the CUDA context no longer works after `exc`."""
    try:
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
    except Exception as e:  # noqa: BLE001
        raise ContextLost(f"CUDA context lost after {type(exc).__name__}: {exc}") from e


def max_err(got, ref):
    return (got.double() - ref).abs().max().item()


def rel_err(got, ref):
    return max_err(got, ref) / max(ref.abs().max().item(), 1e-30)


def shape_name(**dims):
    return "_".join(f"{k}{v}" for k, v in dims.items())


# ---------------------------------------------------------------------------------------
# Module 1
# ---------------------------------------------------------------------------------------

def bench_reductions(run, op, quick):
    sizes = [1 << 20] if quick else [1 << 28, 1 << 20]
    for n in sizes:
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        shape = f"n={n}"
        if op == "l2_norm":
            ref = torch.linalg.vector_norm(x.double())
            scale = ref.abs().item()
            torch_fn = lambda: torch.linalg.vector_norm(x)  # noqa: E731
            bytes_ = 4 * n
        else:
            ref = torch.dot(x.double(), y.double())
            scale = (torch.linalg.vector_norm(x.double()) * torch.linalg.vector_norm(y.double())).item()
            torch_fn = lambda: torch.dot(x, y)  # noqa: E731
            bytes_ = 8 * n
        check = lambda r: abs(r.double().item() - ref.item()) / scale  # noqa: E731
        run.measure(op, shape, "pytorch", "torch", torch_fn, bytes_, "GB/s", check, kind="backend")
        out = torch.empty((), device="cuda")
        ws = torch.empty(1 << 16, dtype=torch.uint8, device="cuda")
        for impl, step in run.course_steps(op):
            if op == "l2_norm":
                fn = lambda s=step, i=impl: ck.l2_norm(x, step=s, impl=i, out=out, workspace=ws)  # noqa: E731
            else:
                fn = lambda s=step, i=impl: ck.dot(x, y, step=s, impl=i, out=out, workspace=ws)  # noqa: E731
            run.run_course(op, shape, impl, step, fn, bytes_, "GB/s", check)


def bench_softmax(run, quick):
    shapes = [(65536, 1024, 1)] if quick else [(65536, 1024, 1), (16384, 4096, 1), (4096, 32768, 1), (16384, 4096, 0),
                                                   (4096, 32768, 0)]
    for rows, cols, dim in shapes:
        x = torch.randn(rows, cols, device="cuda") * 4
        ref = torch.softmax(x.double(), dim)
        shape = f"{rows}x{cols}_dim{dim}"
        bytes_ = 2 * 4 * rows * cols
        check = lambda r: max_err(r, ref)  # noqa: E731
        run.measure("softmax", shape, "pytorch", "torch", lambda: torch.softmax(x, dim), bytes_, "GB/s", check,
                    kind="backend")
        y = torch.empty_like(x)
        ws = torch.empty(2 * max(rows, cols) * 4, dtype=torch.uint8, device="cuda")
        for impl, step in run.course_steps("softmax"):
            fn = lambda s=step, i=impl: ck.softmax(x, dim, step=s, impl=i, out=y, workspace=ws)  # noqa: E731
            run.run_course("softmax", shape, impl, step, fn, bytes_, "GB/s", check)
        del ref


def bench_matmul(run, quick):
    shapes = [(1024, 1024, 1024)] if quick else [(4096, 4096, 4096), (1024, 1024, 1024), (4096, 4096, 1024)]
    for m, n, k in shapes:
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        ref = a.double() @ b.double()
        shape = f"{m}x{n}x{k}"
        check = lambda r: rel_err(r, ref)  # noqa: E731
        run.measure("matmul", shape, "pytorch", "torch.matmul", lambda: a @ b, 2.0 * m * n * k, "TFLOP/s", check,
                    note="TF32 off", kind="backend")
        c = torch.empty(m, n, device="cuda")
        for impl, step in run.course_steps("matmul"):
            fn = lambda s=step, i=impl: ck.matmul(a, b, step=s, impl=i, out=c)  # noqa: E731
            run.run_course("matmul", shape, impl, step, fn, 2.0 * m * n * k, "TFLOP/s", check)
        del ref


def torch_mm_f32_out(a, b):
    """cuBLAS bf16 GEMM with fp32 output when this torch has out_dtype, else bf16 output."""
    try:
        return torch.mm(a, b, out_dtype=torch.float32), "fp32 out"
    except (TypeError, RuntimeError):
        return a @ b, "bf16 out (this torch has no out_dtype)"


def bench_matmul_tc(run, quick):
    shapes = [(4096, 4096, 4096)] if quick else [(8192, 8192, 8192), (4096, 4096, 4096)]
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ref = a.double() @ b.double()
        shape = f"{m}x{n}x{k}"
        check = lambda r: rel_err(r, ref)  # noqa: E731
        _, note = torch_mm_f32_out(a, b)
        run.measure("matmul_tc", shape, "pytorch", "torch.mm", lambda: torch_mm_f32_out(a, b)[0], 2.0 * m * n * k,
                    "TFLOP/s", check, note=note, kind="backend")
        c = torch.empty(m, n, device="cuda")
        for impl, step in run.course_steps("matmul_tc"):
            fn = lambda s=step, i=impl: ck.matmul_tc(a, b, step=s, impl=i, out=c)  # noqa: E731
            run.run_course("matmul_tc", shape, impl, step, fn, 2.0 * m * n * k, "TFLOP/s", check)
        del ref


# ---------------------------------------------------------------------------------------
# Module 2
# ---------------------------------------------------------------------------------------

def bench_batched_gemm(run, quick):
    shapes = [(8, 16, 1024, 64)] if quick else [(8, 16, 1024, 64), (4, 32, 2048, 128), (64, 12, 128, 64)]
    for B, H, N, d in shapes:
        for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
            q, k = torch.randn(B, H, N, d, device="cuda", dtype=dtype), torch.randn(B, H, N, d, device="cuda",
                                                                                   dtype=dtype)
            p = torch.softmax(torch.randn(B, H, N, N, device="cuda"), -1).to(dtype)
            for prod, (A, Bm) in (("qk", (q, k.transpose(-2, -1))), ("pv", (p, k))):
                op = f"bgemm_{prod}_{tag}"
                M, Nn, K = A.shape[-2], Bm.shape[-1], A.shape[-1]
                flops = 2.0 * B * H * M * Nn * K
                ref = A.double() @ Bm.double()
                check = lambda r, ref=ref: rel_err(r, ref)  # noqa: E731
                shape = shape_name(B=B, H=H, N=N, d=d)
                run.measure(op, shape, "pytorch", "torch.matmul", lambda A=A, Bm=Bm: A @ Bm, flops, "TFLOP/s", check,
                            note="TF32 off" if tag == "f32" else "bf16 out", kind="backend")
                c = torch.empty(B, H, M, Nn, device="cuda")
                bf16_step = lambda s: s in ("tensor_core", "wgmma")  # noqa: E731
                for impl, step in run.course_steps("batched_gemm", lambda s: bf16_step(s) == (tag == "bf16")):
                    fn = lambda s=step, i=impl, A=A, Bm=Bm: ck.batched_gemm(A, Bm, step=s, impl=i, out=c)  # noqa
                    run.run_course(op, shape, impl, step, fn, flops, "TFLOP/s", check)
                del ref
            del p


# ---------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------

def sdpa_backends():
    from torch.nn.attention import SDPBackend
    names = [("flash", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION"),
             ("math", "MATH")]
    return [(n, getattr(SDPBackend, attr)) for n, attr in names if hasattr(SDPBackend, attr)]


def sdpa(backend, q, k, v, causal):
    """SDPA restricted to one backend. A backend that refuses the case raises RuntimeError
    carrying PyTorch's reasons (which it otherwise only prints as warnings)."""
    import warnings
    from torch.nn.attention import sdpa_kernel
    with warnings.catch_warnings(record=True) as caught, sdpa_kernel(backend):
        warnings.simplefilter("always")
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        except RuntimeError as e:
            why = "; ".join(str(w.message).strip().replace("\n", " ") for w in caught)
            raise RuntimeError(f"refused: {str(e).splitlines()[0]}" + (f" ({why})" if why else "")) from None


def sampled_heads(B, H):
    return sorted({(0, 0), (B - 1, H - 1), (B // 2, H // 2)})


def reference_heads(q, k, v, causal, heads, block=1024):
    """float64 O of the sampled (b, h) heads, queries in blocks (the N x N scores never exist
    for all heads at once). Bottom-right causal mask (N_q == N_k here: same as SDPA's)."""
    out = []
    N, d = q.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(d)
    for b, h in heads:
        kd, vd = k[b, h].double(), v[b, h].double()
        rows = []
        for i0 in range(0, N, block):
            s = scale * q[b, h, i0:i0 + block].double() @ kd.t()
            if causal:
                i = torch.arange(i0, min(i0 + block, N), device="cuda")[:, None]
                s.masked_fill_(torch.arange(N, device="cuda")[None, :] > i, -math.inf)
            rows.append(torch.softmax(s, -1) @ vd)
        out.append(torch.cat(rows))
    return out


def lowp_heads(q, k, v, causal, heads, block=1024):
    """The plain same-precision pipeline of the sampled heads (FlashAttention's reference for
    its rule): bf16 Q K^T (rounded to bf16), fp32 softmax rounded to bf16, bf16 P V."""
    out = []
    N, d = q.shape[2], q.shape[3]
    for b, h in heads:
        rows = []
        for i0 in range(0, N, block):
            s = (q[b, h, i0:i0 + block] @ k[b, h].t()).float() / math.sqrt(d)
            if causal:
                i = torch.arange(i0, min(i0 + block, N), device="cuda")[:, None]
                s.masked_fill_(torch.arange(N, device="cuda")[None, :] > i, -math.inf)
            rows.append(torch.softmax(s, -1).to(q.dtype) @ v[b, h])
        out.append(torch.cat(rows))
    return out


def heads_err(o, refs, heads):
    return max(max_err(o[b, h], r) for (b, h), r in zip(heads, refs))


def bench_attention_case(run, op, q, k, v, causal, shape, steps, factor, floor, dtype_note):
    B, H, N, d = q.shape
    flops = 4.0 * B * H * N * N * d / (2 if causal else 1)
    heads = sampled_heads(B, H)
    refs = reference_heads(q, k, v, causal, heads)
    err_of = lambda o: heads_err(o, refs, heads)  # noqa: E731
    torch_rows = {}
    for name, backend in sdpa_backends():
        row = run.measure(op, shape, "pytorch", name, lambda b=backend: sdpa(b, q, k, v, causal), flops, "TFLOP/s",
                          err_of, note=dtype_note, kind="backend")
        torch_rows[name] = row
    # The same-precision result the rule compares with: for bf16 the plain pipeline with P
    # rounded to bf16 (FlashAttention's reference), for fp32 PyTorch's math backend (else any).
    if q.dtype == torch.bfloat16:
        lowp = lowp_heads(q, k, v, causal, heads)
        base = max(max_err(o, r) for o, r in zip(lowp, refs))
        del lowp
    else:
        base = next((torch_rows[n]["err"] for n in ("math", "efficient", "flash", "cudnn")
                     if n in torch_rows and torch_rows[n].get("err") is not None), None)
    o = torch.empty_like(q)
    lse = torch.empty(B, H, N, device="cuda")
    for impl, step in steps:
        ws_bytes = 0
        if step == "naive":
            ws_bytes = B * H * N * N * 4
        ws = torch.empty(ws_bytes, dtype=torch.uint8, device="cuda") if ws_bytes else None
        use_lse = step != "naive"
        fn = lambda s=step, i=impl, ws=ws, use_lse=use_lse: ck.attention(  # noqa: E731
            q, k, v, causal=causal, step=s, impl=i, out=o, lse_out=lse if use_lse else None, workspace=ws)
        row = run.run_course(op, shape, impl, step, lambda fn=fn: (fn(), o)[1], flops, "TFLOP/s", err_of)
        if row.get("err") is not None and base is not None:
            row["err_torch"] = base
            row["accuracy_ok"] = row["err"] <= factor * base + floor
        del ws


def bench_attention_fp32(run, quick):
    Ns = [1024] if quick else [512, 1024, 2048, 4096, 8192]
    supports_causal = {"tiled_online": False}
    max_d = {"tiled_online": 64, "causal": 64}
    for d in (64, 128):
        for causal in (False, True):
            for N in Ns:
                B, H = 4, 16
                q, k, v = (torch.randn(B, H, N, d, device="cuda") for _ in range(3))
                shape = shape_name(B=B, H=H, N=N, d=d) + ("_causal" if causal else "")
                steps = [(i, s) for i, s in run.course_steps("attention", lambda s: not s.startswith("tc_"))
                         if d <= max_d.get(s, 128) and (not causal or supports_causal.get(s, True))
                         and not (s == "causal" and not causal) and s != "fused_options"]
                bench_attention_case(run, "attention_f32", q, k, v, causal, shape, steps, 2.0, 1e-5, "fp32")
                del q, k, v
                torch.cuda.empty_cache()


def bench_attention_bf16(run, quick):
    Ns = [1024, 4096] if quick else [1024, 2048, 4096, 8192, 16384]
    for d in (64, 128):
        for causal in (False, True):
            for N in Ns:
                B, H = 16384 // N, 2048 // d
                q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                shape = shape_name(B=B, H=H, N=N, d=d) + ("_causal" if causal else "")
                steps = run.course_steps("attention_bf16")
                bench_attention_case(run, "attention_bf16", q, k, v, causal, shape, steps, 2.0, 1e-4, "bf16")
                del q, k, v
                torch.cuda.empty_cache()


def reference_grads(q, k, v, dout, causal, heads):
    """float64 (dq, dk, dv) of the sampled heads, by autograd over one head at a time."""
    out = []
    d = q.shape[3]
    for b, h in heads:
        qd, kd, vd = (t[b, h].double().requires_grad_() for t in (q, k, v))
        s = qd @ kd.t() / math.sqrt(d)
        if causal:
            N = s.shape[0]
            s = s.masked_fill(torch.ones(N, N, device="cuda", dtype=torch.bool).triu(1), -math.inf)
        o = torch.softmax(s, -1) @ vd
        out.append(torch.autograd.grad(o, (qd, kd, vd), dout[b, h].double()))
    return out


def grads_err(grads, refs, heads):
    err = 0.0
    for (b, h), ref in zip(heads, refs):
        for g, r in zip(grads, ref):
            err = max(err, max_err(g[b, h], r) / max(r.abs().max().item(), 1e-30))
    return err


def bench_attention_backward(run, quick):
    Ns = [1024] if quick else [512, 1024, 2048, 4096, 8192]
    backends = [(n, b) for n, b in sdpa_backends() if n in ("efficient", "math")]
    for d in (64, 128):
        for causal in (False, True):
            for N in Ns:
                B, H = 4, 16
                q, k, v, dout = (torch.randn(B, H, N, d, device="cuda") for _ in range(4))
                shape = shape_name(B=B, H=H, N=N, d=d) + ("_causal" if causal else "")
                flops = 10.0 * B * H * N * N * d / (2 if causal else 1)
                heads = sampled_heads(B, H)
                try:
                    refs = reference_grads(q, k, v, dout, causal, heads)
                except Exception as e:  # noqa: BLE001
                    healthy(e)
                    refs = None
                err_of = (lambda g: grads_err(g, refs, heads)) if refs else None
                base = None
                for name, backend in backends:
                    def torch_grad(backend=backend):
                        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
                        o = sdpa(backend, qg, kg, vg, causal)
                        return o, (qg, kg, vg)

                    try:  # the forward (and its graph) is built once; only the backward is timed
                        o_t, leaves = torch_grad()
                        grad = lambda o_t=o_t, leaves=leaves: torch.autograd.grad(  # noqa: E731
                            o_t, leaves, dout, retain_graph=True)
                    except Exception as e:  # noqa: BLE001
                        run.record(op="attention_backward", shape=shape, impl="pytorch", backend=name,
                                   kind="backend", unit="TFLOP/s", error=f"{type(e).__name__}: {e}"[:400])
                        healthy(e)
                        continue
                    row = run.measure("attention_backward", shape, "pytorch", name, grad, flops, "TFLOP/s", err_of,
                                      note="fp32 autograd through SDPA", kind="backend")
                    if row.get("err") is not None and (base is None or name == "math"):
                        base = row["err"]
                    del o_t, leaves, grad
                o, lse = ck.attention(q, k, v, causal=causal, return_lse=True, step="fused")
                dq, dk, dv = (torch.empty_like(q) for _ in range(3))
                for impl, step in run.course_steps("attention_backward"):
                    ws_bytes = (2 * B * H * N * N if step == "naive" else B * H * N) * 4
                    try:
                        ws = torch.empty(ws_bytes, dtype=torch.uint8, device="cuda")
                    except Exception as e:  # noqa: BLE001
                        run.record(op="attention_backward", shape=shape, impl=impl, step=step, kind="step",
                                   unit="TFLOP/s", error=f"workspace: {type(e).__name__}"[:400])
                        torch.cuda.empty_cache()
                        continue
                    fn = lambda s=step, i=impl, ws=ws: ck.attention_backward(  # noqa: E731
                        q, k, v, o, dout, lse, causal=causal, step=s, impl=i, out=(dq, dk, dv), workspace=ws)
                    row = run.run_course("attention_backward", shape, impl, step, fn, flops, "TFLOP/s", err_of)
                    if row.get("err") is not None and base is not None:
                        row["err_torch"] = base
                        row["accuracy_ok"] = row["err"] <= 3.0 * base + 1e-5
                    del ws
                del q, k, v, dout, o, lse, dq, dk, dv
                torch.cuda.empty_cache()


def reference_grads_blocked(q, k, v, dout, causal, heads, block=1024):
    """float64 (dq, dk, dv) of the sampled heads (N_q == N_k, H == H_kv) from the backward's
    formulas, one block of query rows at a time -- P recomputed per block, as the kernels
    do, so no N x N matrix exists whole (N = 16384 would need 2 GiB per matrix)."""
    out = []
    N, d = q.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(d)
    for b, h in heads:
        qd, kd, vd, dod = (t[b, h].double() for t in (q, k, v, dout))
        dq, dk, dv = torch.empty_like(qd), torch.zeros_like(kd), torch.zeros_like(vd)
        for i0 in range(0, N, block):
            rows = slice(i0, min(i0 + block, N))
            s = scale * qd[rows] @ kd.t()
            if causal:
                i = torch.arange(rows.start, rows.stop, device="cuda")[:, None]
                s.masked_fill_(torch.arange(N, device="cuda")[None, :] > i, -math.inf)
            p = torch.softmax(s, -1)
            o = p @ vd
            ds = p * (dod[rows] @ vd.t() - (dod[rows] * o).sum(-1, keepdim=True))  # dS = P (dP - D)
            dq[rows] = scale * ds @ kd
            dk += scale * ds.t() @ qd[rows]
            dv += p.t() @ dod[rows]
        out.append((dq, dk, dv))
    return out


def bench_attention_backward_bf16(run, quick, with_forward):
    """The bf16 backward (with_forward False: op attention_backward_bf16, the backward alone)
    or forward + backward (op attention_fwdbwd_bf16) beside SDPA's flash and cudnn, on the
    shapes of attention_bf16. Errors: relative max error of dq, dk, dv vs float64 on
    sampled heads; the rule compares it with the best SDPA backend's."""
    op = "attention_fwdbwd_bf16" if with_forward else "attention_backward_bf16"
    Ns = [1024, 4096] if quick else [1024, 2048, 4096, 8192, 16384]
    backends = [(n, b) for n, b in sdpa_backends() if n in ("flash", "cudnn")]
    for d in (64, 128):
        for causal in (False, True):
            for N in Ns:
                B, H = 16384 // N, 2048 // d
                q, k, v, dout = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
                shape = shape_name(B=B, H=H, N=N, d=d) + ("_causal" if causal else "")
                # FLOPs by the FlashAttention convention: backward 2.5x the forward's 4 B H N^2 d
                # (five GEMM-sized products), forward + backward 3.5x; halved when causal.
                flops = (14.0 if with_forward else 10.0) * B * H * N * N * d / (2 if causal else 1)
                heads = sampled_heads(B, H)
                try:
                    refs = reference_grads_blocked(q, k, v, dout, causal, heads)
                except Exception as e:  # noqa: BLE001
                    healthy(e)
                    refs = None
                err_of = (lambda g: grads_err(g, refs, heads)) if refs else None
                leaves = tuple(t.detach().requires_grad_() for t in (q, k, v))
                for name, backend in backends:
                    if with_forward:
                        fn = lambda backend=backend: torch.autograd.grad(  # noqa: E731
                            sdpa(backend, *leaves, causal), leaves, dout)
                    else:
                        try:  # the forward (and its graph) once, outside the timer
                            o_t = sdpa(backend, *leaves, causal)
                        except Exception as e:  # noqa: BLE001 -- a backend that refuses: recorded
                            run.record(op=op, shape=shape, impl="pytorch", backend=name, kind="backend",
                                       unit="TFLOP/s", error=f"{type(e).__name__}: {e}"[:400])
                            healthy(e)
                            continue
                        fn = lambda o_t=o_t: torch.autograd.grad(o_t, leaves, dout, retain_graph=True)  # noqa: E731
                    run.measure(op, shape, "pytorch", name, fn, flops, "TFLOP/s", err_of, note="bf16",
                                kind="backend")
                    fn = o_t = None
                if with_forward:  # ck.attention is differentiable: the same autograd.grad call
                    for impl, step in run.course_steps("attention_backward_bf16"):
                        fn = lambda s=step, i=impl: torch.autograd.grad(  # noqa: E731
                            ck.attention(*leaves, causal=causal, step="tc_flash2", backward_step=s, impl=i),
                            leaves, dout)
                        run.run_course(op, shape, impl, "tc_flash2+" + step, fn, flops, "TFLOP/s", err_of)
                else:
                    o, lse = ck.attention(q, k, v, causal=causal, return_lse=True, step="tc_flash2")
                    grads = tuple(torch.empty_like(t) for t in (q, k, v))
                    for impl, step in run.course_steps("attention_backward_bf16"):
                        nbytes = ck.library(impl).workspace_bytes(
                            "course_attention_backward_bf16_workspace_bytes", step.encode(), B, H, N, N, d)
                        ws = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
                        fn = lambda s=step, i=impl, ws=ws: ck.attention_backward(  # noqa: E731
                            q, k, v, o, dout, lse, causal=causal, step=s, impl=i, out=grads, workspace=ws)
                        run.run_course(op, shape, impl, step, fn, flops, "TFLOP/s", err_of)
                        del ws
                    del o, lse, grads
                del q, k, v, dout, leaves, refs
                torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------
# Module 4 (besides attention backward)
# ---------------------------------------------------------------------------------------

def torch_softmax_backward(y, dy, dim):
    try:
        return torch._softmax_backward_data(dy, y, dim, torch.float32)
    except (AttributeError, TypeError, RuntimeError):
        return y * (dy - (dy * y).sum(dim, keepdim=True))


def bench_softmax_backward(run, quick):
    shapes = [(16384, 4096, 1)] if quick else [(16384, 4096, 1), (16384, 4096, 0), (65536, 1024, 1), (4096, 32768, 1)]
    for rows, cols, dim in shapes:
        y = torch.softmax(torch.randn(rows, cols, device="cuda") * 4, dim)
        dy = torch.randn(rows, cols, device="cuda")
        yd, dyd = y.double(), dy.double()
        ref = yd * (dyd - (dyd * yd).sum(dim, keepdim=True))
        del yd, dyd
        check = lambda r: max_err(r, ref)  # noqa: E731
        shape = f"{rows}x{cols}_dim{dim}"
        bytes_ = 3 * 4 * rows * cols
        run.measure("softmax_backward", shape, "pytorch", "torch", lambda: torch_softmax_backward(y, dy, dim),
                    bytes_, "GB/s", check, note="torch._softmax_backward_data", kind="backend")
        dx = torch.empty_like(y)
        ws = torch.empty(max(rows, cols) * 4, dtype=torch.uint8, device="cuda")
        for impl, step in run.course_steps("softmax_backward"):
            fn = lambda s=step, i=impl: ck.softmax_backward(y, dy, dim, step=s, impl=i, out=dx, workspace=ws)  # noqa
            run.run_course("softmax_backward", shape, impl, step, fn, bytes_, "GB/s", check)
        del ref


def bench_linear_backward(run, quick):
    shapes = [(4096, 4096, 4096)] if quick else [(4096, 4096, 4096), (16384, 1024, 1024), (16384, 4096, 1024)]
    for M, K, N in shapes:
        x, w, dy = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda"), torch.randn(M, N, device="cuda")
        refs = (dy.double() @ w.double().t(), x.double().t() @ dy.double(), dy.double().sum(0))
        check = lambda r: max(rel_err(g, ref) for g, ref in zip(r, refs))  # noqa: E731
        shape = shape_name(M=M, K=K, N=N)
        flops = 4.0 * M * K * N
        run.measure("linear_backward", shape, "pytorch", "torch.matmul",
                    lambda: (dy @ w.t(), x.t() @ dy, dy.sum(0)), flops, "TFLOP/s", check, note="TF32 off",
                    kind="backend")
        outs = (torch.empty(M, K, device="cuda"), torch.empty(K, N, device="cuda"), torch.empty(N, device="cuda"))
        for impl, step in run.course_steps("linear_backward"):
            fn = lambda s=step, i=impl: ck.linear_backward(x, w, dy, step=s, impl=i, out=outs)  # noqa: E731
            run.run_course("linear_backward", shape, impl, step, fn, flops, "TFLOP/s", check)
        del refs


# ---------------------------------------------------------------------------------------
# Module 4's AdamW and GELU; module 1's tensor-core matmul as a linear layer
# ---------------------------------------------------------------------------------------

# bench_adamw.cpp's parameter lists: (layers, d_model, vocabulary, context).
GPT_LISTS = {"gpt6_d384": (6, 384, 84, 256), "gpt12_d768": (12, 768, 50257, 1024)}


def gpt_tensor_sizes(layers, d, vocab, context):
    """(elements, weight decay) of every tensor, in bench_adamw.cpp's order."""
    block = [(d, False), (d, False), (3 * d * d, True), (3 * d, False), (d * d, True), (d, False), (d, False),
             (d, False), (4 * d * d, True), (4 * d, False), (4 * d * d, True), (d, False)]
    return block * layers + [(vocab * d, True), (context * d, True), (d, False), (d, False)]


def bench_adamw(run, quick):
    """One AdamW step with global-norm clipping over a GPT's parameter list (bench_adamw.cpp's
    lists, initial state and hyper-parameters: lr 1e-4, betas (0.9, 0.999), eps 1e-8, weight
    decay 0.01 on matrices, t = 1000, max_norm 1). Both sides update the same flat buffers:
    torch's parameters (nn.Parameter views), their .grad and AdamW's exp_avg / exp_avg_sq
    state are views of the buffers the course's tensor list points into, reset before each
    row. PyTorch: clip_grad_norm_(foreach=True) + AdamW(fused=True).step(); shape
    <list>_bf16 adds a bf16 copy of every parameter (course: bf16_copies in the same pass;
    PyTorch: one copy_ of the flat buffer). Error: the largest relative max error of params,
    exp_avg and exp_avg_sq after one step vs float64. Both sides spend milliseconds of host
    time per step on 76-148 tensors, so the GPU is given 10 ms of queued work before each
    timed call (the timer's spin): the times are GPU time."""
    import ctypes
    lists = ["gpt6_d384"] if quick else ["gpt6_d384", "gpt12_d768"]
    lr, betas, eps, wd, t, max_norm = 1e-4, (0.9, 0.999), 1e-8, 1e-2, 1000, 1.0
    saved_timer = run.timer
    run.timer = Timer(run.args.warmup_ms, run.args.rep_ms, pad_ms=10.0)
    try:
        for name in lists:
            sizes = gpt_tensor_sizes(*GPT_LISTS[name])
            total = sum(n for n, _ in sizes)
            decay = [d for _, d in sizes]
            offsets = [0]
            for n, _ in sizes:
                offsets.append(offsets[-1] + n)
            u = lambda lo, hi: torch.empty(total, device="cuda").uniform_(lo, hi)  # noqa: E731
            init = [u(-0.1, 0.1), u(-1e-2, 1e-2), u(-1e-3, 1e-3), u(0.0, 1e-4)]  # p, g, m, v
            flats = [x.clone() for x in init]
            P, G, M, V = flats
            bf = torch.empty(total, device="cuda", dtype=torch.bfloat16)
            views = lambda flat: [flat[offsets[i]:offsets[i + 1]] for i in range(len(sizes))]  # noqa: E731
            pv, gv, mv, vv, bv = (views(x) for x in (P, G, M, V, bf))

            # float64 reference of one step from the initial state.
            g64 = init[1].double()
            norm = torch.linalg.vector_norm(g64).item()
            g64.mul_(min(1.0, max_norm / (norm + 1e-6)))
            m64 = init[2].double().mul_(betas[0]).add_(g64, alpha=1 - betas[0])
            v64 = init[3].double().mul_(betas[1]).addcmul_(g64, g64, value=1 - betas[1])
            del g64
            keep = torch.cat([torch.full((n,), 1.0 - lr * wd if d else 1.0, device="cuda", dtype=torch.float64)
                              for n, d in sizes])
            p64 = init[0].double().mul_(keep)
            del keep
            denom = v64.sqrt().div_(math.sqrt(1 - betas[1] ** t)).add_(eps)
            p64.addcdiv_(m64, denom, value=-lr / (1 - betas[0] ** t))
            del denom
            check = lambda r: max(rel_err(P, p64), rel_err(M, m64), rel_err(V, v64))  # noqa: E731

            # PyTorch: parameters and their grads are views of P and G; after one step with
            # lr 0 creates AdamW's state, exp_avg and exp_avg_sq become views of M and V.
            params = [torch.nn.Parameter(x) for x in pv]
            groups = [{"params": [p for p, d in zip(params, decay) if d], "weight_decay": wd},
                      {"params": [p for p, d in zip(params, decay) if not d], "weight_decay": 0.0}]
            opt = torch.optim.AdamW(groups, lr=0.0, betas=betas, eps=eps, fused=True)
            for p in params:
                p.grad = torch.zeros_like(p)
            opt.step()
            for p, g, m, v in zip(params, gv, mv, vv):
                p.grad = g
                opt.state[p]["exp_avg"] = m
                opt.state[p]["exp_avg_sq"] = v
            for group in opt.param_groups:
                group["lr"] = lr

            def reset():
                for flat, x in zip(flats, init):
                    flat.copy_(x)
                for state in opt.state.values():
                    state["step"].fill_(t - 1)  # the next step is t

            def torch_step(copy=False):
                torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
                opt.step()
                if copy:
                    bf.copy_(P)

            norm_out = torch.empty((), device="cuda")
            for copies in (False, True):
                shape = name + ("_bf16" if copies else "")
                bytes_ = (34.0 if copies else 32.0) * total  # adamw_bytes_per_element(copies, norm = true)
                reset()
                run.measure("adamw", shape, "pytorch", "clip+AdamW(fused)" + ("+copy_" if copies else ""),
                            lambda c=copies: torch_step(c), bytes_, "GB/s", check,
                            note="torch.nn.utils.clip_grad_norm_(foreach=True) + torch.optim.AdamW(fused=True)",
                            kind="backend")
                for impl, step in run.course_steps("adamw"):
                    size_arr = (ctypes.c_int64 * len(sizes))(*(n for n, _ in sizes))
                    nbytes = ck.library(impl).workspace_bytes("course_adamw_workspace_bytes", step.encode(),
                                                              len(sizes), size_arr)
                    ws = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
                    fn = lambda s=step, i=impl, ws=ws, c=copies: ck.adamw(  # noqa: E731
                        pv, gv, mv, vv, t=t, lr=lr, betas=betas, eps=eps, weight_decay=wd, decay_mask=decay,
                        max_norm=max_norm, bf16_copies=bv if c else None, norm_out=norm_out, step=s, impl=i,
                        workspace=ws)
                    reset()
                    run.run_course("adamw", shape, impl, step, fn, bytes_, "GB/s", check)
                    del ws
            del opt, params, init, flats, P, G, M, V, bf, pv, gv, mv, vv, bv, p64, m64, v64
            torch.cuda.empty_cache()
    finally:
        run.timer = saved_timer


def bench_gelu(run, quick):
    """bench_gelu.cpp's 16384 x 1536 in fp32 and bf16 (x uniform in [-4, 4], dy in [-1, 1]):
    forward (op gelu) beside F.gelu(x, approximate='tanh'); backward (op gelu_backward)
    beside torch.ops.aten.gelu_backward(dy, x, approximate='tanh') -- what autograd runs --
    writing dx; and shape ..._accumulate: dx += dy * gelu'(x) (the course's accumulate, what
    bench_gelu.cpp times) beside dx.add_(aten.gelu_backward(...)). Credited bytes: 2, 3 and 4
    elements per element. Error: max absolute error vs float64."""
    rows, cols = (4096, 1536) if quick else (16384, 1536)
    n = rows * cols
    gelu_bwd = torch.ops.aten.gelu_backward
    for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        size = 4 if dtype == torch.float32 else 2
        x = (torch.rand(rows, cols, device="cuda") * 8 - 4).to(dtype)
        dy = (torch.rand(rows, cols, device="cuda") * 2 - 1).to(dtype)
        dx0 = (torch.rand(rows, cols, device="cuda") * 2 - 1).to(dtype)
        shape = f"{rows}x{cols}_{tag}"

        ref = F.gelu(x.double(), approximate="tanh")
        check = lambda r, ref=ref: max_err(r, ref)  # noqa: E731
        run.measure("gelu", shape, "pytorch", "F.gelu", lambda: F.gelu(x, approximate="tanh"), 2.0 * size * n,
                    "GB/s", check, note="torch.nn.functional.gelu(x, approximate='tanh')", kind="backend")
        y = torch.empty_like(x)
        for impl, step in run.course_steps("gelu"):
            fn = lambda s=step, i=impl: ck.gelu(x, step=s, impl=i, out=y)  # noqa: E731
            run.run_course("gelu", shape, impl, step, fn, 2.0 * size * n, "GB/s", check)
        del ref, y

        dref = gelu_bwd(dy.double(), x.double(), approximate="tanh")
        check = lambda r, ref=dref: max_err(r, ref)  # noqa: E731
        run.measure("gelu_backward", shape, "pytorch", "aten.gelu_backward",
                    lambda: gelu_bwd(dy, x, approximate="tanh"), 3.0 * size * n, "GB/s", check,
                    note="torch.ops.aten.gelu_backward(dy, x, approximate='tanh')", kind="backend")
        dx = torch.empty_like(x)
        for impl, step in run.course_steps("gelu_backward"):
            fn = lambda s=step, i=impl: ck.gelu_backward(x, dy, step=s, impl=i, out=dx)  # noqa: E731
            run.run_course("gelu_backward", shape, impl, step, fn, 3.0 * size * n, "GB/s", check)

        acc_ref = dx0.double() + dref
        del dref
        check = lambda r, ref=acc_ref: max_err(r, ref)  # noqa: E731
        shape_acc = shape + "_accumulate"
        dx.copy_(dx0)
        run.measure("gelu_backward", shape_acc, "pytorch", "aten.gelu_backward+add_",
                    lambda: dx.add_(gelu_bwd(dy, x, approximate="tanh")), 4.0 * size * n, "GB/s", check,
                    note="dx.add_(torch.ops.aten.gelu_backward(dy, x, approximate='tanh'))", kind="backend")
        for impl, step in run.course_steps("gelu_backward"):
            fn = lambda s=step, i=impl: ck.gelu_backward(x, dy, accumulate=True, step=s, impl=i, out=dx)  # noqa
            dx.copy_(dx0)
            run.run_course("gelu_backward", shape_acc, impl, step, fn, 4.0 * size * n, "GB/s", check)
        del acc_ref, dx, x, dy, dx0
        torch.cuda.empty_cache()


def torch_dw_accumulate():
    """The best fp32-accumulating dW += dY^T X this torch has, as (name, fn(dw, dy, x), note):
    addmm with out_dtype (one cuBLAS call, beta = 1, fp32 C; out of place), mm with out_dtype
    then add_, else the bf16 product then add_ (rounded to bf16 first: what autograd does
    for a bf16 weight)."""
    a = torch.zeros(8, 8, device="cuda")
    b = torch.zeros(8, 8, device="cuda", dtype=torch.bfloat16)
    candidates = [
        ("addmm(out_dtype=fp32)", lambda dw, dy, x: torch.addmm(dw, dy.t(), x, out_dtype=torch.float32),
         "torch.addmm(dw, dy.t(), x, out_dtype=torch.float32): fp32 C, beta 1, out of place"),
        ("mm(out_dtype=fp32)+add_", lambda dw, dy, x: dw.add_(torch.mm(dy.t(), x, out_dtype=torch.float32)),
         "dw.add_(torch.mm(dy.t(), x, out_dtype=torch.float32))"),
    ]
    for name, fn, note in candidates:
        try:
            fn(a.clone(), b, b)
            return name, fn, note
        except (TypeError, RuntimeError):
            continue
    return ("bf16 mm+add_", lambda dw, dy, x: dw.add_(dy.t() @ x),
            "dw.add_(dy.t() @ x): the product rounded to bf16 first (this torch has no out_dtype)")


def takes_linear_options(step):
    """The matmul_tc steps that take the linear layer's options (module01/matmul_tc.hpp: all
    but wmma and wgmma, which throw Unsupported for them)."""
    return step not in ("wmma", "wgmma")


def bench_linear_bf16(run, quick):
    """bench_linear_tc.cpp's products of a GPT block's linear layers (16384 tokens, d_model 384;
    every course step that takes the options: mma_sync and the Hopper steps from
    tma_warp_specialized on) beside PyTorch in bf16 on the same tensors:
      fwd_qkv       Y = X W^T + b          course linear(x, w, b)  | F.linear(x, w, b) (cuBLASLt bias epilogue)
      fwd_fc_gelu   gelu(X W^T + b)        linear(.., gelu, pre_gelu_out) | F.gelu(F.linear(x, w, b), 'tanh')
                    and X W^T + b          (training: both write the pre-activation GELU's backward needs)
      fwd_fc_gelu_only  gelu(X W^T + b)    linear(.., gelu) | torch._addmm_activation(b, x, w.t(),
                                           use_gelu=True) (cuBLASLt's GELU epilogue; no pre-activation)
                                           and F.gelu(F.linear(x, w, b), 'tanh')
      fwd_proj_res  X + H W^T + b          linear(h, w, b, residual=x, out=x) in place | x + F.linear(h, w, b)
      bwd_dx        dY W                   matmul_tc_ex(dy, w) bf16 out | dy @ w
      bwd_dw        dW + dY^T X, fp32 dW   matmul_tc_ex(dy.t(), x, accumulate=True, out=dw) |
                                           torch_dw_accumulate()'s form
      (bwd_dx and bwd_dw are the QKV layer's; bwd_dx_fc, bwd_dw_fc, bwd_dx_proj and bwd_dw_proj
      the same products of the MLP's two layers, d -> 4d and 4d -> d)
    PyTorch's bias is the course's fp32 bias rounded to bf16 (the course is given those same
    values). In-place outputs are reset before each row. Error: relative max error vs
    float64 from the same bf16 inputs."""
    T, d = (4096 if quick else 16384), 384
    bf = torch.bfloat16
    products = [("fwd_qkv", T, 3 * d, d), ("fwd_fc_gelu", T, 4 * d, d), ("fwd_fc_gelu_only", T, 4 * d, d),
                ("fwd_proj_res", T, d, 4 * d), ("bwd_dx", T, d, 3 * d), ("bwd_dw", 3 * d, d, T),
                ("bwd_dx_fc", T, d, 4 * d), ("bwd_dw_fc", 4 * d, d, T),
                ("bwd_dx_proj", T, 4 * d, d), ("bwd_dw_proj", d, 4 * d, T)]
    dw_name, dw_fn, dw_note = torch_dw_accumulate()
    for name, M, N, K in products:
        shape = f"{name}_{M}x{N}x{K}"
        flops = 2.0 * M * N * K
        steps = run.course_steps("matmul_tc", takes_linear_options)
        if name.startswith("fwd"):
            x = torch.randn(M, K, device="cuda", dtype=bf)
            w = (torch.randn(N, K, device="cuda") / math.sqrt(K)).to(bf)
            b16 = torch.randn(N, device="cuda", dtype=bf)
            b = b16.float()
            lin = x.double() @ w.double().t() + b.double()
            if name == "fwd_qkv":
                check = lambda r, ref=lin: rel_err(r, ref)  # noqa: E731
                run.measure("linear_bf16", shape, "pytorch", "F.linear", lambda: F.linear(x, w, b16), flops,
                            "TFLOP/s", check, note="bf16 out", kind="backend")
                y = torch.empty(M, N, device="cuda", dtype=bf)
                for impl, step in steps:
                    fn = lambda s=step, i=impl: ck.linear(x, w, b, step=s, impl=i, out=y)  # noqa: E731
                    run.run_course("linear_bf16", shape, impl, step, fn, flops, "TFLOP/s", check)
            elif name.startswith("fwd_fc_gelu"):
                training = name == "fwd_fc_gelu"  # the pre-activation written too, for GELU's backward
                ref = F.gelu(lin, approximate="tanh")
                check = lambda r, ref=ref: rel_err(r, ref)  # noqa: E731
                run.measure("linear_bf16", shape, "pytorch", "F.linear+F.gelu",
                            lambda: F.gelu(F.linear(x, w, b16), approximate="tanh"), flops, "TFLOP/s", check,
                            note="bf16 out; the pre-activation written too", kind="backend")
                if not training and hasattr(torch, "_addmm_activation"):
                    run.measure("linear_bf16", shape, "pytorch", "_addmm_activation",
                                lambda: torch._addmm_activation(b16, x, w.t(), use_gelu=True), flops, "TFLOP/s",
                                check, note="bf16 out; no pre-activation output", kind="backend")
                y = torch.empty(M, N, device="cuda", dtype=bf)
                pre = torch.empty(M, N, device="cuda", dtype=bf) if training else None
                for impl, step in steps:
                    fn = lambda s=step, i=impl: ck.linear(x, w, b, gelu=True, pre_gelu_out=pre, step=s,  # noqa
                                                          impl=i, out=y)
                    run.run_course("linear_bf16", shape, impl, step, (lambda f=fn: f()[0]) if training else fn,
                                   flops, "TFLOP/s", check)
            else:  # fwd_proj_res: x is H (M x 4d), the residual stream r (M x d) is updated in place
                r0 = torch.randn(M, N, device="cuda", dtype=bf)
                ref = r0.double() + lin
                check = lambda r, ref=ref: rel_err(r, ref)  # noqa: E731
                run.measure("linear_bf16", shape, "pytorch", "x+F.linear", lambda: r0 + F.linear(x, w, b16), flops,
                            "TFLOP/s", check, note="bf16 out", kind="backend")
                r = r0.clone()
                for impl, step in steps:
                    fn = lambda s=step, i=impl: ck.linear(x, w, b, residual=r, out=r, step=s, impl=i)  # noqa
                    r.copy_(r0)
                    run.run_course("linear_bf16", shape, impl, step, fn, flops, "TFLOP/s", check)
        elif name.startswith("bwd_dx"):  # dX (T x in) = dY (T x out) W (out x in), W stored [out, in]
            dy = torch.randn(M, K, device="cuda", dtype=bf)
            w = (torch.randn(K, N, device="cuda") / math.sqrt(K)).to(bf)
            ref = dy.double() @ w.double()
            check = lambda r, ref=ref: rel_err(r, ref)  # noqa: E731
            run.measure("linear_bf16", shape, "pytorch", "matmul", lambda: dy @ w, flops, "TFLOP/s", check,
                        note="bf16 out", kind="backend")
            dx = torch.empty(M, N, device="cuda", dtype=bf)
            for impl, step in steps:
                fn = lambda s=step, i=impl: ck.matmul_tc_ex(dy, w, step=s, impl=i, out=dx)  # noqa: E731
                run.run_course("linear_bf16", shape, impl, step, fn, flops, "TFLOP/s", check)
        else:  # bwd_dw*: dW (out x in, fp32) += dY^T (out x T) X (T x in)
            dy = torch.randn(K, M, device="cuda", dtype=bf)
            x = torch.randn(K, N, device="cuda", dtype=bf)
            dw0 = torch.randn(M, N, device="cuda")
            ref = dw0.double() + dy.double().t() @ x.double()
            check = lambda r, ref=ref: rel_err(r, ref)  # noqa: E731
            dw = dw0.clone()
            run.measure("linear_bf16", shape, "pytorch", dw_name, lambda: dw_fn(dw, dy, x), flops, "TFLOP/s",
                        check, note="fp32 out; " + dw_note, kind="backend")
            for impl, step in steps:
                fn = lambda s=step, i=impl: ck.matmul_tc_ex(dy.t(), x, accumulate=True, step=s, impl=i,  # noqa
                                                            out=dw)
                dw.copy_(dw0)
                run.run_course("linear_bf16", shape, impl, step, fn, flops, "TFLOP/s", check)
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------

def accuracy_flags(rows):
    """The accuracy rule for every course row that has an error and a PyTorch one to compare with."""
    rule = {"attention_f32": (2.0, 1e-5), "attention_bf16": (2.0, 1e-4), "attention_backward": (3.0, 1e-5),
            "attention_backward_bf16": (3.0, 1e-3), "attention_fwdbwd_bf16": (3.0, 1e-3)}
    torch_err = {}
    for r in rows:
        if r["impl"] == "pytorch" and r.get("err") is not None:
            key = (r["op"], r["shape"])
            torch_err[key] = min(torch_err.get(key, math.inf), r["err"])
    floors = {"l2_norm": 1e-5, "dot": 1e-5, "softmax": 1e-6, "softmax_backward": 1e-6, "adamw": 1e-6,
              "gelu": 1e-6, "gelu_backward": 1e-6, "linear_bf16": 1e-4, "layer_norm": 1e-5,
              "layer_norm_backward": 1e-5, "layer_norm_fwdbwd": 1e-5}
    for r in rows:
        if r["impl"] == "pytorch" or r.get("err") is None or "accuracy_ok" in r:
            continue
        base = torch_err.get((r["op"], r["shape"]))
        if base is None:
            continue
        factor, floor = rule.get(r["op"], (2.0, floors.get(r["op"], 1e-5)))
        r["err_torch"] = base
        r["accuracy_ok"] = r["err"] <= factor * base + floor


def summary(rows):
    """One line per (op, shape): the best solution step against the best PyTorch row."""
    groups = {}
    for r in rows:
        groups.setdefault((r["op"], r["shape"]), []).append(r)
    lines = [f"{'op':<20} {'shape':<26} {'best solution step':<24} {'ms':>9} {'best pytorch':<14} {'ms':>9} "
             f"{'fraction':>8}  acc"]
    for (op, shape), rs in groups.items():
        sol = [r for r in rs if r["impl"] == "solution" and r.get("ms")]
        lib = [r for r in rs if r["impl"] == "pytorch" and r.get("ms")]
        best_s = min(sol, key=lambda r: r["ms"]) if sol else None
        best_t = min(lib, key=lambda r: r["ms"]) if lib else None
        frac = f"{best_t['ms'] / best_s['ms']:.2f}" if best_s and best_t else "-"
        bad = [r["step"] for r in rs if r["impl"] != "pytorch" and r.get("accuracy_ok") is False]
        acc = "ok" if not bad else "FAIL: " + ",".join(bad)
        lines.append(f"{op:<20} {shape:<26} {(best_s or {}).get('step', '-'):<24} "
                     f"{best_s['ms'] if best_s else float('nan'):>9.3f} {(best_t or {}).get('backend', '-'):<14} "
                     f"{best_t['ms'] if best_t else float('nan'):>9.3f} {frac:>8}  {acc}")
    return "\n".join(lines)


def environment():
    env = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "python": platform.python_version(),
           "torch": torch.__version__, "torch_cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(),
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
    try:
        env["commit"] = os.environ.get("COURSE_COMMIT") or subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() or "unknown"
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        env.setdefault("commit", "unknown")
    for impl in ("solution", "exercise"):
        try:
            env[f"library_{impl}"] = str(ck.library_path(impl))
        except Exception as e:  # noqa: BLE001
            env[f"library_{impl}"] = f"missing: {e}"
    return env


def main():
    global torch, ck, F
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma-separated subset of: {', '.join(OPS)}")
    ap.add_argument("--quick", action="store_true", help="one or two shapes per op, shorter timing")
    ap.add_argument("--impl", default="solution,exercise", help="course implementations to run")
    ap.add_argument("--steps", help="only the course steps whose name matches this regular expression")
    ap.add_argument("--out", type=pathlib.Path, help="write the JSON results here")
    ap.add_argument("--warmup-ms", type=float, default=25.0)
    ap.add_argument("--rep-ms", type=float, default=100.0)
    args = ap.parse_args()
    if args.quick:
        args.warmup_ms, args.rep_ms = min(args.warmup_ms, 10.0), min(args.rep_ms, 30.0)
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = set(ops) - set(OPS)
    if unknown:
        ap.error(f"unknown ops: {', '.join(sorted(unknown))}; choose from {', '.join(OPS)}")

    import torch as _torch
    import torch.nn.functional as _F
    torch, F = _torch, _F
    import course_kernels as _ck
    ck = _ck
    if not torch.cuda.is_available():
        sys.exit("compare_torch: no CUDA device visible to PyTorch")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)

    run = Run(args)
    env = environment()
    print("== compare_torch: " + ", ".join(f"{k}={v}" for k, v in env.items() if not k.startswith("library")))
    table = {
        "l2_norm": lambda q: bench_reductions(run, "l2_norm", q), "dot": lambda q: bench_reductions(run, "dot", q),
        "softmax": lambda q: bench_softmax(run, q), "matmul": lambda q: bench_matmul(run, q),
        "matmul_tc": lambda q: bench_matmul_tc(run, q), "batched_gemm": lambda q: bench_batched_gemm(run, q),
        "attention": lambda q: bench_attention_fp32(run, q), "attention_bf16": lambda q: bench_attention_bf16(run, q),
        "attention_backward": lambda q: bench_attention_backward(run, q),
        "attention_backward_bf16": lambda q: bench_attention_backward_bf16(run, q, with_forward=False),
        "attention_fwdbwd_bf16": lambda q: bench_attention_backward_bf16(run, q, with_forward=True),
        "softmax_backward": lambda q: bench_softmax_backward(run, q),
        "linear_backward": lambda q: bench_linear_backward(run, q),
        "cross_entropy": lambda q: bench_cross_entropy(run, q),
        "adamw": lambda q: bench_adamw(run, q), "gelu": lambda q: bench_gelu(run, q),
        "linear_bf16": lambda q: bench_linear_bf16(run, q),
        "layer_norm": lambda q: bench_layer_norm(run, q),
    }
    t0 = time.time()
    stopped = None
    for op in ops:
        print(f"-- {op}", flush=True)
        try:
            table[op](args.quick)
        except ContextLost as e:
            stopped = str(e)
            print(f"!! {stopped}; stopping", flush=True)
            break
        except Exception as e:  # noqa: BLE001 -- an op's set-up failed: record it, go on
            run.rows.append({"op": op, "shape": "-", "impl": "-", "kind": "setup",
                             "error": f"{type(e).__name__}: {e}"[:400]})
            print(f"!! {op} set-up failed: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
            torch.cuda.empty_cache()
            try:
                healthy(e)
            except ContextLost as lost:
                stopped = str(lost)
                break
    accuracy_flags(run.rows)
    env["seconds"] = round(time.time() - t0, 1)
    if stopped:
        env["stopped"] = stopped
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"env": env, "results": run.rows}, indent=1))
        print(f"wrote {args.out} ({len(run.rows)} rows)")
    print()
    print(summary(run.rows))
    failures = [r for r in run.rows if r.get("accuracy_ok") is False and r["impl"] == "solution"]
    if failures:
        print(f"\n{len(failures)} solution rows break the accuracy rule", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------
# Module 4: fused cross-entropy (self-contained block). To run it, main() needs two lines:
# "cross_entropy" in OPS and  "cross_entropy": lambda q: bench_cross_entropy(run, q)  in its
# table (and, once the bridge's op_table() lists the op, run.course_steps may replace the
# loop over run.impls below).
#
# What PyTorch computes, timed as one call (forward + torch.autograd.grad(loss, logits)):
#   fp32:  F.cross_entropy(logits, targets): log_softmax (writes rows x V log-probs),
#          nll_loss (mean over targets != -100); backward: nll_loss_backward (a rows x V
#          gradient of the log-probs, zero but -1/N at the targets) and
#          _log_softmax_backward_data (reads it and the log-probs, writes dlogits).
#   bf16 "torch":       the same ops on the bf16 tensor: log-probs, their gradient and dlogits
#          are stored in bf16 (accumulation in fp32 inside each kernel), the loss is bf16.
#   bf16 "torch_upcast": F.cross_entropy(logits.float(), targets), what autocast does (it runs
#          cross_entropy in fp32): an fp32 copy of the logits, the fp32 ops above, and the
#          gradient cast back to bf16 by the .float() node.
# The course's row: ck.cross_entropy(step="row_on_chip") into a preallocated dlogits (not in
# place, so every call sees the same logits), int32 targets converted outside the timer.
# Work = the op's minimum traffic, 2 * rows * V * sizeof(element) bytes. Error: max |dlogits -
# float64 reference| (the float64 autograd of the same, rounded, logits).
# ---------------------------------------------------------------------------------------

def bench_cross_entropy(run, quick):
    cases = [(16384, 50304, "bf16")] if quick else [(16384, 84, "fp32"), (16384, 84, "bf16"), (16384, 50304, "fp32"),
                                                   (16384, 50304, "bf16")]
    for rows, vocab, dt in cases:
        dtype = torch.bfloat16 if dt == "bf16" else torch.float32
        logits = (4 * torch.randn(rows, vocab, device="cuda")).to(dtype)
        targets = torch.randint(0, vocab, (rows,), device="cuda")
        targets[::64] = -100  # a few padded positions, as a GPT batch has
        targets32 = targets.to(torch.int32)
        ref_in = logits.double().requires_grad_()
        ref_grad, = torch.autograd.grad(F.cross_entropy(ref_in, targets), ref_in)
        del ref_in
        check = lambda r: max_err(r, ref_grad)  # noqa: E731
        shape = f"{rows}x{vocab}_{dt}"
        bytes_ = 2 * rows * vocab * logits.element_size()
        leaf = logits.detach().requires_grad_()

        def torch_native():
            loss = F.cross_entropy(leaf, targets)
            return torch.autograd.grad(loss, leaf)[0]

        note = "F.cross_entropy + autograd.grad, " + ("fp32" if dt == "fp32" else "bf16 log-probs and grads")
        run.measure("cross_entropy", shape, "pytorch", "torch", torch_native, bytes_, "GB/s", check, note=note,
                    kind="backend")
        if dt == "bf16":
            def torch_upcast():
                loss = F.cross_entropy(leaf.float(), targets)
                return torch.autograd.grad(loss, leaf)[0]

            run.measure("cross_entropy", shape, "pytorch", "torch_upcast", torch_upcast, bytes_, "GB/s", check,
                        note="F.cross_entropy(logits.float()) + autograd.grad: autocast's fp32 path",
                        kind="backend")
        dlogits = torch.empty_like(logits)
        for impl in run.impls:
            fn = lambda i=impl: ck.cross_entropy(logits, targets32, step="row_on_chip", impl=i, out=dlogits)[2]  # noqa
            run.run_course("cross_entropy", shape, impl, "row_on_chip", fn, bytes_, "GB/s", check)
        del ref_grad, leaf, dlogits
        torch.cuda.empty_cache()



# ---------------------------------------------------------------------------------------
# Module 4's LayerNorm (self-contained block; OPS, main()'s table and accuracy_flags' floors
# name it). Three row groups per shape "<rows>x<C>_<f32|bf16>" (bench_layer_norm.cpp's):
#   layer_norm          forward: every forward step, into a given y, mean, rstd, beside
#                       F.layer_norm(x, (C,), w, b); work 2 matrices (read x, write y).
#   layer_norm_backward the backward alone: every backward step (statistics given) beside
#                       torch.autograd.grad(y, (x, w, b), dy, retain_graph=True) on a forward
#                       graph built once outside the timer; work 3 matrices (x, dy, dx).
#   layer_norm_fwdbwd   forward + backward: the course's default forward step then each
#                       backward step (rows "vectorized+partial_sums") beside
#                       torch.autograd.grad(F.layer_norm(x, (C,), w, b), (x, w, b), dy);
#                       work 5 matrices.
# gamma, beta: fp32 for the course always, values chosen bf16-representable so that every
# side normalizes with the same numbers. PyTorch with bf16 x: eager CUDA F.layer_norm wants
# weight and bias in x's dtype ("expected scalar type BFloat16 but found Float"); the script
# tries the fp32 weights once and, when refused, gives PyTorch bf16 copies (exact: the values
# are bf16-representable) and says so in the row's note -- so PyTorch's dgamma, dbeta are
# bf16 there, the course's fp32. bf16 also gets "torch_upcast": F.layer_norm(x.float(), (C,),
# w, b).to(bf16), autocast's policy (LayerNorm in fp32), with fp32 w, b: the like-for-like
# mixed-mode layout (bf16 y and dx, fp32 dgamma, dbeta), at the price of the casts.
# Errors vs float64 autograd of the same inputs: forward max |y - ref|; backward the largest
# of the relative max errors (max |g - ref| / max |ref|) of dx, dgamma and dbeta. Rule: at
# most 2x the best PyTorch row's error of the same shape + 1e-5.
# ---------------------------------------------------------------------------------------

def torch_layer_norm_params(x, w, b):
    """(w, b, note) to give F.layer_norm with x: the fp32 w, b where this torch accepts them
    with x's dtype, else copies in x's dtype (exact here: bf16-representable values)."""
    if x.dtype == torch.float32:
        return w, b, "fp32"
    try:
        F.layer_norm(x[:2], (x.shape[1],), w, b)
        torch.cuda.synchronize()
        return w, b, "fp32 weight and bias with bf16 x (this torch accepts mixed dtypes)"
    except RuntimeError as e:
        print(f"  layer_norm: F.layer_norm(bf16 x, fp32 w, b) refused ({str(e).splitlines()[0][:120]}); "
              "PyTorch gets bf16 copies of w, b", flush=True)
        torch.cuda.synchronize()
        return w.to(x.dtype), b.to(x.dtype), "bf16 weight and bias (F.layer_norm refuses fp32 ones with bf16 x)"


def bench_layer_norm(run, quick):
    shapes = [(16384, 768)] if quick else [(16384, 384), (16384, 768)]
    eps = 1e-5
    for rows, C in shapes:
        for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
            x = (torch.randn(rows, C, device="cuda") * 3 + 1).to(dtype)
            dy = torch.randn(rows, C, device="cuda").to(dtype)
            w = (1 + 0.5 * torch.randn(C, device="cuda")).to(torch.bfloat16).float()
            b = (0.5 * torch.randn(C, device="cuda")).to(torch.bfloat16).float()
            shape = f"{rows}x{C}_{tag}"
            mat = rows * C * x.element_size()

            leaves64 = [t.double().requires_grad_() for t in (x, w, b)]
            y64 = F.layer_norm(leaves64[0], (C,), leaves64[1], leaves64[2], eps)
            refs = torch.autograd.grad(y64, leaves64, dy.double())
            ref_y = y64.detach()
            del y64, leaves64
            check_y = lambda r, ref=ref_y: max_err(r[0] if isinstance(r, tuple) else r, ref)  # noqa: E731
            check_g = lambda r, refs=refs: max(rel_err(g, ref) for g, ref in zip(r, refs))  # noqa: E731

            wt, bt, note = torch_layer_norm_params(x, w, b)
            upcast = dtype != torch.float32
            up_note = "F.layer_norm(x.float(), fp32 w, b).to(bf16): autocast's fp32 LayerNorm"

            # Forward.
            run.measure("layer_norm", shape, "pytorch", "torch", lambda: F.layer_norm(x, (C,), wt, bt, eps),
                        2.0 * mat, "GB/s", check_y, note=note, kind="backend")
            if upcast:
                run.measure("layer_norm", shape, "pytorch", "torch_upcast",
                            lambda: F.layer_norm(x.float(), (C,), w, b, eps).to(dtype), 2.0 * mat, "GB/s", check_y,
                            note=up_note, kind="backend")
            y = torch.empty_like(x)
            mean, rstd = torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda")
            for impl, step in run.course_steps("layer_norm"):
                fn = lambda s=step, i=impl: ck.layer_norm(x, w, b, eps=eps, step=s, impl=i, out=y,  # noqa: E731
                                                          mean_out=mean, rstd_out=rstd)
                run.run_course("layer_norm", shape, impl, step, fn, 2.0 * mat, "GB/s", check_y)

            # Backward alone: PyTorch's graph built once; the course reads fp32 statistics.
            leaves = [t.detach().clone().requires_grad_() for t in (x, wt, bt)]
            y_t = F.layer_norm(leaves[0], (C,), leaves[1], leaves[2], eps)
            run.measure("layer_norm_backward", shape, "pytorch", "torch",
                        lambda: torch.autograd.grad(y_t, leaves, dy, retain_graph=True), 3.0 * mat, "GB/s", check_g,
                        note=note, kind="backend")
            del y_t
            up_leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
            if upcast:
                y_u = F.layer_norm(up_leaves[0].float(), (C,), up_leaves[1], up_leaves[2], eps).to(dtype)
                run.measure("layer_norm_backward", shape, "pytorch", "torch_upcast",
                            lambda: torch.autograd.grad(y_u, up_leaves, dy, retain_graph=True), 3.0 * mat, "GB/s",
                            check_g, note=up_note, kind="backend")
                del y_u
            xd = x.double()
            mean_s = xd.mean(1).float()
            rstd_s = (1 / torch.sqrt(xd.var(1, unbiased=False) + eps)).float()
            del xd
            dx, dg, db = torch.empty_like(x), torch.empty(C, device="cuda"), torch.empty(C, device="cuda")
            nbytes = ck.library().workspace_bytes("course_layer_norm_backward_workspace_bytes", b"partial_sums",
                                                  rows, C)
            ws = torch.empty(max(nbytes, 16), dtype=torch.uint8, device="cuda")
            for impl, step in run.course_steps("layer_norm_backward"):
                fn = lambda s=step, i=impl: ck.layer_norm_backward(  # noqa: E731
                    x, dy, mean_s, rstd_s, w, step=s, impl=i, dx=dx, dgamma=dg, dbeta=db, workspace=ws)
                run.run_course("layer_norm_backward", shape, impl, step, fn, 3.0 * mat, "GB/s", check_g)

            # Forward + backward.
            run.measure("layer_norm_fwdbwd", shape, "pytorch", "torch",
                        lambda: torch.autograd.grad(F.layer_norm(leaves[0], (C,), leaves[1], leaves[2], eps), leaves,
                                                    dy), 5.0 * mat, "GB/s", check_g, note=note, kind="backend")
            if upcast:
                run.measure("layer_norm_fwdbwd", shape, "pytorch", "torch_upcast",
                            lambda: torch.autograd.grad(
                                F.layer_norm(up_leaves[0].float(), (C,), up_leaves[1], up_leaves[2], eps).to(dtype),
                                up_leaves, dy), 5.0 * mat, "GB/s", check_g, note=up_note, kind="backend")
            fwd = ck.DEFAULT_STEPS["layer_norm"]
            for impl, step in run.course_steps("layer_norm_backward"):
                def fn(s=step, i=impl):
                    ck.layer_norm(x, w, b, eps=eps, step=fwd, impl=i, out=y, mean_out=mean, rstd_out=rstd)
                    return ck.layer_norm_backward(x, dy, mean, rstd, w, step=s, impl=i, dx=dx, dgamma=dg, dbeta=db,
                                                  workspace=ws)
                run.run_course("layer_norm_fwdbwd", shape, impl, f"{fwd}+{step}", fn, 5.0 * mat, "GB/s", check_g)
            del refs, ref_y, leaves, up_leaves, x, dy, y, dx, ws
            torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
