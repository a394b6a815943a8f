#!/usr/bin/env python3
"""Draw the lessons' schematic figures (no GPU, no benchmark data).

usage: scripts/draw_figures.py [--out docs/images]

Draws hopper_attention_schedules.png: module 3's Hopper attention steps 11-13 (lesson section
12) as timelines of one SM, three panels on one time axis:

  step 11, tc_warp_specialized  each consumer warpgroup runs S_j -> softmax j -> P_j V_j; both
                                wait for the same first tile and stay in lockstep, so their
                                softmaxes coincide and the tensor cores idle;
  step 12, tc_pingpong          GEMM phases [P_{j-1} V_{j-1} + S_j] issued in turns (named
                                barriers): one consumer's softmax runs under the other's GEMMs;
  step 13, tc_overlap           S_j and P_{j-1} V_{j-1} are two commit groups: the softmax of
                                tile j starts at wgmma.wait_group 1 (S_j landed) under the same
                                warpgroup's P V; O is rescaled and P packed after wait_group 0.

Each panel has a producer lane (the TMA copies of K/V tiles into a ring of stages), the two
consumer lanes and the tensor cores. The timelines are not drawn by hand: a small simulation
runs the three schedules of the kernel (solutions/module03_attention/attention_tc_hopper.cuh)
on made-up durations, so every wait in the figure follows from a barrier in the code. Its
model of the tensor cores: wgmma groups run in the order they were issued; groups that two
warpgroups issue at the same moment (step 11's lockstep) share them. The softmax of one
warpgroup does not slow the other's. Schematic, not measured.

Draws causal_tile_order.png: which causal attention tiles run together in the first wave of
blocks (lesson section 12, the grouped order of steps 11-14), on a small example: 12 heads of
8 query tiles, 16 blocks running at once. Left, longest first over all heads (block_coordinates,
steps 3-10): the first wave holds the last query tile of every head, so almost every K/V tile
it reads is read once. Right, heads in groups of causal_group_heads (two waves of blocks),
longest first inside a group (grouped_tile_coordinates): the first wave holds all the long
tiles of 4 heads, which read the same K/V prefixes. The orders are the two functions in
module03_attention/include/module03/attention_blocks.cuh, rewritten in Python below.

Needs matplotlib (as scripts/make_results.py). The figure is committed; rerun this script
after changing the durations or the schedules, and look at the image before committing it.
"""
import argparse
import io
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------------------------
# Made-up durations, in units of one S_j = Q K_j^T of one consumer warpgroup (64 x 128 x 64) on
# the whole SM's tensor cores. The softmax of a 64 x 128 tile is bound by the exp unit (16 exp2
# per clock per SM against 4096 bf16 FLOP per clock: 8192 exps take twice as long as S at
# d = 64), plus max, sums and conversions; its last 0.4 rescale O and pack P.
S_UNITS = 1.0          # S_j = Q K_j^T, one consumer
PV_UNITS = 1.0         # O += P_j V_j, one consumer
SOFTMAX_UNITS = 2.0    # max, exp2, row sums of one tile (softmax_in_place in step 13)
RESCALE_UNITS = 0.4    # rescale O by exp2(old max - new max), pack P to bf16
TMA_TILE_UNITS = 2.5   # one K/V tile, 2 x 128 x 64 bf16 = 32 KB
TMA_Q_UNITS = 1.25     # the Q tile, 128 x 64 bf16 = 16 KB
STAGES = 4             # the K/V ring at d = 64
TILES = 5              # K/V tiles per block (N_k = 640)
TICKS = 20             # simulation ticks per unit

COLOR = {
    "tc1": "#1f5fa8",      # tensor cores, consumer 1's wgmmas
    "tc2": "#6fa8dc",      # tensor cores, consumer 2's wgmmas
    "softmax": "#f0a030",  # softmax on the ALUs and the exp unit (MUFU)
    "rescale": "#c0641a",  # rescale O, pack P
    "tma": "#4caf50",      # TMA copies
    "wait": "#c8c8c8",     # waiting
    "idle": "#d62728",     # tensor cores idle (hatch)
}


