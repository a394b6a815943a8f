#!/usr/bin/env python3
"""Turn the benchmark data of a GPU run into docs/results.md and plots.

usage: scripts/make_results.py [RUN_DIR] [--docs docs] [--yours DIR] [--no-plots]
RUN_DIR holds bench_<module>.json files and env.txt, as scripts/gpu_check.sh writes them,
and optionally compare_torch.json (scripts/compare_torch.py --out; docs/data/compare_torch_*.json:
runs of a few steps on another GPU, each shown in a section of its own),
m04_training_curve.csv (m04_train --out), and module 4's GPT: gpt_profile_bf16.csv and
gpt_profile_fp32.csv (m04_gpt --profile --profile-csv, per phase of a step; plot
gpt_profile.png), m04_gpt_curve.csv and gpt_twin_curve.csv (m04_gpt --csv and
scripts/gpt_twin.py --curve-csv of the same run; plot gpt_loss_curves.png, drawn when both
exist); gpt_runs.txt (optional): one line per such file, "FILE: GPU, command". The option
--gpt-profile-text CSV prints a profile as the lesson's text bar chart. Every input the page
is built from is kept in docs/data/ (the benchmark rows as bench_results.json, with env.txt's facts); an input
that RUN_DIR lacks comes from there, so `scripts/make_results.py` alone rebuilds the page
from the stored data (no GPU needed), and a run of one kind (say, only compare_torch.json)
keeps the other sections.
Rows are named op/impl/step/shape (impl: solution, exercise, library); each op+shape
becomes one table (steps in ladder order) and one bar chart. The page opens with a
summary: one row per op, its top step beside its library and PyTorch (ranges over shapes).
Tables come in course order (module 1's ops as its lesson teaches them, then modules 2-4).
The "yours" column comes from the learner's own benchmark JSON when there is one
(--yours DIR, default build/: bench_*.json, as `bash scripts/course.sh bench` writes them),
else from the run's exercise rows, else "-".
Plots need matplotlib; --no-plots (or no matplotlib) keeps the images already in
docs/images/ and links those that exist.
After regenerating the page, run scripts/check_numbers.py (CI does): it checks every number
that step banners, READMEs and lessons quote from this page ("Measured (results: ROW): ...")
and lists each one the new run changed.
"""
import argparse
import csv
import json
import math
import pathlib
import re
import shutil
import sys
from collections import Counter, OrderedDict

plt = None  # matplotlib.pyplot, imported in main() unless --no-plots

STORED = "bench_results.json"  # docs/data/: the benchmark rows of the run the page shows


def bench_records(path, module):
    """The rows of one Google Benchmark JSON file, flat: {module, op, impl, step, shape, unit,
    value (None: skipped), copy (copy_GB/s), diagnostic}; and the file's context."""
    data = json.loads(path.read_text())
    rows = OrderedDict()  # a repeated name (repetitions: the median aggregate comes last) keeps its place
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        parts = b["name"].split("/")
        if len(parts) < 4:
            continue
        op, impl, step, shape = parts[:4]
        skipped = b.get("error_occurred") or b.get("skipped") or b.get("error_message")
        if "TFLOP/s" in b:
            value, unit = b["TFLOP/s"], "TFLOP/s"
        elif "GB/s" in b:
            value, unit = b["GB/s"], "GB/s"
        else:  # a row that only has a time (e.g. building pointer arrays): report microseconds
            scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}.get(b.get("time_unit", "ns"), 1.0)
            value, unit = b.get("real_time", 0.0) * scale, "us"
        rows[(op, impl, step, shape)] = {"module": module, "op": op, "impl": impl, "step": step, "shape": shape,
                                         "unit": unit, "value": None if skipped else value,
                                         "copy": b.get("copy_GB/s"), "diagnostic": "diagnostic" in b}
    return list(rows.values()), data.get("context", {})


def group_records(records, groups=None):
    """Flat rows -> groups (module, op, shape) -> OrderedDict(step -> {impl: row})."""
    groups = OrderedDict() if groups is None else groups
    for r in records:
        groups.setdefault((r["module"], r["op"], r["shape"]), OrderedDict()).setdefault(r["step"], {})[r["impl"]] = {
            "value": r["value"], "unit": r["unit"], "copy": r.get("copy"), "diagnostic": bool(r.get("diagnostic"))}
    return groups


def load_rows_from(path, module, groups=None, contexts=None):
    """Adds the rows of one benchmark JSON file to groups (module, op, shape) -> steps."""
    contexts = {} if contexts is None else contexts
    records, contexts[module] = bench_records(path, module)
    return group_records(records, groups), contexts


def store_bench(path, records, env, source):
    """Writes the benchmark rows (and env.txt's facts) to path, one row a line."""
    def compact(r):
        out = {k: r[k] for k in ("module", "op", "impl", "step", "shape", "unit")}
        for k in ("value", "copy"):
            v = r.get(k)
            out[k] = None if v is None else float(f"{v:.9g}")
        if out["copy"] is None:
            del out["copy"]
        if r.get("diagnostic"):
            out["diagnostic"] = True
        return out
    rows = [json.dumps(compact(r)) for r in records]
    text = ["{", f'  "source": {json.dumps(source)},', f'  "env": {json.dumps(env.splitlines())},', '  "rows": [']
    text += [f"    {r}{',' if i < len(rows) - 1 else ''}" for i, r in enumerate(rows)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(text + ["  ]", "}"]) + "\n")


def load_stored(path):
    data = json.loads(path.read_text())
    return data["rows"], "\n".join(data.get("env", [])), data.get("source", "")


# Course order: each module's ops as its lesson teaches them; ops not listed follow in run order.
COURSE_OP_ORDER = {
    "m01": ["l2_norm", "dot", "softmax", "sgemm", "hgemm_bf16", "linear_bf16"],
    "m02": ["bgemm_qk_f32", "bgemm_pv_f32", "bgemm_qk_bf16", "bgemm_pv_bf16", "bgemm_ptr_build"],
    "m03": ["attn_f32", "attn_bf16"],
    "m04": ["softmax_backward", "linear_backward", "bias_grad", "attn_bwd_f32", "attn_bwd_bf16", "adamw", "gelu",
            "gelu_backward", "layer_norm", "layer_norm_backward", "cross_entropy"],
}


def in_course_order(groups):
    """groups (module, op, shape) -> ..., reordered: modules in order, ops in lesson order,
    shapes as they were run."""
    keys = list(groups)
    def rank(key):
        module, op, _ = key
        order = COURSE_OP_ORDER.get(module, [])
        return (module, order.index(op) if op in order else len(order), keys.index(key))
    return OrderedDict((k, groups[k]) for k in sorted(keys, key=rank))


def load_yours(yours_dir):
    """The learner's exercise rows from yours_dir/bench_*.json (newest file wins per row):
    {(module, op, shape, step): value}, and the files and GPUs they came from."""
    values, sources = {}, []
    if yours_dir is None or not yours_dir.is_dir():
        return values, sources
    for path in sorted(yours_dir.glob("bench_*.json"), key=lambda p: p.stat().st_mtime):
        module = path.stem.removeprefix("bench_").split("_")[0]
        try:
            groups, contexts = load_rows_from(path, module)
        except (OSError, ValueError, KeyError):
            continue
        found = 0
        for (mod, op, shape), steps in groups.items():
            for step, impls in steps.items():
                value = impls.get("exercise", {}).get("value")
                if value is not None:
                    values[(mod, op, shape, step)] = value
                    found += 1
        if found:
            ctx = contexts.get(module, {})
            shown = path.resolve()
            root = pathlib.Path(__file__).resolve().parent.parent
            shown = shown.relative_to(root) if root in shown.parents else shown
            sources.append(f"`{shown}` ({ctx.get('date', '?')}, {ctx.get('host_name', 'this machine')})")
    return values, sources


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    return "-" if not a or not b else f"{a / b:.2f}"


def slug(text):
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


