"""Scoring a checkpoint, or every snapshot of a training run: the Python API (notebooks, rules) and the
`score` / `score-checkpoints` subcommands.

- layer_matrices(source, per_head=False, ...): per applied self-attention layer (and per head) the matrix
  M = W_qk (docs/contracts.md), as `LayerMatrix` records; Figure 1 draws these. matrix="ov" gives the OV circuit
  M_ov = sum_h W_o,h W_v,g(h) instead (matrix="both": both, per layer).
- score_model(source, per_head=False, num_std=2.0, ...): the score rows of docs/contracts.md as a DataFrame (with
  matrix "ov" or "both": OV rows, and a `matrix` column).
- score_checkpoints(run_dir, ...): the same for every weight snapshot of a training run, with the training
  columns.

`source` is a path (local directory, .gguf file), a hub id, a loading.TensorSource or a loaded transformers
model; see loading.open_source. Matrices and scores are computed on `device` in float64, one layer at a
time, so memory stays near one layer's q/k tensors plus its d x d matrix.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attention_geometry.architectures.keys import architecture_of, get_family, qk_keys
from attention_geometry.errors import UserError
from attention_geometry.formats.columns import (
    GQA_COLUMNS,
    MATRICES,
    MATRIX_COLUMN,
    RUN_KEYS,
    SCORE_COLUMNS,
    TRAINING_COLUMNS,
    with_matrix_column,
)
from attention_geometry.formats.files import atomic_write_table, check_table_path
from attention_geometry.formats.rundir import (
    RUN_YAML,
    list_snapshots,
    list_trainer_checkpoints,
    read_run_yaml,
    verify_snapshot,
)
from attention_geometry.scoring.extract import LayerQK, iter_layer_ov, iter_layer_qk, wqk
from attention_geometry.scoring.gqa_methods import GQA_METHODS
from attention_geometry.scoring.measures import ScoreError, scores
from attention_geometry.scoring.paper_gqa import layer_wqk
from attention_geometry.weights.base import TensorSource
from attention_geometry.weights.loading import open_source

__all__ = [
    "LayerMatrix",
    "layer_matrices",
    "score_model",
    "score_checkpoints",
]

# Per-head matrices are built this many bytes at a time (a memory bound, not a science parameter).
HEAD_CHUNK_BYTES = 256 * 2**20


@dataclass
class LayerMatrix:
    """M of one applied self-attention layer (head "all": summed over heads) or of one head (head index); `matrix`
    says which: "qk" (W_qk) or "ov" (the OV circuit)."""

    component: str
    layer: int
    head: int | str
    M: torch.Tensor
    n_heads: int
    n_kv_heads: int
    d_model: int
    matrix: str = "qk"


def matrices(matrix: Any) -> tuple[str, ...]:
    """The matrices a `matrix` argument asks for, in MATRICES order: "qk", "ov", "both", or a list of "qk" / "ov".
    Anything else is one UserError."""
    if isinstance(matrix, str):
        asked: Any = MATRICES if matrix == "both" else (matrix,)
    else:
        try:
            asked = tuple(matrix)
        except TypeError:
            asked = (matrix,)
    if not asked or any(not isinstance(m, str) or m not in MATRICES for m in asked):
        raise UserError(f"matrix={matrix!r}: one of {', '.join(MATRICES)}, 'both', or a list of them")
    return tuple(m for m in MATRICES if m in asked)


# what each factor of a LayerQK is, per matrix (for the error that names a NaN weight)
_FACTORS = {"qk": ("query", "key"), "ov": ("output", "value")}


def _device(device: str | torch.device) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise UserError(f"unknown device {device!r} ({exc})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device!r} asked for, but CUDA is not available here")
    return dev


def _finite(w: torch.Tensor) -> bool:
    """Whether every entry is finite. NaN and Inf propagate into the sum, so a finite sum settles it
    without the elementwise check's temporaries (torch.isfinite on bf16 allocates ~6 bytes per entry);
    only a non-finite sum (or an overflowing float16 sum) is checked entry by entry."""
    return bool(torch.isfinite(w.sum())) or bool(torch.isfinite(w).all())


def _open(source: Any, **open_kwargs: Any) -> TensorSource:
    """loading.open_source, after checking a local folder that carries checksums.json (a weight snapshot of
    a training run) against it: a file changed since it was written is one UserError, never scored."""
    if isinstance(source, (str, os.PathLike)) and not os.fspath(source).strip():
        raise UserError("SOURCE: empty (a model directory, a .gguf file or a hub id)")
    if isinstance(source, (str, os.PathLike)) and Path(source).is_dir():
        verify_snapshot(source)
    return open_source(source, **open_kwargs)


def _layers(src: TensorSource, progress: bool, matrix: tuple[str, ...] = ("qk",)) -> Iterator[tuple[LayerQK, ...]]:
    """Every applied self-attention layer's factors, one LayerQK per matrix asked for ((W_q, W_k) for "qk",
    (W_o^T, W_v) for "ov"), checked for NaN/Inf, with a progress bar."""
    from tqdm.auto import tqdm

    family = get_family(src.model_type)
    keys = src.keys()
    total = len(qk_keys(family, src.config, keys))
    readers = {"qk": iter_layer_qk, "ov": iter_layer_ov}
    it = zip(*(readers[m](family, src.config, keys, src.get) for m in matrix))
    for layers in tqdm(it, total=total, desc=f"scoring {src.name}", unit="layer", disable=not progress, leave=False):
        for layer in layers:
            for what, w in zip(_FACTORS[layer.matrix], (layer.wq, layer.wk)):
                if not _finite(w):
                    raise UserError(
                        f"{src.name}: {layer.component} layer {layer.layer} {what} weights "
                        f"({', '.join(layer.keys)}) contain NaN or Inf"
                    )
        yield layers


def _head_chunks(layer: LayerQK, dtype: torch.dtype, device: torch.device) -> Iterator[tuple[int, torch.Tensor]]:
    """(first head, [h, d, d] per-head matrices) in chunks of whole key/value groups, at most HEAD_CHUNK_BYTES."""
    group = layer.n_heads // layer.n_kv_heads
    d = layer.d_model
    per_head = d * d * torch.empty((), dtype=dtype).element_size()
    groups = max(1, HEAD_CHUNK_BYTES // (per_head * group))
    for g0 in range(0, layer.n_kv_heads, groups):
        g1 = min(layer.n_kv_heads, g0 + groups)
        wq, wk = layer.wq[g0 * group : g1 * group], layer.wk[g0:g1]
        sub = LayerQK(layer.component, layer.layer, wq, wk, layer.keys, layer.matrix)
        yield g0 * group, wqk(sub, per_head=True, dtype=dtype, device=device)


def layer_matrices(
    source: Any,
    per_head: bool = False,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
    progress: bool = False,
    matrix: Any = "qk",
    **open_kwargs: Any,
) -> Iterator[LayerMatrix]:
    """Per applied layer, the summed M (head "all"); with per_head, then each head's W_q,h^T W_k,g(h).

    matrix: "qk" (W_qk), "ov" (M_ov = sum_h W_o,h W_v,g(h), per head W_o,h W_v,g(h)) or "both" (per layer, its
    W_qk records, then its OV records); each record's `matrix` says which. open_kwargs go to loading.open_source
    (gguf_file, revision, trust_remote_code, name).
    """
    asked = matrices(matrix)
    src = _open(source, **open_kwargs)
    dev = _device(device)
    for layers in _layers(src, progress, asked):
        for layer in layers:
            shape = dict(n_heads=layer.n_heads, n_kv_heads=layer.n_kv_heads, d_model=layer.d_model, matrix=layer.matrix)
            yield LayerMatrix(layer.component, layer.layer, "all", wqk(layer, dtype=dtype, device=dev), **shape)
            if per_head:
                for h0, Ms in _head_chunks(layer, dtype, dev):
                    for i in range(Ms.shape[0]):
                        yield LayerMatrix(layer.component, layer.layer, h0 + i, Ms[i], **shape)


def _scores(M: torch.Tensor, num_std: float, where: str) -> tuple[list[float], list[float]]:
    try:
        s, d = scores(M, num_std)
    except ScoreError as exc:
        raise ScoreError(f"{where}: {exc}") from None
    return s.reshape(-1).tolist(), d.reshape(-1).tolist()


def score_model(
    source: Any,
    per_head: bool = False,
    num_std: float = 2.0,
    device: str | torch.device = "cpu",
    progress: bool = True,
    name: str | None = None,
    gqa_method: str = "correct",
    matrix: Any = "qk",
    **open_kwargs: Any,
):
    """The score rows (docs/contracts.md, columns SCORE_COLUMNS) of every self-attention layer of `source`.

    One "all" row per applied layer (M summed over heads); with per_head, one row per head in addition.
    `head` is a string column ("all", "0", "1", ...) so CSV and Parquet agree. open_kwargs go to
    loading.open_source (gguf_file, revision, trust_remote_code). gqa_method "paper" scores grouped-query layers
    by the paper's expansion instead of the attention's matrix (scoring/paper_gqa.py: a known error, reproduced).
    matrix: "qk" (W_qk: the contract's rows and columns, the default), "ov" (the OV circuit
    M_ov = sum_h W_o,h W_v,g(h)) or "both" (per layer its W_qk rows, then its OV rows); a table with OV rows has a
    `matrix` column ("qk" | "ov") after `head` (columns.with_matrix_column).
    """
    if gqa_method not in GQA_METHODS:
        raise UserError(f"gqa_method={gqa_method!r}: not one of {', '.join(GQA_METHODS)}")
    if per_head and gqa_method != "correct":
        raise UserError(
            "per_head=True: per-head rows exist for the attention's own matrices only (gqa_method='correct')"
        )
    asked = matrices(matrix)
    if "ov" in asked and gqa_method != "correct":
        raise UserError(
            "the paper's grouped-query expansion is of W_qk only: the OV circuit is scored as the attention computes "
            "it (gqa method correct)"
        )
    src = _open(source, name=name, **open_kwargs)
    permuted = bool(getattr(src, "qk_rows_permuted", False))
    family = get_family(src.model_type)
    dev = _device(device)
    fixed = dict(
        model=src.name,
        model_type=src.model_type,
        architecture=architecture_of(family, src.config),
        modality=family.modality,
    )
    with_ov = "ov" in asked
    rows: list[dict[str, Any]] = []
    for layers in _layers(src, progress, asked):
        for layer in layers:
            shape = dict(
                n_params=src.n_params, d_model=layer.d_model, n_heads=layer.n_heads, n_kv_heads=layer.n_kv_heads
            )
            place = dict(fixed, component=layer.component, layer=layer.layer)
            if with_ov:
                place[MATRIX_COLUMN] = layer.matrix
            where = f"{src.name} {layer.component} layer {layer.layer}" + (" OV" if layer.matrix == "ov" else "")
            if layer.matrix == "qk":
                M = layer_wqk(layer, gqa_method, permuted_rows=permuted, dtype=torch.float64, device=dev)
            else:
                M = wqk(layer, dtype=torch.float64, device=dev)
            (s,), (d,) = _scores(M, num_std, where)
            del M
            rows.append(dict(place, head="all", symmetry=s, directionality=d, **shape))
            if per_head:
                for h0, Ms in _head_chunks(layer, torch.float64, dev):
                    ss, ds = _scores(Ms, num_std, f"{where} heads {h0}..{h0 + Ms.shape[0] - 1}")
                    for i, (s, d) in enumerate(zip(ss, ds)):
                        rows.append(dict(place, head=str(h0 + i), symmetry=s, directionality=d, **shape))
    if not rows:
        raise UserError(f"{src.name}: no self-attention layers found")
    import pandas as pd  # imported once the layers' matrices are freed: its ~65 MiB do not add to their peak

    return pd.DataFrame(rows, columns=with_matrix_column(SCORE_COLUMNS) if with_ov else SCORE_COLUMNS)


# ------------------------------------------------------------------------------------------- checkpoints


# The authors' released checkpoints, `checkpoints/{model}-{mode}-{dataset}[--symmetric-init]/checkpoint-N/` (the
# run folder name their train.py builds; its own output puts `training_output/{run id}/` in between): their
# `--model_name` choices are the configs of prajjwal1/bert-mini (`bert_small`) and bert-base-uncased (`bert`),
# their decoders trained on the masking collator's batch (our `decoder-paper`), their `--init symmetric-init` is
# our `symmetric-fresh`, and every run was seeded with transformers.set_seed(0). docs/paper-code.md.
AUTHORS_SIZES = {"bert_small": "bert-mini", "bert": "bert-base"}
AUTHORS_OBJECTIVES = {"encoder": "encoder", "decoder": "decoder-paper"}
AUTHORS_DATASETS = ("wikipedia", "red_pajama", "jigsaw")
_AUTHORS_RUN = re.compile(
    rf"({'|'.join(AUTHORS_SIZES)})-({'|'.join(AUTHORS_OBJECTIVES)})-({'|'.join(AUTHORS_DATASETS)})(--symmetric-init)?"
)


def authors_run_keys(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The run keys (RUN_KEYS) that a Trainer output folder's name states when it follows the authors' pattern
    `{model}-{mode}-{dataset}[--symmetric-init]`: the folder itself (their released `checkpoints/NAME/`) or,
    for their training output `NAME/training_output/RUN_ID/`, the folder two levels up. None otherwise."""
    p = Path(folder).resolve()
    names = [p.name] + ([p.parent.parent.name] if p.parent.name == "training_output" else [])
    for name in names:
        if m := _AUTHORS_RUN.fullmatch(name):
            model, mode, dataset, symmetric = m.groups()
            return {
                "size": AUTHORS_SIZES[model],
                "dataset": dataset,
                "objective": AUTHORS_OBJECTIVES[mode],
                "init": "symmetric-fresh" if symmetric else "standard",
                "seed": 0,
            }
    return None


