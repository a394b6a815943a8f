#!/usr/bin/env python3
"""The PyTorch twin of module 4's GPT trainer (m04_gpt): the same model, the same initial
parameters, the same batches, the same optimizer -- and the first losses compared.

GPU machine only (PyTorch with CUDA). Usage:

    python3 scripts/gpt_data.py prepare
    build/module04_training/m04_gpt --steps 20 --dump-init build/gpt_init.bin --csv build/gpt_loss.csv --sample 0 \
        --dump-grads build/gpt_grads.bin
    python3 scripts/gpt_twin.py --init build/gpt_init.bin --course-csv build/gpt_loss.csv --grads build/gpt_grads.bin

    # the fp32 check mode: the same with --precision fp32 on both sides
    build/module04_training/m04_gpt --precision fp32 --steps 20 --dump-init build/gpt_init.bin \
        --csv build/gpt_loss.csv --sample 0 --dump-grads build/gpt_grads.bin
    python3 scripts/gpt_twin.py --precision fp32 --schedule-steps 20 --init build/gpt_init.bin \
        --course-csv build/gpt_loss.csv --grads build/gpt_grads.bin

The CTest GPU test m04_gpt_twin_check (scripts/gpt_twin_check.sh) runs both on a small
configuration of the lessons' fallback corpus.

What is shared with m04_gpt (demos/gpt.cpp, module04/gpt_model.hpp):
  - the initial parameters: --init is m04_gpt's --dump-init file, a 64-byte header (char
    magic[8] = "CRSGPTIN", int64 version = 1, vocab, context, layers, heads, d_model, step)
    then the fp32 tensors back to back in ParamLayout order (wte, wpe, per block ln1.w, ln1.b,
    attn.qkv.w, attn.qkv.b, attn.proj.w, attn.proj.b, ln2.w, ln2.b, mlp.fc.w, mlp.fc.b,
    mlp.proj.w, mlp.proj.b, then lnf.w, lnf.b), PyTorch's [out, in] shapes;
  - the batches: gpt_batch_offset(seed, split, step, b) = splitmix64 chain mod (n - T),
    ported below (the CPU test pins splitmix64(0) = 0xE220A8397B1DCDAF);
  - the optimizer: AdamW, decay on 2-D tensors only, warm-up + cosine (LrSchedule), global
    norm clipping; the defaults below are m04_gpt's.
--precision says which m04_gpt run the files come from and picks the twin's precision and
its tolerances (the loss of step k is the loss of the forward before update k, as m04_gpt's
CSV). TF32 is off in both (torch.backends.cuda.matmul.allow_tf32 = False, cudnn too): the
twin's "fp32" is true fp32, the reference of both rules below.

bf16 (the default): torch.autocast(bfloat16) around the forward (the course: bf16
activations, fp32 accumulation, fp32 master weights). Losses: step 1 (identical weights, one
bf16 forward each) within --tol-first (0.02) absolute, each of the first --steps within --tol
(0.05): the two runs round differently (bf16 GEMM outputs, attention's P, the residual stream
in bf16 on the course's side, fp32 on PyTorch's under autocast) and AdamW amplifies those
differences a little each step. Gradients: for every parameter, the course's relative L2
error against the twin's fp32 gradient (no autocast) must be at most --grad-factor (3, the
FlashAttention rule for a backward pass) times the twin's own bf16-autocast error, plus
--grad-floor (1e-3).

fp32 (m04_gpt --precision fp32): no autocast, SDPA's math backend (plain fp32 matmuls), so
both sides compute the same fp32 function and differ only in summation order and in the
last bit of exp/tanh/rsqrt. Losses: every one of the first --steps within --tol-fp32
(1e-4) RELATIVE, |course - twin| <= 1e-4 |twin|. Why 1e-4: one fp32 forward differs by a
few 1e-7 relative (the longest sums, K = 4C and the N = B*T rows of a dW, have ~sqrt(K)
eps ~ 1e-5 worst-case per element, far less in the mean loss); AdamW's first steps are
nearly sign(g) x lr, so elements whose gradient is within rounding of 0 may step apart,
but those barely move the loss (their gradient is ~0): after 20 steps the gap is expected
around 1e-6..1e-5, and 1e-4 leaves a factor of 10 while staying ~100x below the bf16
noise (~1e-2): a real bug (a missing term, a wrong transpose, a stale buffer) shows at
1e-3 or more. m04_gpt writes losses with 6 decimals (4e-7 relative at loss 1): no
quantization trouble. Gradients: every parameter's relative L2 error against the twin's
fp32 gradient at most --grad-tol-fp32 (1e-4), for the same reasons (expected ~1e-6; the
largest sums are the dW over N rows).

Gradients (--grads, m04_gpt's --dump-grads: step 1's fp32 gradients before clipping, the
--dump-init format with magic "CRSGPTGR"). --time: the twin's training step, eager and
under torch.compile.

The whole run's loss curve (--curve-csv): the twin trains --steps steps (the cosine's length
stays --schedule-steps: pass m04_gpt's --steps) and writes m04_gpt's --csv columns (step, lr,
loss, grad_norm, val_loss), the validation loss every --eval-every steps and at the last, the
mean over --eval-batches validation batches drawn as m04_gpt draws them (split 1, batch index
i as the step). With --course-csv of the same run, the losses of the first --compare-steps
steps are compared as above, the validation losses of both are printed side by side, and the
last one both have (the end of the run) must be within --tol-val (0.02, issue 28's target)
absolute. The default run, side by side (scripts/make_results.py plots the two curves from
docs/data/):

    build/module04_training/m04_gpt --dump-init build/gpt_init.bin --csv build/m04_gpt_curve.csv
    python3 scripts/gpt_twin.py --init build/gpt_init.bin --steps 2000 --course-csv build/m04_gpt_curve.csv \
        --curve-csv build/gpt_twin_curve.csv

Exit 1 on a disagreement, 2 on bad input (sys.exit with a message), 77
when PyTorch or its CUDA is missing (the skip code of the CTest test).
"""
import argparse
import csv
import math
import struct
import sys
from pathlib import Path