def ticks(units):
    return int(round(units * TICKS))


class Sim:
    """One block on one SM: a producer and two consumer warpgroups as generators, stepped one
    tick at a time. A generator yields ("alu", ticks, kind, label) for ALU work or ("wait",
    predicate); it issues wgmma groups and arrives on barriers by calling methods directly."""

    def __init__(self, schedule):
        self.schedule = schedule
        self.t = 0
        self.seq = 0
        self.q_landed = False
        self.landed = [False] * TILES
        self.released = [0] * TILES
        self.turn = [0, 0]            # named-barrier arrivals each consumer may consume
        self.tc_queue = []            # wgmma jobs not yet complete, in issue order
        self.tc_jobs = []             # every job: dict(owner, label, issue, start, end)
        self.tc_busy = []             # per tick: the owners the tensor cores served
        self.alu = {0: [], 1: []}     # consumer -> [(start, end, kind, label)]
        self.producer = []            # [(start, end, kind, label)]
        self.span = {0: [None, None], 1: [None, None]}
        self.marks = []               # (consumer, tick, text): barrier events worth naming

    # -- wgmma -------------------------------------------------------------------------------
    def issue(self, owner, jobs):
        """Issue one commit group of wgmmas; returns it (a list of jobs)."""
        group = []
        for label, units in jobs:
            job = dict(owner=owner, label=label, work=2 * ticks(units), issue=self.t, seq=self.seq,
                       start=None, end=None)
            self.seq += 1
            self.tc_queue.append(job)
            self.tc_jobs.append(job)
            group.append(job)
        return group

    def serve_tensor_cores(self):
        heads = {}
        for job in self.tc_queue:
            heads.setdefault(job["owner"], job)  # a warpgroup's wgmmas run in its issue order
        if not heads:
            self.tc_busy.append(())
            return
        heads = list(heads.values())
        if self.schedule == "serial":
            first = min(j["issue"] for j in heads)
            served = [j for j in heads if j["issue"] == first]  # issued together: shared
        else:
            served = [min(heads, key=lambda j: j["seq"])]       # the turns order the issues
        for job in served:
            if job["start"] is None:
                job["start"] = self.t
            job["work"] -= 2 // len(served)
            if job["work"] <= 0:
                job["end"] = self.t + 1
                self.tc_queue.remove(job)
        self.tc_busy.append(tuple(sorted(j["owner"] for j in served)))

    @staticmethod
    def done(group):
        return lambda: all(j["end"] is not None for j in group)

    # -- the agents ----------------------------------------------------------------------------
    def producer_gen(self):
        yield ("tma", ticks(TMA_Q_UNITS), "tma", ("Q", 0))
        self.q_landed = True
        for j in range(TILES):
            if j >= STAGES:
                prev = j - STAGES
                yield ("wait", lambda prev=prev: self.released[prev] == 2, "empty", ("wait", j))
            yield ("tma", ticks(TMA_TILE_UNITS), "tma", ("tma", j))
            self.landed[j] = True

    def wait_turn(self, cw):
        yield ("wait", lambda: self.turn[cw] > 0)
        self.turn[cw] -= 1

    def pass_turn(self, cw):
        self.turn[1 - cw] += 1
        self.marks.append((1 - cw, self.t, "turn"))

    def consumer_gen(self, cw):
        yield ("wait", lambda: self.q_landed)
        if self.schedule == "serial":
            for j in range(TILES):
                yield ("wait", lambda j=j: self.landed[j])
                self.mark_start(cw)
                g = self.issue(cw, [(("S", j), S_UNITS)])
                yield ("wait", self.done(g))
                yield ("alu", ticks(SOFTMAX_UNITS + RESCALE_UNITS), "softmax", ("softmax", j))
                g = self.issue(cw, [(("PV", j), PV_UNITS)])
                yield ("wait", self.done(g))
                self.released[j] += 1
            self.span[cw][1] = self.t
            return
        if cw == 1:
            self.pass_turn(cw)
        yield ("wait", lambda: self.landed[0])
        self.mark_start(cw)
        yield from self.wait_turn(cw)
        g = self.issue(cw, [(("S", 0), S_UNITS)])
        self.pass_turn(cw)
        yield ("wait", self.done(g))
        yield ("alu", ticks(SOFTMAX_UNITS + RESCALE_UNITS), "softmax", ("softmax", 0))
        for j in range(1, TILES):
            yield ("wait", lambda j=j: self.landed[j])
            yield from self.wait_turn(cw)
            if self.schedule == "pingpong":
                g = self.issue(cw, [(("PV", j - 1), PV_UNITS), (("S", j), S_UNITS)])
                self.pass_turn(cw)
                yield ("wait", self.done(g))
                self.released[j - 1] += 1
                yield ("alu", ticks(SOFTMAX_UNITS + RESCALE_UNITS), "softmax", ("softmax", j))
            else:
                gs = self.issue(cw, [(("S", j), S_UNITS)])
                gpv = self.issue(cw, [(("PV", j - 1), PV_UNITS)])
                self.pass_turn(cw)
                yield ("wait", self.done(gs))                    # wgmma.wait_group 1
                self.marks.append((cw, self.t, "wait_group 1"))
                yield ("alu", ticks(SOFTMAX_UNITS), "softmax", ("softmax", j))
                yield ("wait", self.done(gpv))                   # wgmma.wait_group 0
                self.marks.append((cw, self.t, "wait_group 0"))
                self.released[j - 1] += 1
                yield ("alu", ticks(RESCALE_UNITS), "rescale", ("rescale", j))
        yield from self.wait_turn(cw)
        g = self.issue(cw, [(("PV", TILES - 1), PV_UNITS)])
        if cw == 0:
            self.pass_turn(cw)
        yield ("wait", self.done(g))
        self.released[TILES - 1] += 1
        self.span[cw][1] = self.t

    def mark_start(self, cw):
        if self.span[cw][0] is None:
            self.span[cw][0] = self.t

    # -- the loop ------------------------------------------------------------------------------
    def run(self):
        agents = {"p": self.producer_gen(), 0: self.consumer_gen(0), 1: self.consumer_gen(1)}
        state = {k: None for k in agents}  # None: ready; ("busy", until); ("wait", pred, ...)
        wait_since = {}
        while agents or self.tc_queue:
            progress = True
            while progress:  # let every agent act on what the others did this tick
                progress = False
                for name in list(agents):
                    st = state[name]
                    if st is not None:
                        if st[0] == "busy" and st[1] <= self.t:
                            state[name] = st = None
                        elif st[0] == "wait" and st[1]():
                            if name == "p" and st[2] == "empty":
                                self.producer.append((wait_since[name], self.t, "wait", st[3]))
                            state[name] = st = None
                    if st is not None:
                        continue
                    try:
                        cmd = next(agents[name])
                    except StopIteration:
                        del agents[name]
                        continue
                    progress = True
                    if cmd[0] == "wait":
                        state[name] = ("wait",) + cmd[1:] + (None,) * (4 - len(cmd))
                        wait_since[name] = self.t
                    else:
                        _, dur, kind, label = cmd
                        state[name] = ("busy", self.t + dur)
                        seg = (self.t, self.t + dur, kind, label)
                        (self.producer if name == "p" else self.alu[name]).append(seg)
            self.serve_tensor_cores()
            self.t += 1
            if self.t > 100000:
                sys.exit("draw_figures.py: the simulation does not finish (a barrier never opens)")
        return self

    @property
    def end(self):
        return max(self.span[0][1], self.span[1][1])

    def tc_utilization(self):
        start = min(self.span[0][0], self.span[1][0])
        busy = sum(1 for b in self.tc_busy[start:self.end] if b)
        return busy / (self.end - start)


