"""Shared figure style and drawing helpers for the notebooks (seaborn on matplotlib).

Figures are saved without timestamps or software strings and at a fixed dpi, so an unchanged rerun writes
byte-identical PDF and PNG files. Nothing here computes or rescales a score: summaries come from
attention_geometry.analysis.summaries and attention_geometry.analysis.stats.

Every figure goes through `save`, which first runs `check_layout`: a legend that covers an axis label, tick
labels, a title, the suptitle, another axes, another legend or a curve of its own axes stops the notebook
with a UserError naming the covered element (so the workflow rule fails instead of writing the figure).
`legend_below`, `legend_beside` and legend-only axes (`ax.set_axis_off()`) keep legends off the data.

Why over 600 lines: one style and one layout check that every figure passes through, and about thirty small
drawing helpers that the notebooks call as plotting.NAME; split by figure, the helpers shared by several figures
would need a home of their own and the notebooks two imports each, for no rule that one file does not keep.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from attention_geometry.errors import UserError  # noqa: E402

DPI = 200
COMPONENT_COLORS = {"encoder": "#1f77b4", "decoder": "#d62728"}
SOURCE_MARKERS = {"ours": "o", "paper": "s", "trained": "D"}
LABELS = {"symmetry": "symmetry s", "directionality": "directionality d"}


def style() -> None:
    """The one figure style of the project."""
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.0)
    plt.rcParams.update(
        {
            "figure.dpi": 100,
            "savefig.dpi": DPI,
            "pdf.fonttype": 42,
            "ps.fonttype": 42,
            "svg.hashsalt": "attention-geometry",
            "axes.titlesize": "medium",
            "legend.fontsize": "small",
            "legend.frameon": False,
            "path.simplify": True,
        }
    )


def save(
    fig: plt.Figure,
    pdf: str | os.PathLike | None = None,
    png: str | os.PathLike | None = None,
    dpi: int = DPI,
    check: bool = True,
) -> list[Path]:
    """Save `fig` as PDF and/or PNG without timestamps (byte-identical reruns), creating parent folders.

    First runs `check_layout` (unless check=False, meant for tests of the check itself): a figure whose
    legend covers a label, tick labels, a title, another axes or a curve is not written (UserError)."""
    if check:
        name = Path(png or pdf).name if (png or pdf) else "figure"
        check_layout(fig, name=name)
    written = []
    for path, fmt, meta in (
        (pdf, "pdf", {"CreationDate": None, "Creator": None, "Producer": None}),
        (png, "png", {"Software": None}),
    ):
        if path is None:
            continue
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(p, format=fmt, dpi=dpi, metadata=meta, bbox_inches="tight", pad_inches=0.05)
        written.append(p)
    return written


# ------------------------------------------------------------------------------------- layout check
# Overlaps smaller than this (in pixels at the figure's dpi) are rounding, not a covered element.
OVERLAP_TOLERANCE_PX = 1.0


def _axes_name(fig: plt.Figure, ax: plt.Axes) -> str:
    i = fig.axes.index(ax) if ax in fig.axes else -1
    title = next(
        (
            t.get_text()
            for t in (ax.title, getattr(ax, "_left_title", None), getattr(ax, "_right_title", None))
            if t is not None and t.get_text().strip()
        ),
        "",
    )
    if not title and ax.get_label() and not ax.get_label().startswith("<"):
        title = ax.get_label()
    first_line = title.strip().splitlines()[0] if title.strip() else ""
    return f"axes {i}" + (f" ({first_line!r})" if first_line else "")


def _shown(text) -> bool:
    return text is not None and text.get_visible() and bool(text.get_text().strip())


def _tick_labels(axis) -> list:
    """The tick labels of `axis` that are drawn (ticks inside the view interval, label visible, non-empty)."""
    try:
        ticks = axis._update_ticks()  # the ticks the next draw shows (private, stable since matplotlib 3.1)
        labels = [lab for t in ticks for lab in (t.label1, t.label2)]
    except AttributeError:  # pragma: no cover - very old / future matplotlib
        labels = list(axis.get_ticklabels(which="both"))
    return [lab for lab in labels if _shown(lab)]


def _text_elements(fig: plt.Figure) -> list[tuple[str, object]]:
    """(name, artist) of every text that a legend must not cover: per axes its titles, axis labels and tick
    labels; the figure's suptitle, supxlabel and supylabel."""
    out = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        an = _axes_name(fig, ax)
        for t in (ax.title, getattr(ax, "_left_title", None), getattr(ax, "_right_title", None)):
            if _shown(t):
                out.append((f"the title {t.get_text().splitlines()[0]!r} of {an}", t))
        if ax.axison:
            for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
                if _shown(axis.label):
                    out.append((f"the {which}-axis label {axis.label.get_text()!r} of {an}", axis.label))
                for lab in _tick_labels(axis):
                    out.append((f"the {which} tick label {lab.get_text()!r} of {an}", lab))
    for attr, what in (("_suptitle", "suptitle"), ("_supxlabel", "supxlabel"), ("_supylabel", "supylabel")):
        t = getattr(fig, attr, None)
        if _shown(t):
            out.append((f"the figure {what} {t.get_text().splitlines()[0]!r}", t))
    return out