def section_anchor(module, op, shape):
    """The HTML anchor placed before a table's heading (works on GitHub and in Doxygen)."""
    return f"results_{slug(f'{module}_{op}_{shape}')}"


def reference_library(steps):
    """The library row a table compares with: the fastest, never a diagnostic row (part of
    the op's traffic only, bench::mark_diagnostic). Returns (every library row, name, row)."""
    libs = [(s, r["library"]) for s, r in steps.items() if "library" in r and r["library"]["value"]]
    refs = [(s, r) for s, r in libs if not r["diagnostic"]]
    name, lib = max(refs, key=lambda x: x[1]["value"]) if refs else (None, None)
    return libs, name, lib


# ---------------------------------------------------------------------------------------
# The summary on top: one row per op, its top step against its library and PyTorch
# ---------------------------------------------------------------------------------------

def dim0(shape):
    return shape.endswith("_dim0")


def not_dim0(shape):
    return not dim0(shape)


def strided(step):
    return not step.endswith("_ptr")


# One entry per summary row, in course order. module/op: the benchmark's op; shapes: which
# of its tables (default all); steps: the steps that may be the top one (a list or a test;
# default all); torch: the op's name in compare_torch.json, torch_shapes: which of its
# shapes; library "flash": the top step against SDPA's flash backend (FlashAttention-2)
# from the PyTorch data instead of the benchmark's library row; also: other library rows
# of the tables to quote in the notes. An op of the data that no entry shows gets a plain row.
SUMMARY = [
    dict(label="L2 norm", module="m01", op="l2_norm", torch="l2_norm"),
    dict(label="dot", module="m01", op="dot", torch="dot"),
    dict(label="softmax, dim 1 (rows)", module="m01", op="softmax", shapes=not_dim0,
         torch="softmax", torch_shapes=not_dim0),
    dict(label="softmax, dim 0 (columns)", module="m01", op="softmax", shapes=dim0,
         torch="softmax", torch_shapes=dim0, also={"column_order_copy": "the copy in column order"}),
    dict(label="matmul fp32", module="m01", op="sgemm", torch="matmul"),
    dict(label="matmul bf16, tensor cores (sm_80)", module="m01", op="hgemm_bf16", steps=["wmma", "mma_sync"],
         torch="matmul_tc"),
    dict(label="matmul bf16, Hopper (sm_90a)", module="m01", op="hgemm_bf16",
         steps=["wgmma", "tma_warp_specialized", "persistent", "cluster_multicast", "pingpong"], torch="matmul_tc"),
    dict(label="linear layer bf16 (tensor cores, epilogue options)", module="m01", op="linear_bf16", torch="linear_bf16"),
    # The strided API: the one compare_torch.py runs (the pointer-array steps run the same bodies).
    dict(label="batched GEMM Q K^T, fp32", module="m02", op="bgemm_qk_f32", steps=strided, torch="bgemm_qk_f32"),
    dict(label="batched GEMM P V, fp32", module="m02", op="bgemm_pv_f32", steps=strided, torch="bgemm_pv_f32"),
    dict(label="batched GEMM Q K^T, bf16", module="m02", op="bgemm_qk_bf16", steps=strided, torch="bgemm_qk_bf16"),
    dict(label="batched GEMM P V, bf16", module="m02", op="bgemm_pv_bf16", steps=strided, torch="bgemm_pv_bf16"),
    dict(label="attention forward, fp32", module="m03", op="attn_f32", torch="attention_f32"),
    dict(label="attention forward, bf16", module="m03", op="attn_bf16", torch="attention_bf16", library="flash",
         also={"cublas_materialized": "the cuBLAS pipeline that writes S and P"}),
    dict(label="softmax backward, dim 1", module="m04", op="softmax_backward", shapes=not_dim0,
         torch="softmax_backward", torch_shapes=not_dim0),
    dict(label="softmax backward, dim 0", module="m04", op="softmax_backward", shapes=dim0,
         torch="softmax_backward", torch_shapes=dim0),
    dict(label="linear backward (dX, dW, db)", module="m04", op="linear_backward", torch="linear_backward"),
    dict(label="bias gradient (db alone)", module="m04", op="bias_grad"),
    dict(label="attention backward, fp32", module="m04", op="attn_bwd_f32", torch="attention_backward"),
    dict(label="attention backward, bf16", module="m04", op="attn_bwd_bf16", torch="attention_backward_bf16",
         library="flash"),
    dict(label="AdamW + clipping (GPT parameter lists)", module="m04", op="adamw", torch="adamw"),
    dict(label="GELU forward", module="m04", op="gelu", torch="gelu"),
    dict(label="GELU backward", module="m04", op="gelu_backward", torch="gelu_backward"),
    # compare_torch.py's layer_norm_backward rows time PyTorch's backward alone (autograd.grad on
    # a graph built once); its layer_norm_fwdbwd rows (forward + backward) have no entry here.
    dict(label="LayerNorm forward", module="m04", op="layer_norm", torch="layer_norm"),
    dict(label="LayerNorm backward (dx, dgamma, dbeta)", module="m04", op="layer_norm_backward",
         torch="layer_norm_backward"),
    dict(label="fused cross-entropy (loss and dlogits)", module="m04", op="cross_entropy", torch="cross_entropy"),
]
SUMMARY_SKIP = {"bgemm_ptr_build"}  # host-side timing of pointer arrays: no library, no ladder top

# What the PyTorch call is when compare_torch.json names it only "torch".
TORCH_CALL = {"l2_norm": "torch.linalg.vector_norm", "dot": "torch.dot", "softmax": "torch.softmax",
              "layer_norm": "F.layer_norm", "layer_norm_backward": "F.layer_norm's autograd"}

# The course's output dtype where PyTorch's row says "<dtype> out" (compare_torch.py's notes).
COURSE_OUT_DTYPE = {"matmul_tc": "fp32", "bgemm_qk_bf16": "fp32", "bgemm_pv_bf16": "fp32"}
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def bgemm_elements(op, shape):
    """(elements read, elements written) of a batched GEMM of attention, or None."""
    m = re.search(r"B(\d+)_?H(\d+)_?N(\d+)_?d(\d+)", shape)
    if not m or not op.startswith("bgemm_"):
        return None
    b, h, n, d = map(int, m.groups())
    if "_qk_" in op:  # Q [N, d] times K^T [d, N] -> S [N, N]
        return b * h * 2 * n * d, b * h * n * n
    if "_pv_" in op:  # P [N, N] times V [N, d] -> O [N, d]
        return b * h * (n * n + n * d), b * h * n * d
    return None


def dtype_note(op, shape, torch_note):
    """What differs when PyTorch's row writes another dtype than the course, else None."""
    m = re.match(r"(\w+) out\b", torch_note or "")
    ours = COURSE_OUT_DTYPE.get(op)
    if not m or not ours or m.group(1) == ours:
        return None
    theirs = m.group(1)
    text = f"PyTorch writes {theirs} C, the course {ours}"
    elems = bgemm_elements(op, shape)
    if elems and ours in DTYPE_BYTES and theirs in DTYPE_BYTES:
        read = 2 * elems[0]  # bf16 inputs
        ours_b, theirs_b = read + DTYPE_BYTES[ours] * elems[1], read + DTYPE_BYTES[theirs] * elems[1]
        share = DTYPE_BYTES[ours] * elems[1] / ours_b
        text += (f": {ours_b / theirs_b:.2f}x PyTorch's bytes, {share:.0%} of them C"
                 + (" (the stores dominate)" if share > 0.5 else ""))
    return text


def torch_step_name(step, names):
    """The compare_torch.py name of a benchmark step (the benchmark adds _strided / _ptr)."""
    for name in (step, re.sub(r"_(strided|ptr)$", "", step)):
        if name in names:
            return name
    return None


def span(values):
    """min-max of ratios at two decimals, and how many shapes: '0.96-1.00 (3)'."""
    if not values:
        return "-"
    lo, hi = f"{min(values):.2f}", f"{max(values):.2f}"
    return (lo if lo == hi else f"{lo}-{hi}") + f" ({len(values)})"


