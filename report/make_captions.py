"""Write report/captions/NAME.rst for every entry of notebooks/catalog.yaml (the captions of
`snakemake --report`, committed so that a fresh clone makes the report); `--check` only compares and exits 1
when a caption file differs from the catalog, is missing or is left over (tests/test_report.py runs the same
comparison). Run from anywhere: python report/make_captions.py [--check]"""

import argparse
import sys
from pathlib import Path

from attention_geometry.workflow.plan import caption_rst, load_catalog

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "report" / "captions"


def expected() -> dict[Path, str]:
    catalog = load_catalog(str(ROOT / "notebooks" / "catalog.yaml"))
    return {FOLDER / f"{name}.rst": caption_rst(catalog, name) for name in catalog}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 on any difference")
    args = ap.parse_args()
    want = expected()
    stale = sorted(p for p, text in want.items() if not p.is_file() or p.read_text(encoding="utf-8") != text)
    extra = sorted(set(FOLDER.glob("*.rst")) - set(want))
    if args.check:
        for p in stale + extra:
            print(f"report/captions/{p.name}: {'left over' if p in extra else 'differs from notebooks/catalog.yaml'}")
        return 1 if stale or extra else 0
    FOLDER.mkdir(parents=True, exist_ok=True)
    for p in stale:
        p.write_text(want[p], encoding="utf-8")
    for p in extra:
        p.unlink()
    print(f"report/captions: {len(stale)} written, {len(extra)} removed, {len(want)} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
