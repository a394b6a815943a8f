#!/usr/bin/env python3
"""Turn the benchmark JSON of a GPU run into docs/results.md and plots.

usage: scripts/make_results.py RUN_DIR [--docs docs]
RUN_DIR holds bench_<module>.json files and env.txt, as scripts/gpu_check.sh writes them.
Rows are named op/impl/step/shape (impl: solution, exercise, library); each op+shape
becomes one table (steps in ladder order) and one bar chart. compare_torch.json
(scripts/compare_torch.py --out) in RUN_DIR adds the PyTorch comparison section.
Tables come in course order (module 1's ops as its lesson teaches them, then modules 2-4).
The "yours" column comes from the learner's own benchmark JSON when there is one
(--yours DIR, default build/: bench_*.json, as `bash scripts/course.sh bench` writes them),
else from RUN_DIR's exercise rows, else "-".
After regenerating the page, run scripts/check_numbers.py (CI does): it checks every number
that step banners, READMEs and lessons quote from this page ("Measured (results: ROW): ...")
and lists each one the new run changed.
"""
import argparse
import csv
import json
import pathlib
import re
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load_rows(run_dir):
    groups = OrderedDict()  # (module, op, shape) -> OrderedDict(step -> {impl: row})
    contexts = {}
    for path in sorted(run_dir.glob("bench_*.json")):
        load_rows_from(path, path.stem.removeprefix("bench_"), groups, contexts)
    return in_course_order(groups), contexts


def load_rows_from(path, module, groups=None, contexts=None):
    """Adds the rows of one benchmark JSON file to groups (module, op, shape) -> steps."""
    groups = OrderedDict() if groups is None else groups
    contexts = {} if contexts is None else contexts
    data = json.loads(path.read_text())
    contexts[module] = data.get("context", {})
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
        row = {"value": None if skipped else value, "unit": unit,
               "copy": b.get("copy_GB/s"), "time_ms": b.get("real_time"), "diagnostic": "diagnostic" in b}
        groups.setdefault((module, op, shape), OrderedDict()).setdefault(step, {})[impl] = row
    return groups, contexts