def top_step(tables, candidates=None):
    """The solution step with the best geometric mean over the tables of its value relative
    to the best step of each table (among the steps measured on the most tables)."""
    scores = {}
    for _, steps in tables:
        vals = {s: i["solution"]["value"] for s, i in steps.items()
                if "library" not in i and (i.get("solution") or {}).get("value")
                and (candidates is None or (candidates(s) if callable(candidates) else s in candidates))}
        if not vals:
            continue
        lower_better = next(i["solution"]["unit"] for i in steps.values() if "solution" in i) == "us"
        best = min(vals.values()) if lower_better else max(vals.values())
        for s, v in vals.items():
            scores.setdefault(s, []).append(best / v if lower_better else v / best)
    if not scores:
        return None
    most = max(len(v) for v in scores.values())
    full = {s: v for s, v in scores.items() if len(v) == most}
    return max(full, key=lambda s: sum(math.log(x) for x in full[s]))


def torch_backend_label(op, backend, notes):
    if op.startswith("attention"):  # SDPA's backends: flash, cudnn, efficient, math
        return f"SDPA `{backend}`"
    if backend == "torch":
        named = next((n for n in notes if n.startswith("torch.")), None)
        return f"`{named or TORCH_CALL.get(op, 'torch')}`"
    return f"`{backend}`"


def summary_row(entry, groups, torch_rows, extra_torch_rows=()):
    """The summary's cells for one entry, or None when the data has no table of it. The
    PyTorch column comes from compare_torch.json, or, where that run lacks the top step, from
    a later run of a few steps (docs/data/compare_torch_*.json) that has it: each ratio is
    still a course call and PyTorch's from one run."""
    module, op = entry["module"], entry["op"]
    keep = entry.get("shapes", lambda s: True)
    tables = [(k, steps) for k, steps in groups.items() if k[:2] == (module, op) and keep(k[2])]
    top = top_step(tables, entry.get("steps")) if tables else None
    if top is None:
        return None
    lib_ratios, lib_names, also = [], [], {name: [] for name in entry.get("also", {})}
    for _, steps in tables:
        sol = (steps.get(top, {}).get("solution") or {}).get("value")
        _, name, lib = reference_library(steps)
        if sol and lib:
            lib_ratios.append(sol / lib["value"])
            lib_names.append(name)
        for other in also:
            ref = (steps.get(other, {}).get("library") or {}).get("value")
            if sol and ref:
                also[other].append(sol / ref)
    lib_cell = " / ".join(f"`{n}`" for n in dict.fromkeys(lib_names)) or "-"
    notes = []

    t_op, t_keep = entry.get("torch"), entry.get("torch_shapes", lambda s: True)
    def rows_of(rows):
        return [r for r in rows if t_op and r.get("op") == t_op and t_keep(r.get("shape", ""))]

    def solution_steps(rows):
        return {r.get("step") for r in rows if r.get("impl") == "solution"}

    mine = rows_of(torch_rows)
    extra = rows_of(extra_torch_rows)
    if top not in solution_steps(mine) and top in solution_steps(extra):
        mine = extra
    t_step = torch_step_name(top, solution_steps(mine))
    fracs, backends, t_notes, failing, unlike = [], Counter(), [], [], OrderedDict()
    flash = []
    for shape in dict.fromkeys(r["shape"] for r in mine):
        here = [r for r in mine if r["shape"] == shape]
        sol = next((r for r in here if r.get("impl") == "solution" and r.get("step") == t_step and r.get("ms")), None)
        lib = [r for r in here if r.get("impl") == "pytorch" and r.get("ms")]
        if not sol:
            continue
        if sol.get("accuracy_ok") is False:
            failing.append(shape)
        fa2 = next((r for r in lib if r.get("backend") == "flash" and r.get("value")), None)
        if fa2 and sol.get("value"):
            flash.append(sol["value"] / fa2["value"])
        if not lib:
            continue
        best = min(lib, key=lambda r: r["ms"])
        fracs.append(best["ms"] / sol["ms"])
        backends[best.get("backend", "?")] += 1
        if best.get("note") and best["note"] not in t_notes:
            t_notes.append(best["note"])
        note = dtype_note(t_op, shape, best.get("note"))
        if note:
            unlike[shape] = "not like for like: " + note
    if entry.get("library") == "flash" and flash:
        lib_ratios, lib_names = flash, []
        lib_cell = "[FA2](#results_torch_attention_bf16) (SDPA `flash`)"  # no code span in a link: Doxygen 1.9
    for other, values in also.items():
        if values and other not in lib_names:
            notes.append(f"{span(values)} of `{other}`, {entry['also'][other]}")
    torch_cell = "-"
    if backends:
        names = [torch_backend_label(t_op, b, t_notes) for b, _ in backends.most_common()]
        names = " / ".join(n.removeprefix("SDPA ") if i else n for i, n in enumerate(names))
        shown = [n for n in t_notes if not n.startswith("torch.") and not re.fullmatch(r"(bf16|fp32|fp16)", n)]
        torch_cell = names + (f" ({'; '.join(shown)})" if shown else "")
    notes += [(f"{shape}: " if len(unlike) > 1 else "") + note for shape, note in unlike.items()]
    if failing:
        notes.append(f"`{top}` fails the accuracy rule beside PyTorch at {', '.join(failing)}")
    anchor = section_anchor(*tables[0][0])
    cells = [f"[{entry['label']}](#{anchor})", f"`{top}`", lib_cell, span(lib_ratios), torch_cell, span(fracs),
             "; ".join(n for n in notes if n) or ""]
    return cells, anchor


def summary_section(groups, torch_rows, extra_torch_rows=()):
    """The page's first section: one row per op. Returns (lines, the anchors it links to)."""
    rows, anchors, done = [], set(), set()
    # SUMMARY's entries, then a plain row for each op of the data that none of them showed
    plain = [dict(label=op, module=module, op=op) for module, op in dict.fromkeys(k[:2] for k in groups)
             if op not in SUMMARY_SKIP]
    for entry in SUMMARY + plain:
        if entry in plain and (entry["module"], entry["op"]) in done:
            continue
        row = summary_row(entry, groups, torch_rows, extra_torch_rows)
        if row:
            rows.append(row[0])
            anchors.add(row[1])
            done.add((entry["module"], entry["op"]))
    if not rows:
        return [], anchors
    lines = ["## Summary", "",
             "How close each op's top step comes to its library and to PyTorch. **top step**: the solution step "
             "with the best geometric mean over the op's shapes. **top / library**: its throughput over the "
             "library row each table compares with (above 1: faster). **top / PyTorch**: the fastest PyTorch "
             "call's time over the top step's, on the same tensors"
             + (" ([the course beside PyTorch](#results_pytorch)). " if torch_rows else ". ") +
             "Each ratio is the range over the shapes measured, their number in parentheses; the op links to its "
             "first table.", "",
             "| op | top step | library | top / library | PyTorch | top / PyTorch | notes |",
             "| --- | --- | --- | ---: | --- | ---: | --- |"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return lines + [""], anchors


# ---------------------------------------------------------------------------------------
# Module 4's training curve and the PyTorch comparison
# ---------------------------------------------------------------------------------------

def input_file(run_dir, docs, name):
    """RUN_DIR/name when the run has it, else docs/data/name, else None."""
    return next((p for p in ((run_dir / name) if run_dir else None, docs / "data" / name) if p and p.exists()), None)


def training_curve_section(path, images, plots):
    """Module 4's training curve (m04_train --out m04_training_curve.csv): loss and accuracy
    vs step. Returns the page's lines."""
    if path is None:
        return []
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return []
    step = [int(r["step"]) for r in rows]
    val = [(int(r["step"]), float(r["val_accuracy"])) for r in rows if r.get("val_accuracy")]
    image = images / "results_m04_training_curve.png"
    if plots:
        fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.6))
        ax_loss.plot(step, [float(r["loss"]) for r in rows], color="#4c72b0")
        ax_loss.set_yscale("log")
        ax_loss.set_xlabel("step")
        ax_loss.set_ylabel("cross-entropy (training batch)")
        ax_acc.plot(step, [100 * float(r["accuracy"]) for r in rows], color="#4c72b0", label="training batch")
        if val:
            ax_acc.plot([s for s, _ in val], [100 * a for _, a in val], "o", color="#c44e52",
                        label="fresh validation batch")
        ax_acc.set_xlabel("step")
        ax_acc.set_ylabel("accuracy (%)")
        ax_acc.set_ylim(0, 101)
        ax_acc.legend(loc="lower right")
        fig.suptitle("m04_train: one causal self-attention layer, course kernels only")
        fig.tight_layout()
        fig.savefig(image, dpi=110)
        plt.close(fig)
    last = rows[-1]
    final = f"validation accuracy {100 * val[-1][1]:.2f}% at step {val[-1][0]}" if val else f"step {step[-1]}"
    return ["## module04_training: training curve", "",
            f"`m04_train` on the GPU, from `{path.name}`: {len(rows)} steps, final training loss "
            f"{float(last['loss']):.4g}, {final}.", ""] + (
            ["![m04_train training curve](images/results_m04_training_curve.png)", ""] if image.exists() else [])