def _legends(fig: plt.Figure) -> list[tuple[str, object, object]]:
    """(name, legend, parent axes or None for a figure legend) of every visible legend."""
    out = []
    for i, leg in enumerate(fig.legends):
        if leg.get_visible():
            out.append((f"figure legend {i}", leg, None))
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is not None and leg.get_visible() and ax.get_visible():
            out.append((f"the legend of {_axes_name(fig, ax)}", leg, ax))
    return out


def _overlap(a, b, tol: float = OVERLAP_TOLERANCE_PX) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > tol) and (min(a.y1, b.y1) - max(a.y0, b.y0) > tol)


def _data_paths(ax: plt.Axes):
    """(name, display-space vertex arrays) of the curves and points drawn in data coordinates of `ax`:
    Line2D data (split at NaNs) and scatter/errorbar offsets. Reference lines drawn in axes coordinates
    (axhline, axvline) and filled bands are not curves."""
    from matplotlib.collections import PathCollection

    for line in ax.get_lines():
        if not line.get_visible() or not line.get_transform().contains_branch(ax.transData):
            continue
        xy = np.asarray(line.get_xydata(), dtype=float)
        if xy.size == 0:
            continue
        disp = line.get_transform().transform(xy)
        ok = np.all(np.isfinite(disp), axis=1)
        # runs of finite vertices
        edges = np.flatnonzero(np.diff(np.concatenate([[0], ok.astype(int), [0]])))
        name = line.get_label() if not line.get_label().startswith("_") else "a curve"
        for start, stop in zip(edges[::2], edges[1::2]):
            yield (f"curve {name!r}", disp[start:stop], line.get_linestyle() not in ("None", "", " ", "none"))
    for coll in ax.collections:
        if isinstance(coll, PathCollection) and coll.get_visible() and len(coll.get_offsets()):
            if not coll.get_offset_transform().contains_branch(ax.transData):
                continue
            disp = coll.get_offset_transform().transform(np.asarray(coll.get_offsets(), dtype=float))
            disp = disp[np.all(np.isfinite(disp), axis=1)]
            name = coll.get_label() if not str(coll.get_label()).startswith("_") else "points"
            yield (f"points {name!r}", disp, False)


def _covers_path(bbox, disp: np.ndarray, joined: bool) -> bool:
    """True when a vertex lies inside `bbox` (shrunk by the tolerance) or, for a joined curve, a segment
    crosses it."""
    from matplotlib.path import Path as MPath
    from matplotlib.transforms import Bbox

    inner = Bbox.from_extents(
        bbox.x0 + OVERLAP_TOLERANCE_PX,
        bbox.y0 + OVERLAP_TOLERANCE_PX,
        bbox.x1 - OVERLAP_TOLERANCE_PX,
        bbox.y1 - OVERLAP_TOLERANCE_PX,
    )
    if disp.size == 0 or inner.width <= 0 or inner.height <= 0:
        return False
    inside = (disp[:, 0] > inner.x0) & (disp[:, 0] < inner.x1) & (disp[:, 1] > inner.y0) & (disp[:, 1] < inner.y1)
    if inside.any():
        return True
    if joined and len(disp) >= 2:
        return bool(MPath(disp).intersects_bbox(inner, filled=False))
    return False


