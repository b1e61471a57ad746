"""The legend-overlap check of plotting.save: real matplotlib figures built to overlap fail with a UserError
naming the covered element; clean ones pass and are written."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import assert_has_content

from attention_geometry.analysis import plotting
from attention_geometry.errors import UserError

plt = plt


@pytest.fixture(autouse=True)
def _style_and_close():
    plotting.style()
    yield
    plt.close("all")


def _curves(ax, n=2):
    x = np.linspace(0, 1, 50)
    for i in range(n):
        ax.plot(x, (i + 1) * x, label=f"a rather long curve label number {i}")
    ax.set_xlabel("training step")
    ax.set_ylabel("symmetry s")
    ax.set_title("panel title")


def _problems(fig):
    return plotting.layout_problems(fig)


def test_legend_over_the_y_label_fails(tmp_path):
    fig, ax = plt.subplots(figsize=(4, 3))
    _curves(ax)
    fig.tight_layout()
    # the fig3 bug: a legend anchored left of the axes, over the y-axis label and the tick labels
    ax.legend(loc="center left", bbox_to_anchor=(-0.35, 0.5))
    with pytest.raises(UserError, match="y-axis label 'symmetry s'"):
        plotting.save(fig, png=tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()
    assert any("y tick label" in p for p in _problems(fig))


def test_legend_over_the_title_fails():
    fig, ax = plt.subplots(figsize=(4, 3))
    _curves(ax)
    fig.tight_layout()
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 0.95))
    with pytest.raises(UserError, match="title 'panel title'"):
        plotting.check_layout(fig, name="t.png")


def test_legend_over_another_axes_fails():
    fig, axes = plt.subplots(1, 2, figsize=(7, 3))
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="curve")
    fig.tight_layout()
    axes[0].legend(loc="center left", bbox_to_anchor=(0.9, 0.5), fontsize="large")
    problems = _problems(fig)
    assert any(p.startswith("the legend of axes 0") and "overlaps axes 1" in p for p in problems), problems


def test_figure_legend_over_an_axes_and_the_suptitle_fail():
    fig, axes = plt.subplots(1, 2, figsize=(7, 3))
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="curve")
    fig.suptitle("a suptitle")
    fig.tight_layout()
    fig.legend(*axes[0].get_legend_handles_labels(), loc="center")
    problems = _problems(fig)
    assert any(p.startswith("figure legend 0 overlaps axes") for p in problems), problems
    fig2, ax2 = plt.subplots(figsize=(4, 3))
    ax2.plot([0, 1], [0, 1], label="curve")
    fig2.suptitle("a suptitle")
    fig2.tight_layout()
    fig2.legend(*ax2.get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 1.0))
    with pytest.raises(UserError, match="figure suptitle 'a suptitle'"):
        plotting.check_layout(fig2)


def test_legend_over_a_curve_fails_and_off_the_curve_passes():
    fig, ax = plt.subplots(figsize=(4, 3))
    x = np.linspace(0, 1, 50)
    ax.plot(x, x, label="diagonal")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    fig.tight_layout()
    ax.legend(loc="center")  # the diagonal runs through the centre
    with pytest.raises(UserError, match="covers curve 'diagonal'"):
        plotting.check_layout(fig)
    ax.legend(loc="upper left")  # the diagonal never reaches the upper-left corner
    assert _problems(fig) == []
    # the curve check can be switched off (reference lines drawn in axes coordinates never count)
    ax.legend(loc="center")
    ax.axhline(0.5, color="0.5")
    assert plotting.layout_problems(fig, curves=False) == []


def test_two_legends_overlapping_fail():
    fig, ax = plt.subplots(figsize=(5, 3))
    _curves(ax)
    fig.tight_layout(rect=(0, 0, 0.6, 1))
    fig.legend(*ax.get_legend_handles_labels(), loc="center left", bbox_to_anchor=(0.62, 0.5))
    fig.legend(*ax.get_legend_handles_labels(), loc="center left", bbox_to_anchor=(0.63, 0.52))
    assert any(p == "figure legend 0 overlaps figure legend 1" for p in _problems(fig))


def test_clean_figures_pass_and_are_written(tmp_path):
    # legends outside the axes: right of a panel, a figure legend below, and a legend-only axes
    fig, axes = plt.subplots(2, 3, figsize=(10, 5), gridspec_kw={"width_ratios": [1, 1, 0.6]})
    for ax in axes[:, :2].flat:
        _curves(ax)
    axes[0, 2].set_axis_off()
    axes[0, 2].legend(*axes[0, 0].get_legend_handles_labels(), loc="center left", fontsize="x-small")
    axes[1, 2].set_axis_off()
    fig.suptitle("clean figure")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.legend(*axes[1, 0].get_legend_handles_labels(), loc="lower center", ncol=2, bbox_to_anchor=(0.5, 0.0))
    assert _problems(fig) == []
    written = plotting.save(fig, pdf=tmp_path / "ok.pdf", png=tmp_path / "ok.png")
    assert [p.name for p in written] == ["ok.pdf", "ok.png"]
    for p in written:
        assert_has_content(p)


def test_a_figure_without_legends_passes():
    fig, ax = plt.subplots()
    ax.imshow(np.eye(4))
    ax.set_title("no legend")
    assert _problems(fig) == []


def test_save_can_skip_the_check(tmp_path):
    fig, ax = plt.subplots(figsize=(4, 3))
    _curves(ax)
    fig.tight_layout()
    ax.legend(loc="center left", bbox_to_anchor=(-0.35, 0.5))
    plotting.save(fig, png=tmp_path / "forced.png", check=False)
    assert_has_content(tmp_path / "forced.png")


def test_caveat_styles_one_marker_per_kind():
    styles = plotting.caveat_styles(["pythia-qkv-split", "gqa-expansion", "", "some-new-kind", "gqa-expansion"])
    assert set(styles) == {"gqa-expansion", "pythia-qkv-split", "some-new-kind"}
    assert styles["gqa-expansion"] == plotting.CAVEAT_KINDS["gqa-expansion"]
    markers = [m for m, _ in styles.values()]
    assert len(set(markers)) == len(markers)  # every kind drawn has a marker of its own
    assert styles["some-new-kind"][1] == "some-new-kind"


def test_seed_errorbars_draw_the_given_bounds():
    fig, ax = plt.subplots()
    x, est = [0, 10, 20], [0.1, 0.2, 0.3]
    low, high = [np.nan, 0.05, 0.1], [np.nan, 0.4, 0.45]
    container = plotting.seed_errorbars(ax, x, est, low, high, "C0", "ours")
    line, _, (bars,) = container.lines
    assert np.allclose(line.get_xydata(), np.column_stack([x, est]))
    drawn = {}
    for seg in bars.get_segments():
        if np.size(seg) and np.all(np.isfinite(seg)):
            drawn[float(seg[0, 0])] = sorted(float(v) for v in seg[:, 1])
    assert drawn == {10.0: pytest.approx([0.05, 0.4]), 20.0: pytest.approx([0.1, 0.45])}  # no bar at one seed
    assert ax.get_legend_handles_labels()[1] == ["ours"]