def score_checkpoints(
    run_dir: str | os.PathLike,
    per_head: bool = False,
    num_std: float = 2.0,
    device: str | torch.device = "cpu",
    progress: bool = True,
    labels: dict[str, Any] | None = None,
    matrix: Any = "qk",
):
    """Score rows of every snapshot of a run, in step order, with the training columns (TRAINING_COLUMNS).

    model and run are RUN_DIR's name; size, dataset, objective, init, seed come from run.yaml; step from
    the snapshot's folder name (every complete snapshot, rundir.list_snapshots). A Hugging Face Trainer
    output folder (`checkpoint-N/`, no run.yaml: the paper's own code writes these, and so does anyone's Trainer
    run) is read too: the step from each trainer_state.json, the run keys from `labels` (a dict of run keys:
    size, dataset, objective, init, seed), else from the folder's name where it is the authors' (authors_run_keys;
    `labels` win key by key); a key given by neither stays empty (None), and with `progress` one line on stderr
    names the empty keys. Rows with empty keys do not join the workflow's tables (concat-tables refuses them). A
    run folder's keys are its run.yaml's: `labels` there is an error, never ignored. matrix: as score_model's.
    """
    return _score_checkpoints(run_dir, per_head, num_std, device, progress, labels, matrix, option=_PYTHON_LABELS)