def layout_problems(fig: plt.Figure, curves: bool = True) -> list[str]:
    """Every overlap of a legend with something it must not cover, as sentences (empty: the layout is clean).

    Bounding boxes are the renderer's window extents after the layout engines ran (tight_layout /
    constrained layout), so what is checked is what `save` writes. A legend (an axes legend or a figure
    legend) must not overlap
      - any axis label, tick label or title of any axes, nor the figure's suptitle / supxlabel / supylabel;
      - another axes (for an axes legend: any axes but its own and its twins; for a figure legend: every
        axes); axes switched off (`ax.set_axis_off()`, e.g. an axes that only holds legends) count only
        through their titles;
      - another legend;
      - with `curves`: a curve or point drawn in data coordinates of its own axes (a legend inside an axes
        must sit where there is no data)."""
    fig.draw_without_rendering()  # runs the layout engine and places ticks, labels and legends
    renderer = fig.canvas.get_renderer()
    legends = _legends(fig)
    if not legends:
        return []
    texts = [(name, t.get_window_extent(renderer)) for name, t in _text_elements(fig)]
    problems = []
    boxes = []
    for lname, leg, parent in legends:
        lb = leg.get_window_extent(renderer)
        boxes.append((lname, lb))
        for tname, tb in texts:
            if _overlap(lb, tb):
                problems.append(f"{lname} overlaps {tname}")
        for ax in fig.axes:
            if ax is parent or not ax.get_visible() or not ax.axison:
                continue
            ab = ax.get_window_extent(renderer)
            if parent is not None:
                pb = parent.get_window_extent(renderer)
                if np.allclose(ab.extents, pb.extents):  # a twin axes of the legend's own axes
                    continue
            if _overlap(lb, ab):
                problems.append(f"{lname} overlaps {_axes_name(fig, ax)}")
        if curves and parent is not None and parent.axison:
            for cname, disp, joined in _data_paths(parent):
                if _covers_path(lb, disp, joined):
                    problems.append(f"{lname} covers {cname} of {_axes_name(fig, parent)}")
                    break
    for i, (n1, b1) in enumerate(boxes):
        for n2, b2 in boxes[i + 1 :]:
            if _overlap(b1, b2):
                problems.append(f"{n1} overlaps {n2}")
    return problems


def check_layout(fig: plt.Figure, name: str = "figure", curves: bool = True) -> None:
    """Raise a UserError naming every covered element when `layout_problems` finds any (see there)."""
    problems = layout_problems(fig, curves=curves)
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise UserError(
            f"{name}: legend placement hides part of the figure: {shown} "
            "(move the legend outside the axes or into its own legend axes)"
        )


def heatmap_limit(M, clip_percentile: float = 99.0) -> float:
    """The symmetric colour limit of a W_qk heatmap: the `clip_percentile` percentile of |M| over the whole
    matrix (a few outlier entries do not wash the picture out; entries beyond are drawn at the end colours).
    A display choice only: no score is computed from it."""
    A = np.asarray(M, dtype=float)
    if not 0 < clip_percentile <= 100:
        raise UserError(f"heatmap: clip_percentile must be in (0, 100], got {clip_percentile!r}")
    return float(np.percentile(np.abs(A), clip_percentile)) or float(np.max(np.abs(A))) or 1.0


