"""The report's figures (matplotlib, Agg): readable in black and white — markers and line styles
carry the meaning, not colour."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # no display; figures are rendered to PNG bytes
import matplotlib.pyplot as plt  # noqa: E402

from ..record.run import RunRecord  # noqa: E402

MARKERS = {"PASS": ("o", "black"), "FAIL": ("x", "black"), "INCONCLUSIVE": ("s", "none"), "WARN": ("^", "none")}
STYLES = ["-", "--", ":", "-."]
POINTS = ["o", "s", "^", "D", "v", "P"]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def forest(r: RunRecord) -> bytes | None:
    """Each gate's delta and interval (oriented: right is better), with its -margin."""
    gates = [g for g in r.gates if g.mode != "ratio" and g.lower_bound is not None]
    if not gates:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.42 * len(gates) + 1.2))
    for i, g in enumerate(reversed(gates)):
        ax.plot([g.lower_bound, g.upper_bound], [i, i], color="black", lw=1.5)
        m, face = MARKERS.get(g.verdict, ("o", "black"))
        ax.plot([g.delta], [i], marker=m, color="black", markerfacecolor=face, ms=7, lw=0)
        ax.plot([-g.margin, -g.margin], [i - 0.35, i + 0.35], color="black", ls="--", lw=1)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(range(len(gates)), [f"{g.variant}: {g.suite}/{g.metric}" for g in reversed(gates)], fontsize=8)
    ax.set_xlabel("delta = variant - baseline (oriented: right is better); dashed: -margin")
    ax.set_title("Gates: interval of delta (o pass, x fail, open square inconclusive)", fontsize=10)
    return _png(fig)


def _quality(v) -> float | None:
    # mean of the suites' primary scores: one number per variant for the trade-off view; a corpus measured
    # per token (a distribution in the record) has a perplexity, not a score
    vals = [s.means[s.primary] for s in v.suites if s.suite not in v.distribution]
    return sum(vals) / len(vals) if vals else None


def tradeoff(r: RunRecord) -> bytes | None:
    pts = [(v.name, _quality(v), v.perf()) for v in r.variants if v.status == "ok" and v.role != "noise"]
    pts = [(n, q, p) for n, q, p in pts if q is not None and "weights_bytes" in p]
    if len(pts) < 2:
        return None
    has_tp = all("max_output_throughput" in p for _, _, p in pts)
    fig, axes = plt.subplots(1, 2 if has_tp else 1, figsize=(10 if has_tp else 5.5, 4), squeeze=False)
    for k, (n, q, p) in enumerate(pts):
        axes[0][0].plot(p["weights_bytes"] / 2**20, q, marker=POINTS[k % len(POINTS)], color="black", ls="", ms=8,
                        label=n)
        if has_tp:
            axes[0][1].plot(p["max_output_throughput"], q, marker=POINTS[k % len(POINTS)], color="black", ls="", ms=8,
                            label=n)
    axes[0][0].set_xlabel("weights on disk (MiB)")
    axes[0][0].set_ylabel("mean primary score over suites")
    axes[0][0].set_title("quality vs memory", fontsize=10)
    axes[0][0].legend(fontsize=8, loc="lower right")
    if has_tp:
        axes[0][1].set_xlabel("peak output throughput (tokens/s)")
        axes[0][1].set_title("quality vs throughput", fontsize=10)
    return _png(fig)