# ---------------------------------------------------------------------------------------------
def label_forms(label):
    """A bar's label, longest form first."""
    kind, j = label
    return {
        "S": [f"$S_{{{j}}}$"],
        "PV": [f"$P_{{{j}}}V_{{{j}}}$", f"$PV_{{{j}}}$"],
        "softmax": [f"softmax {j}", f"softmax$_{{{j}}}$", f"sm {j}", f"{j}"],
        "rescale": [],
        "tma": [f"$K_{{{j}}}V_{{{j}}}$ \u2192 stage {j % STAGES}", f"$K_{{{j}}}V_{{{j}}}$ \u2192 {j % STAGES}",
                f"$K_{{{j}}}V_{{{j}}}$"],
        "Q": ["Q"],
        "wait": [f"wait empty[{j % STAGES}]", "wait"],
    }[kind]


def put_label(ax, x0, x1, yc, forms, fontsize, color):
    """Write the longest of forms that fits between x0 and x1 (data units), centred at yc."""
    renderer = ax.figure.canvas.get_renderer()
    to_px = ax.transData.transform
    room = to_px((x1, 0))[0] - to_px((x0, 0))[0] - 2
    for form in forms:
        t = ax.text((x0 + x1) / 2, yc, form, ha="center", va="center", fontsize=fontsize, color=color)
        if t.get_window_extent(renderer).width <= room:
            return t
        t.remove()
    return None


