"""The data behind figures that needs more than reading a contract table, made by rules so that the
notebooks only read and draw (rules/figures.smk):

- Figure 1 (`attention-geometry extract-wqk`): the summed W_qk of one model's median-symmetry layer, as a
  small `.npz` (format below: `write_wqk` / `read_wqk`, its one writer and reader), drawn with its
  symmetric and antisymmetric parts (`symmetric_parts`);
- fig_symmetry_speedup (`attention-geometry symmetry-speedup`): per ablation run, final symmetry and its
  change vs the held-out loss gain and signed speed-up over the same-seed baseline run, and the Spearman
  correlations with bootstrap intervals within each (objective, init), never pooled across inits
  (results/tables/symmetry_speedup_{runs,correlations}.csv).

Importing this module imports neither torch nor a model loader (the notebooks import it); only
`median_symmetry_layer` (the extract-wqk command) loads weights.

The W_qk file (`.npz`, readable with numpy.load(allow_pickle=False)): `M`, the float32 d_model x d_model
matrix (rows: query side, columns: key side, docs/contracts.md), and `meta`, a JSON string with the keys
WQK_META (name: the run or model label; layer: 0-based; n_layers: the summed layers the median is taken
over; symmetry and directionality of M as scored in float64; symmetry_min/max over those layers). The
bytes depend only on the content (fixed zip timestamps), so a regenerated file that did not change does
not show as changed.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from attention_geometry.analysis import summaries as analysis
from attention_geometry.analysis.symmetry_speedup import correlation_table, symmetry_vs_gain
from attention_geometry.errors import UserError
from attention_geometry.formats.columns import RUN_COLUMNS, SCORES
from attention_geometry.formats.files import atomic_write_bytes, atomic_write_table, check_table_path, check_writable

__all__ = [
    "WqkExample",
    "WQK_META",
    "write_wqk",
    "read_wqk",
    "median_symmetry_layer",
    "symmetric_parts",
    "SYMMETRY_COLUMNS",
    "GAIN_COLUMNS",
    "symmetry_speedup_tables",
    "seed_means",
]

WQK_META = (
    "name",
    "component",
    "layer",
    "n_layers",
    "d_model",
    "n_heads",
    "symmetry",
    "directionality",
    "symmetry_min",
    "symmetry_max",
)
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


# ------------------------------------------------------------------------------------------- Figure 1
@dataclass
class WqkExample:
    """One model's median-symmetry layer: its summed W_qk and where it sits among the model's layers."""

    M: np.ndarray
    name: str
    component: str
    layer: int
    n_layers: int
    d_model: int
    n_heads: int
    symmetry: float
    directionality: float
    symmetry_min: float
    symmetry_max: float

    def meta(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "M"}


def write_wqk(path, ex: WqkExample) -> None:
    """Write `ex` as the W_qk .npz (module docstring), atomically."""
    buf = io.BytesIO()
    arrays = {
        "M": np.ascontiguousarray(ex.M, dtype=np.float32),
        "meta": np.array(json.dumps(ex.meta(), sort_keys=True)),
    }
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key, arr in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            data = io.BytesIO()
            np.lib.format.write_array(data, arr, allow_pickle=False)
            zf.writestr(info, data.getvalue())
    atomic_write_bytes(path, buf.getvalue())


def read_wqk(path) -> WqkExample:
    """The W_qk .npz written by write_wqk; one UserError line when it is missing or not such a file."""
    try:
        with np.load(path, allow_pickle=False) as z:
            M, meta = z["M"], json.loads(str(z["meta"]))
    except FileNotFoundError:
        raise UserError(f"{path}: no such W_qk file (rule extract_run_wqk / extract_pretrained_wqk)") from None
    except (KeyError, ValueError, OSError, zipfile.BadZipFile) as exc:
        raise UserError(f"{path}: not a W_qk .npz of `attention-geometry extract-wqk` ({exc})") from None
    missing = [k for k in WQK_META if k not in meta]
    if missing or M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise UserError(
            f"{path}: not a W_qk .npz of `attention-geometry extract-wqk` (missing {missing}, M of shape {M.shape})"
        )
    return WqkExample(M=M, **{k: meta[k] for k in WQK_META})


def median_symmetry_layer(source, name: str) -> WqkExample:
    """The summed W_qk of the median-symmetry layer of `source` (a model folder, a weight snapshot or a GGUF
    file): the layer whose symmetry is the lower median over the model's layers (ties by layer index), so
    the picture represents the model rather than its most or least symmetric layer."""
    from attention_geometry.scoring.measures import scores
    from attention_geometry.scoring.scorer import layer_matrices  # torch and the model loaders, only here

    mats = [r for r in layer_matrices(source) if r.head == "all"]
    if not mats:
        raise UserError(f"{source}: no self-attention layers")
    sd = [tuple(float(x) for x in scores(r.M)) for r in mats]
    order = sorted(range(len(mats)), key=lambda i: (sd[i][0], mats[i].layer))
    pick = order[(len(order) - 1) // 2]
    r, all_s = mats[pick], [s for s, _ in sd]
    return WqkExample(
        M=r.M.float().numpy(),
        name=str(name),
        component=r.component,
        layer=int(r.layer),
        n_layers=len(all_s),
        d_model=int(r.d_model),
        n_heads=int(r.n_heads),
        symmetry=sd[pick][0],
        directionality=sd[pick][1],
        symmetry_min=min(all_s),
        symmetry_max=max(all_s),
    )


def symmetric_parts(M) -> tuple[np.ndarray, np.ndarray]:
    """(M + M^T) / 2 and (M - M^T) / 2 of a square matrix, in float64: the symmetric and antisymmetric parts
    whose squared norms the symmetry score compares (a principal block of a part is that part of the block)."""
    A = np.asarray(M, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise UserError(f"symmetric parts: expected a square matrix, got shape {A.shape}")
    return (A + A.T) / 2, (A - A.T) / 2


# ------------------------------------------------------------------------------- symmetry vs speed-up
SYMMETRY_COLUMNS = ["symmetry_final", "symmetry_change"]
GAIN_COLUMNS = ["loss_gain", "speedup"]


def symmetry_speedup_tables(
    scores: pd.DataFrame,
    loss: pd.DataFrame,
    runs: list[str],
    baseline_init: str,
    level: float,
    n_resamples: int,
    seed: int,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per ablation run: symmetry_speedup.symmetry_vs_gain; Spearman correlation of each symmetry column
    with each gain column within each (objective, init), with percentile-bootstrap intervals). Within an
    init, not pooled: inits differ in their symmetry by construction (symmetric-fresh starts at s = 1), so a
    pooled rank correlation would measure the difference between inits, not a relation within any of them."""
    scores = analysis.select_runs(scores, runs, "training scores")
    loss = analysis.select_runs(loss, runs, "training loss")
    table = symmetry_vs_gain(scores, loss, baseline_init)
    if table.empty:
        raise UserError("no ablation run has both training scores and a same-seed baseline run in the loss table")
    corr = correlation_table(
        table,
        SYMMETRY_COLUMNS,
        GAIN_COLUMNS,
        n_resamples=int(n_resamples),
        seed=int(seed),
        level=float(level),
        by=["objective", "init"],
    )
    return table, corr