def latency(r: RunRecord) -> bytes | None:
    probed = [v for v in r.variants if v.probe and v.probe.steps]
    if not probed:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for k, v in enumerate(probed):
        steps = sorted((s for s in v.probe.steps if s.kind == "concurrency"), key=lambda s: s.load)
        xs = [s.load for s in steps]
        style = dict(color="black", ls=STYLES[k % len(STYLES)], marker=POINTS[k % len(POINTS)], label=v.name)
        axes[0].plot(xs, [s.output_throughput for s in steps], **style)
        axes[1].plot(xs, [s.ttft_ms.p95 for s in steps], **style)
        axes[2].plot(xs, [s.tpot_ms.p95 for s in steps], **style)
    for ax, title in zip(axes, ("output tokens/s", "TTFT p95 (ms)", "TPOT p95 (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=8)
    return _png(fig)


def depth(r: RunRecord) -> bytes | None:
    """KL against the baseline by depth: per long-document suite, each variant's mean KL in each depth bucket
    (at the bucket's middle token, log scale), an open marker where the bucket is too thin to judge."""
    suites = sorted({s for v in r.variants for s, st in v.strata.items() if st.axis == "depth"})
    if not suites:
        return None
    fig, axes = plt.subplots(1, len(suites), figsize=(5.5 * len(suites), 3.8), squeeze=False)
    for ax, suite in zip(axes[0], suites):
        shown = [v for v in r.variants if suite in v.strata and v.strata[suite].cells and v.strata[suite].axis == "depth"]
        for k, v in enumerate(shown):
            cells = v.strata[suite].cells
            xs, ys = [(c.lo + c.hi) / 2 for c in cells], [c.kl if c.kl is not None else float("nan") for c in cells]
            ax.plot(xs, ys, color="black", ls=STYLES[k % len(STYLES)], lw=1, marker=POINTS[k % len(POINTS)], ms=6,
                    label=v.name)
            for x, y, c in zip(xs, ys, cells):
                if c.insufficient:  # drawn open over the filled one
                    ax.plot([x], [y], marker=POINTS[k % len(POINTS)], color="black", markerfacecolor="white", ms=6)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("token position (bucket middle)")
        ax.set_ylabel("mean KL against the baseline (nats)")
        ax.set_title(f"{suite}: KL by depth (open: too few data)", fontsize=10)
        ax.legend(fontsize=8)
    return _png(fig)


def grid_heatmap(v) -> bytes | None:
    """A variant's batch size x concurrency grid: output tokens/s per (engine setting, concurrency), each
    cell annotated with its value; the best cell under the SLOs boxed, cells missing an SLO or with
    errors marked in words, missing cells hatched. A light grey ramp keeps black text readable."""
    import math

    import numpy as np

    g = v.grid
    if g is None or not g.cells:
        return None
    z = np.array(g.matrix(), dtype=float)
    rows, cols = g.rows, g.concurrency
    fig, ax = plt.subplots(figsize=(1.5 * len(cols) + 3, 0.9 * len(rows) + 1.8))
    cmap = plt.get_cmap("Greys").with_extremes(bad="white")
    top = np.nanmax(z) if np.isfinite(z).any() else 1.0
    im = ax.imshow(np.ma.masked_invalid(z), cmap=cmap, vmin=0, vmax=1.8 * top, aspect="auto")
    cells = {(c.row, c.concurrency): c for c in g.cells}
    best = (g.best.row, g.best.concurrency) if g.best else None
    for i, r in enumerate(rows):
        for j, k in enumerate(cols):
            c = cells.get((r, k))
            if c is None or math.isnan(z[i, j]):
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//", color="grey", lw=0))
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=9)
                continue
            is_best = (r, k) == best
            note = "best" if is_best else (f"{c.errors} errors" if c.errors else
                                           ("" if c.meets_slo(g.slo) else "misses SLO"))
            ax.text(j, i, f"{z[i, j]:.1f}" + (f"\n{note}" if note else ""), ha="center", va="center",
                    fontsize=10, fontweight="bold" if is_best else "normal", color="black")
            if is_best:
                ax.add_patch(plt.Rectangle((j - 0.47, i - 0.47), 0.94, 0.94, fill=False, color="black", lw=3))
    ax.set_xticks(range(len(cols)), [str(k) for k in cols])
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("client concurrency (requests in flight)")
    ax.set_ylabel(" x ".join(g.settings) + " (one server each)")
    slo = ", ".join(f"{k} <= {val:g}" for k, val in g.slo.items()) or "no SLO given: error-free cells"
    ax.set_title(f"{v.name}: output tokens/s; box = best under the SLOs ({slo})", fontsize=10)
    bar = fig.colorbar(im, ax=ax, label="output tokens/s", shrink=0.8)
    bar.ax.set_ylim(0, top)  # the ramp runs on past the top so that the darkest cell stays light
    return _png(fig)


NEEDLE_AXIS = "length x depth"


def _heat(ax, shade, labels, rows: list[str], cols: list[str], title: str) -> None:
    """One annotated grid, its cells drawn as grid_heatmap draws its own: a light grey ramp (0: white, 1: the
    darkest, still light under black text), missing cells white and hatched."""
    import numpy as np

    cmap = plt.get_cmap("Greys").with_extremes(bad="white")
    ax.imshow(np.ma.masked_invalid(shade), cmap=cmap, vmin=0, vmax=1.8, aspect="auto")
    for i in range(len(rows)):
        for j in range(len(cols)):
            if labels[i][j] is None:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//", color="grey", lw=0))
            ax.text(j, i, labels[i][j] or "n/a", ha="center", va="center", fontsize=9, color="black")
    ax.set_xticks(range(len(cols)), cols)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("needle depth (share of the filler)")
    ax.set_title(title, fontsize=10)


def needle(r: RunRecord) -> bytes | None:
    """Retrieval at length: per needle suite and variant, the baseline's accuracy over length x depth, the
    variant's beside it, and the variant's less the baseline's. A cell darkens as accuracy is lost."""
    import numpy as np

    shown = [(v, suite, st) for v in r.variants if v.role != "baseline"
             for suite, st in sorted(v.strata.items()) if st.axis == NEEDLE_AXIS and st.cells]
    if not shown:
        return None
    tall = max(len({c.length for c in st.cells}) for *_, st in shown)
    fig, axes = plt.subplots(len(shown), 3, figsize=(13, (0.5 * tall + 1.6) * len(shown)), squeeze=False)
    for (v, suite, st), row in zip(shown, axes):
        lengths, depths, at = st.grid()
        ys, xs = [f"{n:,}" for n in lengths], [f"{d:g}" for d in depths]

        def figure(k: str):
            return [[getattr(at[(n, d)], k) if (n, d) in at else None for d in depths] for n in lengths]

        for ax, k, title in ((row[0], "base", f"{suite}: baseline accuracy"), (row[1], "variant", f"{v.name}: accuracy")):
            m = figure(k)
            shade = np.array([[np.nan if x is None else 1 - x for x in line] for line in m], dtype=float)
            _heat(ax, shade, [[None if x is None else f"{x:.2f}" for x in line] for line in m], ys, xs, title)
        d = figure("delta")
        shade = np.array([[np.nan if x is None else max(0.0, -x) for x in line] for line in d], dtype=float)
        _heat(row[2], shade, [[None if x is None else f"{x:+.2f}" for x in line] for line in d], ys, xs,
              f"{v.name} less the baseline")
        row[0].set_ylabel("prompt length (tokens)")
    fig.tight_layout()
    return _png(fig)
