"""CPU tests (no GPU, no torch): the package imports, finds and loads both libraries, lists
ops and steps, checks arguments in Python with clear errors, and surfaces the C++
validation's messages (validation runs before any launch, so no device is needed)."""
import pathlib
import subprocess
import sys

import pytest

import course_kernels as ck

IMPLS = ["solution", "exercise"]


def test_import_does_not_import_torch():
    code = "import sys, course_kernels; print('torch' in sys.modules)"
    env_path = str(pathlib.Path(ck.__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {env_path!r}); {code}"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("impl", IMPLS)
def test_library_is_found_and_loads(impl):
    path = ck.library_path(impl)
    assert path.name == f"libcourse_bridge_{impl}.so"
    lib = ck.library(impl)
    assert lib.impl == impl
    assert lib.raw("course_bridge_abi_version")() == ck.ABI_VERSION


def test_env_var_overrides(monkeypatch, tmp_path):
    from course_kernels import _library
    real = ck.library_path("solution")
    monkeypatch.setenv("COURSE_BRIDGE_LIB", str(real.parent))
    assert _library.candidate_paths("exercise")[0] == real.parent / "libcourse_bridge_exercise.so"
    monkeypatch.setenv("COURSE_BRIDGE_LIB", str(real))  # a file: its folder serves the other impl
    assert _library.candidate_paths("solution")[0] == real
    assert _library.candidate_paths("exercise")[0] == real.parent / "libcourse_bridge_exercise.so"
    monkeypatch.setenv("COURSE_BRIDGE_LIB", str(tmp_path))  # empty folder: the build folders still count
    assert _library.candidate_paths("solution")[0].name == "libcourse_bridge_solution.so"


def test_bad_impl_is_named():
    with pytest.raises(ValueError, match="impl: 'mine'"):
        ck.library("mine")
    with pytest.raises(ValueError, match="impl"):
        ck.softmax(object(), impl="mine")


def test_ops_and_steps_come_from_the_step_tables():
    assert ck.ops()[:7] == ["l2_norm", "dot", "softmax", "matmul", "matmul_tc", "batched_gemm", "attention"]
    assert [s for s, _ in ck.steps("softmax")] == ["naive_three_pass", "block_per_row", "warp_per_row",
                                                   "online_vectorized", "cluster_columns"]
    assert ck.steps("matmul")[-1][0] == "warp_tiled" and "warp" in ck.steps("matmul")[-1][1]
    assert ck.steps("l2_norm") == ck.steps("dot")
    for impl in IMPLS:
        for op in ck.ops(impl):
            names = [s for s, _ in ck.steps(op, impl)]
            assert names and all(names), op
            if op in ck.DEFAULT_STEPS:
                assert ck.DEFAULT_STEPS[op] in names, f"default step of {op} is not in its table"
            assert isinstance(ck.available(op, impl), bool)
    assert set(ck.DEFAULT_STEPS) <= set(ck.ops()) | {"attention_bf16", "softmax_backward", "linear_backward",
                                                     "attention_backward", "attention_backward_bf16"}
    # Ops with a float32 and a bfloat16 overload list the steps of each under its own name.
    assert [s for s, _ in ck.steps("attention_backward")] == ["naive", "flash", "flash_deterministic"]
    assert [s for s, _ in ck.steps("attention_backward_bf16")] == ["tc_mma", "tc_pipelined", "tc_deterministic",
                                                                "tc_split_dq", "tc_wgmma",
                                                                "tc_wgmma_deterministic", "tc_wgmma_split_dq"]


def test_unknown_op_and_step_are_clear(fake):
    with pytest.raises(ck.InvalidArgumentError, match="argument 'op' = \"flash\".*the ops are: l2_norm"):
        ck.steps("flash")
    with pytest.raises(ck.InvalidArgumentError) as e:
        ck.softmax(fake((4, 8)), step="fastest", out=fake((4, 8)))
    assert "softmax: argument 'step' = \"fastest\"" in str(e.value)
    assert "naive_three_pass,block_per_row,warp_per_row,online_vectorized,cluster_columns" in str(e.value)
    assert isinstance(e.value, ValueError)
    with pytest.raises(TypeError, match="step: expected a step name"):
        ck.softmax(fake((4, 8)), step=3, out=fake((4, 8)))


@pytest.mark.parametrize("impl", IMPLS)
def test_validation_messages_cross_the_boundary(fake, impl):
    """Null pointers and bad sizes reach the C++ validation and come back by name."""
    with pytest.raises(ck.InvalidArgumentError, match=r"\[%s\] matmul: argument 'a' = nullptr" % impl):
        ck.matmul(fake((4, 4), ptr=0), fake((4, 4)), out=fake((4, 4)), impl=impl)
    with pytest.raises(ck.InvalidArgumentError, match="argument 'ldx' = 4: must be >= cols"):
        ck.softmax(fake((4, 8), strides=(16, 4)), out=fake((4, 8)), impl=impl)  # rows overlap
    with pytest.raises(ck.InvalidArgumentError, match="argument 'head_dim' = 48"):
        q = fake((2, 4, 8, 48))
        ck.attention(q, fake((2, 4, 8, 48)), fake((2, 4, 8, 48)), out=fake((2, 4, 8, 48)), impl=impl)
    with pytest.raises(ck.InvalidArgumentError, match="argument 'causal' = true: is not supported by step "
                                                      "tiled_online"):
        shape = (1, 2, 16, 64)
        ck.attention(fake(shape), fake(shape), fake(shape), causal=True, step="tiled_online", out=fake(shape),
                     impl=impl)
    with pytest.raises(ck.InvalidArgumentError, match="argument 'lda' = 12: must be a multiple of 8"):
        ck.matmul_tc(fake((16, 12), "<V2"), fake((12, 16), "<V2"), out=fake((16, 16)), impl=impl)
    # A transposed bf16 `a` is read as a_transposed, which the bf16 steps reject by name.
    with pytest.raises(ck.InvalidArgumentError, match="argument 'a_transposed' = true"):
        ck.batched_gemm(fake((2, 32, 16), "<V2", strides=(1024, 2, 64)), fake((2, 16, 8), "<V2"),
                        out=fake((2, 32, 8)), impl=impl)
    # The pointer arrays of batched_gemm_ptr_array are checked to be device memory: here they
    # cannot be uploaded without a device, so call the C ABI with host arrays directly.
    import ctypes
    host = (ctypes.c_void_p * 1)(1 << 40)
    lib = ck.library(impl)
    with pytest.raises(ck.InvalidArgumentError, match="argument 'a_ptrs'"):
        lib.call("course_batched_gemm_ptr_array_f32", b"smem_tiled", ctypes.addressof(host), ctypes.addressof(host),
                 ctypes.addressof(host), 8, 8, 8, 1, 1, 8, 8, 8, 0, 0, 1.0, None)


@pytest.mark.parametrize("impl", IMPLS)
def test_bf16_attention_reaches_its_validation_or_says_it_is_missing(fake, impl):
    s = (1, 2, 16, 48)
    call = lambda: ck.attention(fake(s, "<V2"), fake(s, "<V2"), fake(s, "<V2"), out=fake(s, "<V2"),  # noqa: E731
                                impl=impl)
    if "attention_bf16" in ck.ops(impl) and ck.available("attention_bf16", impl):
        with pytest.raises(ck.InvalidArgumentError, match="argument 'head_dim' = 48"):
            call()
        with pytest.raises(ck.InvalidArgumentError, match="attention_bf16: argument 'step' = \"fused\": is not a "
                                                          "step of attention_bf16.*takes float32 tensors"):
            s64 = (1, 2, 16, 64)
            ck.attention(fake(s64, "<V2"), fake(s64, "<V2"), fake(s64, "<V2"), out=fake(s64, "<V2"), step="fused",
                         impl=impl)
    else:
        with pytest.raises(ck.StubNotImplementedError):
            call()
    with pytest.raises(ValueError, match="rope: the tensor-core"):
        s64 = (1, 2, 16, 64)
        ck.attention(fake(s64, "<V2"), fake(s64, "<V2"), fake(s64, "<V2"), rope=True, out=fake(s64, "<V2"),
                     impl=impl)
    with pytest.raises(TypeError, match="k: dtype float32, but q is bfloat16"):
        ck.attention(fake(s, "<V2"), fake(s), fake(s), impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
def test_module4_validation_crosses_the_boundary(fake, impl):
    ops = ck.ops(impl)
    if "attention_backward" in ops and ck.available("attention_backward", impl):
        s = (1, 2, 16, 64)
        with pytest.raises(ck.InvalidArgumentError, match="argument 'head_dim' = 8"):
            s8 = (1, 2, 16, 8)
            ck.attention_backward(fake(s8), fake(s8), fake(s8), fake(s8), fake(s8), fake((1, 2, 16)),
                                  out=(fake(s8), fake(s8), fake(s8)), step="flash", impl=impl,
                                  workspace=fake((4096,), "|u1"))
        with pytest.raises(ValueError, match="lse: must be contiguous"):
            ck.attention_backward(fake(s), fake(s), fake(s), fake(s), fake(s), fake((1, 2, 16), strides=(8, 4, 8)),
                                  out=(fake(s), fake(s), fake(s)), impl=impl, workspace=fake((4096,), "|u1"))
        with pytest.raises(ck.InvalidArgumentError, match="argument 'workspace_bytes' = 100: must be >= "):
            ck.attention_backward(fake(s), fake(s), fake(s), fake(s), fake(s), fake((1, 2, 16)),
                                  out=(fake(s), fake(s), fake(s)), impl=impl, workspace=fake((100,), "|u1"))
    if "softmax_backward" in ops and ck.available("softmax_backward", impl):
        with pytest.raises(ck.InvalidArgumentError, match="argument 'dim' = 2"):
            ck.library(impl).call("course_softmax_backward", b"warp_per_row", 1 << 40, 2 << 40, 3 << 40, 4, 8, 8, 8,
                                  8, 2, None, 0, None)
    if "linear_backward" in ops and ck.available("linear_backward", impl):
        with pytest.raises(ck.InvalidArgumentError, match="argument 'dx'.*overlaps"):
            x = fake((8, 4))
            ck.linear_backward(x, fake((4, 8)), fake((8, 8)), out=(x, fake((4, 8)), fake((8,))), impl=impl)
        with pytest.raises(ValueError, match="x: needed for dW"):
            ck.linear_backward(None, fake((4, 8)), fake((8, 8)), impl=impl)


def test_python_checks_name_the_argument(fake):
    with pytest.raises(TypeError, match="x: expected a torch.Tensor or an object with __cuda_array_interface__, "
                                        "got list"):
        ck.softmax([[1.0, 2.0]])
    with pytest.raises(TypeError, match="x: dtype typestr '<f8', expected float32"):
        ck.softmax(fake((4, 8), "<f8"))
    with pytest.raises(TypeError, match="a: dtype float32, expected bfloat16"):
        ck.matmul_tc(fake((16, 16)), fake((16, 16), "<V2"))
    with pytest.raises(ValueError, match="x: expected a 2-D array"):
        ck.softmax(fake((4, 8, 2)))
    with pytest.raises(ValueError, match=r"x: the last dimension must be contiguous \(stride 1\)"):
        ck.softmax(fake((4, 8), strides=(64, 8)))
    with pytest.raises(ValueError, match="x: strides .* are not multiples of the 4-byte element"):
        ck.softmax(fake((4, 8), strides=(34, 4)))
    with pytest.raises(ValueError, match="b: shape \\(5, 4\\) does not match a's \\(4, 4\\)"):
        ck.matmul(fake((4, 4)), fake((5, 4)))
    with pytest.raises(ValueError, match="beta: a nonzero beta reads C"):
        ck.matmul(fake((4, 4)), fake((4, 4)), beta=1.0)
    with pytest.raises(ValueError, match="out: shape \\(4, 5\\), expected the result's shape"):
        ck.matmul(fake((4, 4)), fake((4, 4)), out=fake((4, 5)))
    with pytest.raises(ValueError, match="out: the output array is read-only"):
        ck.matmul(fake((4, 4)), fake((4, 4)), out=fake((4, 4), readonly=True))
    with pytest.raises(ValueError, match="dim: 2 is not a dimension"):
        ck.softmax(fake((4, 8)), dim=2)
    with pytest.raises(ValueError, match="x: must be contiguous"):
        ck.l2_norm(fake((8,), strides=(8,)))
    with pytest.raises(ValueError, match="y: shape \\(9,\\), expected x's shape"):
        ck.dot(fake((8,)), fake((9,)))
    with pytest.raises(ValueError, match="a: one of the last two dimensions must be contiguous"):
        ck.batched_gemm(fake((2, 8, 8), strides=(256, 16, 8)), fake((2, 8, 8)), out=fake((2, 8, 8)))
    with pytest.raises(ValueError, match="b: leading dims \\(3,\\) differ from a's \\(2,\\)"):
        ck.batched_gemm(fake((2, 8, 8)), fake((3, 8, 8)))
    with pytest.raises(TypeError, match="b: dtype bfloat16, but a is float32"):
        ck.batched_gemm(fake((2, 8, 8)), fake((2, 8, 8), "<V2"))
    with pytest.raises(ValueError, match="k: shape .* expected \\[batch, kv_heads, seq_k, head_dim\\]"):
        ck.attention(fake((2, 4, 8, 64)), fake((2, 4, 8, 32)), fake((2, 4, 8, 32)))
    with pytest.raises(ValueError, match="q: expected a 4-D array"):
        ck.attention(fake((4, 8, 64)), fake((4, 8, 64)), fake((4, 8, 64)))
    with pytest.raises(ValueError, match="lse_out: must be contiguous"):
        s = (1, 2, 16, 64)
        ck.attention(fake(s), fake(s), fake(s), out=fake(s), lse_out=fake((1, 2, 16), strides=(8, 4, 8)))
    with pytest.raises(ValueError, match="a, b: need two non-empty lists"):
        ck.batched_gemm_ptr_array([], [])
    with pytest.raises(ValueError, match="b\\[1\\]: shape"):
        ck.batched_gemm_ptr_array([fake((8, 8))] * 2, [fake((8, 8)), fake((8, 4))])


def test_stream_argument(fake):
    from course_kernels import _arrays
    like = _arrays.as_array(fake((1,)), "x")

    class TorchLikeStream:
        cuda_stream = 1234

    assert _arrays.resolve_stream(None, like) == 0
    assert _arrays.resolve_stream(77, like) == 77
    assert _arrays.resolve_stream(TorchLikeStream(), like) == 1234
    with pytest.raises(TypeError, match="stream: expected an int handle"):
        ck.softmax(fake((4, 8)), out=fake((4, 8)), stream="default")


def test_transposed_views_are_detected(fake):
    from course_kernels import _arrays
    from course_kernels.ops import _operand_layout
    row_major = _arrays.as_array(fake((3, 8, 16)), "a")
    assert _operand_layout(row_major) == (False, 16)
    col_major = _arrays.as_array(fake((3, 8, 16), strides=(512, 4, 32)), "a")  # a K x M matrix read as A^T
    assert _operand_layout(col_major) == (True, 8)
    padded = _arrays.as_array(fake((8, 16), strides=(96, 4)), "a")
    assert _operand_layout(padded) == (False, 24)


def test_cuda_errors_cross_the_boundary():
    """Without a device, an allocation fails as NoGpuError saying so; with one, it works."""
    from conftest import gpu_reason
    if gpu_reason() is None:
        arr = ck.device_array((4,), data=bytes(16))
        assert arr.tolist() == [0.0] * 4
        return
    with pytest.raises(ck.NoGpuError) as e:
        ck.device_array((4,))
    lines = str(e.value).splitlines()
    assert lines[0].startswith("[solution] no NVIDIA GPU found"), lines
    assert lines[1].startswith("CUDA error cuda"), lines  # the runtime's own error, on the next line
    assert "cudaMalloc" in str(e.value)
    assert isinstance(e.value, ck.CudaError)


@pytest.fixture
def no_allocation(monkeypatch):
    """Makes any device allocation by the package fail the test."""
    from course_kernels import _arrays

    def refuse(*args, **kwargs):
        raise AssertionError("a device allocation was attempted before the arguments were checked")

    monkeypatch.setattr(_arrays, "empty", refuse)
    monkeypatch.setattr(_arrays.DeviceArray, "__init__", refuse)


@pytest.mark.parametrize("impl", IMPLS)
def test_step_names_are_checked_before_anything_is_allocated(fake, no_allocation, impl):
    """The lesson's promise: step="nope" is rejected before any launch -- and before the
    outputs and workspace are allocated, so it says so on a machine without a GPU too."""
    f32, bf16 = (lambda *shape: fake(shape)), (lambda *shape: fake(shape, "<V2"))  # noqa: E731
    s = (1, 2, 16, 64)
    calls = {
        "l2_norm": lambda step: ck.l2_norm(f32(64), step=step, impl=impl),
        "dot": lambda step: ck.dot(f32(64), f32(64), step=step, impl=impl),
        "softmax": lambda step: ck.softmax(f32(4, 8), step=step, impl=impl),
        "matmul": lambda step: ck.matmul(f32(4, 4), f32(4, 4), step=step, impl=impl),
        "matmul_tc": lambda step: ck.matmul_tc(bf16(16, 16), bf16(16, 16), step=step, impl=impl),
        "batched_gemm": lambda step: ck.batched_gemm(f32(2, 8, 8), f32(2, 8, 8), step=step, impl=impl),
        "batched_gemm_ptr_array": lambda step: ck.batched_gemm_ptr_array([f32(8, 8)], [f32(8, 8)], step=step,
                                                                         impl=impl),
        "attention": lambda step: ck.attention(f32(*s), f32(*s), f32(*s), step=step, impl=impl),
        "attention_bf16": lambda step: ck.attention(bf16(*s), bf16(*s), bf16(*s), step=step, impl=impl),
        "softmax_backward": lambda step: ck.softmax_backward(f32(4, 8), f32(4, 8), step=step, impl=impl),
        "linear_backward": lambda step: ck.linear_backward(f32(8, 4), f32(4, 8), f32(8, 8), step=step, impl=impl),
        "attention_backward": lambda step: ck.attention_backward(
            f32(*s), f32(*s), f32(*s), f32(*s), f32(*s), f32(1, 2, 16), step=step, impl=impl),
        "attention_backward_bf16": lambda step: ck.attention_backward(
            bf16(*s), bf16(*s), bf16(*s), bf16(*s), bf16(*s), f32(1, 2, 16), step=step, impl=impl),
    }
    for op, call in calls.items():
        table = "batched_gemm" if op == "batched_gemm_ptr_array" else op
        with pytest.raises(ck.InvalidArgumentError, match=f"argument 'step' = \"nope\": is not a step of {table}; "
                                                          "the steps are: "):
            call("nope")
    with pytest.raises(TypeError, match="step: expected a step name"):
        calls["softmax"](3)


@pytest.mark.parametrize("impl", IMPLS)
def test_dtypes_and_shapes_are_checked_before_anything_is_allocated(fake, no_allocation, impl):
    s, kv = (1, 4, 100, 64), (1, 2, 100, 64)  # grouped-query: 2 kv heads
    q = lambda dt="<V2", shape=s: fake(shape, dt)  # noqa: E731
    lse = fake((1, 4, 100))
    backward = lambda **kw: ck.attention_backward(  # noqa: E731
        kw.get("q", q()), kw.get("k", q(shape=kv)), q(shape=kv), kw.get("o", q()), kw.get("dout", q()),
        kw.get("lse", lse), impl=impl, step=kw.get("step"))
    with pytest.raises(TypeError, match="o: dtype float32, but q is bfloat16; q, k, v, o and dout share one dtype"):
        backward(o=q("<f4"))
    with pytest.raises(TypeError, match="dout: dtype float32, but q is bfloat16"):
        backward(dout=q("<f4"))
    with pytest.raises(TypeError, match="k: dtype float32, but q is bfloat16"):
        backward(k=q("<f4", kv))
    with pytest.raises(TypeError, match="lse: dtype bfloat16, expected float32"):
        backward(lse=fake((1, 4, 100), "<V2"))
    with pytest.raises(TypeError, match="q: dtype typestr '<f8', expected float32 or bfloat16"):
        backward(q=q("<f8"))
    with pytest.raises(ValueError, match=r"dout: shape \(1, 4, 99, 64\), expected q's shape"):
        backward(dout=q(shape=(1, 4, 99, 64)))
    with pytest.raises(ValueError, match=r"lse: shape \(1, 4, 99\), expected \[B, H, N_q\]"):
        backward(lse=fake((1, 4, 99)))
    # A step of the other dtype's table is named as such.
    with pytest.raises(ck.InvalidArgumentError, match=r"is not a step of attention_backward_bf16; the steps are: "
                                                      r"tc_mma,tc_pipelined,tc_deterministic,tc_split_dq,tc_wgmma,tc_wgmma_deterministic,tc_wgmma_split_dq "
                                                      r"\(step flash takes float32 tensors; these are bfloat16\)"):
        backward(step="flash")
    with pytest.raises(ck.InvalidArgumentError, match="is not a step of attention_backward;.*takes bfloat16"):
        ck.attention_backward(*(q("<f4") for _ in range(5)), lse, step="tc_pipelined", impl=impl)
    with pytest.raises(ck.InvalidArgumentError, match="is not a step of attention;.*takes bfloat16"):
        ck.attention(q("<f4"), q("<f4"), q("<f4"), step="tc_flash2", impl=impl)
    # The forward checks the backward's step too, so that a wrong name does not wait for backward().
    with pytest.raises(ck.InvalidArgumentError, match="backward_step: .*\"flash\": is not a step of "
                                                      "attention_backward_bf16"):
        ck.attention(q(), q(), q(), backward_step="flash", impl=impl)
    with pytest.raises(TypeError, match="backward_step: expected a step name"):
        ck.attention(q(), q(), q(), backward_step=1, impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
def test_bf16_attention_backward_reaches_its_validation(fake, impl):
    """With every output and the workspace given, the C++ validation of the bf16 overload runs."""
    s, kv = (1, 4, 100, 64), (1, 2, 100, 64)
    lib = ck.library(impl)
    need = lib.workspace_bytes("course_attention_backward_bf16_workspace_bytes", b"tc_pipelined", 1, 4, 100, 100, 64)
    wider = lib.workspace_bytes("course_attention_backward_bf16_workspace_bytes", b"tc_pipelined", 1, 4, 100, 100, 128)
    assert need >= 1 * 4 * 100 * 64 * 4 and wider > need  # an fp32 dQ accumulator, growing with head_dim
    with pytest.raises(ck.InvalidArgumentError, match="attention_backward_bf16: argument 'step' = \"flash\""):
        lib.workspace_bytes("course_attention_backward_bf16_workspace_bytes", b"flash", 1, 4, 100, 100, 64)
    with pytest.raises(ck.InvalidArgumentError, match="attention_backward: argument 'step' = \"tc_mma\""):
        lib.workspace_bytes("course_attention_backward_workspace_bytes", b"tc_mma", 1, 4, 100, 100)

    def call(shape=s, kv_shape=kv, ws=need, **kw):
        t = lambda sh: fake(sh, "<V2")  # noqa: E731
        ck.attention_backward(t(shape), t(kv_shape), t(kv_shape), t(shape), t(shape), fake(shape[:3]),
                              out=(t(shape), t(kv_shape), t(kv_shape)), workspace=fake((ws,), "|u1"), impl=impl,
                              **kw)

    if not ck.available("attention_backward_bf16", impl):
        with pytest.raises(ck.StubNotImplementedError, match="module04_training"):
            call()
        return
    with pytest.raises(ck.InvalidArgumentError, match="argument 'head_dim' = 32: must be 64 or 128"):
        call((1, 4, 100, 32), (1, 2, 100, 32))
    with pytest.raises(ck.InvalidArgumentError, match="argument 'workspace_bytes' = 100: must be >= "):
        call(ws=100)
    with pytest.raises(ck.InvalidArgumentError, match="argument 'q_strides.seq' = 68"):
        t = lambda sh, st=None: fake(sh, "<V2", strides=st)  # noqa: E731
        ck.attention_backward(t(s, (2 * 4 * 100 * 68, 2 * 100 * 68, 2 * 68, 2)), t(kv), t(kv), t(s), t(s),
                              fake(s[:3]), out=(t(s), t(kv), t(kv)), workspace=fake((need,), "|u1"), impl=impl)


def test_without_a_gpu_an_op_says_so(fake):
    """Arguments that pass every check, no out=: the first allocation says there is no GPU
    (not "cudaErrorInsufficientDriver"); with out= given, so does the launch."""
    from conftest import gpu_reason
    if gpu_reason() is None:
        return  # a GPU is here: the fake pointers must not reach a kernel
    with pytest.raises(ck.NoGpuError, match="^\\[solution\\] no NVIDIA GPU found"):
        ck.softmax(fake((4, 8)))
    with pytest.raises(ck.NoGpuError, match="^\\[solution\\] no NVIDIA GPU found"):
        ck.softmax(fake((4, 8)), out=fake((4, 8)), step="warp_per_row")


def test_autograd_pieces_without_a_gpu():
    """AttentionFunction is loaded (with torch) on first use; kernel_ready copies only what
    the kernels cannot read in place. Runs where torch is installed (CPU tensors suffice)."""
    assert "AttentionFunction" in ck.__all__
    with pytest.raises(AttributeError):
        ck.no_such_name  # noqa: B018
    torch = pytest.importorskip("torch")
    from course_kernels.autograd import AttentionFunction, kernel_ready
    assert ck.AttentionFunction is AttentionFunction
    x = torch.zeros(2, 100, 4, 64, dtype=torch.bfloat16)
    assert kernel_ready(x) is x
    assert kernel_ready(x.transpose(1, 2)) is not None and kernel_ready(x.transpose(1, 2)).data_ptr() == x.data_ptr()
    grad = torch.ones((), dtype=torch.bfloat16).expand(2, 4, 100, 64)  # what o.sum().backward() hands over
    ready = kernel_ready(grad)
    assert ready.is_contiguous() and ready.data_ptr() != grad.data_ptr()
    odd = torch.zeros(2, 4, 100, 72, dtype=torch.bfloat16)[..., :60]  # rows 72 apart, d = 60: fine (72 % 8 == 0)
    assert kernel_ready(odd).data_ptr() == odd.data_ptr()
    skewed = torch.zeros(2 * 4 * 100 * 64 + 1, dtype=torch.bfloat16)[1:].view(2, 4, 100, 64)  # 2-byte offset
    assert kernel_ready(skewed).data_ptr() != skewed.data_ptr()


# ---- module 4: fused cross-entropy (self-contained block) -------------------------------

@pytest.mark.parametrize("impl", IMPLS)
def test_cross_entropy_arguments_are_checked_before_any_launch(impl):
    """The C++ validation, reached through course_cross_entropy with never-dereferenced
    addresses: each bad argument is named; the Python wrapper checks the step first."""
    from course_kernels.ops import _cross_entropy_fn
    lib = ck.library(impl)
    fn = _cross_entropy_fn(lib)
    base = 1 << 40
    good = dict(step=b"row_on_chip", bf16=0, logits=base, targets=base + (1 << 32), losses=base + (2 << 32),
                mean=base + (3 << 32), count=base + (4 << 32), dlogits=base + (5 << 32), rows=16, vocab=84,
                ldl=88, lddl=88, ignore=-100, dloss=1.0)

    def call(**bad):
        a = dict(good, **bad)
        status = fn(a["step"], a["bf16"], a["logits"], a["targets"], a["losses"], a["mean"], a["count"],
                    a["dlogits"], a["rows"], a["vocab"], a["ldl"], a["lddl"], a["ignore"], a["dloss"], None)
        return status, lib.last_error()

    for bad, needle in [({"vocab": 0}, "'vocab' = 0"), ({"rows": -1}, "'rows' = -1"), ({"ldl": 80}, "'ldl' = 80"),
                        ({"lddl": 3}, "'lddl' = 3"), ({"logits": None}, "'logits' = nullptr"),
                        ({"mean": None}, "'loss_mean' = nullptr"), ({"dlogits": base + 64}, "overlaps logits"),
                        ({"dloss": float("nan")}, "'dloss'"), ({"step": b"fastest"}, "'step' = \"fastest\""),
                        ({"logits": base + 2}, "'logits'")]:
        status, message = call(**bad)
        assert status != 0 and needle in message, (bad, message)
    with pytest.raises(ck.InvalidArgumentError, match="is not a step of cross_entropy"):
        ck.cross_entropy(None, None, step="nope", impl=impl)


# ---- module 4's AdamW and GELU, module 1's matmul_tc options (course_adamw, course_gelu_*,
# course_matmul_tc_ex): names, dtypes, shapes and step names checked before anything is
# allocated; the C++ validation's messages through the boundary ------------------------

import ctypes  # noqa: E402  (this block is self-contained)


def _adamw_lists(fake, shapes=((4, 8), (3,)), typestr="<f4"):
    return [[fake(s, typestr) for s in shapes] for _ in range(4)]


def test_new_ops_are_listed_with_their_steps():
    for impl in IMPLS:
        ops = ck.ops(impl)
        assert {"adamw", "gelu", "gelu_backward"} <= set(ops)
        assert [s for s, _ in ck.steps("adamw", impl)] == ["per_tensor", "multi_tensor"]
        assert ck.steps("gelu", impl) == ck.steps("gelu_backward", impl)
        assert [s for s, _ in ck.steps("gelu", impl)] == ["scalar", "vectorized"]
    assert ck.DEFAULT_STEPS["adamw"] == "multi_tensor" and ck.DEFAULT_STEPS["gelu"] == "vectorized"
    for name in ("adamw", "gelu", "gelu_backward", "linear", "matmul_tc_ex"):
        assert name in ck.__all__ and callable(getattr(ck, name))


@pytest.mark.parametrize("impl", IMPLS)
def test_new_ops_check_names_dtypes_and_shapes_before_anything_is_allocated(fake, no_allocation, impl):
    f32, bf16 = (lambda *shape: fake(shape)), (lambda *shape: fake(shape, "<V2"))  # noqa: E731
    # Step names, against each op's table.
    calls = {
        "adamw": lambda step: ck.adamw(*_adamw_lists(fake), t=1, step=step, impl=impl),
        "gelu": lambda step: ck.gelu(f32(4, 8), step=step, impl=impl),
        "gelu_backward": lambda step: ck.gelu_backward(f32(4, 8), f32(4, 8), step=step, impl=impl),
        "matmul_tc": lambda step: ck.linear(bf16(16, 16), bf16(32, 16), step=step, impl=impl),
    }
    for op, call in calls.items():
        with pytest.raises(ck.InvalidArgumentError, match=f"argument 'step' = \"nope\": is not a step of {op}; "
                                                          "the steps are: "):
            call("nope")
    with pytest.raises(ck.InvalidArgumentError, match="is not a step of matmul_tc"):
        ck.matmul_tc_ex(bf16(16, 16), bf16(16, 32), step="nope", impl=impl)
    with pytest.raises(TypeError, match="step: expected a step name"):
        calls["gelu"](2)

    # AdamW: lists, dtypes, shapes.
    p, g, m, v = _adamw_lists(fake)
    with pytest.raises(ValueError, match="params: an empty list"):
        ck.adamw([], [], [], [], t=1, impl=impl)
    with pytest.raises(ValueError, match="grads: 1 entries, but params has 2"):
        ck.adamw(p, g[:1], m, v, t=1, impl=impl)
    with pytest.raises(TypeError, match="exp_avgs: expected a list of arrays"):
        ck.adamw(p, g, "m", v, t=1, impl=impl)
    with pytest.raises(TypeError, match=r"grads\[1\]: dtype bfloat16, expected float32"):
        ck.adamw(p, [g[0], fake((3,), "<V2")], m, v, t=1, impl=impl)
    with pytest.raises(ValueError, match=r"exp_avg_sqs\[0\]: shape \(8, 4\), expected params\[0\]'s shape"):
        ck.adamw(p, g, m, [fake((8, 4)), v[1]], t=1, impl=impl)
    with pytest.raises(ValueError, match=r"params\[0\]: must be contiguous"):
        ck.adamw([fake((4, 8), strides=(64, 4)), p[1]], g, m, v, t=1, impl=impl)
    with pytest.raises(ValueError, match=r"exp_avgs\[1\]: the output array is read-only"):
        ck.adamw(p, g, [m[0], fake((3,), readonly=True)], v, t=1, impl=impl)
    with pytest.raises(TypeError, match=r"bf16_copies\[0\]: dtype float32, expected bfloat16"):
        ck.adamw(p, g, m, v, t=1, bf16_copies=[fake((4, 8)), None], impl=impl)
    with pytest.raises(ValueError, match=r"bf16_copies\[1\]: shape \(4,\), expected params\[1\]'s shape"):
        ck.adamw(p, g, m, v, t=1, bf16_copies=[None, fake((4,), "<V2")], impl=impl)
    with pytest.raises(ValueError, match="decay_mask: 3 entries, but params has 2"):
        ck.adamw(p, g, m, v, t=1, decay_mask=[True, False, True], impl=impl)
    with pytest.raises(TypeError, match="t: expected the step number"):
        ck.adamw(p, g, m, v, t=1.0, impl=impl)
    with pytest.raises(TypeError, match="betas: expected"):
        ck.adamw(p, g, m, v, t=1, betas=0.9, impl=impl)
    with pytest.raises(TypeError, match="norm_out: dtype bfloat16, expected float32"):
        ck.adamw(p, g, m, v, t=1, norm_out=fake((1,), "<V2"), impl=impl)

    # GELU.
    with pytest.raises(TypeError, match="x: dtype typestr '<f8', expected float32 or bfloat16"):
        ck.gelu(fake((4, 8), "<f8"), impl=impl)
    with pytest.raises(ValueError, match="x: must be contiguous"):
        ck.gelu(fake((4, 8), strides=(64, 4)), impl=impl)
    with pytest.raises(TypeError, match="out: dtype float32, expected bfloat16"):
        ck.gelu(bf16(4, 8), out=f32(4, 8), impl=impl)
    with pytest.raises(TypeError, match="dy: dtype bfloat16, but x is float32"):
        ck.gelu_backward(f32(4, 8), bf16(4, 8), impl=impl)
    with pytest.raises(ValueError, match=r"dy: shape \(4, 9\), expected x's shape"):
        ck.gelu_backward(f32(4, 8), f32(4, 9), impl=impl)
    with pytest.raises(ValueError, match="accumulate: adds into dx"):
        ck.gelu_backward(f32(4, 8), f32(4, 8), accumulate=True, impl=impl)

    # The tensor-core matmul's options.
    with pytest.raises(TypeError, match="x: dtype float32, expected bfloat16"):
        ck.linear(f32(16, 16), bf16(32, 16), impl=impl)
    with pytest.raises(ValueError, match=r"w: shape \(32, 8\) does not match x's \(16, 16\)"):
        ck.linear(bf16(16, 16), bf16(32, 8), impl=impl)
    with pytest.raises(TypeError, match="bias: dtype bfloat16, expected float32"):
        ck.linear(bf16(16, 16), bf16(32, 16), bf16(32), impl=impl)
    with pytest.raises(ValueError, match=r"bias: shape \(16,\), expected \[N\]"):
        ck.linear(bf16(16, 16), bf16(32, 16), f32(16), impl=impl)
    with pytest.raises(TypeError, match="residual: dtype float32, expected bfloat16"):
        ck.linear(bf16(16, 16), bf16(32, 16), residual=f32(16, 32), impl=impl)
    with pytest.raises(TypeError, match="out_dtype: 'float16' is not float32 or bfloat16"):
        ck.linear(bf16(16, 16), bf16(32, 16), out_dtype="float16", impl=impl)
    with pytest.raises(ValueError, match="pre_gelu_out: the pre-activation is only written with gelu=True"):
        ck.linear(bf16(16, 16), bf16(32, 16), return_pre_gelu=True, impl=impl)
    with pytest.raises(ValueError, match="accumulate: adds into C"):
        ck.matmul_tc_ex(bf16(16, 16), bf16(16, 32), accumulate=True, impl=impl)
    with pytest.raises(ValueError, match="accumulate: needs a float32 output"):
        ck.matmul_tc_ex(bf16(16, 16), bf16(16, 32), accumulate=True, out=bf16(16, 32), impl=impl)
    with pytest.raises(ValueError, match="residual: not with accumulate"):
        ck.matmul_tc_ex(bf16(16, 16), bf16(16, 32), accumulate=True, residual=f32(16, 32), out=f32(16, 32), impl=impl)
    with pytest.raises(ValueError, match="pre_gelu_out: row stride 40 differs from out's 32"):
        ck.linear(bf16(16, 16), bf16(32, 16), gelu=True, out=bf16(16, 32),
                  pre_gelu_out=fake((16, 32), "<V2", strides=(80, 2)), impl=impl)
    with pytest.raises(ValueError, match="a: one of the last two dimensions must be contiguous"):
        ck.matmul_tc_ex(fake((16, 16), "<V2", strides=(64, 4)), bf16(16, 32), impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
def test_new_ops_validation_crosses_the_boundary(fake, impl):
    """Every output and the workspace given: the C++ validation runs, before any launch."""
    lib = ck.library(impl)
    p, g, m, v = _adamw_lists(fake)
    ws = fake((1 << 16,), "|u1")

    def adamw(**kw):
        lists = kw.pop("lists", (p, g, m, v))
        ck.adamw(*lists, impl=impl, workspace=kw.pop("workspace", ws), **{"t": 1, **kw})

    with pytest.raises(ck.InvalidArgumentError, match=r"\[%s\] adamw: argument 't' = 0: must be >= 1" % impl):
        adamw(t=0)
    with pytest.raises(ck.InvalidArgumentError, match="adamw: argument 'beta2' = 1: must be in \\[0, 1\\)"):
        adamw(betas=(0.9, 1.0))
    with pytest.raises(ck.InvalidArgumentError, match="adamw: argument 'max_norm' = inf: must be finite"):
        adamw(max_norm=float("inf"))
    with pytest.raises(ck.InvalidArgumentError, match="adamw: argument 'workspace_bytes' = 8: must be >= "
                                                      "adamw_workspace_bytes"):
        adamw(workspace=fake((8,), "|u1"))
    with pytest.raises(ck.InvalidArgumentError, match=r"adamw: argument 'tensors\[1\].params' = 0x[0-9a-f]+: must be "
                                                      "aligned to 4 bytes"):
        adamw(lists=([p[0], fake((3,), ptr=(1 << 40) + 2)], g, m, v))
    with pytest.raises(ck.InvalidArgumentError, match=r"adamw: argument 'tensors\[\d\]\.\w+' .*overlaps "
                                                      r"tensors\[\d\]\.\w+"):
        adamw(lists=(p, g, [m[0], v[1]], v))  # a first moment that is also a second moment
    # The workspace query: a table entry per tensor and a partial sum per 16384-element chunk.
    sizes = lambda *n: (ctypes.c_int64 * len(n))(*n)  # noqa: E731
    small = lib.workspace_bytes("course_adamw_workspace_bytes", b"multi_tensor", 2, sizes(10, 10))
    big = lib.workspace_bytes("course_adamw_workspace_bytes", b"multi_tensor", 2, sizes(10, 16384 * 100))
    assert big - small >= 99 * 4
    assert lib.workspace_bytes("course_adamw_workspace_bytes", b"per_tensor", 2, sizes(10, 16384 * 100)) == \
        lib.workspace_bytes("course_adamw_workspace_bytes", b"per_tensor", 2, sizes(10, 10))
    with pytest.raises(ck.InvalidArgumentError, match=r"adamw_workspace_bytes: argument 'sizes\[1\]' = -1"):
        lib.workspace_bytes("course_adamw_workspace_bytes", b"multi_tensor", 2, sizes(10, -1))
    with pytest.raises(ck.InvalidArgumentError, match="adamw_workspace_bytes: argument 'sizes' = nullptr"):
        lib.workspace_bytes("course_adamw_workspace_bytes", b"multi_tensor", 2, None)
    with pytest.raises(ck.InvalidArgumentError, match="adamw: argument 'params' = nullptr"):
        lib.call("course_adamw", b"multi_tensor", 2, None, None, None, None, None, sizes(1, 1), None, 1e-3, 0.9,
                 0.999, 1e-8, 0.0, 1, 0.0, None, None, 0, None)

    # GELU: alignment and the one allowed overlap (exact in place).
    x = fake((64,))
    with pytest.raises(ck.InvalidArgumentError, match=r"gelu_forward: argument 'y' = 0x[0-9a-f]+: must be aligned "
                                                      "to 4 bytes"):
        ck.gelu(x, out=fake((64,), ptr=(1 << 40) + 6), impl=impl)
    shifted = fake((64,), ptr=x.__cuda_array_interface__["data"][0] + 16)
    with pytest.raises(ck.InvalidArgumentError, match="gelu_forward: argument 'y' = .*overlaps x"):
        ck.gelu(x, out=shifted, impl=impl)
    with pytest.raises(ck.InvalidArgumentError, match="gelu_backward: argument 'dx' = .*overlaps x"):
        ck.gelu_backward(x, fake((64,)), out=x, impl=impl)
    with pytest.raises(ck.InvalidArgumentError, match="gelu_forward: argument 'dtype' = 2"):
        lib.call("course_gelu_forward", b"vectorized", 1 << 40, 2 << 40, 8, 2, None)

    # The tensor-core matmul's options.
    bf16 = lambda *shape, **kw: fake(shape, "<V2", **kw)  # noqa: E731
    with pytest.raises(ck.InvalidArgumentError, match="matmul_tc: argument 'lda' = 12: must be a multiple of 8"):
        ck.linear(bf16(16, 12), bf16(32, 12), out=bf16(16, 32), impl=impl)
    with pytest.raises(ck.InvalidArgumentError, match="matmul_tc: argument 'ldb' = 12: must be a multiple of 8"):
        ck.linear(bf16(16, 8, strides=(32, 2)), bf16(32, 8, strides=(24, 2)), out=bf16(16, 32), impl=impl)
    c = bf16(16, 32)
    with pytest.raises(ck.InvalidArgumentError, match="matmul_tc: argument 'epilogue.residual' = .*overlaps the "
                                                      "output without being it"):
        ck.linear(bf16(16, 16), bf16(32, 16), residual=fake((16, 32), "<V2", strides=(80, 2),
                                                            ptr=c.__cuda_array_interface__["data"][0]),
                  out=c, impl=impl)
    with pytest.raises(ck.UnsupportedError, match="matmul_tc step wmma .*does not take TcMatmulArgs::b_transposed"):
        ck.linear(bf16(16, 16), bf16(32, 16), step="wmma", out=bf16(16, 32), impl=impl)
    with pytest.raises(ck.UnsupportedError, match="does not take TcMatmulArgs::a_transposed"):
        ck.matmul_tc_ex(bf16(16, 16, strides=(2, 32)), bf16(16, 32), step="wmma", out=fake((16, 32)), impl=impl)
    with pytest.raises(ck.InvalidArgumentError, match="matmul_tc: argument 'epilogue.pre_gelu' = .*is only written "
                                                      "with epilogue.gelu"):
        lib.call("course_matmul_tc_ex", b"mma_sync", 1 << 40, 2 << 40, None, 3 << 40, 16, 16, 16, 16, 16, 16, 0, 0,
                 None, 4 << 40, 0, None, 0, 0, None)
    with pytest.raises(ck.InvalidArgumentError, match="matmul_tc: argument 'c' = nullptr: while c_bf16 is null too: give "
                                                      "one output"):
        lib.call("course_matmul_tc_ex", b"mma_sync", 1 << 40, 2 << 40, None, None, 16, 16, 16, 16, 16, 16, 0, 0,
                 None, None, 0, None, 0, 0, None)


def test_new_ops_without_a_gpu_say_so(fake):
    """Arguments that pass every check: the first CUDA call says there is no GPU."""
    from conftest import gpu_reason
    if gpu_reason() is None:
        return  # a GPU is here: the fake pointers must not reach a kernel
    p, g, m, v = _adamw_lists(fake)
    for call in (lambda: ck.adamw(p, g, m, v, t=1, workspace=fake((1 << 16,), "|u1")),
                 lambda: ck.gelu(fake((64,)), out=fake((64,))),
                 lambda: ck.gelu_backward(fake((64,)), fake((64,)), out=fake((64,)), accumulate=True),
                 lambda: ck.linear(fake((16, 16), "<V2"), fake((32, 16), "<V2"), fake((32,)), gelu=True,
                                   out=fake((16, 32), "<V2"))):
        with pytest.raises(ck.NoGpuError, match="^\\[solution\\] no NVIDIA GPU found"):
            call()


# ---- module 4's LayerNorm (course_layer_norm_forward, course_layer_norm_backward and its
# workspace query; ck.layer_norm, ck.layer_norm_backward): names, dtypes and shapes checked
# in Python before anything is allocated; the C++ validation's messages through the boundary

def _ln_raw_forward(lib, **bad):
    """course_layer_norm_forward on never-dereferenced addresses, with `bad` replacing arguments."""
    base = 1 << 40
    a = dict(step=b"vectorized", bf16=0, x=base, y=base + (1 << 32), gamma=base + (2 << 32),
             beta=base + (3 << 32), mean=base + (4 << 32), rstd=base + (5 << 32), rows=16, C=384, ldx=384, ldy=384,
             eps=1e-5)
    a.update(bad)
    lib.call("course_layer_norm_forward", a["step"], a["bf16"], a["x"], a["y"], a["gamma"], a["beta"], a["mean"],
             a["rstd"], a["rows"], a["C"], a["ldx"], a["ldy"], a["eps"], None)


def _ln_raw_backward(lib, **bad):
    base = 1 << 40
    a = dict(step=b"atomic_params", bf16=1, x=base, dy=base + (1 << 32), dx=base + (2 << 32),
             gamma=base + (3 << 32), mean=base + (4 << 32), rstd=base + (5 << 32), dgamma=base + (6 << 32),
             dbeta=base + (7 << 32), rows=16, C=384, ldx=384, lddy=384, lddx=384, acc_dx=0, acc_p=0, ws=None,
             ws_bytes=0)
    a.update(bad)
    lib.call("course_layer_norm_backward", a["step"], a["bf16"], a["x"], a["dy"], a["dx"], a["gamma"], a["mean"],
             a["rstd"], a["dgamma"], a["dbeta"], a["rows"], a["C"], a["ldx"], a["lddy"], a["lddx"], a["acc_dx"],
             a["acc_p"], a["ws"], a["ws_bytes"], None)


def test_layer_norm_is_listed_with_its_steps():
    for impl in IMPLS:
        ops = ck.ops(impl)
        assert {"layer_norm", "layer_norm_backward"} <= set(ops)
        assert [s for s, _ in ck.steps("layer_norm", impl)] == ["thread_per_row", "warp_per_row", "vectorized",
                                                                "pipelined"]
        assert [s for s, _ in ck.steps("layer_norm_backward", impl)] == ["atomic_params", "partial_sums", "pipelined"]
        assert "nondeterministic" in dict(ck.steps("layer_norm_backward", impl))["atomic_params"]
    assert ck.DEFAULT_STEPS["layer_norm"] == "pipelined"
    assert ck.DEFAULT_STEPS["layer_norm_backward"] == "pipelined"
    for name in ("layer_norm", "layer_norm_backward"):
        assert name in ck.__all__ and callable(getattr(ck, name))


@pytest.mark.parametrize("impl", IMPLS)
def test_layer_norm_checks_names_dtypes_and_shapes_before_anything_is_allocated(fake, no_allocation, impl):
    f32, bf16 = (lambda *shape: fake(shape)), (lambda *shape: fake(shape, "<V2"))  # noqa: E731
    x, g, b = f32(16, 384), f32(384), f32(384)
    st = f32(16)
    fwd = lambda **kw: ck.layer_norm(kw.pop("x", x), kw.pop("gamma", g), kw.pop("beta", b), impl=impl, **kw)  # noqa
    bwd = lambda **kw: ck.layer_norm_backward(kw.pop("x", x), kw.pop("dy", f32(16, 384)), kw.pop("mean", st),  # noqa
                                              kw.pop("rstd", st), kw.pop("gamma", g), impl=impl, **kw)
    for op, call in (("layer_norm", fwd), ("layer_norm_backward", bwd)):
        with pytest.raises(ck.InvalidArgumentError, match=f"argument 'step' = \"nope\": is not a step of {op}; "
                                                          "the steps are: "):
            call(step="nope")
        with pytest.raises(TypeError, match="step: expected a step name"):
            call(step=1)
    with pytest.raises(ck.InvalidArgumentError, match="is not a step of layer_norm; the steps are: thread_per_row"):
        fwd(step="partial_sums")  # a backward step asked of the forward

    # Forward.
    with pytest.raises(TypeError, match="x: dtype typestr '<f8', expected float32 or bfloat16"):
        fwd(x=fake((16, 384), "<f8"))
    with pytest.raises(ValueError, match="x: expected a 2-D array"):
        fwd(x=f32(2, 8, 384))
    with pytest.raises(ValueError, match="x: the last dimension must be contiguous"):
        fwd(x=fake((16, 384), strides=(4, 64)))
    with pytest.raises(TypeError, match="gamma: dtype bfloat16, expected float32"):
        fwd(x=bf16(16, 384), gamma=bf16(384))  # bf16 activations keep fp32 parameters
    with pytest.raises(ValueError, match=r"gamma: shape \(768,\), expected \[C\] \(C from x\)"):
        fwd(gamma=f32(768))
    with pytest.raises(ValueError, match="beta: must be contiguous"):
        fwd(beta=fake((384,), strides=(8,)))
    with pytest.raises(TypeError, match="out: dtype float32, expected bfloat16"):
        fwd(x=bf16(16, 384), out=f32(16, 384))
    with pytest.raises(ValueError, match=r"out: shape \(16, 385\), expected the result's shape"):
        fwd(out=f32(16, 385))
    with pytest.raises(ValueError, match="mean_out, rstd_out: give both or neither"):
        fwd(mean_out=st)
    with pytest.raises(ValueError, match=r"rstd_out: shape \(8,\), expected \[rows\]"):
        fwd(mean_out=st, rstd_out=f32(8))
    with pytest.raises(ValueError, match="rstd_out: the output array is read-only"):
        fwd(mean_out=st, rstd_out=fake((16,), readonly=True))
    for eps in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="eps: .*expected a finite value >= 0"):
            fwd(eps=eps)

    # Backward.
    with pytest.raises(TypeError, match="dy: dtype bfloat16, but x is float32"):
        bwd(dy=bf16(16, 384))
    with pytest.raises(ValueError, match=r"dy: shape \(16, 768\), expected x's shape"):
        bwd(dy=f32(16, 768))
    with pytest.raises(ValueError, match=r"mean: shape \(8,\), expected \[rows\] \(rows from x\)"):
        bwd(mean=f32(8))
    with pytest.raises(TypeError, match="rstd: dtype bfloat16, expected float32"):
        bwd(rstd=bf16(16))
    with pytest.raises(TypeError, match="gamma: dtype bfloat16, expected float32"):
        bwd(x=bf16(16, 384), dy=bf16(16, 384), gamma=bf16(384))
    with pytest.raises(ValueError, match="accumulate_dx: adds into dx"):
        bwd(accumulate_dx=True)
    with pytest.raises(ValueError, match="accumulate_dparams: adds into dgamma and dbeta"):
        bwd(accumulate_dparams=True, dgamma=f32(384))
    with pytest.raises(TypeError, match="dx: dtype float32, expected bfloat16"):
        bwd(x=bf16(16, 384), dy=bf16(16, 384), dx=f32(16, 384))
    with pytest.raises(ValueError, match=r"dbeta: shape \(16,\), expected \[C\]"):
        bwd(dbeta=f32(16))


@pytest.mark.parametrize("impl", IMPLS)
def test_layer_norm_validation_crosses_the_boundary(fake, impl):
    """Every output (and the workspace) given: the C++ validation runs, before any launch."""
    lib = ck.library(impl)
    f32 = lambda *shape, **kw: fake(shape, **kw)  # noqa: E731
    x, g, b, mean, rstd = f32(16, 384), f32(384), f32(384), f32(16), f32(16)
    stats = dict(mean_out=mean, rstd_out=rstd)
    with pytest.raises(ck.InvalidArgumentError, match=r"\[%s\] layer_norm_forward: argument 'ldx' = 256: must be "
                                                      ">= C" % impl):
        ck.layer_norm(f32(16, 384, strides=(1024, 4)), g, b, out=f32(16, 384), impl=impl, **stats)
    xp = x.__cuda_array_interface__["data"][0]
    with pytest.raises(ck.InvalidArgumentError, match="layer_norm_forward: argument 'y' = .*overlaps x"):
        ck.layer_norm(x, g, b, out=x, impl=impl, **stats)
    with pytest.raises(ck.InvalidArgumentError, match="layer_norm_forward: argument 'y' = .*overlaps x"):
        ck.layer_norm(x, g, b, out=f32(16, 384, ptr=xp + 64), impl=impl, **stats)
    with pytest.raises(ck.InvalidArgumentError, match="layer_norm_forward: argument 'mean' = .*overlaps rstd"):
        ck.layer_norm(x, g, b, out=f32(16, 384), mean_out=mean, rstd_out=mean, impl=impl)
    with pytest.raises(ck.InvalidArgumentError, match=r"layer_norm_forward: argument 'gamma' = 0x[0-9a-f]+: must be "
                                                      "aligned to 4 bytes"):
        ck.layer_norm(x, f32(384, ptr=(1 << 40) + 2), b, out=f32(16, 384), impl=impl, **stats)
    # Raw ABI: what Python cannot pass (a dtype flag out of range, negative sizes, null pointers).
    for bad, needle in [({"bf16": 2}, "argument 'bf16' = 2: must be 0"), ({"rows": -1}, "argument 'rows' = -1"),
                        ({"C": 0}, "argument 'C' = 0"), ({"eps": -1.0}, "argument 'eps' = -1"),
                        ({"x": None}, "argument 'x' = nullptr"), ({"rstd": None}, "argument 'rstd' = nullptr"),
                        ({"ldy": 100}, "argument 'ldy' = 100"), ({"step": b"fastest"}, "'step' = \"fastest\"")]:
        with pytest.raises(ck.InvalidArgumentError, match=needle):
            _ln_raw_forward(lib, **bad)

    # Backward.
    dy, dx, dg, db = f32(16, 384), f32(16, 384), f32(384), f32(384)
    outs = dict(dx=dx, dgamma=dg, dbeta=db)
    with pytest.raises(ck.InvalidArgumentError, match="layer_norm_backward: argument 'dx' = .*overlaps dy"):
        ck.layer_norm_backward(x, dy, mean, rstd, g, dx=dy, dgamma=dg, dbeta=db, step="atomic_params", impl=impl)
    with pytest.raises(ck.InvalidArgumentError, match="layer_norm_backward: argument 'dgamma' = .*overlaps dbeta"):
        ck.layer_norm_backward(x, dy, mean, rstd, g, dx=dx, dgamma=dg, dbeta=dg, step="atomic_params", impl=impl)
    with pytest.raises(ck.InvalidArgumentError, match="layer_norm_backward: argument 'dbeta' = .*overlaps gamma"):
        ck.layer_norm_backward(x, dy, mean, rstd, g, dx=dx, dgamma=dg, dbeta=g, step="atomic_params", impl=impl)
    need = lib.workspace_bytes("course_layer_norm_backward_workspace_bytes", b"partial_sums", 16, 384)
    assert need == 2 * 2 * 384 * 4  # 16 rows: 2 blocks of 8 rows, a dgamma and a dbeta partial each
    with pytest.raises(ck.InvalidArgumentError, match=f"layer_norm_backward: argument 'workspace_bytes' = "
                                                      f"{need - 4}: must be >= layer_norm_backward_workspace_bytes"):
        ck.layer_norm_backward(x, dy, mean, rstd, g, workspace=fake((need - 4,), "|u1"), impl=impl, **outs)
    ws = fake((need,), "|u1", ptr=(1 << 40) + 8)
    with pytest.raises(ck.InvalidArgumentError, match="layer_norm_backward: argument 'workspace' = .*must be "
                                                      "aligned to 16 bytes"):
        ck.layer_norm_backward(x, dy, mean, rstd, g, workspace=ws, impl=impl, **outs)
    with pytest.raises(ck.InvalidArgumentError, match="layer_norm_backward: argument 'lddy' = 200: must be >= C"):
        ck.layer_norm_backward(x, f32(16, 384, strides=(800, 4)), mean, rstd, g, step="atomic_params", impl=impl,
                               **outs)
    for bad, needle in [({"bf16": -1}, "argument 'bf16' = -1"), ({"dgamma": None}, "argument 'dgamma' = nullptr"),
                        ({"mean": None}, "argument 'mean' = nullptr"), ({"lddx": 3}, "argument 'lddx' = 3"),
                        ({"dx": (1 << 40) + 1}, "argument 'dx' = 0x[0-9a-f]+: must be aligned to 2 bytes"),
                        ({"step": b"partial_sums"}, "argument 'workspace_bytes' = 0: must be >=")]:
        with pytest.raises(ck.InvalidArgumentError, match=needle):
            _ln_raw_backward(lib, **bad)
    # The workspace query: partial_sums keeps at most 256 partials of 2 x C floats; atomic_params none.
    assert lib.workspace_bytes("course_layer_norm_backward_workspace_bytes", b"partial_sums", 16384, 768) == \
        256 * 2 * 768 * 4
    assert lib.workspace_bytes("course_layer_norm_backward_workspace_bytes", b"atomic_params", 16384, 768) == 0
    with pytest.raises(ck.InvalidArgumentError, match="is not a step of layer_norm_backward"):
        lib.workspace_bytes("course_layer_norm_backward_workspace_bytes", b"vectorized", 16, 384)


def test_layer_norm_without_a_gpu_says_so(fake):
    """Arguments that pass every check: the first CUDA call says there is no GPU."""
    from conftest import gpu_reason
    if gpu_reason() is None:
        return  # a GPU is here: the fake pointers must not reach a kernel
    x, g = fake((16, 384), "<V2"), fake((384,))
    for call in (lambda: ck.layer_norm(x, g, fake((384,)), out=fake((16, 384), "<V2"), mean_out=fake((16,)),
                                       rstd_out=fake((16,))),
                 lambda: ck.layer_norm_backward(x, fake((16, 384), "<V2"), fake((16,)), fake((16,)), g,
                                                dx=fake((16, 384), "<V2"), dgamma=fake((384,)), dbeta=fake((384,)),
                                                accumulate_dx=True, step="atomic_params")):
        with pytest.raises(ck.NoGpuError, match="^\\[solution\\] no NVIDIA GPU found"):
            call()