def seed_means(table: pd.DataFrame, columns: list[str], level: float) -> pd.DataFrame:
    """Per (objective, init): n_seeds and, for each column, the mean over seeds with its Student-t interval
    ({c}_mean, {c}_low, {c}_high)."""
    return analysis.mean_over_seeds(table, ["objective", "init"], columns, level)


# ------------------------------------------------------------------------------------------------- CLI
def run_extract_wqk(args) -> int:
    if not str(args.out).endswith(".npz"):
        raise UserError(f"{args.out}: the output must end in .npz")
    check_writable(args.out)
    ex = median_symmetry_layer(args.source, args.name)
    write_wqk(args.out, ex)
    print(
        f"{args.out}: {ex.name} {ex.component} layer {ex.layer} of {ex.n_layers} ({ex.d_model} x {ex.d_model}), "
        f"s = {ex.symmetry:.4f}, d = {ex.directionality:.4f}"
    )
    return 0


def run_symmetry_speedup(args) -> int:
    for path in (args.out_runs, args.out_correlations):
        check_table_path(path)
    scores = analysis.read_table(args.scores, "training scores", RUN_COLUMNS + ["layer", *SCORES])
    loss = analysis.read_table(args.loss, "training loss", RUN_COLUMNS + ["eval_loss"])
    table, corr = symmetry_speedup_tables(
        scores, loss, args.runs, args.baseline_init, args.ci_level, args.bootstrap_resamples, args.bootstrap_seed
    )
    atomic_write_table(table, args.out_runs, lineterminator="\n")
    atomic_write_table(corr, args.out_correlations, lineterminator="\n")
    print(f"{args.out_runs}: {len(table)} runs; {args.out_correlations}: {len(corr)} correlations")
    return 0