def wqk_heatmap(
    ax: plt.Axes,
    M,
    title: str,
    max_dim: int | None = None,
    clip_percentile: float = 99.0,
    lim: float | None = None,
    mark_block: int | None = None,
) -> matplotlib.image.AxesImage:
    """M (rows = query side, columns = key side) as a diverging heatmap centred on 0, colour limits
    +-`lim` (default: heatmap_limit of the block shown). `max_dim` shows only the top-left
    max_dim x max_dim block (said in the title; tick labels are the matrix's own indices). `mark_block`
    outlines the top-left mark_block x mark_block block (the one a zoomed panel beside shows)."""
    from matplotlib.patches import Rectangle

    A = np.asarray(M, dtype=float)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise UserError(f"heatmap {title!r}: expected a square matrix, got shape {A.shape}")
    shown = A if max_dim is None or max_dim >= A.shape[0] else A[:max_dim, :max_dim]
    if lim is None:
        lim = heatmap_limit(shown, clip_percentile)
    im = ax.imshow(shown, cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
    if shown.shape != A.shape:
        title += f"\n(top-left {shown.shape[0]} x {shown.shape[0]} of {A.shape[0]} dims)"
    if mark_block is not None and mark_block < A.shape[0]:
        ax.add_patch(Rectangle((-0.5, -0.5), mark_block, mark_block, fill=False, ec="black", lw=1.0))
    ax.set_title(title)
    ax.set_xlabel("key dimension")
    ax.set_ylabel("query dimension")
    ax.grid(False)
    return im


# The paper's points that are not comparable (resources/paper/paper_caveats.csv), one marker and one legend
# wording per kind of caveat; a kind not listed here gets the next of CAVEAT_FALLBACK_MARKERS and its own name.
CAVEAT_KINDS = {
    "gqa-expansion": ("X", "the authors' grouped-query expansion"),
    "pythia-qkv-split": ("v", "Pythia's fused q/k/v split as contiguous blocks"),
}
CAVEAT_FALLBACK_MARKERS = ("P", "*", "h", "<", ">")
CAVEAT_ALPHA = 0.3


def caveat_styles(kinds) -> dict[str, tuple[str, str]]:
    """(marker, legend wording) per kind of caveat: CAVEAT_KINDS, other kinds the fallback markers in sorted
    order (by their own name), so each kind drawn has a marker of its own."""
    out, extra = {}, iter(CAVEAT_FALLBACK_MARKERS * 4)
    for kind in sorted({str(k) for k in kinds if str(k)}):
        out[kind] = CAVEAT_KINDS.get(kind) or (next(extra), kind)
    return out


def scores_vs_params(
    axes: Sequence[plt.Axes], table: pd.DataFrame, hue: str = "component", label_ours: bool = True
) -> None:
    """Two panels (symmetry, directionality): per model the median over layers with IQR bars vs n_params
    (log x). Colour = `hue`; filled circles = ours, squares = the paper's; the paper's caveat-flagged points
    are drawn faded (CAVEAT_ALPHA), one marker per kind of caveat (caveat_styles), each kind named in the
    legend as not comparable; ours with a caveat (analysis.OUR_CAVEATS) as hollow circles, their caveat named
    in the legend. Labels say "ours" only for rows of ours. `table` is analysis.model_table."""
    palette = _palette(table[hue].unique())
    kinds = caveat_styles(table.loc[table["source"] != "ours", "caveat"])
    for ax, v in zip(axes, ("symmetry", "directionality")):
        for (src, h, cav), g in table.groupby(["source", hue, "caveat"], sort=True):
            y, lo, hi = g[f"{v}_median"], g[f"{v}_q1"], g[f"{v}_q3"]
            flagged = bool(cav)
            ours = src in ("ours", "trained")
            if src == "trained":  # our runs trained from scratch (one point per seed), not named one by one
                label, marker, alpha = f"ours, trained from scratch (per seed), {h}", SOURCE_MARKERS["trained"], 0.8
            elif ours:
                # ours are the model's W_qk, but no fixed bilinear form gives that model's logits (OUR_CAVEATS)
                label = f"ours, {h}" + (f", {cav}: no fixed bilinear form" if flagged else "")
                marker, alpha = SOURCE_MARKERS["ours"], 1.0
            elif flagged:
                marker, why = kinds[str(cav)]
                label = f"paper (published), {h}: not comparable ({why})"
                alpha = CAVEAT_ALPHA
            else:
                label, marker, alpha = f"paper (published), {h}", SOURCE_MARKERS["paper"], 1.0
            ax.errorbar(
                g["n_params"],
                y,
                yerr=[y - lo, hi - y],
                fmt="none",
                ecolor=palette[h],
                alpha=0.35 * alpha,
                elinewidth=0.8,
                zorder=1,
            )
            ax.scatter(
                g["n_params"],
                y,
                marker=marker,
                s=(46 if ours else 26 if flagged else 18),
                facecolors=("none" if flagged and ours else palette[h]),
                edgecolors=palette[h],
                linewidths=(1.2 if ours else 0.3),
                alpha=alpha,
                label=label,
                zorder=3 if ours else 1.5 if flagged else 2,
            )
            if src == "ours" and label_ours:
                # names of the lower half of our points (in this panel) below them, of the upper half above:
                # two nearby points (or an encoder-decoder model's two stacks at one x) get their names apart
                mid = float(np.median(table.loc[table["source"] == "ours", f"{v}_median"]))
                for x_, y_, name in zip(g["n_params"], y, g["model"]):
                    below = float(y_) < mid
                    # on a light box above the markers: a name drawn over the paper's points stays readable
                    ax.annotate(
                        _short(name),
                        (x_, y_),
                        textcoords="offset points",
                        xytext=(4, -9 if below else 4),
                        fontsize=6,
                        zorder=4,
                        bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8),
                    )
        ax.set_xscale("log")
        ax.set_xlabel("number of parameters")
        ax.set_ylabel(f"{LABELS[v]} (median, IQR over layers)")
        ax.axhline(0, color="0.5", lw=0.6, zorder=0)
        ax.set_ylim(-1.05, 1.05)
    h, l = axes[0].get_legend_handles_labels()
    fig = axes[0].figure
    fig.legend(h, l, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2)


