"""GPU tests: every op and step of both builds through the bridge, against PyTorch.

Skipped (with the reason) without a CUDA device or without PyTorch. An exercise stub
that is not written yet, or a step this GPU cannot run, skips its case. The references
are float64 computations in torch on the same inputs; tolerances are for fp32 (bf16
inputs: fp32 accumulation of exact products), far looser than a wrong index or a
dropped tail would need.
"""
import math
import struct

import pytest

import course_kernels as ck

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the GPU tests compare with torch)")
pytestmark = pytest.mark.gpu

IMPLS = ["solution", "exercise"]


@pytest.fixture(params=IMPLS)
def impl(request):
    return request.param


@pytest.fixture(autouse=True)
def _fp32_matmul():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(1234)
    yield


def run(fn, *args, **kwargs):
    """Calls fn; an unwritten stub or a step this GPU lacks skips the case."""
    try:
        out = fn(*args, **kwargs)
    except ck.StubNotImplementedError as e:
        pytest.skip(f"exercise stub not written yet: {e}")
    except ck.UnsupportedError as e:
        pytest.skip(f"unsupported here: {e}")
    torch.cuda.synchronize()
    return out


def steps(op, dtype=None):
    """Step names of `op` ("attention" with dtype "bf16": the tensor-core steps, if built)."""
    if op == "attention" and dtype == "bf16":
        op = "attention_bf16"
        if op not in ck.ops():
            return []
    return [s for s, _ in ck.steps(op)]