MASK = (1 << 64) - 1
SKIP = 77  # CTest's SKIP_RETURN_CODE of m04_gpt_twin_check


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def batch_offset(seed: int, split: int, step: int, b: int, n_tokens: int, context: int) -> int:
    h = splitmix64(splitmix64(splitmix64(splitmix64(seed) ^ split) ^ step) ^ b)
    return h % (n_tokens - context)


def lr_at(step: int, lr: float, min_lr: float, warmup: int, steps: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= steps - 1:
        return min_lr if steps - 1 > warmup else lr
    progress = (step - warmup) / (steps - 1 - warmup)
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def read_tokens(path: Path):
    import numpy as np
    data = path.read_bytes()
    magic, version, vocab, token_bytes, _, n = struct.unpack_from("<8sIIIIQ", data, 0)
    if magic != b"CRSTOKEN" or version != 1:
        sys.exit(f"[gpt_twin] {path}: not a CRSTOKEN file (python3 scripts/gpt_data.py prepare)")
    dtype = np.uint8 if token_bytes == 1 else np.dtype("<u2")
    return np.frombuffer(data, dtype=dtype, count=n, offset=32).astype(np.int64), vocab


def read_init(path: Path, magic_expected: bytes = b"CRSGPTIN", flag: str = "--dump-init"):
    import numpy as np
    data = path.read_bytes()
    magic = data[:8]
    if magic != magic_expected:
        sys.exit(f"[gpt_twin] {path}: not an m04_gpt {flag} file")
    version, vocab, context, layers, heads, d_model, _ = struct.unpack_from("<7q", data, 8)
    if version != 1:
        sys.exit(f"[gpt_twin] {path}: version {version}, expected 1")
    flat = np.frombuffer(data, dtype="<f4", offset=64)
    return dict(vocab=vocab, context=context, layers=layers, heads=heads, d_model=d_model), flat


def build_model(cfg):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    C, H, V, T = cfg["d_model"], cfg["heads"], cfg["vocab"], cfg["context"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C, eps=1e-5)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C, eps=1e-5)
            self.fc = nn.Linear(C, 4 * C)
            self.fcproj = nn.Linear(4 * C, C)

        def forward(self, x):
            B, Tn, _ = x.shape
            qkv = self.qkv(self.ln1(x)).view(B, Tn, 3, H, C // H)
            q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))          # [B, H, T, d]
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(o.transpose(1, 2).reshape(B, Tn, C))
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Parameter(torch.empty(V, C))
            self.wpe = nn.Parameter(torch.empty(T, C))
            self.blocks = nn.ModuleList(Block() for _ in range(cfg["layers"]))
            self.lnf = nn.LayerNorm(C, eps=1e-5)

        def names(self):
            """Names of ordered()'s tensors, for reports."""
            out = ["wte", "wpe"]
            for i in range(len(self.blocks)):
                out += [f"h{i}.{n}" for n in ("ln1.w", "ln1.b", "qkv.w", "qkv.b", "proj.w", "proj.b", "ln2.w", "ln2.b",
                                              "fc.w", "fc.b", "fcproj.w", "fcproj.b")]
            return out + ["lnf.w", "lnf.b"]

        def ordered(self):
            """The parameters in m04_gpt's ParamLayout order."""
            out = [self.wte, self.wpe]
            for b in self.blocks:
                out += [b.ln1.weight, b.ln1.bias, b.qkv.weight, b.qkv.bias, b.proj.weight, b.proj.bias,
                        b.ln2.weight, b.ln2.bias, b.fc.weight, b.fc.bias, b.fcproj.weight, b.fcproj.bias]
            return out + [self.lnf.weight, self.lnf.bias]

        def forward(self, ids, targets):
            Tn = ids.shape[1]
            x = self.wte[ids] + self.wpe[:Tn]
            for b in self.blocks:
                x = b(x)
            logits = self.lnf(x) @ self.wte.t()                              # weight-tied head
            return F.cross_entropy(logits.float().reshape(-1, V), targets.reshape(-1).long())

    return Gpt()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", required=True, type=Path, help="m04_gpt --dump-init file")
    ap.add_argument("--course-csv", type=Path, help="m04_gpt --csv of the same run (compared when given)")
    ap.add_argument("--data", type=Path, default=Path("build/data/shakespeare"))
    ap.add_argument("--steps", type=int, default=20, help="steps to train")
    ap.add_argument("--compare-steps", type=int, default=20,
                    help="with --course-csv: compare the losses of the first min(--steps, this) steps")
    ap.add_argument("--schedule-steps", type=int, default=2000, help="m04_gpt's --steps (the cosine's length)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.99)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                    help="m04_gpt's --precision of the files: the twin's precision and tolerances")
    ap.add_argument("--tol-first", type=float, default=0.02, help="bf16: |diff| of step 1's loss")
    ap.add_argument("--tol", type=float, default=0.05, help="bf16: |diff| of the later losses")
    ap.add_argument("--tol-fp32", type=float, default=1e-4, help="fp32: |diff| / |twin loss| of every loss")
    ap.add_argument("--grads", type=Path,
                    help="m04_gpt --dump-grads file of the same run: check every parameter's step-1 gradient")
    ap.add_argument("--grad-factor", type=float, default=3.0)
    ap.add_argument("--grad-floor", type=float, default=1e-3)
    ap.add_argument("--grad-tol-fp32", type=float, default=1e-4, help="fp32: relative L2 error of every gradient")
    ap.add_argument("--curve-csv", type=Path,
                    help="write the twin's loss curve here (m04_gpt's --csv columns), with validation losses")
    ap.add_argument("--eval-every", type=int, default=250,
                    help="--curve-csv: steps between validation losses (0: only at the end), as m04_gpt")
    ap.add_argument("--eval-batches", type=int, default=20, help="--curve-csv: validation batches per loss")
    ap.add_argument("--log-every", type=int, default=250, help="--curve-csv: steps between progress lines")
    ap.add_argument("--tol-val", type=float, default=0.02,
                    help="--curve-csv with --course-csv: |diff| of the last validation loss both runs have")
    ap.add_argument("--time", action="store_true",
                    help="after the comparison, time training steps of the twin, eager and torch.compile'd")
    args = ap.parse_args()
    fp32 = args.precision == "fp32"
    for name in ("steps", "compare_steps", "batch", "eval_every", "eval_batches", "log_every"):
        if getattr(args, name) < (1 if name in ("steps", "batch", "log_every") else 0):
            sys.exit(f"[gpt_twin] --{name.replace('_', '-')} {getattr(args, name)}: out of range")

    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(f"[gpt_twin] SKIPPED: needs python3 with NumPy and PyTorch ({e})")
        return SKIP
    if not torch.cuda.is_available():
        print("[gpt_twin] SKIPPED: needs PyTorch with CUDA and an NVIDIA GPU (torch.cuda.is_available() is False)")
        return SKIP
    # The twin's fp32 is true fp32 (the reference of both modes' rules): no TF32 anywhere.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    def exact_attention():
        """SDPA restricted to its math backend (fp32 matmuls, TF32 off): the fp32 reference."""
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            return sdpa_kernel(SDPBackend.MATH)
        except ImportError:  # PyTorch < 2.3
            return torch.backends.cuda.sdp_kernel(enable_flash=False, enable_math=True, enable_mem_efficient=False)
    cfg, flat = read_init(args.init)
    tokens, vocab = read_tokens(args.data / "train.bin")
    if vocab != cfg["vocab"]:
        sys.exit(f"[gpt_twin] the data's vocabulary ({vocab}) is not the init file's ({cfg['vocab']})")
    val_tokens = None
    if args.curve_csv:
        val_tokens, val_vocab = read_tokens(args.data / "val.bin")
        if val_vocab != vocab:
            sys.exit(f"[gpt_twin] {args.data}: train.bin and val.bin disagree on the vocabulary size")
    dev = torch.device("cuda")
    model = build_model(cfg).to(dev)
    params = model.ordered()
    need = sum(p.numel() for p in params)
    if flat.size != need:
        sys.exit(f"[gpt_twin] {args.init} holds {flat.size} floats, the model has {need}")
    with torch.no_grad():
        at = 0
        for p in params:
            p.copy_(torch.from_numpy(flat[at:at + p.numel()].copy()).view_as(p))
            at += p.numel()

    decay = [p for p in params if p.dim() == 2]
    no_decay = [p for p in params if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(args.beta1, args.beta2), eps=1e-8, fused=True)
    T, B, n = cfg["context"], args.batch, len(tokens)
    tok = torch.from_numpy(tokens.astype(np.int64)).to(dev)
    ar = torch.arange(T + 1, device=dev)

    def batch(step, split=0, source=None):
        src = tok if source is None else source
        offs = torch.tensor([batch_offset(args.seed, split, step, b, len(src), T) for b in range(B)], device=dev)
        seq = src[offs[:, None] + ar[None, :]]
        return seq[:, :-1], seq[:, 1:]

    val_tok = None if val_tokens is None else torch.from_numpy(val_tokens.astype(np.int64)).to(dev)

    def validate():
        """m04_gpt's validation loss: the mean of --eval-batches batch losses of the validation
        split (batch index i drawn as step i of split 1), in the run's precision, no gradients."""
        total = torch.zeros((), device=dev)
        with torch.no_grad():
            for i in range(args.eval_batches):
                ids_v, targets_v = batch(i, 1, val_tok)
                if fp32:
                    with exact_attention():
                        total += model(ids_v, targets_v).float()
                else:
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        total += model(ids_v, targets_v).float()
        return total.item() / args.eval_batches

    grads_ok = True
    if args.grads:
        # Step 1's gradients, parameter by parameter, under the FlashAttention rule for a
        # backward pass: with g the twin's fp32 gradient (no autocast) as the reference, the
        # course's relative error ||g_course - g|| / ||g|| must be at most factor x that of
        # the twin's own bf16-autocast gradient, plus a floor.
        gcfg, gflat = read_init(args.grads, b"CRSGPTGR", "--dump-grads")
        if gcfg != cfg or gflat.size != need:
            sys.exit(f"[gpt_twin] {args.grads} is not a gradient file of this model")
        ids0, targets0 = batch(0)

        def grads_of(autocast):
            model.zero_grad(set_to_none=True)
            if autocast:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    model(ids0, targets0).backward()
            else:
                with exact_attention():
                    model(ids0, targets0).backward()
            return [p.grad.detach().float().clone() for p in params]

        g32 = grads_of(False)
        g16 = None if fp32 else grads_of(True)
        model.zero_grad(set_to_none=True)
        at, worst = 0, 0.0
        if fp32:
            print(f"[gpt_twin] step 1 gradients (fp32): course vs fp32 twin <= {args.grad_tol_fp32}, "
                  f"relative L2 per parameter")
        else:
            print(f"[gpt_twin] step 1 gradients: course vs fp32 twin <= {args.grad_factor} x (bf16 twin vs fp32 "
                  f"twin) + {args.grad_floor}, relative L2 per parameter")
        for i, (name, p, ref) in enumerate(zip(model.names(), params, g32)):
            c = torch.from_numpy(gflat[at:at + p.numel()].copy()).to(dev).view_as(p)
            at += p.numel()
            scale = ref.norm().item() or 1.0
            err_c = (c - ref).norm().item() / scale
            if fp32:
                err_t, bound = 0.0, args.grad_tol_fp32
            else:
                err_t = (g16[i] - ref).norm().item() / scale
                bound = args.grad_factor * err_t + args.grad_floor
            ok_p = err_c <= bound
            grads_ok &= ok_p
            worst = max(worst, err_c / bound)
            if not ok_p or name in ("wte", "wpe", "lnf.w") or name.startswith("h0."):
                twin = "" if fp32 else f"  bf16 twin {err_t:.2e}"
                print(f"   {name:12s} course {err_c:.2e}{twin}  bound {bound:.2e}{'' if ok_p else '  FAILS'}")
        print(f"[gpt_twin] gradients: worst error / bound {worst:.3f} over {len(params)} parameters: "
              f"{'agree' if grads_ok else 'DISAGREE'}")
    # The losses and norms stay on the device until the end (no synchronization per step).
    loss_t, norm_t, rows = [], [], []
    for step in range(args.steps):
        ids, targets = batch(step)
        lr = lr_at(step, args.lr, args.min_lr, args.warmup, args.schedule_steps)
        for g in opt.param_groups:
            g["lr"] = lr
        if fp32:
            with exact_attention():
                loss = model(ids, targets)
                opt.zero_grad(set_to_none=True)
                loss.backward()
        else:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(ids, targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, args.clip)  # the norm before clipping, as m04_gpt's
        opt.step()
        loss_t.append(loss.detach().float())
        norm_t.append(norm.detach().float())
        val = None
        if args.curve_csv:
            last = step + 1 == args.steps
            if args.eval_batches > 0 and ((args.eval_every > 0 and (step + 1) % args.eval_every == 0) or last):
                val = validate()
            if (step + 1) % args.log_every == 0 or last or val is not None:
                print(f"   step {step + 1:5d}/{args.steps}  loss {loss.item():.4f}  lr {lr:.2e}"
                      + ("" if val is None else f"  validation loss {val:.4f}"), flush=True)
        rows.append((step + 1, lr, val))
    losses = torch.stack(loss_t).tolist()
    norms = torch.stack(norm_t).tolist()
    if args.curve_csv:
        args.curve_csv.parent.mkdir(parents=True, exist_ok=True)
        with open(args.curve_csv, "w") as f:
            f.write("step,lr,loss,grad_norm,val_loss\n")
            for (s_, lr_, v_), l_, g_ in zip(rows, losses, norms):
                f.write(f"{s_},{lr_:.6g},{l_:.6f},{g_:.4f},{'' if v_ is None else f'{v_:.6f}'}\n")
        print(f"[gpt_twin] loss curve of {args.steps} steps written to {args.curve_csv}")
    compare_steps = min(args.steps, args.compare_steps)

    course, course_rows = None, []
    if args.course_csv:
        with open(args.course_csv) as f:
            course_rows = list(csv.DictReader(f))
        course = [float(r["loss"]) for r in course_rows][:compare_steps]
        if len(course) < compare_steps:
            sys.exit(f"[gpt_twin] {args.course_csv} has {len(course)} steps, fewer than the {compare_steps} compared")
    print(f"[gpt_twin] {'fp32 (TF32 off, SDPA math)' if fp32 else 'bf16 autocast'}, {args.steps} steps, "
          f"batch {B} x {T}" + (f"; the first {compare_steps} losses" if args.steps > compare_steps else ""))
    print("   step   twin loss   course loss   |diff|")
    worst, worst_rel, ok = 0.0, 0.0, True
    for i, l in enumerate(losses[:compare_steps]):
        if course is None:
            print(f"   {i + 1:4d}   {l:9.6f}")
            continue
        d = abs(l - course[i])
        tol = args.tol_fp32 * abs(l) if fp32 else args.tol_first if i == 0 else args.tol
        ok &= d <= tol
        worst = max(worst, d)
        worst_rel = max(worst_rel, d / max(abs(l), 1e-30))
        print(f"   {i + 1:4d}   {l:9.6f}   {course[i]:11.6f}   {d:.2e}{'' if d <= tol else f'  > {tol:.2e}'}")
    if course is not None:
        rule = (f"tolerance {args.tol_fp32:g} relative" if fp32
                else f"tolerance {args.tol_first} at step 1, {args.tol} after")
        print(f"[gpt_twin] {args.precision}: largest difference {worst:.2e} ({worst_rel:.2e} relative): "
              f"{'agree' if ok else 'DISAGREE'} ({rule})")
    if args.curve_csv and course_rows:
        # Issue 28's target: the validation loss within --tol-val of the twin's after the same
        # steps, checked at the last validation step both runs have; the earlier ones are shown.
        twin_val = {s_: v_ for s_, _, v_ in rows if v_ is not None}
        pairs = [(int(r["step"]), float(r["val_loss"]), twin_val[int(r["step"])]) for r in course_rows
                 if r.get("val_loss") and int(r["step"]) in twin_val]
        if not pairs:
            sys.exit(f"[gpt_twin] {args.course_csv} and the twin have no validation step in common "
                     f"(the same --steps and --eval-every on both sides)")
        print("   step   twin val loss   course val loss   course - twin")
        for s_, cv, tv in pairs:
            print(f"   {s_:4d}   {tv:13.4f}   {cv:15.4f}   {cv - tv:+13.4f}")
        s_, cv, tv = pairs[-1]
        val_ok = abs(cv - tv) <= args.tol_val
        print(f"[gpt_twin] validation loss after {s_} steps: course {cv:.4f}, twin {tv:.4f}, |diff| {abs(cv - tv):.4f}: "
              f"{'agree' if val_ok else 'DISAGREE'} (tolerance {args.tol_val}; largest |diff| over the "
              f"{len(pairs)} validation steps {max(abs(c - t) for _, c, t in pairs):.4f})")
        ok &= val_ok
    if args.time:
        # One training step as the loop above runs it (same batch each time: only speed is
        # measured), eager and compiled; CUDA events around 20 steps after 5 warm-up steps
        # (torch.compile compiles during the warm-up).
        def train_step(m):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not fp32):
                loss = m(ids, targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, args.clip)
            opt.step()
        for name, m in (("eager", model), ("torch.compile", torch.compile(model))):
            for _ in range(5):
                train_step(m)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(20):
                train_step(m)
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end) / 20
            print(f"[gpt_twin] PyTorch {name}: {ms:.2f} ms/step, {B * T / ms * 1e3:,.0f} tokens/s")
    return 0 if ok and grads_ok else 1


if __name__ == "__main__":
    sys.exit(main())
