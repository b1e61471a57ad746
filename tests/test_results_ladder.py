"""results/README.md's ladder (a, b and anti for each study) is typed by hand: each cell must say what
the study's committed claims.csv says: the number of seeds, each verdict, estimate and 95 % interval (3 decimals)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
NUM = r"([+-]\d\.\d{3})"
CELL = re.compile(rf"^(holds|inconclusive|contradicted), (?:decoder s )?{NUM} \[{NUM}, {NUM}\]$")


def _ladder() -> list[list[str]]:
    text = (REPO / "results" / "README.md").read_text()
    section = text.split("## The ladder", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"^\| \d \|", line)]
    return [[c.strip() for c in line.strip("|").split("|")] for line in rows]


def test_the_ladder_has_a_row_per_study():
    assert [row[0] for row in _ladder()] == ["1", "2", "3"]


@pytest.mark.parametrize("row", _ladder(), ids=lambda r: f"study{r[0]}")
def test_each_ladder_cell_says_what_the_committed_claims_say(row):
    claims = pd.read_csv(REPO / "results" / f"study{row[0]}" / "tables" / "claims.csv").set_index("id")
    assert row[3] == str(int(claims.loc["a", "n"])), f"study {row[0]}: seeds"
    # the tokens a run saw: the emergence encoders' last step in the committed loss table x 32 blocks x 64 tokens
    # (studies 1-3's recipe), and the paper's step of 32 x 8 x 512 positions it equals
    loss = pd.read_csv(REPO / "results" / f"study{row[0]}" / "tables" / "training_loss.csv")
    last = int(loss.loc[(loss["objective"] == "encoder") & (loss["init"] == "standard"), "step"].max())
    tokens = last * 32 * 64
    assert row[2] == f"{tokens / 1e6:.1f} M ({round(tokens / (32 * 8 * 512))})", f"study {row[0]}: tokens"
    for cid, cell in zip(["a", "b", "anti"], row[4:7]):
        if cell == "not a claim":
            assert cid not in claims.index or claims.loc[cid, "verdict"] == "not tested", (row[0], cid)
            continue
        m = CELL.match(cell)
        assert m, f"study {row[0]}, {cid}: cannot read {cell!r}"
        got = claims.loc[cid]
        assert m.group(1) == got["verdict"], (row[0], cid)
        want = [round(got[k], 3) for k in ("estimate", "low", "high")]
        assert [float(x) for x in m.groups()[1:]] == want, (row[0], cid)