def cuda(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def close(got, ref, rtol, atol, what=""):
    torch.testing.assert_close(got.double(), ref.double(), rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


# ---- module 1 -------------------------------------------------------------------------

@pytest.mark.parametrize("step", steps("l2_norm"))
@pytest.mark.parametrize("n", [1, 1000, (1 << 20) + 3])
def test_l2_norm_and_dot(impl, step, n):
    x, y = cuda(n), cuda(n)
    got = run(ck.l2_norm, x, step=step, impl=impl)
    assert got.shape == () and got.dtype == torch.float32
    close(got, torch.linalg.vector_norm(x.double()), 5e-4, 0, "l2_norm")  # (fp32 atomics in atomic_naive)
    got = run(ck.dot, x, y, step=step, impl=impl)
    scale = (torch.linalg.vector_norm(x.double()) * torch.linalg.vector_norm(y.double())).item()
    close(got, torch.dot(x.double(), y.double()), 0, 1e-5 * scale, "dot")


@pytest.mark.parametrize("step", steps("softmax"))
@pytest.mark.parametrize("dim", [1, 0])
def test_softmax(impl, step, dim):
    wide = cuda(129, 1024) * 3
    x = wide[:, :1000]  # row stride 1024: a window of a wider matrix
    ref = torch.softmax(x.double(), dim)
    close(run(ck.softmax, x, dim, step=step, impl=impl), ref, 1e-5, 1e-7, "softmax")
    y = x.clone()
    run(ck.softmax, y, dim, step=step, impl=impl, out=y)  # in place
    close(y, ref, 1e-5, 1e-7, "softmax in place")


@pytest.mark.parametrize("step", steps("matmul"))
def test_matmul(impl, step):
    a, b = cuda(257, 65), cuda(65, 129)
    ref = a.double() @ b.double()
    close(run(ck.matmul, a, b, step=step, impl=impl), ref, 1e-5, 1e-4, "matmul")
    c = cuda(257, 129)
    want = 0.5 * ref + 2.0 * c.double()
    run(ck.matmul, a, b, alpha=0.5, beta=2.0, out=c, step=step, impl=impl)
    close(c, want, 1e-5, 1e-4, "matmul alpha/beta")


@pytest.mark.parametrize("step", steps("matmul_tc"))
def test_matmul_tc(impl, step):
    a, b = cuda(256, 136, dtype=torch.bfloat16), cuda(136, 72, dtype=torch.bfloat16)
    got = run(ck.matmul_tc, a, b, step=step, impl=impl)
    assert got.dtype == torch.float32
    close(got, a.double() @ b.double(), 1e-4, 1e-3, "matmul_tc")


# ---- module 2 -------------------------------------------------------------------------

@pytest.mark.parametrize("step", steps("batched_gemm"))
def test_batched_gemm(impl, step):
    bf16 = step in ("tensor_core", "wgmma")
    dt = torch.bfloat16 if bf16 else torch.float32
    q = cuda(2, 65, 3, 64, dtype=dt).transpose(1, 2)  # [B, N, H, d] storage read as [B, H, N, d]
    k = cuda(2, 3, 70, 64, dtype=dt)
    v = cuda(2, 3, 70, 64, dtype=dt)
    s = run(ck.batched_gemm, q, k.transpose(-2, -1), alpha=0.125, step=step, impl=impl)  # Q K^T, b_transposed
    close(s, 0.125 * q.double() @ k.double().transpose(-2, -1), 1e-4, 1e-3, "Q K^T")
    p = torch.softmax(s, -1).to(dt)
    close(run(ck.batched_gemm, p, v, step=step, impl=impl), p.double() @ v.double(), 1e-4, 1e-3, "P V")
    if not bf16:  # a_transposed: dV = P^T dO reads P in place
        close(run(ck.batched_gemm, p.transpose(-2, -1), q, step=step, impl=impl),
              p.double().transpose(-2, -1) @ q.double(), 1e-4, 1e-3, "P^T dO")
    kb = cuda(2, 1, 70, 64, dtype=dt).expand(2, 3, 70, 64)  # one K for every head (stride 0)
    close(run(ck.batched_gemm, q, kb.transpose(-2, -1), step=step, impl=impl),
          q.double() @ kb.double().transpose(-2, -1), 1e-4, 1e-3, "broadcast K")


@pytest.mark.parametrize("step", steps("batched_gemm"))
def test_batched_gemm_ptr_array(impl, step):
    dt = torch.bfloat16 if step in ("tensor_core", "wgmma") else torch.float32
    a = [cuda(33, 40, dtype=dt) for _ in range(3)]  # separate allocations
    b = [cuda(24, 40, dtype=dt).t() for _ in range(3)]  # transposed views
    got = run(ck.batched_gemm_ptr_array, a, b, alpha=2.0, step=step, impl=impl)
    for i in range(3):
        close(got[i], 2.0 * a[i].double() @ b[i].double(), 1e-4, 1e-3, f"C[{i}]")


# ---- module 3 -------------------------------------------------------------------------

def ref_attention(q, k, v, causal=False, scale=None, rope=False, theta=10000.0, alibi=False):
    """Float64 reference with the course's conventions (bottom-right causal mask, GQA)."""
    q, k, v = q.double(), k.double(), v.double()
    B, H, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    scale = scale or 1 / math.sqrt(d)
    qpos = torch.arange(Nq, device=q.device, dtype=torch.float64) + (Nk - Nq)
    kpos = torch.arange(Nk, device=q.device, dtype=torch.float64)
    if rope:
        inv = theta ** (-2 * torch.arange(d // 2, device=q.device, dtype=torch.float64) / d)

        def rotate(x, pos):
            ang = pos[:, None] * inv[None, :]
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)

        q, k = rotate(q, qpos), rotate(k, kpos)
    s = scale * q @ k.transpose(-2, -1)
    if alibi:
        m = 2.0 ** (-8.0 * (torch.arange(H, device=q.device, dtype=torch.float64) + 1) / H)
        s = s + m[:, None, None] * (kpos[None, None, :] - qpos[None, :, None])
    if causal:
        s = s.masked_fill(kpos[None, :] > qpos[:, None], -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return p @ v, lse


ATTN_SUPPORT = {  # step: (max head_dim, causal, lse, options) -- module03/attention.hpp's step_support
    "naive": (128, True, False, False), "tiled_online": (64, False, True, False), "causal": (64, True, True, False),
    "fused": (128, True, True, False), "fused_options": (128, True, True, True),
}


@pytest.mark.parametrize("step", steps("attention"))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [(100, 100), (37, 130), (130, 37)])
def test_attention_forward(impl, step, causal, seq):
    max_d, can_causal, has_lse, _ = ATTN_SUPPORT.get(step, (128, True, True, False))
    if causal and not can_causal:
        pytest.skip(f"step {step} has no causal mask")
    nq, nk = seq
    for d in sorted({64, max_d}):
        q = cuda(2, nq, 4, d).transpose(1, 2)  # [B, N, H, d] storage
        k, v = cuda(2, 4, nk, d), cuda(2, 4, nk, d)
        o_ref, lse_ref = ref_attention(q, k, v, causal)
        if has_lse:
            o, lse = run(ck.attention, q, k, v, causal=causal, return_lse=True, step=step, impl=impl)
            close(lse, lse_ref, 1e-5, 1e-5, f"lse d={d}")
        else:
            o = run(ck.attention, q, k, v, causal=causal, step=step, impl=impl)
        close(o, o_ref, 1e-4, 1e-5, f"O d={d}")


@pytest.mark.parametrize("causal", [False, True])
def test_attention_options(impl, causal):
    """fused_options: RoPE, ALiBi and grouped-query attention reach the kernel."""
    q, k, v = cuda(2, 8, 90, 64), cuda(2, 2, 90, 64), cuda(2, 2, 90, 64)
    for rope, alibi in [(True, False), (False, True), (True, True), (False, False)]:
        o = run(ck.attention, q, k, v, causal=causal, rope=rope, alibi=alibi, scale=0.2, step="fused_options",
                impl=impl)
        close(o, ref_attention(q, k, v, causal, 0.2, rope, 10000.0, alibi)[0], 1e-4, 1e-5,
              f"rope={rope} alibi={alibi}")


def ref_attention_lowp(q, k, v, causal=False):
    """The plain same-precision pipeline FlashAttention's rule compares with: bf16 Q K^T
    (fp32 accumulation, rounded to bf16), fp32 softmax rounded to bf16, bf16 P V."""
    B, H, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
    s = (q @ k.transpose(-2, -1)).float() / math.sqrt(d)
    if causal:
        i = torch.arange(Nq, device=q.device)[:, None] + (Nk - Nq)
        s = s.masked_fill(torch.arange(Nk, device=q.device)[None, :] > i, -math.inf)
    p = torch.softmax(s, -1).nan_to_num(0.0).to(q.dtype)
    return p @ v


@pytest.mark.parametrize("step", steps("attention", "bf16"))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [(1, 1), (113, 203), (128, 217), (239, 1), (1024, 1023), (256, 256)])
@pytest.mark.parametrize("d", [64, 128])
def test_attention_bf16(impl, step, causal, seq, d):
    """Tensor-core steps: FlashAttention's rule, error vs float64 <= 2x the plain bf16 pipeline's + a floor."""
    if not ck.available("attention_bf16", impl):
        pytest.skip(f"the {impl} library has no bf16 attention yet")
    nq, nk = seq
    q = cuda(2, nq, 4, d, dtype=torch.bfloat16).transpose(1, 2)  # [B, N, H, d] storage
    k, v = cuda(2, 2, nk, d, dtype=torch.bfloat16), cuda(2, 2, nk, d, dtype=torch.bfloat16)  # GQA: 2 kv heads
    o, lse = run(ck.attention, q, k, v, causal=causal, return_lse=True, step=step, impl=impl)
    assert o.dtype == torch.bfloat16 and lse.dtype == torch.float32
    o_ref, lse_ref = ref_attention(q, k, v, causal)
    err = (o.double() - o_ref).abs().max().item()
    err_lowp = (ref_attention_lowp(q, k, v, causal).double() - o_ref).abs().max().item()
    assert err <= 2 * err_lowp + 1e-4, f"max error {err:.3e} > 2 x {err_lowp:.3e} (plain bf16) + 1e-4"
    close(lse, lse_ref, 1e-4, 1e-3, "lse")


def test_attention_matches_sdpa():
    """The causal mask and scale agree with PyTorch's SDPA when N_q == N_k."""
    q, k, v = cuda(2, 4, 128, 64), cuda(2, 4, 128, 64), cuda(2, 4, 128, 64)
    for causal in (False, True):
        ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
        close(ck.attention(q, k, v, causal=causal), ref, 1e-4, 1e-5, f"causal={causal}")


# ---- module 4 -------------------------------------------------------------------------

def _need(op, impl):
    if op not in ck.ops(impl) or not ck.available(op, impl):
        pytest.skip(f"{op} is not in this build of the {impl} library yet")


@pytest.mark.parametrize("dim", [1, 0])
def test_softmax_backward(impl, dim):
    _need("softmax_backward", impl)
    y = torch.softmax(cuda(65, 1030), dim)
    dy = cuda(65, 1030)
    yd, dyd = y.double(), dy.double()
    ref = yd * (dyd - (dyd * yd).sum(dim, keepdim=True))
    for step in steps("softmax_backward"):
        close(run(ck.softmax_backward, y, dy, dim, step=step, impl=impl), ref, 1e-4, 1e-6, step)


def test_linear_backward(impl):
    _need("linear_backward", impl)
    x, w, dy = cuda(70, 33), cuda(33, 45), cuda(70, 45)
    for step in steps("linear_backward"):
        dx, dw, db = run(ck.linear_backward, x, w, dy, step=step, impl=impl)
        close(dx, dy.double() @ w.double().t(), 1e-5, 1e-4, "dx")
        close(dw, x.double().t() @ dy.double(), 1e-5, 1e-4, "dw")
        close(db, dy.double().sum(0), 1e-5, 1e-4, "db")
        dx, dw, db = run(ck.linear_backward, None, w, dy, need_dw=False, need_db=False, step=step, impl=impl)
        assert dw is None and db is None
        close(dx, dy.double() @ w.double().t(), 1e-5, 1e-4, "dx alone")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_attention_backward(impl, causal, kv_heads):
    _need("attention_backward", impl)
    B, H, N, d = 2, 4, 80, 64
    q, k, v = cuda(B, H, N, d), cuda(B, kv_heads, N, d), cuda(B, kv_heads, N, d)
    o, lse = ck.attention(q, k, v, causal=causal, return_lse=True)  # the solution's forward
    dout = cuda(B, H, N, d)
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    ref_o, _ = ref_attention(qd, kd, vd, causal)
    ref_o.backward(dout.double())
    for step in steps("attention_backward"):
        if step == "naive" and kv_heads != H:
            continue  # naive has no grouped-query attention
        dq, dk, dv = run(ck.attention_backward, q, k, v, o, dout, lse, causal=causal, step=step, impl=impl)
        close(dq, qd.grad, 1e-3, 1e-4, f"{step} dq")
        close(dk, kd.grad, 1e-3, 1e-4, f"{step} dk")
        close(dv, vd.grad, 1e-3, 1e-4, f"{step} dv")


# ---- plumbing --------------------------------------------------------------------------

def test_runs_on_the_current_and_a_given_stream():
    x = cuda(512, 2048)
    ref = torch.softmax(x, -1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = ck.softmax(x)  # torch's current stream here is `side`
    side.synchronize()
    close(y, ref, 1e-5, 1e-7, "current stream")
    z = torch.empty_like(x)
    ck.softmax(x, out=z, stream=side)
    side.synchronize()
    close(z, ref, 1e-5, 1e-7, "stream=")


def test_cuda_array_interface_without_torch_tensors():
    vals = [3.0, 4.0] + [0.0] * 14
    x = ck.device_array((16,), data=struct.pack("<16f", *vals))
    r = ck.l2_norm(x)
    assert isinstance(r, ck.DeviceArray)
    assert r.tolist() == pytest.approx([5.0])
    y = ck.device_array((16,), data=struct.pack("<16f", *([1.0] * 16)))
    assert ck.dot(x, y).tolist() == pytest.approx([7.0])


def test_cpu_tensor_is_rejected():
    with pytest.raises(ValueError, match="x: tensor is on cpu"):
        ck.softmax(torch.randn(4, 4))
    with pytest.raises(TypeError, match="x: dtype float64, expected float32"):
        ck.softmax(torch.randn(4, 4, device="cuda", dtype=torch.float64))


# ---- module 4: the tensor-core backward, and attention under autograd -----------------
#
# Reference: torch SDPA's math backend in fp32, from the same bf16 inputs (K and V repeated
# for grouped-query attention: autograd sums the copies' gradients back per kv head).
# Tolerance, FlashAttention's rule: the course's max error against it is at most 3x that of
# the same computation done in bf16 by PyTorch (SDPA's math backend on the bf16 tensors:
# bf16 products, rounded where bf16 autograd rounds) plus a floor of 1e-3.

def bottom_right_mask(nq, nk):
    """The course's causal mask as SDPA's attn_mask: query i sees key j <= i + nk - nq."""
    i = torch.arange(nq, device="cuda")[:, None] + (nk - nq)
    return torch.arange(nk, device="cuda")[None, :] <= i


def sdpa_with_grads(q, k, v, dout, causal, dtype):
    """(O, (dq, dk, dv)) of SDPA's math backend computing in `dtype`."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    H, Hkv, nq, nk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    leaves = tuple(t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    qx, kx, vx = leaves
    kx, vx = kx.repeat_interleave(H // Hkv, 1), vx.repeat_interleave(H // Hkv, 1)
    mask = bottom_right_mask(nq, nk) if causal else None
    with sdpa_kernel(SDPBackend.MATH):
        o = torch.nn.functional.scaled_dot_product_attention(qx, kx, vx, attn_mask=mask)
    return o, torch.autograd.grad(o, leaves, dout.to(dtype))


def check_grads(got, q, k, v, dout, causal, what):
    """FlashAttention's rule for (dq, dk, dv) against SDPA math fp32 (see above)."""
    _, ref = sdpa_with_grads(q, k, v, dout, causal, torch.float32)
    _, lowp = sdpa_with_grads(q, k, v, dout, causal, torch.bfloat16)
    for name, g, r, lp in zip(("dq", "dk", "dv"), got, ref, lowp):
        assert g.shape == r.shape and g.dtype == q.dtype, f"{what} {name}: {g.shape} {g.dtype}"
        err = (g.float() - r).abs().max().item()
        bound = 3 * (lp.float() - r).abs().max().item() + 1e-3
        assert err <= bound, f"{what} {name}: max error {err:.3e} > 3 x PyTorch bf16's + 1e-3 = {bound:.3e}"


def bf16_qkv(B, H, Hkv, nq, nk, d, requires_grad=False):
    """q stored [B, N, H, d] and read as [B, H, N, d] (strides, no copy); k, v [B, H_kv, N, d]."""
    q = cuda(B, nq, H, d, dtype=torch.bfloat16).transpose(1, 2)
    k, v = cuda(B, Hkv, nk, d, dtype=torch.bfloat16), cuda(B, Hkv, nk, d, dtype=torch.bfloat16)
    if requires_grad:
        q = q.detach().requires_grad_()  # a non-leaf view's .grad is not kept: make the view the leaf
        k.requires_grad_()
        v.requires_grad_()
    return q, k, v


@pytest.mark.parametrize("step", steps("attention_backward_bf16") if "attention_backward_bf16" in ck.ops() else [])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [(200, 200), (113, 203), (1000, 1000)])
@pytest.mark.parametrize("d", [64, 128])
def test_attention_backward_bf16(impl, step, causal, seq, d):
    """Every tensor-core backward step through the bridge: GQA (4 query heads on 2 kv heads),
    N not a multiple of the 64-row tiles, N_q != N_k, q in [B, N, H, d] storage."""
    _need("attention_backward_bf16", impl)
    nq, nk = seq
    q, k, v = bf16_qkv(2, 4, 2, nq, nk, d)
    o, lse = ck.attention(q, k, v, causal=causal, return_lse=True)  # the solution's tc_flash2
    dout = cuda(2, 4, nq, d, dtype=torch.bfloat16)
    grads = run(ck.attention_backward, q, k, v, o, dout, lse, causal=causal, step=step, impl=impl)
    check_grads(grads, q, k, v, dout, causal, f"{step} N={seq} d={d}")


@pytest.mark.parametrize("backward_step",
                         steps("attention_backward_bf16") if "attention_backward_bf16" in ck.ops() else [])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_attention_autograd_bf16(impl, backward_step, causal, d, kv_heads):
    """ck.attention on tensors that require grad: forward tc_flash2, backward through
    AttentionFunction, gradients in .grad with the inputs' shapes (GQA's dk, dv per kv head)."""
    _need("attention_backward_bf16", impl)
    N = 200
    q, k, v = bf16_qkv(2, 4, kv_heads, N, N, d, requires_grad=True)
    dout = cuda(2, 4, N, d, dtype=torch.bfloat16)
    o = run(ck.attention, q, k, v, causal=causal, backward_step=backward_step, impl=impl)
    assert o.requires_grad and o.dtype == torch.bfloat16
    try:
        o.backward(dout)
    except ck.StubNotImplementedError as e:
        pytest.skip(f"exercise stub not written yet: {e}")
    except ck.UnsupportedError as e:  # tc_wgmma off Hopper / without sm_90a code
        pytest.skip(f"unsupported here: {e}")
    torch.cuda.synchronize()
    ref_o, _ = sdpa_with_grads(q, k, v, dout, causal, torch.float32)
    close(o, ref_o, 2e-2, 2e-2, "O")
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape
    check_grads((q.grad, k.grad, v.grad), q, k, v, dout, causal, f"autograd {backward_step} d={d} H_kv={kv_heads}")


def test_attention_autograd_details():
    """The gradient autograd hands over may be expanded (o.sum()): it is copied, not misread;
    AttentionFunction.apply is the same op; no_grad gives the plain op; options without a
    backward are refused by name."""
    if "attention_backward_bf16" not in ck.ops() or not ck.available("attention_backward_bf16"):
        pytest.skip("no bf16 attention backward in this build")
    q, k, v = bf16_qkv(1, 4, 4, 130, 130, 64, requires_grad=True)
    ck.attention(q, k, v, causal=True).sum().backward()  # dO = ones, handed over expanded (stride 0)
    torch.cuda.synchronize()
    ones = torch.ones(1, 4, 130, 64, device="cuda", dtype=torch.bfloat16)
    check_grads((q.grad, k.grad, v.grad), q, k, v, ones, True, "o.sum()")
    dout = cuda(1, 4, 130, 64, dtype=torch.bfloat16)
    grads = torch.autograd.grad(ck.AttentionFunction.apply(q, k, v, True), (q, k, v), dout)
    check_grads(grads, q, k, v, dout, True, "AttentionFunction.apply")
    with torch.no_grad():
        assert not ck.attention(q, k, v).requires_grad
    for bad in ({"rope": True}, {"return_lse": True}, {"out": torch.empty_like(q)}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))}: not with autograd"):
            ck.attention(q, k, v, **bad)