def band(ax: plt.Axes, x, median, q1, q3, color, label: str, ls: str = "-", alpha: float = 0.18) -> None:
    """A median line with its interquartile band (`alpha`: the band's opacity)."""
    ax.plot(x, median, color=color, ls=ls, lw=1.3, label=label)
    ax.fill_between(x, q1, q3, color=color, alpha=alpha, lw=0)


# Spread across layers (the paper's one model per curve) is drawn as a faded band; an interval across seeds
# (ours) as error bars on markers at the snapshots, so the two never look alike.
LAYER_SPREAD_ALPHA = 0.1


def seed_errorbars(
    ax: plt.Axes, x, estimate, low, high, color, label: str, marker: str = "o", ls: str = "-"
) -> matplotlib.container.ErrorbarContainer:
    """An estimate over seeds (a line with a marker at each x) with its interval as capped error bars, one
    artist (its legend entry shows line, marker and bar). Where a bound is NaN (fewer than 2 seeds) no bar."""
    x = np.asarray(x, dtype=float)
    est = np.asarray(estimate, dtype=float)
    lo, hi = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    return ax.errorbar(
        x,
        est,
        yerr=[est - lo, hi - est],
        color=color,
        ls=ls,
        lw=1.4,
        marker=marker,
        ms=3.5,
        elinewidth=1.0,
        capsize=2.5,
        capthick=1.0,
        label=label,
        zorder=3,
    )


def _palette(values) -> dict:
    vals = sorted(map(str, values))
    extra = [v for v in vals if v not in COMPONENT_COLORS]
    colors = dict(COMPONENT_COLORS)
    colors.update(zip(extra, sns.color_palette("colorblind", len(extra) + 2)[2:]))
    return colors


def palette(values) -> dict:
    """Stable colours: encoder blue, decoder red, anything else from the colorblind palette (sorted)."""
    return _palette(values)


def _short(name: str) -> str:
    return str(name).rstrip("/").split("/")[-1]


def subplots(nrows: int, ncols: int, width: float = 3.2, height: float = 2.6, **kw) -> tuple[plt.Figure, np.ndarray]:
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw)
    return fig, axes


def tokens_text(tokens: float) -> str:
    """A token count as read on an axis or in a legend: 2,048; 17.4 M; 26.2 G."""
    t = float(tokens)
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(t) >= div:
            return f"{t / div:.3g} {unit}"
    return f"{t:,.0f}"


def _steps_text(steps: float) -> str:
    """A step count on a log axis: 10; 1,000; 10k; 1M."""
    if steps >= 1e6:
        return f"{steps / 1e6:g}M"
    if steps >= 1e4:
        return f"{steps / 1e3:g}k"
    return f"{steps:,.0f}" if steps >= 1 else f"{steps:g}"


