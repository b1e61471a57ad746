"""The grouped-query table summarized per model and matched with the paper's published scores
(attention_geometry.analysis.gqa), and its drawing (plotting.gqa_pairs, gqa_distance, gqa_correction_arrows),
checked against medians taken by hand (the standard library's statistics.median) on small synthetic tables."""

from __future__ import annotations

import statistics

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.text import Annotation

from attention_geometry.analysis import gqa, plotting
from attention_geometry.errors import UserError
from attention_geometry.formats.columns import GQA_COLUMNS

# per (model, component): per-layer (s, d, s_paper, d_paper, relative distance)
LAYERS = {
    ("org/a", "decoder"): [(0.30, -0.2, 0.05, -0.1, 0.9), (0.10, -0.4, 0.01, 0.2, 1.1), (0.20, 0.1, 0.03, 0.0, 1.0)],
    ("org/b", "decoder"): [(0.05, 0.3, 0.02, 0.1, 0.8), (0.15, -0.3, 0.06, -0.2, 1.2)],
    ("org/c", "encoder"): [(0.6, 0.0, 0.5, 0.1, 0.5)],
    ("org/c", "decoder"): [(0.2, -0.5, 0.1, -0.4, 0.7), (0.4, -0.1, 0.2, -0.3, 0.9)],
}


def _table(layers=LAYERS) -> pd.DataFrame:
    rows = []
    for (model, component), values in layers.items():
        for layer, (s, d, sp, dp, r) in enumerate(values):
            rows.append(
                dict(
                    model=model,
                    component=component,
                    layer=layer,
                    n_heads=8,
                    n_kv_heads=2,
                    symmetry=s,
                    directionality=d,
                    symmetry_paper=sp,
                    directionality_paper=dp,
                    relative_distance=r,
                )
            )
    return pd.DataFrame(rows, columns=GQA_COLUMNS)


def _paper() -> pd.DataFrame:
    """The paper's scores: org/a published twice (a duplicate marked by same_as, with other numbers, which must be
    ignored), org/c only as an encoder, org/b not at all."""
    rows = []
    for family, model, component, values, same_as in (
        ("F", "org/a", "decoder", [0.02, 0.06, 0.04, 0.01], ""),
        ("G", "org/a", "decoder", [0.9, 0.9], "F/org/a"),
        ("F", "org/c", "encoder", [0.45, 0.55], ""),
    ):
        for layer, s in enumerate(values):
            rows.append(
                dict(
                    modality="language",
                    family_file=family,
                    model=model,
                    architecture="decoder-only",
                    component=component,
                    n_params=1000 if model == "org/a" else 2000,
                    layer=layer,
                    symmetry=s,
                    directionality=-s,
                    same_as=same_as,
                )
            )
    return pd.DataFrame(rows)


def test_model_table_medians_shifts_and_published_by_hand():
    t = gqa.gqa_model_table(_table(), _paper())
    assert list(t.columns) == gqa.GQA_MODEL_COLUMNS
    assert list(zip(t["model"], t["component"])) == list(LAYERS)  # the table's order
    for (model, component), values in LAYERS.items():
        r = t[(t["model"] == model) & (t["component"] == component)].iloc[0]
        s, d, sp, dp, dist = (statistics.median(col) for col in zip(*values))
        assert r["n_layers"] == len(values) and (r["n_heads"], r["n_kv_heads"]) == (8, 2)
        assert (r["symmetry_median"], r["directionality_median"]) == pytest.approx((s, d))
        assert (r["symmetry_paper_median"], r["directionality_paper_median"]) == pytest.approx((sp, dp))
        assert r["relative_distance_median"] == pytest.approx(dist)
        assert (r["symmetry_shift"], r["directionality_shift"]) == pytest.approx((sp - s, dp - d))
    by = t.set_index(["model", "component"])
    # org/a: the distinct set only (median of 0.02, 0.06, 0.04, 0.01 = 0.03), not the same_as duplicate
    assert by.loc[("org/a", "decoder"), "published_symmetry_median"] == pytest.approx(0.03)
    assert by.loc[("org/a", "decoder"), "published_directionality_median"] == pytest.approx(-0.03)
    assert by.loc[("org/a", "decoder"), "published_n_layers"] == 4 and by.loc[("org/a", "decoder"), "n_params"] == 1000
    assert by.loc[("org/c", "encoder"), "published_symmetry_median"] == pytest.approx(0.5)
    for key in (("org/b", "decoder"), ("org/c", "decoder")):  # not published (org/c's decoder: no such component)
        assert np.isnan(by.loc[key, "published_symmetry_median"]) and by.loc[key, "published_n_layers"] == 0
    alone = gqa.gqa_model_table(_table())  # without the paper's table: nothing published
    assert alone[["published_symmetry_median", "n_params"]].isna().all().all()
    assert (alone["published_n_layers"] == 0).all()