# how the run keys of a Trainer folder are given, named in messages: as the Python API takes them, or on the CLI
_PYTHON_LABELS = ("labels=", "labels={KEY: VALUE}")
_CLI_LABELS = ("--label", "--label KEY=VALUE")


def _checked_labels(labels: dict[str, Any] | None, option: tuple[str, str]) -> dict[str, Any]:
    """`labels` as run keys: each key one of RUN_KEYS, a seed a whole number (an int, or a string of digits);
    None and "" mean not given."""
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise UserError(f"{option[0]} a dict of run keys ({', '.join(RUN_KEYS)}), got {type(labels).__name__}")
    out: dict[str, Any] = {}
    for key, value in labels.items():
        if key not in RUN_KEYS:
            raise UserError(f"{option[0]} {key!r} is not a run key (one of {', '.join(RUN_KEYS)})")
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if key == "seed":
            if isinstance(value, str) and value.isascii() and value.isdigit():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UserError(f"{option[0]} seed {value!r}: a seed is a whole number >= 0")
        out[key] = value
    return out


def _score_checkpoints(run_dir, per_head, num_std, device, progress, labels, matrix, option):
    """score_checkpoints, with `option` naming how the caller gives run keys (_PYTHON_LABELS or _CLI_LABELS)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    run = Path(os.path.abspath(run_dir)).name  # the folder's own name, also for "." or "out/"
    asked = matrices(matrix)
    labels = _checked_labels(labels, option)
    if not (run_dir / RUN_YAML).is_file() and (trainer := list_trainer_checkpoints(run_dir)):
        named = authors_run_keys(run_dir) or {}
        keys = {**named, **labels}
        if progress and (from_name := {k: v for k, v in named.items() if k not in labels}):
            said = " ".join(f"{k}={v}" for k, v in from_name.items())
            print(f"{run_dir}: run keys from the authors' folder name: {said}", file=sys.stderr, flush=True)
        if progress and (empty := [k for k in RUN_KEYS if k not in keys]):
            print(
                f"{run_dir}: a Trainer output folder without {RUN_YAML}: run key(s) {', '.join(empty)} left empty "
                f"(give them with {option[1]} to join these rows with other runs' tables)",
                file=sys.stderr,
                flush=True,
            )
        meta = {k: keys.get(k) for k in RUN_KEYS}
        return _score_snapshots(run, meta, trainer, per_head, num_std, device, progress, asked)
    if labels:
        raise UserError(
            f"{run_dir}: {option[0]} is for a Trainer output folder; this run folder's keys come from its "
            f"{RUN_YAML} (given: {', '.join(sorted(labels))})"
        )
    cfg = read_run_yaml(run_dir)
    meta = {k: cfg[k] for k in RUN_KEYS}
    snapshots = list_snapshots(run_dir)
    # a snapshot missing between those on disk would silently shift every statistic over steps (the last
    # snapshots of a run, a step's contrast): the steps run.yaml implies up to the newest one must all be there
    implied = [int(s) for s in cfg.get("snapshot_steps") or [] if int(s) <= max(snapshots)]
    if missing := sorted(set(implied) - set(snapshots)):
        raise UserError(
            f"{run_dir / 'checkpoints'}: no snapshot of step(s) {', '.join(map(str, missing))}, which run.yaml's "
            f"snapshot_steps imply (the run reached step {max(snapshots)}): restore them, or move the run aside "
            "and train it again"
        )
    return _score_snapshots(run, meta, snapshots, per_head, num_std, device, progress, asked)


def _score_snapshots(run, meta, snapshots, per_head, num_std, device, progress, asked=("qk",)):
    import pandas as pd
    from tqdm.auto import tqdm

    tables = []
    for step, folder in tqdm(snapshots.items(), desc=f"scoring {run}", unit="checkpoint", disable=not progress):
        df = score_model(
            folder, per_head=per_head, num_std=num_std, device=device, progress=False, name=run, matrix=asked
        )
        df["run"] = run
        for k, v in meta.items():
            df[k] = v
        df["step"] = step
        tables.append(df)
    columns = with_matrix_column(TRAINING_COLUMNS) if "ov" in asked else TRAINING_COLUMNS
    return pd.concat(tables, ignore_index=True)[columns]


# --------------------------------------------------------------------------------------------------- CLI


def compare_gqa(source: Any, num_std: float = 2.0, name: str | None = None, **open_kwargs: Any):
    """Per grouped-query layer of `source`: s and d of the attention's M and of the paper's expansion
    (scoring/paper_gqa.py), and their relative Frobenius distance ||M_paper - M|| / ||M|| (columns GQA_COLUMNS).
    UserError for a model without grouped-query layers, or one the paper's path cannot reshape."""
    import pandas as pd

    src = _open(source, name=name, **open_kwargs)
    permuted = bool(getattr(src, "qk_rows_permuted", False))
    rows = []
    for (layer,) in _layers(src, progress=False):
        if layer.n_kv_heads == layer.n_heads:
            continue
        where = f"{src.name} {layer.component} layer {layer.layer}"
        M = wqk(layer)
        P = layer_wqk(layer, "paper", permuted_rows=permuted)
        (s,), (d,) = _scores(M, num_std, where)
        (sp,), (dp,) = _scores(P, num_std, where)
        rows.append(
            dict(
                model=src.name,
                component=layer.component,
                layer=layer.layer,
                n_heads=layer.n_heads,
                n_kv_heads=layer.n_kv_heads,
                symmetry=s,
                directionality=d,
                symmetry_paper=sp,
                directionality_paper=dp,
                relative_distance=float(torch.linalg.norm(P - M) / torch.linalg.norm(M)),
            )
        )
    if not rows:
        raise UserError(f"{src.name}: no grouped-query attention layer (as many key/value heads as query heads)")
    return pd.DataFrame(rows, columns=GQA_COLUMNS)