# ---------------------------------------------------------------------------------------
# The GPT trainer (module 4, m04_gpt): where a step's time goes, the loss curve beside the twin's
# ---------------------------------------------------------------------------------------

# m04_gpt --profile's phases in four groups (demos/gpt.cpp marks them). A GEMM phase holds its
# matmul_tc calls with their epilogues (bias, GELU, residual) and, backward, the bias gradient's
# column sum; "other" is the glue: the batch gather, the embeddings, the loss, GELU's backward,
# AdamW.
GPT_PHASE_GROUPS = [
    ("GEMMs", ("fwd.qkv", "fwd.proj", "fwd.fc", "fwd.fc_proj", "fwd.head", "bwd.head_dx", "bwd.fc_proj", "bwd.fc",
               "bwd.proj", "bwd.qkv", "bwd.head_dw")),
    ("attention", ("fwd.attention", "bwd.attention")),
    ("LayerNorm", ("fwd.ln1", "fwd.ln2", "fwd.lnf", "bwd.ln1", "bwd.ln2", "bwd.lnf")),
    ("other", None),
]
GPT_GROUP_COLOURS = {"GEMMs": "#4c72b0", "attention": "#dd8452", "LayerNorm": "#55a868", "other": "#8c8c8c"}
GPT_PROFILES = (("bf16", "gpt_profile_bf16.csv"), ("fp32", "gpt_profile_fp32.csv"))
GPT_CURVES = ("m04_gpt_curve.csv", "gpt_twin_curve.csv")  # m04_gpt --csv, scripts/gpt_twin.py --curve-csv
GPT_VAL_TOLERANCE = 0.02  # issue 28: the validation loss within 0.02 of the twin's after the same steps
GPT_RUNS = "gpt_runs.txt"  # optional: "FILE: the GPU and command it came from", one line per input file


def gpt_run_notes(runs_path, names):
    """The lines of docs/data/gpt_runs.txt about the given input files, as a list for the page."""
    if runs_path is None:
        return []
    notes = [l.strip() for l in runs_path.read_text().splitlines()
             if any(l.strip().startswith(n + ":") for n in names)]
    return [f"- `{n.split(':', 1)[0]}`:{n.split(':', 1)[1]}" for n in notes] + ([""] if notes else [])


def gpt_phase_group(phase):
    return next(name for name, phases in GPT_PHASE_GROUPS if phases is None or phase in phases)


def read_gpt_profile(path):
    """m04_gpt --profile-csv (phase, ms_per_step, share) -> [(phase, ms, share)] in step order."""
    with path.open(newline="") as f:
        return [(r["phase"], float(r["ms_per_step"]), float(r["share"])) for r in csv.DictReader(f)]


def gpt_profile_groups(rows):
    """[(group, ms, share, [(phase, ms, share)] largest first)] in GPT_PHASE_GROUPS order; a
    group's share is of the sum of the phases (one profiled step)."""
    total = sum(ms for _, ms, _ in rows) or 1.0
    out = []
    for name, _ in GPT_PHASE_GROUPS:
        members = sorted((r for r in rows if gpt_phase_group(r[0]) == name), key=lambda r: -r[1])
        if members:
            ms = sum(r[1] for r in members)
            out.append((name, ms, ms / total, members))
    return out


def gpt_profile_text(rows, width=40):
    """The profile as a monospace bar chart (the lesson's picture): a line per group, then its
    phases largest first, each with a bar of '#' (the largest phase gets `width` of them)."""
    top = max((ms for _, ms, _ in rows), default=0.0) or 1.0
    lines = [f"{'phase':<19s} {'ms':>6s}  {'share':>6s}   ({sum(ms for _, ms, _ in rows):.2f} ms per step in all)"]
    for name, ms, share, members in gpt_profile_groups(rows):
        lines.append(f"{name:<19s} {ms:6.3f}  {100 * share:5.1f}%")
        for phase, p_ms, p_share in members:
            lines.append(f"  {phase:<17s} {p_ms:6.3f}  {100 * p_share:5.1f}%  {'#' * round(width * p_ms / top)}".rstrip())
    return lines