def tokens_axis(ax: plt.Axes, tokens_per_step: float, whose: str, lo: float, hi: float) -> None:
    """The x axis in tokens seen (log scale, lo to hi, one range for every panel, so ours and the paper's are read
    at equal tokens), with `whose` steps (e.g. "our step", "paper step") on a second axis at the top. Step 0 (no
    token seen) has no place on a log axis."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    per = float(tokens_per_step)
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=12))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: tokens_text(v)))
    ax.set_xlabel("tokens seen")
    top = ax.secondary_xaxis("top", functions=(lambda t: t / per, lambda s: s * per))
    top.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _steps_text(v)))
    top.set_xlabel(f"{whose} ({tokens_text(per)} tokens each)", fontsize="small")
    top.tick_params(labelsize="small")


def step_axis(ax: plt.Axes) -> None:
    """Training-step ticks as 50k, 100k above 10,000 (so 200k-step axes stay readable)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True, steps=[1, 2, 2.5, 5, 10]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g}k" if abs(v) >= 10000 else f"{v:g}"))


# ------------------------------------------------------------------------------------ shared drawing
# Initializations: the baseline dark grey, symmetric-fresh (the paper's "symmetric") vermillion and its untied
# control `fresh` blue, so the two that the key contrast compares never look alike (Okabe-Ito colours).
INIT_COLORS = {"standard": "#404040", "symmetric-fresh": "#D55E00", "fresh": "#0072B2", "symmetric": "#009E73"}


def init_palette(inits) -> dict:
    """Stable colours per initialization (INIT_COLORS; any other init from the colorblind palette)."""
    colors = dict(INIT_COLORS)
    extra = [i for i in sorted(map(str, inits)) if i not in colors]
    colors.update(zip(extra, sns.color_palette("colorblind", 10)[4 : 4 + len(extra)] if extra else []))
    return {i: colors[str(i)] for i in inits}


def layer_styles(n: int) -> list[tuple]:
    """(colour, line style) per layer 0..n-1: colours spread over the whole `turbo` map (ordered, and
    neighbouring layers clearly different), solid and dashed alternating so even 12+ layers stay apart."""
    cmap = matplotlib.colormaps["turbo"]
    pos = np.linspace(0.05, 0.95, n) if n > 1 else np.array([0.2])
    return [(cmap(float(p)), "-" if i % 2 == 0 else "--") for i, p in enumerate(pos)]


def interval_band(
    ax: plt.Axes, x, estimate, low, high, color, label: str, ls: str = "-", lw: float = 1.4, alpha: float = 0.2
) -> None:
    """An estimate line (e.g. the mean over seeds) with its interval as a band (NaN bounds leave a gap)."""
    ax.plot(x, estimate, color=color, ls=ls, lw=lw, label=label)
    ax.fill_between(
        np.asarray(x, dtype=float),
        np.asarray(low, dtype=float),
        np.asarray(high, dtype=float),
        color=color,
        alpha=alpha,
        lw=0,
    )


def legend_below(
    fig: plt.Figure, handles, labels, ncol: int = 2, top: float = 1.0, pad: float = 0.1, **kw
) -> matplotlib.legend.Legend:
    """A figure legend under all axes: the figure grows by the legend's height (plus `pad` inches), the
    legend sits at its bottom edge and the axes are laid out (tight_layout) above it, so it covers nothing.
    `top` < 1 leaves room for a suptitle."""
    leg = fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=ncol, **kw)
    fig.draw_without_rendering()
    w, h = fig.get_size_inches()
    extra = leg.get_window_extent(fig.canvas.get_renderer()).height / fig.dpi + pad
    fig.set_size_inches(w, h + extra)
    fig.tight_layout(rect=(0, extra / (h + extra), 1, 1 - (1 - top) * h / (h + extra)))
    return leg


def legend_beside(fig: plt.Figure, handles, labels, ncol: int = 1, pad: float = 0.1, **kw) -> matplotlib.legend.Legend:
    """A figure legend right of all axes: the figure grows by the legend's width (plus `pad` inches), the
    legend sits at its right edge and the axes are laid out in the space left of it."""
    leg = fig.legend(handles, labels, loc="center right", bbox_to_anchor=(1.0, 0.5), ncol=ncol, **kw)
    fig.draw_without_rendering()
    w, h = fig.get_size_inches()
    extra = leg.get_window_extent(fig.canvas.get_renderer()).width / fig.dpi + pad
    fig.set_size_inches(w + extra, h)
    fig.tight_layout(rect=(0, 0, w / (w + extra), 1))
    return leg