# Course order: each module's ops as its lesson teaches them; ops not listed follow in run order.
COURSE_OP_ORDER = {
    "m01": ["l2_norm", "dot", "softmax", "sgemm", "hgemm_bf16"],
    "m02": ["bgemm_qk_f32", "bgemm_pv_f32", "bgemm_qk_bf16", "bgemm_pv_bf16", "bgemm_ptr_build"],
    "m03": ["attn_f32", "attn_bf16"],
    "m04": ["softmax_backward", "linear_backward", "bias_grad", "attn_bwd_f32"],
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


def training_curve_section(run_dir, docs, images):
    """Module 4's training curve (m04_train --out m04_training_curve.csv): loss and accuracy
    vs step, plotted if the CSV is in RUN_DIR or in docs/data/. Returns the page's lines."""
    path = next((p for p in (run_dir / "m04_training_curve.csv", docs / "data" / "m04_training_curve.csv")
                 if p.exists()), None)
    if path is None:
        return []
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return []
    step = [int(r["step"]) for r in rows]
    val = [(int(r["step"]), float(r["val_accuracy"])) for r in rows if r.get("val_accuracy")]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax_loss.plot(step, [float(r["loss"]) for r in rows], color="#4c72b0")
    ax_loss.set_yscale("log")
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("cross-entropy (training batch)")
    ax_acc.plot(step, [100 * float(r["accuracy"]) for r in rows], color="#4c72b0", label="training batch")
    if val:
        ax_acc.plot([s for s, _ in val], [100 * a for _, a in val], "o", color="#c44e52", label="fresh validation batch")
    ax_acc.set_xlabel("step")
    ax_acc.set_ylabel("accuracy (%)")
    ax_acc.set_ylim(0, 101)
    ax_acc.legend(loc="lower right")
    fig.suptitle("m04_train: one causal self-attention layer, course kernels only")
    fig.tight_layout()
    fig.savefig(images / "results_m04_training_curve.png", dpi=110)
    plt.close(fig)
    last = rows[-1]
    final = f"validation accuracy {100 * val[-1][1]:.2f}% at step {val[-1][0]}" if val else f"step {step[-1]}"
    return ["## module04_training: training curve", "",
            f"`m04_train` on the GPU, from `{path.name}`: {len(rows)} steps, final training loss "
            f"{float(last['loss']):.4g}, {final}.", "",
            "![m04_train training curve](images/results_m04_training_curve.png)", ""]


def load_compare_torch(run_dir, docs):
    """scripts/compare_torch.py's JSON (compare_torch.json in RUN_DIR or docs/data/), or None."""
    path = next((p for p in (run_dir / "compare_torch.json", docs / "data" / "compare_torch.json") if p.exists()),
                None)
    return (path, json.loads(path.read_text())) if path else (None, None)


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


def attention_vs_n_section(rows, op, images, title):
    """Attention against N for d = 64 and 128, causal and not: TFLOP/s of every solution
    step and of the SDPA backends, and the top step as a fraction of FlashAttention-2
    (SDPA flash) and cuDNN. Returns the page's lines (a table and two plots)."""
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
    lines = [f"## {title}", "",
             "TFLOP/s by the FlashAttention convention (4 B H N^2 d, halved when causal); B = 16384 / N and "
             "H = 2048 / d for the bf16 rows. `top` is the fastest solution step at that N; FA2 is SDPA's `flash` "
             "backend, cuDNN its `cudnn` backend.", "",
             "| d | causal | N | top step | TFLOP/s | FA2 | cuDNN | top / FA2 | top / cuDNN |",
             "| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    keys = sorted(data)
    # A curve against N needs two N at least (a --quick run has one): then the table alone.
    plot = any(len(v) >= 2 for v in data.values())
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
        frac_fa2, frac_cudnn = [], []
        for n in ns:
            course = {k: v for k, v in by_n[n].items() if not k.startswith("pytorch")}
            top = max(course, key=course.get) if course else None
            fa2, cudnn = by_n[n].get("pytorch flash"), by_n[n].get("pytorch cudnn")
            tv = course.get(top)
            lines.append(f"| {d} | {'yes' if causal else 'no'} | {n} | {top or '-'} | {fmt(tv)} | {fmt(fa2)} | "
                         f"{fmt(cudnn)} | {ratio(tv, fa2)} | {ratio(tv, cudnn)} |")
            frac_fa2.append((n, tv / fa2 if tv and fa2 else None))
            frac_cudnn.append((n, tv / cudnn if tv and cudnn else None))
        ax2 = axes[1][col]
        for label, pts in (("top step / FA2", frac_fa2), ("top step / cuDNN", frac_cudnn)):
            pts = [p for p in pts if p[1] is not None]
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
    slug = re.sub(r"[^A-Za-z0-9]+", "_", op)
    image = images / f"results_torch_{slug}.png"
    if not plot:
        plt.close(fig)
        image.unlink(missing_ok=True)
        return lines + [""]
    fig.savefig(image, dpi=110)
    plt.close(fig)
    return lines + ["", f"![{title}](images/results_torch_{slug}.png)", ""]


def compare_torch_section(run_dir, docs, images):
    """The PyTorch comparison (scripts/compare_torch.py --out compare_torch.json): the
    fraction-of-PyTorch table and the attention-vs-N plots. Returns the page's lines."""
    path, data = load_compare_torch(run_dir, docs)
    if data is None:
        return []
    env, rows = data.get("env", {}), data.get("results", [])
    facts = ", ".join(f"{k} {env[k]}" for k in ("gpu", "driver", "torch", "torch_cuda", "cudnn", "commit") if k in env)
    out = ["## The course beside PyTorch", "",
           f"From `{path.name}` ({facts}): `scripts/compare_torch.py` runs every step and PyTorch's equivalents on "
           "the same tensors with one timer (CUDA events, L2 flushed, median). fraction = best PyTorch time / "
           "course time (1.00 = as fast as the best PyTorch row; above 1 faster). accuracy: max error vs float64 "
           "within 2x (backward 3x) PyTorch's own, plus a small floor.", ""]
    out += compare_torch_table(rows) + [""]
    errors = [r for r in rows if r.get("error") and r.get("impl") == "pytorch"]
    if errors:
        out += ["PyTorch rows that did not run: " + "; ".join(
            f"{r['op']} {r['shape']} {r.get('backend', '')}: {r['error']}" for r in errors[:12])
            + (f" (and {len(errors) - 12} more)" if len(errors) > 12 else ""), ""]
    out += attention_vs_n_section(rows, "attention_bf16", images, "Tensor-core attention (bf16) beside FA2 and cuDNN")
    out += attention_vs_n_section(rows, "attention_f32", images, "fp32 attention beside PyTorch's SDPA")
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


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run_dir", type=pathlib.Path)
    ap.add_argument("--docs", type=pathlib.Path, default=pathlib.Path("docs"))
    ap.add_argument("--yours", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent.parent / "build",
                    help="folder of your own benchmark JSON (bench_*.json; default: build/)")
    args = ap.parse_args()
    groups, contexts = load_rows(args.run_dir)
    yours, yours_sources = load_yours(args.yours)
    env = (args.run_dir / "env.txt").read_text() if (args.run_dir / "env.txt").exists() else ""
    # Keep the facts (date, commit, GPU, driver, CUDA, CMake); drop any git-status noise.
    env = "\n".join(l for l in env.splitlines() if l.strip() and not l.startswith(("??", " M", "HEAD", "(no git)")))
    images = args.docs / "images"
    images.mkdir(parents=True, exist_ok=True)

    out = ["# Results {#results}", "",
           "Generated by `scripts/make_results.py` from one run of `scripts/gpu_check.sh` on the GPU machine.",
           "Ratios are measured in the same run; absolute numbers hold for the GPU named here only.",
           "", "```", env.strip(), "```", ""]
    if yours_sources:
        out += ["The **yours** column: your exercise rows from " + ", ".join(yours_sources)
                + " -- your GPU, not necessarily the one above.", ""]
    else:
        out += ["The **yours** column shows `-` until you have benchmarked your own kernels: "
                "`bash scripts/course.sh bench` writes `build/bench_<module>.json`; run this script again "
                "and your numbers appear beside the solution's.", ""]
    for (module, op, shape), steps in groups.items():
        # The fastest library row is the reference (as in the benchmark's own summary); a
        # diagnostic row (part of the op's traffic only, bench::mark_diagnostic) never is.
        libs = [(s, r["library"]) for s, r in steps.items() if "library" in r and r["library"]["value"]]
        refs = [(s, r) for s, r in libs if not r["diagnostic"]]
        lib_name, lib = max(refs, key=lambda x: x[1]["value"]) if refs else (None, None)
        # The unit of a measured row: a skipped row (no counters) would read as "us".
        rows_here = [r for per_impl in steps.values() for r in per_impl.values()]
        unit = next((r["unit"] for r in rows_here if r["value"] is not None), rows_here[0]["unit"])
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
        slug = re.sub(r"[^A-Za-z0-9]+", "_", f"{module}_{op}_{shape}").strip("_")
        bar_chart(images / f"results_{slug}.png", f"{op} {shape}", unit, labels, values, mine,
                   (lib_name, lib["value"]) if lib else None)
        out += ["", f"![{op} {shape}](images/results_{slug}.png)", ""]
    out += compare_torch_section(args.run_dir, args.docs, images)
    out += training_curve_section(args.run_dir, args.docs, images)
    (args.docs / "results.md").write_text("\n".join(out) + "\n")
    print(f"wrote {args.docs / 'results.md'} with {len(groups)} tables")


if __name__ == "__main__":
    main()