def gpt_profile_plot(profiles, image):
    """Horizontal bars, one panel per precision: every phase, grouped and coloured as the text
    chart, labelled with ms and share."""
    fig, axes = plt.subplots(1, len(profiles), figsize=(6.2 * len(profiles), 7.5), squeeze=False)
    for ax, (precision, rows) in zip(axes[0], profiles):
        labels, values, colours, notes = [], [], [], []
        for name, _, share, members in gpt_profile_groups(rows):
            for phase, ms, p_share in members:
                labels.append(phase)
                values.append(ms)
                colours.append(GPT_GROUP_COLOURS[name])
                notes.append(f"{ms:.3f} ms  {100 * p_share:.1f}%")
        pos = list(range(len(labels)))[::-1]  # the first group on top
        ax.barh(pos, values, color=colours, height=0.7)
        for y, v, note in zip(pos, values, notes):
            ax.annotate(note, (v, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
        ax.set_yticks(pos, labels, fontsize=8)
        ax.set_xlim(0, max(values) * 1.45)
        ax.set_xlabel("ms per step (summed over the layers)")
        total = sum(values)
        ax.set_title(f"{precision}: {total:.2f} ms per step, "
                     + ", ".join(f"{n} {100 * s:.0f}%" for n, _, s, _ in gpt_profile_groups(rows)), fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in GPT_GROUP_COLOURS.values()]
    axes[0][-1].legend(handles, list(GPT_GROUP_COLOURS), loc="lower right", fontsize=8)
    fig.suptitle("m04_gpt --profile: where a training step's time goes")
    fig.tight_layout()
    fig.savefig(image, dpi=110)
    plt.close(fig)


def gpt_profile_section(paths, images, plots, runs_path=None):
    """m04_gpt --profile's tables (docs/data/gpt_profile_<precision>.csv): per group and per
    phase, bf16 beside fp32 where both exist, and the bar chart; the runs' notes from
    gpt_runs.txt. Returns the page's lines."""
    profiles = [(p, read_gpt_profile(path)) for p, path in paths if path]
    profiles = [(p, rows) for p, rows in profiles if rows]
    if not profiles:
        return []
    names = [p for p, _ in profiles]
    grouped = {p: gpt_profile_groups(rows) for p, rows in profiles}
    out = ['<a id="results_gpt_profile"></a>', "## GPT: where a training step's time goes", "",
           "`m04_gpt --profile` (module 4's GPT, default configuration): CUDA events between the phases of 10 "
           "training steps, each phase summed over the 6 layers; a step's total is the sum of its phases (the "
           "events and a synchronization per profiled step put it a little above an unprofiled step). From "
           + ", ".join(f"`{path.name}`" for _, path in paths if path) + ". GEMM phases include their epilogues "
           "and, backward, the bias gradient; other: the batch, the embeddings, the loss, GELU backward, AdamW.", ""]
    out += gpt_run_notes(runs_path, [path.name for _, path in paths if path])
    out += ["| group | " + " | ".join(f"{p} ms/step | {p} share" for p in names) + " |",
           "| --- |" + " ---: | ---: |" * len(names)]
    by_group = {p: {g: (ms, share) for g, ms, share, _ in grouped[p]} for p in names}
    for g, _ in GPT_PHASE_GROUPS:
        cells = [by_group[p].get(g) for p in names]
        if any(cells):
            out.append(f"| {g} | " + " | ".join("- | -" if c is None else f"{c[0]:.3f} | {100 * c[1]:.1f}%"
                                                    for c in cells) + " |")
    out.append("| **step** | " + " | ".join(f"**{sum(ms for _, ms, _ in rows):.3f}** | 100%" for _, rows in profiles)
               + " |")
    out += ["", "| phase | group | " + " | ".join(f"{p} ms/step | {p} share" for p in names) + " |",
            "| --- | --- |" + " ---: | ---: |" * len(names)]
    per_phase = {p: {ph: (ms, share) for ph, ms, share in rows} for p, rows in profiles}
    order = list(dict.fromkeys(ph for _, rows in profiles for ph, _, _ in rows))
    for ph in order:
        cells = [per_phase[p].get(ph) for p in names]
        out.append(f"| {ph} | {gpt_phase_group(ph)} | "
                   + " | ".join("- | -" if c is None else f"{c[0]:.3f} | {100 * c[1]:.1f}%" for c in cells) + " |")
    image = images / "gpt_profile.png"
    if plots:
        gpt_profile_plot(profiles, image)
    return out + [""] + (["![m04_gpt --profile](images/gpt_profile.png)", ""] if image.exists() else [])


def read_curve(path):
    """m04_gpt --csv or gpt_twin.py --curve-csv -> ([(step, loss)], {step: val_loss})."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    train = [(int(r["step"]), float(r["loss"])) for r in rows]
    val = {int(r["step"]): float(r["val_loss"]) for r in rows if r.get("val_loss")}
    return train, val


def smoothed(values, window):
    """Trailing mean over `window` values (fewer at the start)."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def gpt_curves_plot(course, twin, image, window=50):
    """Top: both runs' training loss (trailing mean of `window` steps) and validation losses.
    Bottom: m04_gpt minus the twin, training (smoothed) and validation, with the +-0.02 band."""
    fig, (ax, ax_d) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
    smooth = {}
    for key, (train, val), label, colour in (("course", course, "m04_gpt (course kernels)", "#4c72b0"),
                                             ("twin", twin, "PyTorch twin", "#dd8452")):
        smooth[key] = dict(zip([s for s, _ in train], smoothed([l for _, l in train], window)))
        ax.plot(list(smooth[key]), list(smooth[key].values()), color=colour, lw=1.2,
                label=f"{label}: training loss, mean of {window} steps")
        steps = sorted(val)
        ax.plot(steps, [val[s] for s in steps], "o--", color=colour, ms=5, lw=0.8,
                label=f"{label}: validation loss")
    ax.set_ylabel("cross-entropy (nats per character)")
    top = max(list(course[1].values()) + list(twin[1].values()) + [2.5])
    ax.set_ylim(min(l for train, _ in (course, twin) for _, l in train) * 0.95, min(top * 1.1, 4.6))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("m04_gpt beside its PyTorch twin: same initial parameters, same batches")
    both = sorted(set(smooth["course"]) & set(smooth["twin"]))
    ax_d.plot(both, [smooth["course"][s] - smooth["twin"][s] for s in both], color="#555555", lw=1,
              label=f"training loss (mean of {window})")
    common = sorted(set(course[1]) & set(twin[1]))
    ax_d.plot(common, [course[1][s] - twin[1][s] for s in common], "o", color="#c44e52", ms=5,
              label="validation loss")
    ax_d.axhspan(-GPT_VAL_TOLERANCE, GPT_VAL_TOLERANCE, color="#55a868", alpha=0.15,
                 label=f"+-{GPT_VAL_TOLERANCE} (the target)")
    ax_d.axhline(0.0, color="#888888", lw=0.8)
    ax_d.set_ylabel("m04_gpt - twin")
    ax_d.set_xlabel("step")
    ax_d.grid(alpha=0.3)
    ax_d.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(image, dpi=110)
    plt.close(fig)


def gpt_curves_section(course_path, twin_path, images, plots, runs_path=None):
    """m04_gpt's loss curve beside its PyTorch twin's (docs/data/m04_gpt_curve.csv,
    gpt_twin_curve.csv): the validation losses side by side and the plot. Returns the page's
    lines (none unless both files exist)."""
    if course_path is None or twin_path is None:
        return []
    course, twin = read_curve(course_path), read_curve(twin_path)
    common = sorted(set(course[1]) & set(twin[1]))
    if not common:
        return []
    out = ['<a id="results_gpt_loss_curves"></a>', "## GPT: the loss curve beside the PyTorch twin", "",
           f"`m04_gpt --csv` (`{course_path.name}`) and `scripts/gpt_twin.py --curve-csv` (`{twin_path.name}`): the "
           "same model from the same initial parameters (`--dump-init`), trained on the same batches with the same "
           "schedule, bf16 on both sides (the twin under autocast); validation loss: the mean over the same 20 "
           f"validation batches. Target (issue 28): within {GPT_VAL_TOLERANCE} of the twin's after the same steps.",
           ""]
    out += gpt_run_notes(runs_path, [course_path.name, twin_path.name])
    out += ["| step | m04_gpt validation loss | twin validation loss | m04_gpt - twin | within "
           f"{GPT_VAL_TOLERANCE} |", "| ---: | ---: | ---: | ---: | --- |"]
    for s in common:
        d = course[1][s] - twin[1][s]
        out.append(f"| {s} | {course[1][s]:.4f} | {twin[1][s]:.4f} | {d:+.4f} | "
                   f"{'yes' if abs(d) <= GPT_VAL_TOLERANCE else 'no'} |")
    image = images / "gpt_loss_curves.png"
    if plots:
        gpt_curves_plot(course, twin, image)
    return out + [""] + (["![m04_gpt and its PyTorch twin](images/gpt_loss_curves.png)", ""] if image.exists() else [])


def compare_torch_table(rows):
    """One line per (op, shape): the best solution step as a fraction of the best PyTorch row
    (time ratio), every solution step's fraction, and the accuracy rule's verdict."""
    groups = OrderedDict()
    for r in rows:
        if r.get("impl") in ("solution", "pytorch"):
            groups.setdefault((r["op"], r["shape"]), []).append(r)
    out = ["| op | shape | best PyTorch | ms | best solution step | ms | fraction | every step (fraction) | accuracy |",
           "| --- | --- | --- | ---: | --- | ---: | ---: | --- | --- |"]
    for (op, shape), rs in groups.items():
        lib = [r for r in rs if r["impl"] == "pytorch" and r.get("ms")]
        sol = [r for r in rs if r["impl"] == "solution" and r.get("ms")]
        if not lib and not sol:
            continue
        best_t = min(lib, key=lambda r: r["ms"]) if lib else None
        best_s = min(sol, key=lambda r: r["ms"]) if sol else None
        frac = ratio(best_t["ms"], best_s["ms"]) if best_t and best_s else "-"
        steps = ", ".join(f"{r['step']} {ratio(best_t['ms'], r['ms'])}" for r in sol) if best_t else ""
        bad = [r["step"] for r in rs if r["impl"] == "solution" and r.get("accuracy_ok") is False]
        checked = any("accuracy_ok" in r for r in rs if r["impl"] == "solution")
        acc = ("fails: " + ", ".join(bad)) if bad else ("ok" if checked else "-")
        out.append(f"| {op} | {shape} | {best_t['backend'] if best_t else '-'} | {fmt(best_t and best_t['ms'], 3)} | "
                   f"{best_s['step'] if best_s else '-'} | {fmt(best_s and best_s['ms'], 3)} | {frac} | {steps} | "
                   f"{acc} |")
    return out


def refusal_reason(error):
    """PyTorch's refusal, short: SDPA's 'No available kernel' with the reason of the backend
    asked for (the other backends' 'runtime disabled' lines and 'Triggered internally at'
    locations dropped); any other error's first sentence."""
    m = re.match(r"(?:\w+: )?refused: (.*?)(?: \((.*))?$", error, re.S)
    if not m:
        return re.split(r"(?<=\.) ", error.strip(), maxsplit=1)[0][:160]
    head, why = m.group(1).strip(), m.group(2) or ""
    why = re.sub(r"\(Triggered internally at [^)]*(\)|$)\.?", "", why)
    parts = [p.strip(" .;()") for p in why.split(";")]
    kept = [p for p in parts if p and not re.search(r"not used because|runtime disabled", p)]
    if not kept:
        return f"{head.rstrip('.')} (the stored message ends before this backend's own reason)"
    return re.split(r"(?<=\.) ", kept[0], maxsplit=1)[0].rstrip(".")


def refusal_lines(rows):
    """One line per (op, backend, reason) of the PyTorch rows that did not run."""
    shapes = {}
    for r in rows:
        shapes.setdefault(r.get("op"), set()).add(r.get("shape"))
    refused = OrderedDict()
    for r in rows:
        if r.get("impl") == "pytorch" and r.get("error"):
            refused.setdefault((r["op"], r.get("backend", "?"), refusal_reason(r["error"])), []).append(r["shape"])
    lines = []
    for (op, backend, reason), where in refused.items():
        n, total = len(where), len(shapes.get(op, ()))
        which = f"all {total} shapes" if n == total and n > 1 else ", ".join(where)
        lines.append(f"- `{op}`, {torch_backend_label(op, backend, [])} ({which}): {reason}.")
    return (["PyTorch backends that refused a case (one line per backend and reason):", ""] + lines + [""]) \
        if lines else []


def like_for_like_lines(rows):
    """A line per (op, shape) whose PyTorch row writes another dtype than the course."""
    lines = []
    for r in rows:
        if r.get("impl") == "pytorch" and r.get("ms"):
            note = dtype_note(r["op"], r["shape"], r.get("note"))
            if note:
                lines.append(f"- `{r['op']}` {r['shape']} beside `{r.get('backend')}`: {note}.")
    return (["Not like for like:", ""] + list(dict.fromkeys(lines)) + [""]) if lines else []


def attention_vs_n_section(rows, op, images, title, plots, tag=""):
    """Attention against N for d = 64 and 128, causal and not: TFLOP/s of every solution
    step and of the SDPA backends, and the top step as a fraction of FlashAttention-2
    (SDPA flash) and cuDNN. `tag` keeps the anchor and image of a second run apart.
    Returns the page's lines (a table and two plots)."""
    pat = re.compile(r"N(\d+)_d(\d+)(_causal)?$")
    data = {}  # (d, causal) -> {N: {name: TFLOP/s}}
    for r in rows:
        m = pat.search(r.get("shape", ""))
        if r.get("op") != op or not m or not r.get("value") or r.get("impl") not in ("solution", "pytorch"):
            continue
        name = r["step"] if r["impl"] == "solution" else "pytorch " + r["backend"]
        data.setdefault((int(m.group(2)), bool(m.group(3))), {}).setdefault(int(m.group(1)), {})[name] = r["value"]
    if not data:
        return []
    lines = [f'<a id="results_torch_{slug(op + tag)}"></a>', f"## {title}", "",
             "TFLOP/s by the FlashAttention convention (4 B H N^2 d, halved when causal); B = 16384 / N and "
             "H = 2048 / d for the bf16 rows. `top` is the fastest solution step at that N; FA2 is SDPA's `flash` "
             "backend, cuDNN its `cudnn` backend.", "",
             "| d | causal | N | top step | TFLOP/s | FA2 | cuDNN | top / FA2 | top / cuDNN |",
             "| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    keys = sorted(data)
    # A curve against N needs two N at least (a --quick run has one): then the table alone.
    plot = any(len(v) >= 2 for v in data.values())
    fracs = {}
    for d, causal in keys:
        by_n = data[(d, causal)]
        for n in sorted(by_n):
            course = {k: v for k, v in by_n[n].items() if not k.startswith("pytorch")}
            top = max(course, key=course.get) if course else None
            fa2, cudnn = by_n[n].get("pytorch flash"), by_n[n].get("pytorch cudnn")
            tv = course.get(top)
            lines.append(f"| {d} | {'yes' if causal else 'no'} | {n} | {top or '-'} | {fmt(tv)} | {fmt(fa2)} | "
                         f"{fmt(cudnn)} | {ratio(tv, fa2)} | {ratio(tv, cudnn)} |")
            fracs.setdefault((d, causal), []).append((n, tv / fa2 if tv and fa2 else None,
                                                     tv / cudnn if tv and cudnn else None))
    image = images / f"results_torch_{slug(op + tag)}.png"
    if plots and not plot:
        image.unlink(missing_ok=True)
    if plots and plot:
        attention_vs_n_plot(data, keys, fracs, title, image)
    if not plot or not image.exists():
        return lines + [""]
    return lines + ["", f"![{title}](images/{image.name})", ""]


def attention_vs_n_plot(data, keys, fracs, title, image):
    # One colour per step or backend on every panel (a panel may lack some of them).
    run_order = list(dict.fromkeys(name for v in data.values() for per_n in v.values() for name in per_n))
    every = sorted(run_order, key=lambda n: (n.startswith("pytorch"), run_order.index(n)))
    colour = {name: plt.cm.tab10(i % 10) for i, name in enumerate(every)}
    fig, axes = plt.subplots(2, len(keys), figsize=(4.2 * len(keys), 7), squeeze=False)
    for col, (d, causal) in enumerate(keys):
        by_n = data[(d, causal)]
        ns = sorted(by_n)
        ax = axes[0][col]
        for name in every:
            pts = [(n, by_n[n][name]) for n in ns if name in by_n[n]]
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o--" if name.startswith("pytorch") else "o-",
                    label=name, ms=3, color=colour[name])
        ax.set_xscale("log", base=2)
        ax.set_title(f"d = {d}{', causal' if causal else ''}")
        ax.set_ylabel("TFLOP/s")
        ax2 = axes[1][col]
        for label, idx in (("top step / FA2", 1), ("top step / cuDNN", 2)):
            pts = [(f[0], f[idx]) for f in fracs[(d, causal)] if f[idx] is not None]
            if pts:
                ax2.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label, ms=3)
        ax2.axhline(1.0, color="#888888", lw=0.8)
        ax2.set_xscale("log", base=2)
        ax2.set_xlabel("N")
        ax2.set_ylabel("fraction")
        if ax2.get_lines()[1:]:  # a fraction curve besides the 1.0 line
            ax2.legend(fontsize=7)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(image, dpi=110)
    plt.close(fig)


def compare_torch_section(path, data, images, plots):
    """The PyTorch comparison (scripts/compare_torch.py --out compare_torch.json): the
    fraction-of-PyTorch table, the refusals, the like-for-like notes and the attention-vs-N
    tables and plots. Returns the page's lines."""
    if data is None:
        return []
    env, rows = data.get("env", {}), data.get("results", [])
    facts = ", ".join(f"{k} {env[k]}" for k in ("gpu", "driver", "torch", "torch_cuda", "cudnn", "commit") if k in env)
    out = ['<a id="results_pytorch"></a>', "## The course beside PyTorch", "",
           f"From `{path.name}` ({facts}): `scripts/compare_torch.py` runs every step and PyTorch's equivalents on "
           "the same tensors with one timer (CUDA events, L2 flushed, median). fraction = best PyTorch time / "
           "course time (1.00 = as fast as the best PyTorch row; above 1 faster). accuracy: max error vs float64 "
           "within 2x (backward 3x) PyTorch's own, plus a small floor.", ""]
    out += compare_torch_table(rows) + [""]
    out += like_for_like_lines(rows)
    out += refusal_lines(rows)
    out += attention_vs_n_section(rows, "attention_bf16", images, "Tensor-core attention (bf16) beside FA2 and cuDNN",
                                  plots)
    out += attention_vs_n_section(rows, "attention_f32", images, "fp32 attention beside PyTorch's SDPA", plots)
    return out


EXTRA_COMPARE = "compare_torch_*.json"  # docs/data/: runs of a few steps on another GPU


def attention_steps_table(rows, op):
    """Every solution step of `op` at every shape beside SDPA's flash (FA2) and cudnn backends:
    TFLOP/s, and each step's fraction of cuDNN. Returns the page's lines."""
    pat = re.compile(r"N(\d+)_d(\d+)(_causal)?$")
    cells, steps = {}, []
    for r in rows:
        m = pat.search(r.get("shape", ""))
        if r.get("op") != op or not m or not r.get("value") or r.get("impl") not in ("solution", "pytorch"):
            continue
        name = r["step"] if r["impl"] == "solution" else "pytorch " + r["backend"]
        if r["impl"] == "solution" and name not in steps:
            steps.append(name)
        cells.setdefault((int(m.group(2)), bool(m.group(3)), int(m.group(1))), {})[name] = r["value"]
    if not cells:
        return []
    lines = ["| d | causal | N | FA2 | cuDNN | " + " | ".join(f"`{s}` (/ cuDNN)" for s in steps) + " |",
             "| ---: | --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in steps) + " |"]
    for d, causal, n in sorted(cells):
        c = cells[(d, causal, n)]
        cudnn = c.get("pytorch cudnn")
        lines.append(f"| {d} | {'yes' if causal else 'no'} | {n} | {fmt(c.get('pytorch flash'))} | {fmt(cudnn)} | "
                     + " | ".join(f"{fmt(c.get(s))} ({ratio(c.get(s), cudnn)})" for s in steps) + " |")
    return lines


def other_ops_table(rows, skip=("attention_bf16", "attention_backward_bf16")):
    """The rows of ops other than `skip`, one line per (op, shape): the fastest PyTorch
    variant and the fastest solution step, each with its value (in the op's unit) and time,
    and PyTorch's time over the step's (above 1: the course is faster). Returns the page's lines."""
    cells = {}  # (op, shape) -> {"unit": u, "torch": (ms, name, value), "step": (ms, name, value)}
    for r in rows:
        if r.get("op") in skip or not r.get("ms") or r.get("impl") not in ("solution", "pytorch"):
            continue
        c = cells.setdefault((r["op"], r["shape"]), {"unit": r.get("unit", "")})
        key, name = ("step", r["step"]) if r["impl"] == "solution" else ("torch", r["backend"])
        if key not in c or r["ms"] < c[key][0]:
            c[key] = (r["ms"], name, r.get("value"))
    lines = ["| op | shape | unit | fastest PyTorch | value | ms | top step | value | ms | PyTorch ms / step ms |",
             "| --- | --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for (op, shape), c in cells.items():
        if "torch" not in c or "step" not in c:
            continue
        t, st = c["torch"], c["step"]
        lines.append(f"| {op} | {shape} | {c['unit']} | `{t[1]}` | {fmt(t[2])} | {t[0]:.3f} | `{st[1]}` | {fmt(st[2])} | "
                     f"{st[0]:.3f} | {t[0] / st[0]:.2f} |")
    return lines if len(lines) > 2 else []


def extra_compare_sections(docs, images, plots):
    """docs/data/compare_torch_*.json: runs of scripts/compare_torch.py on a few steps only,
    on another GPU than the page's main run (for example the Hopper attention steps measured
    on an H100 while the rest of the page is an H200's). Each becomes its own section with
    its own GPU named, so that no table mixes two cards: a table of the bf16 forward's rows
    with a section against N, a table of the bf16 backward's, and one line per shape of any
    other op (other_ops_table). A file may carry a "title" and a
    "note" besides compare_torch.py's "env" and "results". Returns the page's lines."""
    out = []
    for path in sorted((docs / "data").glob(EXTRA_COMPARE)):
        data = json.loads(path.read_text())
        env, rows = data.get("env", {}), data.get("results", [])
        facts = ", ".join(f"{k} {env[k]}" for k in ("gpu", "date", "driver", "torch", "cudnn", "commit") if k in env)
        title = data.get("title", path.stem)
        tag = "_" + path.stem.removeprefix("compare_torch_")
        out += [f'<a id="results_pytorch_{slug(tag)}"></a>', f"## {title}", "",
                f"From `docs/data/{path.name}` ({facts}): `scripts/compare_torch.py` on the same tensors as PyTorch, "
                "one timer, as in the section above but on this run's GPU; ratios only within this table."
                + (" " + data["note"] if data.get("note") else ""), ""]
        forward, backward = attention_steps_table(rows, "attention_bf16"), attention_steps_table(rows, "attention_backward_bf16")
        if forward:
            out += forward + [""]
            out += attention_vs_n_section(rows, "attention_bf16", images, f"{title}: the top step against N", plots, tag)
        if backward:
            out += ["The backward (`attention_backward_bf16`): TFLOP/s at 2.5 times the forward's FLOPs "
                    "(the FlashAttention convention), SDPA's backends through `torch.autograd.grad`.", ""] + backward + [""]
        out += other_ops_table(rows) + [""] if other_ops_table(rows) else []
    return out


def bar_chart(path, title, unit, labels, values, mine, library):
    """Horizontal bars, first step on top: the solution's value per step (and yours beside it
    when there is one), each labelled with its number; the library as a dashed line. A log
    axis when the values span more than 50x (module 1's atomic_naive beside 4 TB/s); the
    legend sits right of the axes, never on a bar."""
    has_mine = any(v is not None for v in mine)
    n = len(labels)
    fig, ax = plt.subplots(figsize=(7.5, 0.5 * n * (1.6 if has_mine else 1) + 1.6))
    pos = list(range(n))[::-1]  # first step on top
    h = 0.38 if has_mine else 0.7
    sol_y = [p + (h / 2 if has_mine else 0) for p in pos]
    bars = [(ax.barh(sol_y, values, height=h, color="#4c72b0", label="solution"), values)]
    if has_mine:
        mine_v = [v or 0.0 for v in mine]
        bars.append((ax.barh([p - h / 2 for p in pos], mine_v, height=h, color="#dd8452", label="yours"), mine_v))
    positive = [v for v in values + [v for v in mine if v] + ([library[1]] if library else []) if v and v > 0]
    log = bool(positive) and max(positive) / min(positive) > 50
    if log:
        ax.set_xscale("log")
        ax.set_xlim(min(positive) / 2, max(positive) * 2.5)
    else:
        ax.set_xlim(0, max(positive or [1.0]) * 1.18)
    for container, vals in bars:
        for rect, v in zip(container, vals):
            if v:
                ax.annotate(f"{v:.0f}" if v >= 100 else f"{v:.3g}", (rect.get_width(), rect.get_y() + rect.get_height() / 2),
                            xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
    if library:
        ax.axvline(library[1], color="#c44e52", ls="--", label=f"library ({library[0]})")
    ax.set_yticks(pos, labels)
    ax.set_xlabel(unit + (" (log scale)" if log else ""))
    ax.set_title(title)
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False, fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


# ---------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------

def keep_input(src, docs, name):
    """Copies a run's input into docs/data/ (what a later rebuild reads)."""
    dst = docs / "data" / name
    if src and src.resolve() != dst.resolve():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        print(f"kept {src} as {dst}")


def main():
    global plt
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=pathlib.Path, nargs="?",
                    help="a gpu_check.sh output folder; left out: rebuild from docs/data/")
    ap.add_argument("--docs", type=pathlib.Path, default=pathlib.Path("docs"))
    ap.add_argument("--yours", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent.parent / "build",
                    help="folder of your own benchmark JSON (bench_*.json; default: build/)")
    ap.add_argument("--no-plots", action="store_true", help="draw no images; link those already in docs/images/")
    ap.add_argument("--merge", action="store_true",
                    help="RUN_DIR's benchmark rows replace the stored rows of the same name and the other stored "
                         "rows stay (a run of some benchmarks only); without it a run's rows replace them all")
    ap.add_argument("--gpt-profile-text", type=pathlib.Path, metavar="CSV",
                    help="only print m04_gpt --profile-csv's table as the lesson's text bar chart, then exit")
    args = ap.parse_args()
    if args.gpt_profile_text:
        print("\n".join(gpt_profile_text(read_gpt_profile(args.gpt_profile_text))))
        return
    plots = not args.no_plots
    if plots:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as pyplot
            plt = pyplot
        except ImportError:
            print("matplotlib is not installed: no plots drawn; the images already in docs/images/ are linked")
            plots = False

    stored = args.docs / "data" / STORED
    bench_files = sorted(args.run_dir.glob("bench_*.json")) if args.run_dir else []
    if bench_files:
        records = []
        for path in bench_files:
            records += bench_records(path, path.stem.removeprefix("bench_"))[0]
        env = (args.run_dir / "env.txt").read_text() if (args.run_dir / "env.txt").exists() else ""
        # Keep the facts (date, commit, GPU, driver, CUDA, CMake); drop any git-status noise.
        env = "\n".join(l for l in env.splitlines()
                        if l.strip() and not l.startswith(("??", " M", "HEAD", "(no git)")))
        source = f"scripts/gpu_check.sh: {', '.join(p.name for p in bench_files)}"
        if args.merge and stored.exists():
            old_records, old_env, old_source = load_stored(stored)
            key = lambda r: (r["module"], r["op"], r["impl"], r["step"], r["shape"])
            fresh = {key(r) for r in records}
            records = [r for r in old_records if key(r) not in fresh] + records
            env = f"{old_env}\n(merged rows: {source})\n{env}"
            source = f"{old_source}; merged: {source}"
        store_bench(stored, records, env, source)
        print(f"kept the {len(records)} benchmark rows in {stored}")
    elif stored.exists():
        records, env, _ = load_stored(stored)
        print(f"{'no bench_*.json in ' + str(args.run_dir) if args.run_dir else 'no RUN_DIR'}: "
              f"the benchmark rows come from {stored}")
    else:
        sys.exit(f"no bench_*.json in {args.run_dir} and no {stored}")
    groups = in_course_order(group_records(records))
    compare_path = input_file(args.run_dir, args.docs, "compare_torch.json")
    curve_path = input_file(args.run_dir, args.docs, "m04_training_curve.csv")
    gpt_inputs = {name: input_file(args.run_dir, args.docs, name)
                  for name in [n for _, n in GPT_PROFILES] + list(GPT_CURVES) + [GPT_RUNS]}
    if args.run_dir:
        keep_input(compare_path, args.docs, "compare_torch.json")
        keep_input(curve_path, args.docs, "m04_training_curve.csv")
        for name, path in gpt_inputs.items():
            keep_input(path, args.docs, name)
    compare = json.loads(compare_path.read_text()) if compare_path else None
    yours, yours_sources = load_yours(args.yours)
    images = args.docs / "images"
    images.mkdir(parents=True, exist_ok=True)

    extra_rows = [r for path in sorted((args.docs / "data").glob(EXTRA_COMPARE))
                  for r in json.loads(path.read_text()).get("results", [])]
    summary, anchors = summary_section(groups, (compare or {}).get("results", []), extra_rows)
    merged = "(merged rows:" in env
    source_line = ("Generated by `scripts/make_results.py` from runs of `scripts/gpu_check.sh` on the GPU machines "
                   "listed below (a full run, then runs of some benchmarks merged over its rows with `--merge`)"
                   if merged else
                   "Generated by `scripts/make_results.py` from one run of `scripts/gpu_check.sh` on the GPU machine "
                   "(below)")
    out = ["# Results {#results}", "",
           source_line + " and, for the PyTorch columns, `scripts/compare_torch.py`; the inputs are kept in "
           "`docs/data/`.",
           "Every ratio is measured within one run (a row and its library, a course call and PyTorch's on the same "
           "tensors); absolute numbers hold only for the GPU of their run.", ""]
    out += summary
    out += ["## The benchmark run", "", "```", env.strip(), "```", ""]
    if yours_sources:
        out += ["The **yours** column: your exercise rows from " + ", ".join(yours_sources)
                + " -- your GPU, not necessarily the one above.", ""]
    else:
        out += ["The **yours** column shows `-` until you have benchmarked your own kernels: "
                "`bash scripts/course.sh bench` writes `build/bench_<module>.json`; run this script again "
                "and your numbers appear beside the solution's.", ""]
    for (module, op, shape), steps in groups.items():
        # The fastest library row is the reference (as in the benchmark's own summary).
        libs, lib_name, lib = reference_library(steps)
        # The unit of a measured row: a skipped row (no counters) would read as "us".
        rows_here = [r for per_impl in steps.values() for r in per_impl.values()]
        unit = next((r["unit"] for r in rows_here if r["value"] is not None), rows_here[0]["unit"])
        if section_anchor(module, op, shape) in anchors:
            out.append(f'<a id="{section_anchor(module, op, shape)}"></a>')
        out += [f"## {module}: {op} ({shape})", ""]
        out += [f"| step | solution {unit} | yours {unit} | library | sol / lib | sol / copy |",
                "| --- | ---: | ---: | ---: | ---: | ---: |"]
        labels, values, mine = [], [], []
        for step, impls in steps.items():
            if "library" in impls:
                continue
            sol = impls.get("solution", {}).get("value")
            ex = yours.get((module, op, shape, step), impls.get("exercise", {}).get("value"))
            copy = impls.get("solution", {}).get("copy")
            out.append(f"| {step} | {fmt(sol)} | {fmt(ex)} | {fmt(lib['value'] if lib else None)} | "
                       f"{ratio(sol, lib['value'] if lib else None)} | {ratio(sol, copy) if unit == 'GB/s' else '-'} |")
            labels.append(step)
            values.append(sol or 0.0)
            mine.append(ex)
        if libs:
            out += ["", "Library rows: " + ", ".join(f"`{n}` = {fmt(r['value'])} {unit}" for n, r in libs)
                    + f" (the table compares with `{lib_name}`)."]
        image = images / f"results_{slug(f'{module}_{op}_{shape}')}.png"
        if plots:
            bar_chart(image, f"{op} {shape}", unit, labels, values, mine, (lib_name, lib["value"]) if lib else None)
        out += [""] + ([f"![{op} {shape}](images/{image.name})", ""] if image.exists() else [])
    out += compare_torch_section(compare_path, compare, images, plots)
    out += extra_compare_sections(args.docs, images, plots)
    out += training_curve_section(curve_path, images, plots)
    out += gpt_profile_section([(p, gpt_inputs[name]) for p, name in GPT_PROFILES], images, plots,
                               gpt_inputs[GPT_RUNS])
    out += gpt_curves_section(*(gpt_inputs[name] for name in GPT_CURVES), images, plots, gpt_inputs[GPT_RUNS])
    (args.docs / "results.md").write_text("\n".join(out) + "\n")
    print(f"wrote {args.docs / 'results.md'} with {len(groups)} tables and a {len(anchors)}-link summary")


if __name__ == "__main__":
    main()