def spacer() -> tuple:
    """An invisible legend entry (handle, label), to start a new legend column at a chosen place."""
    return matplotlib.lines.Line2D([], [], alpha=0.0), " "


def unique_handles(*axes: plt.Axes) -> tuple[list, list]:
    """Legend handles and labels of `axes`, each label once (first seen), labels starting with '_' left out."""
    seen = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if not lab.startswith("_") and lab not in seen:
                seen[lab] = h
    return list(seen.values()), list(seen.keys())


def seeds_text(n: int, level: float) -> str:
    """How a curve summarizes its seeds, for legends: "mean of 3 seeds, 95 % t-interval", or "1 seed (no
    interval)" when there is only one."""
    n = int(n)
    if n < 2:
        return f"{n} seed (no interval)"
    return f"mean of {n} seeds, {100 * float(level):g} % t-interval"


# ------------------------------------------------------------------- the paper's grouped-query expansion
# the attention's own W_qk, the paper's expansion (as reproduced by compare-gqa), the paper's published number
GQA_METHOD_STYLES = {
    "correct": ("#0072B2", "o", "the attention's W_qk (each query head with its own key/value head)"),
    "paper": ("#E69F00", "X", "the paper's grouped-query expansion, reproduced"),
    "published": ("#000000", "s", "the paper's published median (same model)"),
}
GQA_OFFSET = 0.2  # x offset of each method's points from the model's tick


def _model_ticks(ax: plt.Axes, labels: Sequence[str]) -> None:
    n = len(labels)
    ax.set_xticks(range(n))
    ax.set_xticklabels([_short(lab) for lab in labels], rotation=30 if n > 3 else 0, ha="right" if n > 3 else "center")
    ax.set_xlim(-0.6, n - 0.4)
    ax.grid(False, axis="x")


def gqa_pairs(ax: plt.Axes, layers: pd.DataFrame, models: pd.DataFrame, score: str, values: bool | None = None) -> int:
    """One panel of `score` (symmetry | directionality) per grouped-query model (one x tick per row of
    gqa.gqa_model_table, in its order): each layer's value by the attention's W_qk (left of the tick) joined by a
    thin grey line to the same layer's value by the paper's expansion (right), the medians over layers as large
    markers joined by a bold line, and the paper's published median (where it published the model) at the
    expansion's side, where a correct reproduction puts it onto the expansion's median. `values`: write the two
    medians beside their markers (default: with at most 3 models). `layers`: gqa.gqa_layers. Returns the number
    of layer pairs drawn."""
    values = len(models) <= 3 if values is None else values
    pairs = 0
    for i, m in enumerate(models.itertuples(index=False)):
        g = layers[(layers["model"] == m.model) & (layers["component"] == m.component)]
        a, b = g[score].to_numpy(dtype=float), g[f"{score}_paper"].to_numpy(dtype=float)
        xa, xb = i - GQA_OFFSET, i + GQA_OFFSET
        segments = np.stack([np.column_stack([np.full_like(a, xa), a]), np.column_stack([np.full_like(b, xb), b])], 1)
        first = i == 0
        joined = "one layer: its two scores joined" if first else "_"
        ax.add_collection(
            matplotlib.collections.LineCollection(segments, colors="0.6", linewidths=0.5, zorder=1, label=joined)
        )
        pairs += len(a)
        for x, y, key in ((xa, a, "correct"), (xb, b, "paper")):
            color, marker, label = GQA_METHOD_STYLES[key]
            ax.scatter(np.full_like(y, x), y, s=9, color=color, alpha=0.6, lw=0, zorder=2)
            ax.scatter(
                [x],
                [np.median(y)],
                s=70,
                marker=marker,
                color=color,
                edgecolors="white",
                lw=0.6,
                zorder=4,
                label=f"{label}: median over layers" if first else "_",
            )
        ax.plot([xa, xb], [np.median(a), np.median(b)], color="0.2", lw=1.4, zorder=3)
        if values:
            for x, y, side in ((xa, np.median(a), -1), (xb, np.median(b), 1)):
                ax.annotate(
                    f"{y:.3f}",
                    (x, y),
                    textcoords="offset points",
                    xytext=(9 * side, 0),
                    fontsize=7,
                    ha="left" if side > 0 else "right",
                    va="center",
                    zorder=6,
                    bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8),
                )
        pub = getattr(m, f"published_{score}_median")
        if np.isfinite(pub):
            color, marker, label = GQA_METHOD_STYLES["published"]
            ax.scatter(
                [xb], [pub], s=80, marker=marker, facecolors="none", edgecolors=color, lw=1.2, zorder=5, label=label
            )
    _model_ticks(ax, models["label"] if "label" in models.columns else models["model"])
    ax.axhline(0, color="0.5", lw=0.6, zorder=0)
    ax.set_ylim(-1.05, 1.05)
    ax.set_ylabel(f"{LABELS[score]} per layer")
    return pairs


