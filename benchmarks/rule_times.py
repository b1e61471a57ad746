"""Core-seconds per workflow rule from Snakemake's benchmark files: the table the README and
docs/experiment-design.md quote for a full run (`make run` from an empty results/).

    python benchmarks/rule_times.py [RESULTS]            # default: results
    python benchmarks/rule_times.py results --by-kind    # training split by the run's objective and init

Each rule with a `benchmark:` writes {results}/benchmarks/{folder}/{job}.tsv or {rule}.tsv (columns s, ...,
cpu_time); this sums `cpu_time` (seconds of CPU, all threads: core-seconds) and `s` (wall seconds) per folder
and prints the number of jobs, the sums and the per-job range. Rules without a benchmark (notebooks, config
records, small writers) are not counted: the difference between the run's wall time and these sums is theirs
and Snakemake's own.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import defaultdict
from pathlib import Path


def read_benchmarks(results: Path, by_kind: bool = False) -> dict[str, list[tuple[float, float]]]:
    """folder (or folder:objective-init for training with by_kind) -> [(cpu_time, wall s) per job]."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    root = results / "benchmarks"
    for tsv in sorted(root.rglob("*.tsv")):
        with tsv.open(newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        if not rows:
            continue
        key = tsv.parent.name if tsv.parent != root else tsv.stem  # a rule's own file (score_null_inits.tsv)
        if by_kind and key == "train":
            m = re.match(r".*-(encoder|decoder|classifier)-(.+)-s\d+$", tsv.stem)
            key = f"train:{m.group(1)}-{m.group(2)}" if m else key
        # a job benchmarked with repeats has several rows: its first is the run that made the output
        out[key].append((float(rows[0]["cpu_time"]), float(rows[0]["s"])))
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="?", default="results", type=Path)
    p.add_argument("--by-kind", action="store_true", help="split training by objective and init")
    args = p.parse_args(argv)
    table = read_benchmarks(args.results, args.by_kind)
    if not table:
        print(f"no benchmark files under {args.results / 'benchmarks'}", file=sys.stderr)
        return 1
    print(f"{'rule (benchmark folder)':34} {'jobs':>5} {'core-s':>9} {'wall-s':>9}  per job (core-s)")
    total = 0.0
    for key, jobs in sorted(table.items(), key=lambda kv: -sum(c for c, _ in kv[1])):
        cpu = [c for c, _ in jobs]
        total += sum(cpu)
        print(f"{key:34} {len(jobs):5d} {sum(cpu):9.0f} {sum(w for _, w in jobs):9.0f}  {min(cpu):.0f}-{max(cpu):.0f}")
    print(f"{'total':34} {sum(len(j) for j in table.values()):5d} {total:9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