def test_corrections_are_the_published_models_and_labels_name_a_second_stack():
    t = gqa.gqa_model_table(_table(), _paper())
    c = gqa.gqa_corrections(t)
    assert list(zip(c["model"], c["component"])) == [("org/a", "decoder"), ("org/c", "encoder")]
    assert gqa.gqa_corrections(gqa.gqa_model_table(_table())).empty  # nothing published: no arrow
    assert gqa.model_labels(t) == ["org/a", "org/b", "org/c (encoder)", "org/c (decoder)"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.drop(columns="symmetry_paper"), "missing column"),
        (lambda t: t.assign(symmetry=[np.nan] + list(t["symmetry"][1:])), "org/a decoder layer 0 has a missing score"),
        (lambda t: pd.concat([t, t.iloc[[1]]]), "org/a decoder layer 1 appears twice"),
        (lambda t: t.iloc[0:0], "no rows"),
    ],
)
def test_bad_tables_are_refused_with_one_line(mutate, message):
    with pytest.raises(UserError, match=message):
        gqa.gqa_model_table(mutate(_table()))


def test_pairs_and_distance_panels_draw_every_layer_where_it_belongs():
    layers = gqa.gqa_layers(_table())
    models = gqa.gqa_model_table(layers, _paper())
    models["label"] = gqa.model_labels(models)
    fig, (ax, ax_d) = plt.subplots(1, 2)
    assert plotting.gqa_pairs(ax, layers, models, "symmetry") == sum(len(v) for v in LAYERS.values())
    segments = [seg for c in ax.collections if isinstance(c, LineCollection) for seg in c.get_segments()]
    expected = [
        ((i - plotting.GQA_OFFSET, s), (i + plotting.GQA_OFFSET, sp))
        for i, values in enumerate(LAYERS.values())
        for s, _d, sp, _dp, _r in values
    ]
    np.testing.assert_allclose(np.array(segments, dtype=float), np.array(expected, dtype=float))
    # the medians (large markers) and the published squares, in data coordinates
    points = [tuple(p) for c in ax.collections if isinstance(c, PathCollection) for p in c.get_offsets()]
    for i, values in enumerate(LAYERS.values()):
        s, sp = statistics.median(v[0] for v in values), statistics.median(v[2] for v in values)
        assert (i - plotting.GQA_OFFSET, pytest.approx(s)) in points
        assert (i + plotting.GQA_OFFSET, pytest.approx(sp)) in points
    assert (0 + plotting.GQA_OFFSET, pytest.approx(0.03)) in points  # org/a's published median
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c (encoder)", "c (decoder)"]
    plotting.gqa_distance(ax_d, layers, models)
    medians = [line.get_ydata()[0] for line in ax_d.get_lines()]
    assert medians == pytest.approx([statistics.median(v[4] for v in values) for values in LAYERS.values()])
    plt.close(fig)


def test_correction_arrows_go_from_the_published_point_to_the_attentions_own_matrix():
    models = gqa.gqa_model_table(_table(), _paper())
    fig, axes = plt.subplots(1, 2)
    assert plotting.gqa_correction_arrows(axes, gqa.gqa_corrections(models)) == 2
    for ax, v in zip(axes, ("symmetry", "directionality")):
        arrows = sorted((a.xyann, a.xy) for a in ax.texts if isinstance(a, Annotation))
        expected = []
        for key, values in (
            (("org/a", "decoder"), LAYERS[("org/a", "decoder")]),
            (("org/c", "encoder"), LAYERS[("org/c", "encoder")]),
        ):
            col = 0 if v == "symmetry" else 1
            published = {("org/a", "decoder"): (1000, 0.03), ("org/c", "encoder"): (2000, 0.5)}[key]
            sign = 1 if v == "symmetry" else -1
            corrected = statistics.median(x[col] for x in values)
            expected.append(((published[0], sign * published[1]), (published[0], corrected)))
        np.testing.assert_allclose(np.array(arrows, dtype=float), np.array(sorted(expected), dtype=float))
    plt.close(fig)
    # the default config's case: no grouped-query model is one of the paper's, so nothing is drawn
    fig, axes = plt.subplots(1, 2)
    assert plotting.gqa_correction_arrows(axes, gqa.gqa_corrections(gqa.gqa_model_table(_table()))) == 0
    assert not any(ax.texts or ax.collections for ax in axes)
    plt.close(fig)
