"""Shared figure style and drawing helpers for the notebooks (seaborn on matplotlib).

Figures are saved without timestamps or software strings and at a fixed dpi, so an unchanged rerun writes
byte-identical PDF and PNG files. Nothing here computes or rescales a score: summaries come from
attention_geometry.analysis.
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

from .errors import UserError  # noqa: E402

DPI = 200
COMPONENT_COLORS = {"encoder": "#1f77b4", "decoder": "#d62728"}
SOURCE_MARKERS = {"ours": "o", "paper": "s"}
LABELS = {"symmetry": "symmetry s", "directionality": "directionality d"}


def style() -> None:
    """The one figure style of the project."""
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.0)
    plt.rcParams.update({
        "figure.dpi": 100,
        "savefig.dpi": DPI,
        "pdf.fonttype": 42,
        "ps.fonttype": 42,
        "svg.hashsalt": "attention-geometry",
        "axes.titlesize": "medium",
        "legend.fontsize": "small",
        "legend.frameon": False,
        "path.simplify": True,
    })


def save(fig: plt.Figure, pdf: str | os.PathLike | None = None, png: str | os.PathLike | None = None,
         dpi: int = DPI) -> list[Path]:
    """Save `fig` as PDF and/or PNG without timestamps (byte-identical reruns), creating parent folders."""
    written = []
    for path, fmt, meta in ((pdf, "pdf", {"CreationDate": None, "Creator": None, "Producer": None}),
                            (png, "png", {"Software": None})):
        if path is None:
            continue
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(p, format=fmt, dpi=dpi, metadata=meta, bbox_inches="tight", pad_inches=0.05)
        written.append(p)
    return written


def wqk_heatmap(ax: plt.Axes, M, title: str, max_dim: int | None = None,
                clip_percentile: float = 99.0) -> matplotlib.image.AxesImage:
    """M (rows = query side, columns = key side) as a diverging heatmap centred on 0. The colour limits are
    +-(the `clip_percentile` percentile of |M|), so a few outlier entries do not wash the picture out (entries
    beyond are drawn at the end colours; a display choice only: no score is computed here). `max_dim` shows only
    the top-left max_dim x max_dim block (said in the title)."""
    A = np.asarray(M, dtype=float)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise UserError(f"heatmap {title!r}: expected a square matrix, got shape {A.shape}")
    shown = A if max_dim is None or max_dim >= A.shape[0] else A[:max_dim, :max_dim]
    if not 0 < clip_percentile <= 100:
        raise UserError(f"heatmap {title!r}: clip_percentile must be in (0, 100], got {clip_percentile!r}")
    lim = float(np.percentile(np.abs(shown), clip_percentile)) or float(np.max(np.abs(shown))) or 1.0
    im = ax.imshow(shown, cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
    if shown.shape != A.shape:
        title += f"\n(top-left {shown.shape[0]} of {A.shape[0]} dims)"
    ax.set_title(title)
    ax.set_xlabel("key dimension")
    ax.set_ylabel("query dimension")
    ax.grid(False)
    return im


def scores_vs_params(axes: Sequence[plt.Axes], table: pd.DataFrame, hue: str = "component",
                     label_ours: bool = True) -> None:
    """Two panels (symmetry, directionality): per model the median over layers with IQR bars vs n_params
    (log x). Colour = `hue`; filled circles = ours, squares = the paper's; the paper's caveat-flagged points
    are drawn hollow with an x and named in the legend as not comparable. `table` is analysis.model_table."""
    palette = _palette(table[hue].unique())
    for ax, v in zip(axes, ("symmetry", "directionality")):
        for (src, h, cav), g in table.groupby(["source", hue, "caveat"], sort=True):
            y, lo, hi = g[f"{v}_median"], g[f"{v}_q1"], g[f"{v}_q3"]
            flagged = bool(cav)
            who = "ours" if src == "ours" else "paper (published)"
            label = f"{who}, {h}" + (f", {cav}: not comparable" if flagged else "")
            ax.errorbar(g["n_params"], y, yerr=[y - lo, hi - y], fmt="none", ecolor=palette[h], alpha=0.35,
                        elinewidth=0.8, zorder=1)
            ax.scatter(g["n_params"], y, marker="X" if flagged else SOURCE_MARKERS[src],
                       s=(46 if src == "ours" else 18),
                       facecolors=("none" if flagged else palette[h]), edgecolors=palette[h],
                       linewidths=(0.9 if flagged else (1.2 if src == "ours" else 0.3)),
                       label=label, zorder=3 if src == "ours" else 2)
            if src == "ours" and label_ours:
                for x_, y_, name in zip(g["n_params"], y, g["model"]):
                    ax.annotate(_short(name), (x_, y_), textcoords="offset points", xytext=(4, 4), fontsize=6)
        ax.set_xscale("log")
        ax.set_xlabel("number of parameters")
        ax.set_ylabel(f"{LABELS[v]} (median, IQR over layers)")
        ax.axhline(0, color="0.5", lw=0.6, zorder=0)
        ax.set_ylim(-1.05, 1.05)
    h, l = axes[0].get_legend_handles_labels()
    fig = axes[0].figure
    fig.legend(h, l, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2)


def band(ax: plt.Axes, x, median, q1, q3, color, label: str, ls: str = "-") -> None:
    """A median line with its interquartile band."""
    ax.plot(x, median, color=color, ls=ls, lw=1.3, label=label)
    ax.fill_between(x, q1, q3, color=color, alpha=0.18, lw=0)


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


def step_axis(ax: plt.Axes) -> None:
    """Training-step ticks as 50k, 100k above 10,000 (so 200k-step axes stay readable)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g}k" if abs(v) >= 10000 else f"{v:g}"))