def draw(out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    sims = [("serial", "Step 11, tc_warp_specialized: S \u2192 softmax \u2192 P V, consumers in lockstep"),
            ("pingpong", "Step 12, tc_pingpong: GEMM phases [P$_{j-1}$V$_{j-1}$ + S$_j$] in turns"),
            ("overlap", "Step 13, tc_overlap: softmax j under the same consumer's P$_{j-1}$V$_{j-1}$")]
    sims = [(Sim(s).run(), title) for s, title in sims]
    t_max = max(s.end for s, _ in sims) / TICKS

    dpi = 100
    fig, axes = plt.subplots(3, 1, figsize=(9.0, 8.4), dpi=dpi, sharex=True)
    fig.subplots_adjust(left=0.115, right=0.985, top=0.885, bottom=0.085, hspace=0.42)
    lanes = ["producer\n(TMA)", "consumer 1", "consumer 2", "tensor\ncores"]
    y_of = {"p": 3, 0: 2, 1: 1, "tc": 0}
    h = 0.72

    def bar(ax, t0, t1, y, color, frac=(0.0, 1.0), hatch=None, edge="white", lw=0.6):
        y0 = y - h / 2 + h * frac[0]
        ax.add_patch(Rectangle((t0 / TICKS, y0), (t1 - t0) / TICKS, h * (frac[1] - frac[0]),
                               facecolor=color if hatch is None else "none", edgecolor=edge,
                               hatch=hatch, linewidth=lw))

    def text(ax, t0, t1, y, label, frac=(0.0, 1.0), color="white"):
        yc = y - h / 2 + h * (frac[0] + frac[1]) / 2
        put_label(ax, t0 / TICKS, t1 / TICKS, yc, label_forms(label), 7, color)

    for ax, (sim, title) in zip(axes, sims):
        end = sim.end
        ax.set_ylim(-0.55, 3.75)
        ax.set_xlim(0, t_max + 0.6)  # before any label is measured against the bars
        # Producer: copies and waits for an empty stage.
        for t0, t1, kind, label in sim.producer:
            if kind == "tma":
                bar(ax, t0, t1, y_of["p"], COLOR["tma"])
                text(ax, t0, t1, y_of["p"], label)
            elif t1 > t0:
                bar(ax, t0, t1, y_of["p"], COLOR["wait"])
                text(ax, t0, t1, y_of["p"], label, color="#333333")
        # Consumers: wgmmas in flight (top half when the ALUs work too), ALU work, waiting.
        for cw in (0, 1):
            y = y_of[cw]
            tc = [(j["start"], j["end"], j["label"]) for j in sim.tc_jobs if j["owner"] == cw]
            alu = sim.alu[cw]
            start = sim.span[cw][0]
            busy = [False] * (end + 1)
            for t0, t1, _ in tc:
                for t in range(t0, t1):
                    busy[t] = True
            for t0, t1, _, _ in alu:
                for t in range(t0, t1):
                    busy[t] = True
            t = start
            while t < sim.span[cw][1]:  # waiting: neither a wgmma nor ALU work of its own runs
                if busy[t]:
                    t += 1
                    continue
                t1 = t
                while t1 < sim.span[cw][1] and not busy[t1]:
                    t1 += 1
                bar(ax, t, t1, y, COLOR["wait"])
                t = t1
            if start > 0:
                bar(ax, 0, start, y, COLOR["wait"])
            overlap = lambda a0, a1, spans: any(b0 < a1 and a0 < b1 for b0, b1, *_ in spans)
            for t0, t1, label in tc:
                frac = (0.5, 1.0) if overlap(t0, t1, alu) else (0.0, 1.0)
                bar(ax, t0, t1, y, COLOR["tc1" if cw == 0 else "tc2"], frac)
                text(ax, t0, t1, y, label, frac, "white" if cw == 0 else "black")
            for t0, t1, kind, label in alu:
                frac = (0.0, 0.5) if overlap(t0, t1, tc) else (0.0, 1.0)
                bar(ax, t0, t1, y, COLOR[kind], frac)
                text(ax, t0, t1, y, label, frac, "black")
        # Tensor cores: who they serve, tick by tick, and where they idle.
        y = y_of["tc"]
        first = min(sim.span[0][0], sim.span[1][0])
        t = 0
        while t < end:
            who = sim.tc_busy[t]
            t1 = t
            while t1 < end and sim.tc_busy[t1] == who:
                t1 += 1
            if not who and t >= first:
                bar(ax, t, t1, y, "white", hatch="////", edge=COLOR["idle"], lw=0.0)
                ax.add_patch(Rectangle((t / TICKS, y - h / 2), (t1 - t) / TICKS, h, facecolor="none",
                                       edgecolor=COLOR["idle"], linewidth=0.8))
            elif len(who) == 2:
                bar(ax, t, t1, y, COLOR["tc1"], (0.5, 1.0), lw=0)
                bar(ax, t, t1, y, COLOR["tc2"], (0.0, 0.5), lw=0)
            elif who:
                bar(ax, t, t1, y, COLOR["tc1" if who[0] == 0 else "tc2"], lw=0)
            t = t1
        ax.axvline(end / TICKS, color="black", linestyle=":", linewidth=1.0)
        ax.set_title(title, loc="left", fontsize=9.5, fontweight="bold", pad=4)
        ax.set_title(f"done at {end / TICKS:.1f}, tensor cores busy {100 * sim.tc_utilization():.0f}%",
                     loc="right", fontsize=9, pad=4)
        ax.set_yticks([y_of[k] for k in ("p", 0, 1, "tc")])
        ax.set_yticklabels(lanes, fontsize=8.5)
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
        ax.tick_params(axis="y", length=0)
        ax.tick_params(axis="x", labelsize=8)
        annotate(ax, sim, y_of)
    axes[-1].set_xlabel("time (arbitrary units)", fontsize=9)

    legend = [Patch(color=COLOR["tc1"], label="wgmma (tensor cores), consumer 1"),
              Patch(color=COLOR["tc2"], label="wgmma (tensor cores), consumer 2"),
              Patch(color=COLOR["softmax"], label="softmax (ALU, MUFU)"),
              Patch(color=COLOR["rescale"], label="rescale O, pack P"),
              Patch(color=COLOR["tma"], label="TMA copy"),
              Patch(color=COLOR["wait"], label="waiting"),
              Patch(facecolor="white", edgecolor=COLOR["idle"], hatch="////", label="tensor cores idle")]
    fig.legend(handles=legend, loc="upper center", ncol=4, fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 0.955), handlelength=1.6, columnspacing=1.2)
    fig.suptitle("Module 3, Hopper attention steps 11-13 on one SM (schematic, not measured)",
                 fontsize=11, fontweight="bold", y=0.995)
    fig.text(0.5, 0.005,
             f"Made-up durations: S = P V = {S_UNITS:g}, softmax {SOFTMAX_UNITS + RESCALE_UNITS:g} "
             f"(incl. rescale O, pack P: {RESCALE_UNITS:g}), K/V tile copy {TMA_TILE_UNITS:g}; "
             f"{TILES} K/V tiles, a {STAGES}-stage ring.\nThe tensor cores run wgmmas in issue order; "
             f"those two consumers issue at once (step 11) share them.",
             ha="center", va="bottom", fontsize=7.5, color="#444444")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "hopper_attention_schedules.png"
    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png")
    plt.close(fig)
    # Flat colours: a 64-colour palette keeps the file small (and the text crisp enough).
    from PIL import Image
    Image.open(buf).convert("RGB").quantize(colors=64).save(path, optimize=True)
    return path, sims


