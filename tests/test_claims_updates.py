"""The applied-update claims: an applied update at step s spans s -> the run's next snapshot, whatever steps
were scored (a regression test: its length used to be taken from the gaps between scored steps)."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import run_keys

from attention_geometry.analysis import claims as C

SEEDS = (0, 1, 2)
SNAPSHOTS = [0, 100, 200, 300]  # every 100 steps
SCORED = [0, 200]  # score-updates at every other snapshot: the applied update at s spans s -> s + 100


def _run(objective, seed):
    return f"tiny-w-{objective}-standard-s{seed}"


def _training():
    return pd.DataFrame(
        [
            dict(
                **run_keys(_run(o, s), o, "standard", s, dataset="w"),
                step=step,
                layer=layer,
                head="all",
                symmetry=0.0,
                directionality=0.0,
            )
            for o in ("encoder", "decoder")
            for s in SEEDS
            for step in SNAPSHOTS
            for layer in (0, 1)
        ]
    )


def _updates():
    rows = []
    for o in ("encoder", "decoder"):
        for s in SEEDS:
            for step in SCORED:
                for kind in ("gradient", "applied"):
                    for layer in (0, 1):
                        # the encoder's applied updates: 0.3 at step 0, 0.5 at step 200; the decoder's 0.1
                        sym = (0.3 if step == 0 else 0.5) if o == "encoder" else 0.1
                        rows.append(
                            dict(
                                **run_keys(_run(o, s), o, "standard", s, dataset="w"),
                                step=step,
                                layer=layer,
                                kind=kind,
                                symmetry=sym,
                                directionality=-0.2,
                            )
                        )
    return pd.DataFrame(rows)


def _claims(**tables):
    emergence = {o: [_run(o, s) for s in SEEDS] for o in ("encoder", "decoder")}
    t = C.ClaimTables(updates=_updates(), emergence_runs=emergence, **tables)
    return C.reproduction_claims(t, C.ClaimSettings()).set_index("id")


def test_applied_update_length_is_the_snapshot_spacing_not_the_scoring_gap():
    h = _claims(training=_training()).loc["h_applied_1"]
    # every applied row spans 100 steps (0 -> 100, 200 -> 300): none is left out, and the per-seed median over
    # layers and steps of the encoder's (0.3, 0.3, 0.5, 0.5) is 0.4, against the decoder's 0.1
    assert "left out" not in h["note"]
    assert "each spanning 100 steps" in h["note"]
    assert h["estimate"] == pytest.approx(0.3)


def test_snapshot_steps_given_explicitly():
    runs = [_run(o, s) for o in ("encoder", "decoder") for s in SEEDS]
    # snapshots every 200 steps: 0 -> 200 spans 200, and step 200 has no next snapshot (left out, with a note)
    h = _claims(snapshot_steps={r: [0, 200] for r in runs}).loc["h_applied_1"]
    assert "each spanning 200 steps (12 row(s) of other spans or without a next snapshot left out)" in h["note"]
    assert h["estimate"] == pytest.approx(0.3 - 0.1)
    # without training scores or snapshot steps the applied claims are not tested; the gradient ones are
    c = _claims()
    assert c.loc["h_applied_1", "verdict"] == "not tested" and "no snapshot steps" in c.loc["h_applied_1", "note"]
    assert c.loc["h_gradient_1", "verdict"] != "not tested"
