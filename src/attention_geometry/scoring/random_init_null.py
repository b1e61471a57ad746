"""The random-initialization null: symmetry and directionality of untrained models of a run's shape.

score_null(run_config, inits, samples) builds `samples` models per init with training.build_model, under
the same size, hyperparameters (RUN.yaml `overrides`), vocabulary and special tokens as the run (resolved
by the trainer's own readers: load_run_config, formats.corpus.load_corpus, resolve_run), and scores every
layer's summed W_qk with checkpoints.score_model, the function `score-checkpoints` applies to each snapshot.
Sample i is built with seed NULL_SEED_OFFSET + i (100000 + i), so a null model never equals a training run's
initial weights (training seeds are small integers); the `sample` column holds that seed.

Rows (NULL_COLUMNS): size, init, sample, layer, symmetry, directionality: one per (init, sample, layer),
head "all" only (docs/contracts.md conventions). Subcommand `attention-geometry score-null`.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from attention_geometry.errors import UserError

__all__ = ["NULL_COLUMNS", "NULL_INITS", "NULL_SEED_OFFSET", "null_seed", "score_null"]

NULL_COLUMNS = ["size", "init", "sample", "layer", "symmetry", "directionality"]
NULL_INITS = ("standard", "symmetric-fresh", "fresh")
NULL_SEED_OFFSET = 100_000


def null_seed(i: int) -> int:
    """The build_model seed of null sample i (0-based)."""
    return NULL_SEED_OFFSET + int(i)


def _check_inits(inits: Iterable[str]) -> list[str]:
    from attention_geometry.training.hyper import INITS

    inits = list(inits)
    if not inits:
        raise UserError("inits: give at least one init")
    bad = [i for i in inits if i not in INITS]
    if bad:
        raise UserError(f"inits: unknown init {bad[0]!r} (known: {', '.join(INITS)})")
    dup = sorted({i for i in inits if inits.count(i) > 1})
    if dup:
        raise UserError(f"inits: {dup[0]!r} given more than once")
    return inits


def _check_samples(samples: Any) -> int:
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise UserError(f"samples: must be an integer >= 1, got {samples!r}")
    return samples


def score_null(
    run_config: Any,
    inits: Iterable[str] = NULL_INITS,
    samples: int = 100,
    num_std: float = 2.0,
    progress: bool = False,
):
    """The null rows (NULL_COLUMNS) of `samples` random models per init of the run's shape.

    run_config: a RUN.yaml path or a training.RunConfig; its corpus supplies the vocabulary size and the
    special tokens as in training (the corpus must exist). The run's own init and seed are not used: each
    init in `inits` is drawn under seeds null_seed(0) ... null_seed(samples - 1).
    """
    import pandas as pd
    from tqdm.auto import tqdm

    from attention_geometry.formats.corpus import load_corpus
    from attention_geometry.scoring.scorer import score_model
    from attention_geometry.training.models import build_model
    from attention_geometry.training.run_config import RunConfig, load_run_config, resolve_run

    inits = _check_inits(inits)
    samples = _check_samples(samples)
    cfg = run_config if isinstance(run_config, RunConfig) else load_run_config(run_config)
    corpus = load_corpus(cfg.corpus)
    h = resolve_run(cfg, corpus).hyper
    special = corpus.special_tokens
    tables = []
    with tqdm(total=len(inits) * samples, desc=f"null {cfg.size}", unit="model", disable=not progress) as bar:
        for init in inits:
            for i in range(samples):
                seed = null_seed(i)
                model = build_model(cfg.size, cfg.objective, init, seed, special_tokens=special, _hyper=h)
                df = score_model(model, num_std=num_std, progress=False, name=f"null-{init}-{seed}")
                del model
                df = df[df["head"] == "all"]
                tables.append(
                    pd.DataFrame(
                        {
                            "size": cfg.size,
                            "init": init,
                            "sample": seed,
                            "layer": df["layer"].to_numpy(),
                            "symmetry": df["symmetry"].to_numpy(),
                            "directionality": df["directionality"].to_numpy(),
                        }
                    )
                )
                bar.update(1)
    return pd.concat(tables, ignore_index=True)[NULL_COLUMNS]


# --------------------------------------------------------------------------------------------------- CLI


def run_score_null(args: argparse.Namespace) -> int:
    from attention_geometry.formats.files import atomic_write_table, check_table_path
    from attention_geometry.scoring.measures import check_num_std

    check_table_path(args.out)
    check_num_std(args.num_std, "--num-std")
    _check_inits(args.inits)
    _check_samples(args.samples)
    if args.threads < 1:
        raise UserError(f"--threads: must be >= 1, got {args.threads}")
    import torch

    torch.set_num_threads(args.threads)
    df = score_null(args.run_config, args.inits, args.samples, num_std=args.num_std, progress=not args.quiet)
    atomic_write_table(df, args.out)
    if args.out != "-":
        from attention_geometry.formats.files import sha256_line

        print(sha256_line(args.out))  # last: the proof that this job wrote the table (workflow.records.made_by_its_job)
    return 0