def _open_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of `score` and `compare-gqa` that say how to open SOURCE (loading.open_source's keywords)."""
    return dict(
        name=args.name, gguf_file=args.gguf_file, revision=args.revision, trust_remote_code=args.trust_remote_code
    )


def _scoring_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options `score` and `score-checkpoints` share (commands._scoring_arguments), as score_model's and
    score_checkpoints' keywords."""
    return dict(
        per_head=args.per_head, num_std=args.num_std, device=args.device, progress=not args.quiet, matrix=args.matrix
    )


def _check_out(out: str, source: str | None = None) -> None:
    """A score table's --out, checked before any work: a table path, or - (CSV on stdout); never inside a run or
    snapshot folder (a run's loss.csv is its only loss log), nor inside a local `source` (what is scored)."""
    if out == "-":
        return
    check_table_path(out)
    from attention_geometry.formats.rundir import check_not_in_a_run, is_workflow_run_output

    check_not_in_a_run(out)
    if source is not None and os.path.exists(source) and not is_workflow_run_output(out):
        from attention_geometry.formats.files import check_out_location

        check_out_location(out, [source])


def _write_scores(df, out: str) -> None:
    """A score table to --out: the file, or CSV on stdout where it is -."""
    if out == "-":
        df.to_csv(sys.stdout, index=False)
    else:
        atomic_write_table(df, out)


def run_compare_gqa(args: argparse.Namespace) -> int:
    check_table_path(args.out)
    df = compare_gqa(args.source, num_std=args.num_std, **_open_options(args))
    atomic_write_table(df, args.out)
    return 0


def summary_lines(df) -> list[str]:
    """One line per component of a score table (and per matrix, where it has OV rows): layers, median symmetry
    and directionality over layers (the "all" rows), and the model's head counts."""
    rows = df[df["head"] == "all"]
    by = ["component", MATRIX_COLUMN] if MATRIX_COLUMN in rows else ["component"]
    out = []
    for key, g in rows.groupby(by, sort=False):
        what = " ".join(key) if isinstance(key, tuple) else key
        out.append(
            f"{g['model'].iloc[0]} {what}: {len(g)} layers, median symmetry {g['symmetry'].median():+.3f}, "
            f"median directionality {g['directionality'].median():+.3f} "
            f"({int(g['n_heads'].iloc[0])} heads, {int(g['n_kv_heads'].iloc[0])} key/value heads)"
        )
    return out


def run_score(args: argparse.Namespace) -> int:
    _check_out(args.out, args.source)
    if args.per_head and args.gqa_method != "correct":  # said with the flags typed (score_model names its keywords)
        raise UserError("--per-head: per-head rows exist for the attention's own matrices only (--gqa-method correct)")
    df = score_model(args.source, gqa_method=args.gqa_method, **_scoring_options(args), **_open_options(args))
    _write_scores(df, args.out)
    for line in summary_lines(df):  # stderr: stdout may be the table itself
        print(line, file=sys.stderr)
    return 0


def run_score_checkpoints(args: argparse.Namespace) -> int:
    _check_out(args.out, args.run_dir)
    labels: dict[str, Any] = {}
    for item in args.label:
        key, sep, value = item.partition("=")
        if not sep or key not in RUN_KEYS or not value.strip():
            raise UserError(f"--label {item!r}: expected KEY=VALUE with KEY one of {', '.join(RUN_KEYS)} and a value")
        if key == "seed":
            if not (value.isascii() and value.isdigit()):
                raise UserError(f"--label {item!r}: a seed is a whole number >= 0")
            value = int(value)
        if labels.get(key, value) != value:
            raise UserError(f"--label {key}: given twice, as {labels[key]!r} and {value!r}")
        labels[key] = value
    df = _score_checkpoints(args.run_dir, labels=labels, option=_CLI_LABELS, **_scoring_options(args))
    _write_scores(df, args.out)
    return 0