def annotate(ax, sim, y_of):
    """Name one instance of what each panel is about."""
    kw = dict(fontsize=7.5, arrowprops=dict(arrowstyle="->", color="black", lw=0.8),
              ha="center", va="center", color="black")
    if sim.schedule == "serial":
        first = min(sim.span[0][0], sim.span[1][0])
        gaps = []
        t = first
        while t < sim.end:
            if not sim.tc_busy[t]:
                t1 = t
                while t1 < sim.end and not sim.tc_busy[t1]:
                    t1 += 1
                gaps.append((t, t1))
                t = t1
            t += 1
        if len(gaps) > 2:
            g0, g1 = gaps[2]
            ax.annotate("both softmaxes at once:\ntensor cores idle", xy=((g0 + g1) / 2 / TICKS, y_of["tc"]),
                        xytext=((g0 + g1) / 2 / TICKS, y_of["p"] - 0.05), **kw,
                        bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.9))
    elif sim.schedule == "pingpong":
        # Every hand-off of the turn: an arrow from the consumer that issued to the other.
        first = min(sim.span[0][0], sim.span[1][0])  # not consumer 2's opening of the first turn
        turns = [(c, t) for c, t, what in sim.marks if what == "turn" and t >= first]
        for c, t in turns:
            ax.annotate("", xy=(t / TICKS, y_of[c] + 0.36 * (1 if c == 1 else -1)),
                        xytext=(t / TICKS, y_of[1 - c] + 0.36 * (-1 if c == 1 else 1)),
                        arrowprops=dict(arrowstyle="-|>", color="black", lw=0.9, mutation_scale=7))
        if len(turns) > 6:
            c, t = turns[6]
            ax.annotate("GEMM phase issued: bar.arrive,\nthe other consumer's turn",
                        xy=(t / TICKS, (y_of[0] + y_of[1]) / 2), xytext=(t / TICKS + 4.5, y_of["p"] - 0.05),
                        **kw, bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.9))
    else:
        w1 = [t for c, t, what in sim.marks if c == 0 and what == "wait_group 1"]
        w0 = [t for c, t, what in sim.marks if c == 0 and what == "wait_group 0"]
        if len(w1) > 3 and len(w0) > 3:
            ax.annotate("wait_group 1: S$_j$ landed,\nsoftmax j starts", xy=(w1[3] / TICKS, y_of[0] - 0.36),
                        xytext=(w1[3] / TICKS - 1.0, y_of["p"] + 0.05), **kw,
                        bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.9))
            ax.annotate("wait_group 0: P$_{j-1}$V$_{j-1}$ done,\nthen rescale O, pack P",
                        xy=(w0[3] / TICKS + RESCALE_UNITS / 2, y_of[0] + 0.36),
                        xytext=(w0[3] / TICKS + 5.5, y_of["p"] + 0.05), **kw,
                        bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.9))