def gqa_distance(ax: plt.Axes, layers: pd.DataFrame, models: pd.DataFrame, values: bool | None = None) -> None:
    """Per grouped-query model (the ticks of gqa_pairs): each layer's relative Frobenius distance
    ||M_paper - M|| / ||M|| between the two matrices (spread over the tick by layer index, deterministic) and
    its median over layers as a bar (its value written beside it with at most 3 models, or as `values` says)."""
    values = len(models) <= 3 if values is None else values
    color = GQA_METHOD_STYLES["paper"][0]
    for i, m in enumerate(models.itertuples(index=False)):
        g = layers[(layers["model"] == m.model) & (layers["component"] == m.component)].sort_values("layer")
        r = g["relative_distance"].to_numpy(dtype=float)
        x = i + (np.linspace(-0.25, 0.25, len(r)) if len(r) > 1 else np.zeros(1))
        ax.scatter(
            x,
            r,
            s=9,
            color=color,
            alpha=0.7,
            lw=0,
            zorder=2,
            label="relative distance of the two matrices, per layer" if i == 0 else "_",
        )
        ax.plot(
            [i - 0.3, i + 0.3],
            [np.median(r)] * 2,
            color="0.1",
            lw=2.0,
            zorder=3,
            label="relative distance, median over layers" if i == 0 else "_",
        )
        if values:
            ax.annotate(
                f"{np.median(r):.2f}",
                (i + 0.3, np.median(r)),
                textcoords="offset points",
                xytext=(3, 0),
                fontsize=7,
                ha="left",
                va="center",
                zorder=6,
                bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8),
            )
    _model_ticks(ax, models["label"] if "label" in models.columns else models["model"])
    ax.set_ylim(bottom=0)
    ax.set_ylabel("relative distance per layer")


def gqa_correction_arrows(axes: Sequence[plt.Axes], corrections: pd.DataFrame) -> int:
    """Figure 2's correction of the paper's grouped-query points, on its two panels (symmetry, directionality; x =
    n_params): per row of gqa.gqa_corrections an arrow from the paper's published median to the median by the
    attention's W_qk at the paper's n_params, which is marked (a star in the component's colour). Draws nothing
    and returns 0 when `corrections` is empty (no scored model is one of the paper's); else the arrows per panel.
    Call it before scores_vs_params, whose figure legend then names the stars."""
    if corrections.empty:
        return 0
    colors = _palette(corrections["component"].unique())
    for ax, v in zip(axes, ("symmetry", "directionality")):
        for comp, g in corrections.groupby("component", sort=True):
            x = g["n_params"].to_numpy(dtype=float)
            start, end = g[f"published_{v}_median"].to_numpy(dtype=float), g[f"{v}_median"].to_numpy(dtype=float)
            for x_, s_, e_ in zip(x, start, end):
                ax.annotate(
                    "",
                    xy=(x_, e_),
                    xytext=(x_, s_),
                    arrowprops=dict(arrowstyle="-|>", color=colors[comp], lw=0.9, shrinkA=2, shrinkB=3),
                    zorder=4,
                )
            ax.scatter(
                x,
                end,
                marker="*",
                s=70,
                color=colors[comp],
                edgecolors="white",
                linewidths=0.4,
                zorder=5,
                label=f"ours, the paper's grouped-query {comp}s corrected (arrow: from its published point)",
            )
    return len(corrections)
