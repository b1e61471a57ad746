"""The paper's grouped-query expansion beside the attention's matrix, per model: the table of rule concat_gqa
(`{results}/tables/gqa_paper_method.csv`, columns formats.columns.GQA_COLUMNS, one row per grouped-query layer,
written by `attention-geometry compare-gqa`) summarized over layers and matched with the paper's published
scores of the same model (resources/paper/paper_pretrained_scores.csv).

Per model and component (`gqa_model_table`): the medians over layers of s and d by the attention's W_qk
(`symmetry_median`, `directionality_median`), by the paper's expansion (`symmetry_paper_median`, ...), the
median relative Frobenius distance between the two matrices, and `symmetry_shift`, the paper-method median minus
the correct median (the claims' per-model effect); where the paper published the same model (same name and
component, a distinct score set), its published medians and its parameter count. `gqa_corrections` keeps the
models with a published value: Figure 2's arrows from the published point to the corrected one.

Pure functions on DataFrames (no file reading, no drawing); the notebooks and attention_geometry.analysis.claims
call them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attention_geometry.analysis.summaries import distinct_paper_models, require_columns
from attention_geometry.errors import UserError
from attention_geometry.formats.columns import GQA_COLUMNS, SCORES

__all__ = ["GQA_MODEL_COLUMNS", "gqa_layers", "gqa_model_table", "gqa_corrections", "model_labels"]

# what gqa_model_table returns, one row per (model, component), in the table's order of first appearance
GQA_MODEL_COLUMNS = [
    "model",
    "component",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "symmetry_median",
    "directionality_median",
    "symmetry_paper_median",
    "directionality_paper_median",
    "relative_distance_median",
    "symmetry_shift",
    "directionality_shift",
    "published_symmetry_median",
    "published_directionality_median",
    "published_n_layers",
    "n_params",
]
_PER_LAYER = [*SCORES, "symmetry_paper", "directionality_paper", "relative_distance"]


def gqa_layers(gqa: pd.DataFrame) -> pd.DataFrame:
    """The table's rows checked (GQA_COLUMNS, finite scores, one row per model, component and layer), with
    `model` and `component` as strings, in the table's order."""
    require_columns(gqa, GQA_COLUMNS, "grouped-query table")
    if gqa.empty:
        raise UserError("grouped-query table: no rows")
    t = gqa.assign(model=gqa["model"].astype(str), component=gqa["component"].astype(str)).reset_index(drop=True)
    bad = ~np.isfinite(t[_PER_LAYER].to_numpy(dtype=float)).all(axis=1)
    if bad.any():
        r = t[bad].iloc[0]
        raise UserError(f"grouped-query table: {r['model']} {r['component']} layer {r['layer']} has a missing score")
    dup = t.duplicated(["model", "component", "layer"])
    if dup.any():
        r = t[dup].iloc[0]
        raise UserError(f"grouped-query table: {r['model']} {r['component']} layer {r['layer']} appears twice")
    return t


def _published(paper: pd.DataFrame | None) -> dict[tuple[str, str], dict]:
    """(model, component) -> the paper's published medians over layers (a distinct score set; where one name has
    several, the first family file in sorted order), n_layers and n_params."""
    if paper is None or paper.empty:
        return {}
    require_columns(
        paper, ["family_file", "model", "component", "n_params", "layer", *SCORES, "same_as"], "paper pretrained scores"
    )
    out: dict[tuple[str, str], dict] = {}
    p = distinct_paper_models(paper)
    for (model, component, _family), g in p.groupby(["model", "component", "family_file"], sort=True):
        key = (str(model), str(component))
        if key in out:
            continue
        out[key] = {
            "published_symmetry_median": float(np.median(g["symmetry"].to_numpy(dtype=float))),
            "published_directionality_median": float(np.median(g["directionality"].to_numpy(dtype=float))),
            "published_n_layers": int(len(g)),
            "n_params": float(g["n_params"].iloc[0]),
        }
    return out


def gqa_model_table(gqa: pd.DataFrame, paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (model, component) of the grouped-query table (GQA_MODEL_COLUMNS, in the table's order): medians over
    layers of both methods' s and d and of the relative distance; the shifts (paper-method median minus correct
    median); the heads of its first layer; and, where `paper` has the same model and component, the paper's
    published medians over its layers and its n_params (NaN where not)."""
    t = gqa_layers(gqa)
    published = _published(paper)
    empty = {k: np.nan for k in ("published_symmetry_median", "published_directionality_median", "n_params")}
    rows = []
    for (model, component), g in t.groupby(["model", "component"], sort=False):
        med = {c: float(np.median(g[c].to_numpy(dtype=float))) for c in _PER_LAYER}
        rows.append(
            {
                "model": model,
                "component": component,
                "n_layers": int(len(g)),
                "n_heads": int(g["n_heads"].iloc[0]),
                "n_kv_heads": int(g["n_kv_heads"].iloc[0]),
                **{f"{c}_median": med[c] for c in _PER_LAYER},
                "symmetry_shift": med["symmetry_paper"] - med["symmetry"],
                "directionality_shift": med["directionality_paper"] - med["directionality"],
                "published_n_layers": 0,
                **empty,
                **published.get((model, component), {}),
            }
        )
    return pd.DataFrame(rows, columns=GQA_MODEL_COLUMNS)


def gqa_corrections(models: pd.DataFrame) -> pd.DataFrame:
    """The rows of gqa_model_table whose model the paper published (a published median and n_params): each is
    drawn in Figure 2 as an arrow from the published point to the attention's own matrix at the same n_params.
    Empty when no model of the table is one of the paper's (the default config's SmolLM2)."""
    require_columns(models, GQA_MODEL_COLUMNS, "grouped-query model table")
    keep = np.isfinite(models["published_symmetry_median"].to_numpy(dtype=float)) & np.isfinite(
        models["n_params"].to_numpy(dtype=float)
    )
    return models[keep].reset_index(drop=True)


def model_labels(models: pd.DataFrame) -> list[str]:
    """One label per row of gqa_model_table: the model's name, with its component where the model has several
    grouped-query stacks (the claims' unit labels and the figure's ticks)."""
    counts = models["model"].value_counts()
    return [m if counts[m] == 1 else f"{m} ({c})" for m, c in zip(models["model"], models["component"])]
