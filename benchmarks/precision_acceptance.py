"""The precision acceptance rule of the embedded default (docs/experiment-design.md, "bf16 acceptance"): a
faster numeric precision (bf16 autocast on the CPU) may replace fp32 in the default only if, on the same
seeds, every claim's estimate under it lies inside the fp32 run's 95 % interval and every verdict is the same.

    python benchmarks/precision_acceptance.py REFERENCE CANDIDATE --seeds 0 1 2 [--config config/config.yaml]
        [--out FILE.csv]

REFERENCE and CANDIDATE are the results folders of two finished default runs (fp32 and bf16). The claims of
each are recomputed from its tables on the given seeds only (`seed_claims`: claims.reproduction_claims on the
training scores, the loss and the update scores of those seeds, the null table as it is), so a 5-seed
candidate is compared with a 3-seed reference on the seeds they share. Only claims that depend on training
are compared (pretrained models are scored the same way in both). Prints the comparison and "accepted" or
"rejected"; exit status 0 either way (a verdict, not an error)."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence

import pandas as pd

from attention_geometry.analysis.claims import DEFAULT_MARGINS, reproduction_claims
from attention_geometry.errors import UserError
from attention_geometry.formats.files import atomic_write_table, read_yaml

__all__ = ["seed_claims", "compare_claims", "main"]

# claims computed from training runs (the pretrained rows g1/g2 do not depend on the training precision)
TRAINING_CLAIMS = (
    "a",
    "b",
    "b1",
    "b2",
    "c1",
    "c2",
    "d1",
    "d2",
    "e",
    "f",
    "h_gradient_1",
    "h_gradient_2",
    "h_applied_1",
    "h_applied_2",
)
COMPARE_COLUMNS = [
    "id",
    "ref_estimate",
    "ref_low",
    "ref_high",
    "ref_verdict",
    "estimate",
    "verdict",
    "inside",
    "same_verdict",
]


def _read(path: str, required: bool = True) -> pd.DataFrame | None:
    if not os.path.isfile(path):
        if required:
            raise UserError(f"{path}: not found (a finished default run's table)")
        return None
    return pd.read_csv(path)


def seed_claims(results: str, seeds: Sequence[int], figures: dict | None = None) -> pd.DataFrame:
    """The claims table of the run in `results` (its tables/), recomputed on `seeds` only. `figures`: the
    config's figures section (margins, horizon_snapshots, baseline_init, ci_level; defaults otherwise)."""
    f = figures or {}
    keep = {int(s) for s in seeds}
    tables = os.path.join(results, "tables")

    def only(df: pd.DataFrame | None) -> pd.DataFrame | None:
        return None if df is None else df[df["seed"].astype(int).isin(keep)].reset_index(drop=True)

    training = only(_read(os.path.join(tables, "training_scores.csv")))
    loss = only(_read(os.path.join(tables, "training_loss.csv")))
    updates = only(_read(os.path.join(tables, "update_scores.csv"), required=False))
    null = _read(os.path.join(tables, "null_scores.csv"), required=False)
    if training.empty:
        raise UserError(f"{results}: no training scores of seed(s) {sorted(keep)}")
    runs = training.drop_duplicates("run")
    emergence = {
        o: sorted(runs.loc[(runs["objective"] == o) & (runs["init"] == "standard"), "run"])
        for o in ("encoder", "decoder")
    }
    claims = reproduction_claims(
        training=training,
        loss=loss,
        updates=updates,
        null=null,
        emergence_runs=emergence,
        ablation_runs=sorted(runs["run"]),
        margins={**DEFAULT_MARGINS, **(f.get("margins") or {})},
        horizon_snapshots=int(f.get("horizon_snapshots", 3)),
        baseline_init=f.get("baseline_init", "standard"),
        level=float(f.get("ci_level", 0.95)),
    )
    return claims[claims["id"].isin(TRAINING_CLAIMS)].reset_index(drop=True)


def compare_claims(reference: pd.DataFrame, candidate: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """(one row per claim of the reference, COMPARE_COLUMNS; accepted). A claim passes when the candidate's
    estimate lies inside the reference's interval [low, high] (ends included) and the verdicts are equal;
    the candidate is accepted when every claim passes. A claim missing from the candidate, or whose
    reference has no interval, fails (nothing is skipped silently)."""
    cand = candidate.set_index("id")
    rows = []
    for r in reference.itertuples():
        c = cand.loc[r.id] if r.id in cand.index else None
        est = float(c["estimate"]) if c is not None else math.nan
        finite = all(math.isfinite(v) for v in (r.low, r.high, est))
        rows.append(
            {
                "id": r.id,
                "ref_estimate": r.estimate,
                "ref_low": r.low,
                "ref_high": r.high,
                "ref_verdict": r.verdict,
                "estimate": est,
                "verdict": c["verdict"] if c is not None else "missing",
                "inside": bool(finite and r.low <= est <= r.high),
                "same_verdict": bool(c is not None and c["verdict"] == r.verdict),
            }
        )
    table = pd.DataFrame(rows, columns=COMPARE_COLUMNS)
    return table, bool(len(table)) and bool(table["inside"].all() and table["same_verdict"].all())


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reference", help="results folder of the reference run (fp32)")
    p.add_argument("candidate", help="results folder of the candidate run (e.g. bf16)")
    p.add_argument("--seeds", type=int, nargs="+", required=True, help="the seeds both runs have")
    p.add_argument("--config", default="config/config.yaml", help="the config whose figures section applies")
    p.add_argument("--out", help="write the comparison table here (CSV)")
    args = p.parse_args(argv)
    try:
        figures = (read_yaml(args.config, "config") or {}).get("figures", {})
        table, accepted = compare_claims(
            seed_claims(args.reference, args.seeds, figures), seed_claims(args.candidate, args.seeds, figures)
        )
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda v: f"{v:+.4f}"))
    print("accepted" if accepted else "rejected")
    if args.out:
        atomic_write_table(table, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