def test_attention_autograd_fp32():
    """float32 tensors: forward fused_options (GQA), backward flash, against float64."""
    _need("attention_backward", "solution")
    q, k, v = (t.requires_grad_() for t in (cuda(2, 4, 90, 64), cuda(2, 2, 90, 64), cuda(2, 2, 90, 64)))
    dout = cuda(2, 4, 90, 64)
    ck.attention(q, k, v, causal=True).backward(dout)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref_o, _ = ref_attention(qd, kd, vd, True)
    ref_o.backward(dout.double())
    for got, ref, name in ((q.grad, qd.grad, "dq"), (k.grad, kd.grad, "dk"), (v.grad, vd.grad, "dv")):
        close(got, ref, 1e-3, 1e-4, name)


# ---- module 4: fused cross-entropy (self-contained block) -------------------------------

@pytest.mark.parametrize("step", ["three_pass", "online", "row_on_chip"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab", [84, 1000, 50304])
def test_cross_entropy_matches_torch(impl, step, dtype, vocab):
    """loss and dlogits against F.cross_entropy + autograd in float64 on the same (rounded)
    logits; ignored rows, an out-of-place and an in-place call."""
    rows = 37
    logits = (4 * torch.randn(rows, vocab, device="cuda")).to(dtype)
    targets = torch.randint(0, vocab, (rows,), device="cuda")
    targets[::5] = -100
    ref_in = logits.double().requires_grad_()
    ref = torch.nn.functional.cross_entropy(ref_in, targets)
    ref.backward()
    mean, losses, dlogits, n = run(ck.cross_entropy, logits, targets, step=step, impl=impl)
    assert int(n.item()) == int((targets != -100).sum())
    close(mean, ref.detach().reshape(1), 1e-5, 1e-5, "loss_mean")
    grad_tol = (2e-2, 4e-3) if dtype == torch.bfloat16 else (1e-4, 1e-6)
    close(dlogits, ref_in.grad, *grad_tol, "dlogits")
    in_place = logits.clone()
    run(ck.cross_entropy, in_place, targets, step=step, impl=impl, out=in_place)
    close(in_place, ref_in.grad, *grad_tol, "dlogits in place")
    with_none = ck.cross_entropy(logits, targets, step=step, impl=impl, grad=False)
    assert with_none[2] is None
    close(with_none[0], mean, 0, 0, "forward only")


def test_cross_entropy_all_ignored_is_zero_not_nan(impl):
    logits = cuda(8, 84)
    targets = torch.full((8,), -100, device="cuda", dtype=torch.int32)
    mean, losses, dlogits, n = run(ck.cross_entropy, logits, targets, impl=impl)
    assert mean.item() == 0.0 and int(n.item()) == 0
    assert torch.count_nonzero(dlogits).item() == 0 and torch.count_nonzero(losses).item() == 0
    # PyTorch: NaN (0 / 0) -- the documented difference.
    assert math.isnan(torch.nn.functional.cross_entropy(logits, targets.long()).item())


# ---- module 4's AdamW and GELU, module 1's matmul_tc options (ck.adamw, ck.gelu,
# ck.gelu_backward, ck.linear, ck.matmul_tc_ex) -------------------------------------------
#
# References in float64 from the same inputs. AdamW: torch.optim.AdamW's formula and order
# (decay of the old p, the moments, the bias-corrected step) after clip_grad_norm_'s scale;
# fp32 tolerances. GELU and the bf16 GEMMs: one rounding of an fp32 result (bf16 outputs:
# 2^-9 relative, so rtol 8e-3 / 1e-2).

def ref_adamw(ps, gs, ms, vs, *, lr, betas, eps, weight_decay, t, decay, max_norm):
    """(norm, [(p, m, v)]) in float64."""
    b1, b2 = betas
    norm = math.sqrt(sum((g.double() ** 2).sum().item() for g in gs))
    scale = min(1.0, max_norm / (norm + 1e-6)) if max_norm > 0 else 1.0
    out = []
    for p, g, m, v, d in zip(ps, gs, ms, vs, decay):
        p, g, m, v = p.double(), g.double() * scale, m.double(), v.double()
        if d:
            p = p - lr * weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        denom = v.sqrt() / math.sqrt(1 - b2 ** t) + eps
        out.append((p - lr / (1 - b1 ** t) * m / denom, m, v))
    return norm, out


def adamw_state(sizes, offset=1):
    """params, grads, m, v as views into one flat buffer each, starting `offset` floats in
    (offset 1: 4-byte aligned, not 16: multi_tensor's scalar path), plus two separate 2-D
    tensors (the float4 path)."""
    total = sum(sizes) + offset
    flats = [cuda(total) * 0.5, cuda(total) * 1e-2, cuda(total) * 1e-3, torch.rand(total, device="cuda") * 1e-4]
    lists = [[], [], [], []]
    off = offset
    for n in sizes:
        for lst, flat in zip(lists, flats):
            lst.append(flat[off:off + n])
        off += n
    for shape in ((64, 96), (384,)):
        for lst, make in zip(lists, (lambda s: cuda(*s) * 0.5, lambda s: cuda(*s) * 1e-2, lambda s: cuda(*s) * 1e-3,
                                     lambda s: torch.rand(*s, device="cuda") * 1e-4)):
            lst.append(make(shape))
    return lists


@pytest.mark.parametrize("step", steps("adamw") if "adamw" in ck.ops() else [])
@pytest.mark.parametrize("max_norm", [0.0, 1.0])
def test_adamw(impl, step, max_norm):
    _need("adamw", impl)
    ps, gs, ms, vs = adamw_state([1, 7, 1152, 2 * 16384 + 5, 100003])
    decay = [i % 2 == 0 for i in range(len(ps))]
    hyper = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, t=3)
    norm_ref, refs = ref_adamw(ps, gs, ms, vs, decay=decay, max_norm=max_norm, **hyper)
    grads_before = [g.clone() for g in gs]
    copies = [torch.empty_like(p, dtype=torch.bfloat16) if i != 1 else None for i, p in enumerate(ps)]
    norm = run(ck.adamw, ps, gs, ms, vs, decay_mask=decay, max_norm=max_norm, bf16_copies=copies, return_norm=True,
               step=step, impl=impl, **hyper)
    assert norm.shape == () and norm.dtype == torch.float32
    assert norm.item() == pytest.approx(norm_ref, rel=1e-5)
    for i, (p, m, v, (rp, rm, rv)) in enumerate(zip(ps, ms, vs, refs)):
        close(p, rp, 1e-5, 2e-6, f"params[{i}]")
        close(m, rm, 1e-5, 1e-9, f"exp_avgs[{i}]")
        close(v, rv, 1e-5, 1e-12, f"exp_avg_sqs[{i}]")
        if copies[i] is not None:
            assert torch.equal(copies[i], p.to(torch.bfloat16)), f"bf16_copies[{i}] is not params rounded to bf16"
    for g, g0 in zip(gs, grads_before):
        assert torch.equal(g, g0), "grads must be read only (the clip is applied on the fly)"


def test_adamw_matches_torch_optim():
    """From zero moments at t = 1 and 2: the same numbers as clip_grad_norm_ + torch.optim.AdamW
    (two parameter groups: decay and no decay)."""
    _need("adamw", "solution")
    shapes = [(96, 64), (96,), (1000,), (7, 9)]
    decay = [True, False, True, False]
    params = [torch.nn.Parameter(cuda(*s)) for s in shapes]
    mine = [p.detach().clone() for p in params]
    ms = [torch.zeros_like(p) for p in mine]
    vs = [torch.zeros_like(p) for p in mine]
    groups = [{"params": [p for p, d in zip(params, decay) if d], "weight_decay": 0.1},
              {"params": [p for p, d in zip(params, decay) if not d], "weight_decay": 0.0}]
    kwargs = {"fused": True} if "fused" in torch.optim.AdamW.__init__.__code__.co_varnames else {}
    opt = torch.optim.AdamW(groups, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, **kwargs)
    for t in (1, 2):
        grads = [cuda(*s) for s in shapes]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        run(ck.adamw, mine, grads, ms, vs, t=t, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
            decay_mask=decay, max_norm=1.0)
        for i, (p, q) in enumerate(zip(params, mine)):
            close(q, p.detach(), 1e-5, 1e-6, f"t={t} params[{i}]")


@pytest.mark.parametrize("step", steps("gelu") if "gelu" in ck.ops() else [])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gelu_forward_and_backward(impl, step, dtype):
    _need("gelu", impl)
    # fp32: a few ulps of each term (module04_training/tests/gelu_check.hpp's bound: the
    # backward's 1 - tanh^2 cancels, ~|x| du/dx ulps of dy); bf16: one rounding more.
    tol = (1e-5, 5e-6) if dtype == torch.float32 else (8e-3, 1e-5)
    btol = (1e-5, 2e-5) if dtype == torch.float32 else (8e-3, 1e-4)
    for shape in ((1000003,), (129, 1536)):
        x = (cuda(*shape) * 3).to(dtype)
        dy = cuda(*shape).to(dtype)
        ref = F_gelu64(x)
        close(run(ck.gelu, x, step=step, impl=impl), ref, *tol, f"gelu {shape}")
        y = x.clone()
        run(ck.gelu, y, step=step, impl=impl, out=y)
        close(y, ref, *tol, "gelu in place")
        dref = torch.ops.aten.gelu_backward(dy.double(), x.double(), approximate="tanh")
        close(run(ck.gelu_backward, x, dy, step=step, impl=impl), dref, *btol, f"gelu_backward {shape}")
        dx = cuda(*shape).to(dtype)
        want = dx.double() + dref
        run(ck.gelu_backward, x, dy, accumulate=True, step=step, impl=impl, out=dx)
        close(dx, want, *btol, "gelu_backward accumulate")
        g = dy.clone()
        run(ck.gelu_backward, x, g, step=step, impl=impl, out=g)
        close(g, dref, *btol, "gelu_backward in place")


def F_gelu64(x):
    return torch.nn.functional.gelu(x.double(), approximate="tanh")


def test_linear_layer_products(impl):
    """The five products of a linear layer on step mma_sync, at sizes with partial tiles."""
    M, K, N = 200, 136, 72
    bf = torch.bfloat16
    x, w, dy = cuda(M, K, dtype=bf), cuda(N, K, dtype=bf), cuda(M, N, dtype=bf)
    b = cuda(N).to(bf).float()  # bf16-representable: PyTorch's bf16 bias is the same numbers
    lin = x.double() @ w.double().t() + b.double()
    lo = (1e-2, 1e-2)  # a bf16 output
    got = run(ck.linear, x, w, b, impl=impl)
    assert got.dtype == bf and got.shape == (M, N)
    close(got, lin, *lo, "Y = X W^T + b")
    y, pre = run(ck.linear, x, w, b, gelu=True, return_pre_gelu=True, impl=impl)
    close(pre, lin, *lo, "pre_gelu")
    close(y, F_gelu64(lin), *lo, "gelu(X W^T + b)")
    r = cuda(M, N, dtype=bf)
    want = r.double() + lin
    run(ck.linear, x, w, b, residual=r, out=r, impl=impl)
    close(r, want, *lo, "R += X W^T + b (in place)")
    close(run(ck.linear, x, w, out_dtype=torch.float32, impl=impl), x.double() @ w.double().t(), 1e-4, 1e-3,
          "fp32 out, no bias")
    dx = run(ck.matmul_tc_ex, dy, w, out_dtype=bf, impl=impl)
    close(dx, dy.double() @ w.double(), *lo, "dX = dY W")
    dw = cuda(N, K)
    want = dw.double() + dy.double().t() @ x.double()
    run(ck.matmul_tc_ex, dy.t(), x, accumulate=True, out=dw, impl=impl)  # a_transposed, fp32 accumulate
    close(dw, want, 1e-4, 1e-3, "dW += dY^T X")
    with pytest.raises(ck.UnsupportedError, match="b_transposed"):
        ck.linear(x, w, step="wmma", impl=impl)


# ---- module 4's LayerNorm (ck.layer_norm, ck.layer_norm_backward) ------------------------
#
# Reference: float64 autograd of F.layer_norm on the same (rounded) inputs, gamma and beta in
# float32 (the course keeps them fp32 for bf16 activations too). Tolerances: fp32, a few ulps
# of each sum (C up to 1030, rows up to 129); bf16 outputs: one rounding of an fp32 result
# (2^-9 relative, so rtol 8e-3) over the same fp32 error.

def ln_reference(x, gamma, beta, dy, eps=1e-5):
    """float64 (y, mean, rstd, dx, dgamma, dbeta) of F.layer_norm over the last dim."""
    xd, gd, bd = (t.double().requires_grad_() for t in (x, gamma, beta))
    y = torch.nn.functional.layer_norm(xd, (x.shape[1],), gd, bd, eps)
    dx, dg, db = torch.autograd.grad(y, (xd, gd, bd), dy.double())
    xd = xd.detach()
    mean = xd.mean(1)
    rstd = 1 / torch.sqrt(xd.var(1, unbiased=False) + eps)
    return y.detach(), mean, rstd, dx, dg, db


def ln_inputs(rows, C, dtype, pad=0):
    """x (rows x C, row stride C + pad, mean ~1 and scale ~3 per row), dy, gamma, beta."""
    x = (cuda(rows, C + pad) * 3 + 1)[:, :C].to(dtype) if pad else (cuda(rows, C) * 3 + 1).to(dtype)
    dy = cuda(rows, C).to(dtype)
    return x, dy, cuda(C), cuda(C)


LN_SHAPES = [(1, 1), (37, 384), (129, 768), (8, 1024), (65, 1000), (17, 1030), (3, 7)]


def ln_tolerances(dtype):
    """(y, dx, dparams) (rtol, atol)."""
    if dtype == torch.float32:
        return (2e-5, 2e-5), (1e-4, 1e-4), (1e-4, 1e-3)
    return (8e-3, 1e-3), (8e-3, 2e-3), (1e-4, 1e-3)


@pytest.mark.parametrize("step", steps("layer_norm") if "layer_norm" in ck.ops() else [])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_forward(impl, step, dtype):
    _need("layer_norm", impl)
    ytol, _, _ = ln_tolerances(dtype)
    for rows, C in LN_SHAPES:
        for pad in (0, 8):
            x, dy, g, b = ln_inputs(rows, C, dtype, pad)
            ref_y, ref_mean, ref_rstd, *_ = ln_reference(x, g, b, dy)
            what = f"{rows}x{C} pad {pad}"
            y, mean, rstd = run(ck.layer_norm, x, g, b, step=step, impl=impl, return_stats=True)
            assert y.dtype == dtype and y.shape == (rows, C) and mean.shape == (rows,)
            close(y, ref_y, *ytol, f"y {what}")
            close(mean, ref_mean, 1e-5, 1e-5, f"mean {what}")
            close(rstd, ref_rstd, 1e-5, 1e-6, f"rstd {what}")
    # Into given outputs with a padded row stride, and eps.
    x, dy, g, b = ln_inputs(40, 768, dtype)
    out = torch.full((40, 800), float("nan"), device="cuda", dtype=dtype)
    mean, rstd = torch.empty(40, device="cuda"), torch.empty(40, device="cuda")
    run(ck.layer_norm, x, g, b, eps=1e-2, step=step, impl=impl, out=out[:, :768], mean_out=mean, rstd_out=rstd)
    ref_y, _, ref_rstd, *_ = ln_reference(x, g, b, dy, eps=1e-2)
    close(out[:, :768], ref_y, *ytol, "y into a padded out, eps 1e-2")
    close(rstd, ref_rstd, 1e-5, 1e-6, "rstd, eps 1e-2")
    assert torch.isnan(out[:, 768:]).all(), "the padding between rows of out was written"


@pytest.mark.parametrize("step", steps("layer_norm_backward") if "layer_norm_backward" in ck.ops() else [])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_backward(impl, step, dtype):
    _need("layer_norm_backward", impl)
    _, dxtol, ptol = ln_tolerances(dtype)
    for rows, C in LN_SHAPES + [(2049, 384)]:
        x, dy, g, b = ln_inputs(rows, C, dtype, pad=8 if rows % 2 else 0)
        _, _, _, ref_dx, ref_dg, ref_db = ln_reference(x, g, b, dy)
        # The statistics the forward writes (the float64 ones would hide a forward/backward mismatch).
        _, mean, rstd = ck.layer_norm(x, g, b, step="thread_per_row", return_stats=True)
        what = f"{rows}x{C}"
        dx, dg, db = run(ck.layer_norm_backward, x, dy, mean, rstd, g, step=step, impl=impl)
        assert dx.dtype == dtype and dg.dtype == torch.float32 and db.shape == (C,)
        close(dx, ref_dx, *dxtol, f"dx {what}")
        close(dg, ref_dg, *ptol, f"dgamma {what}")
        close(db, ref_db, *ptol, f"dbeta {what}")
    # Accumulation: dx += (the residual stream's gradient), dgamma += and dbeta += (micro-batches).
    x, dy, g, b = ln_inputs(100, 768, dtype)
    _, _, _, ref_dx, ref_dg, ref_db = ln_reference(x, g, b, dy)
    _, mean, rstd = ck.layer_norm(x, g, b, step="thread_per_row", return_stats=True)
    dx0, dg0, db0 = cuda(100, 768).to(dtype), cuda(768), cuda(768)
    dx, dg, db = dx0.clone(), dg0.clone(), db0.clone()
    run(ck.layer_norm_backward, x, dy, mean, rstd, g, step=step, impl=impl, dx=dx, accumulate_dx=True, dgamma=dg,
        dbeta=db, accumulate_dparams=True)
    close(dx, dx0.double() + ref_dx, *dxtol, "dx accumulate")
    close(dg, dg0.double() + ref_dg, *ptol, "dgamma accumulate")
    close(db, db0.double() + ref_db, *ptol, "dbeta accumulate")
    # rows = 0: dgamma, dbeta are sums over no rows (zero), or left alone when accumulating.
    e = torch.empty(0, 768, device="cuda", dtype=dtype)
    dg, db = torch.full((768,), float("nan"), device="cuda"), torch.full((768,), float("nan"), device="cuda")
    run(ck.layer_norm_backward, e, e, torch.empty(0, device="cuda"), torch.empty(0, device="cuda"), g, step=step,
        impl=impl, dgamma=dg, dbeta=db)
    assert torch.count_nonzero(dg).item() == 0 and torch.count_nonzero(db).item() == 0


def test_layer_norm_partial_sums_is_deterministic_and_matches_torch():
    """partial_sums gives the same bits twice; both steps agree with PyTorch's fp32 autograd."""
    _need("layer_norm_backward", "solution")
    x, dy, g, b = ln_inputs(4096, 768, torch.float32)
    _, mean, rstd = ck.layer_norm(x, g, b, return_stats=True)
    first = run(ck.layer_norm_backward, x, dy, mean, rstd, g, step="partial_sums")
    second = run(ck.layer_norm_backward, x, dy, mean, rstd, g, step="partial_sums")
    for a, c, name in zip(first, second, ("dx", "dgamma", "dbeta")):
        assert torch.equal(a, c), f"partial_sums {name} differs between two runs"
    leaves = [t.detach().clone().requires_grad_() for t in (x, g, b)]
    y = torch.nn.functional.layer_norm(leaves[0], (768,), leaves[1], leaves[2])
    close(run(ck.layer_norm, x, g, b), y.detach(), 2e-5, 2e-5, "y vs F.layer_norm")
    theirs = torch.autograd.grad(y, leaves, dy)
    for a, t, name in zip(first, theirs, ("dx", "dgamma", "dbeta")):
        close(a, t, 1e-4, 1e-3, f"{name} vs torch autograd")