# ---------------------------------------------------------------------------------------------
# The causal tile orders (module03/attention_blocks.cuh), on a small example.
ORDER_HEADS = 12        # batch * heads
ORDER_Q_TILES = 8       # query tiles per head (N = 1024 with 128-row tiles)
ORDER_RUNNING = 16      # blocks running at once (the GPU's "SMs" in the example)


def longest_first(linear, q_tiles, heads):
    """block_coordinates, causal: the query tile is the slow index, counted down, over all heads."""
    return q_tiles - 1 - linear // heads, linear % heads


def grouped(linear, q_tiles, heads, group):
    """grouped_tile_coordinates, causal: heads in groups, longest first inside a group."""
    per_group = group * q_tiles
    g = linear // per_group
    first = g * group
    size = min(group, heads - first)
    r = linear - g * per_group
    return q_tiles - 1 - r // size, first + r % size


def causal_group_heads(q_tiles, heads, running):
    return max(1, min(heads, -(-2 * running // q_tiles)))


def draw_tile_order(out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    q_tiles, heads, running = ORDER_Q_TILES, ORDER_HEADS, ORDER_RUNNING
    group = causal_group_heads(q_tiles, heads, running)
    orders = [("Longest first over all heads (steps 3-10)", lambda w: longest_first(w, q_tiles, heads)),
              (f"Heads in groups of {group}, longest first inside (steps 11-14)",
               lambda w: grouped(w, q_tiles, heads, group))]
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.6), dpi=100)
    fig.subplots_adjust(left=0.06, right=0.99, top=0.80, bottom=0.2, wspace=0.12)
    for ax, (title, order) in zip(axes, orders):
        first_wave = set()
        for w in range(q_tiles * heads):
            q, h = order(w)
            wave = w // running
            color = ["#1f5fa8", "#9ec5e8"][wave] if wave < 2 else "white"
            ax.add_patch(Rectangle((h, q), 1, 1, facecolor=color, edgecolor="#888888", lw=0.6))
            ax.text(h + 0.5, q + 0.5, str(w), ha="center", va="center", fontsize=7,
                    color="white" if wave == 0 else "black")
            if wave == 0:
                first_wave.add((q, h))
        # K/V tiles the first wave reads (causal: query tile q reads K/V tiles 0..q of its head)
        # and the tile products it computes.
        distinct = {(h, k) for q, h in first_wave for k in range(q + 1)}
        products = sum(q + 1 for q, h in first_wave)
        ax.set_xlim(0, heads)
        ax.set_ylim(0, q_tiles)
        ax.set_xticks([h + 0.5 for h in range(heads)], [str(h) for h in range(heads)], fontsize=7)
        ax.set_yticks([q + 0.5 for q in range(q_tiles)], [str(q) for q in range(q_tiles)], fontsize=7)
        ax.set_xlabel("batch * head", fontsize=8)
        ax.set_ylabel("query tile (reads K/V tiles 0..q)", fontsize=8)
        ax.set_title(f"{title}\nfirst wave: {len(distinct)} distinct K/V tiles for {products} tile products "
                     f"({products / len(distinct):.1f} uses each)", fontsize=8.5)
    fig.suptitle(f"Causal attention: which tiles run together ({running} blocks at once; number = launch order)",
                 fontsize=10.5, fontweight="bold")
    fig.text(0.5, 0.02, "dark: the first wave of blocks, light: the second. A K/V tile read by several running "
             "blocks comes from L2 after the first read; one read once comes from HBM.",
             ha="center", fontsize=8, color="#444444")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "causal_tile_order.png"
    buf = io.BytesIO()
    fig.savefig(buf, dpi=100, format="png")
    plt.close(fig)
    from PIL import Image
    Image.open(buf).convert("RGB").quantize(colors=64).save(path, optimize=True)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "images",
                    help="folder for the images (default: docs/images)")
    args = ap.parse_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit("draw_figures.py needs matplotlib (pip install matplotlib)")
    path, sims = draw(args.out)
    for sim, _ in sims:
        print(f"{sim.schedule:9s} done at {sim.end / TICKS:5.1f} units, tensor cores busy "
              f"{100 * sim.tc_utilization():.0f}%")
    print(f"wrote {path} ({path.stat().st_size // 1024} KB)")
    path = draw_tile_order(args.out)
    print(f"wrote {path} ({path.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
