"""The structure of the W_qk updates: implicit gradients dL/dW_qk and the changes applied between snapshots.

For head h of a layer, the pre-softmax logit is a_h,ij = c x_i^T M_h x_j + (bias terms), with x the
attention input, c the head's scale (1/sqrt(d_head) in BERT) and M_h = W_q,h^T W_k,h. Seen as a function of
M_h, the loss has the gradient

    dL/dM_h = c * sum_(b, i, j) (dL/da_h,bij) x_bi x_bj^T,

and the layer's implicit gradient is G = sum_h dL/dM_h (docs/updates.md). It is computed from what the model
itself does: a forward pre-hook records x at each self-attention module, and an attention function registered
with transformers' AttentionInterface computes the logits exactly as BERT's eager attention does, keeping
them so that torch.autograd.grad returns dL/da. Rows are the query side, columns the key side, as M in
docs/contracts.md, so G is scored with the same functions as the weights (attention_geometry.scoring.measures).

Held-out batches follow the run's own objective: masked LM (training's rule and the run's masking fields of
training.Hyper: `mlm_probability` of the tokens other than [CLS], [SEP], [PAD], [MASK]; of those,
`mask_token_fraction` become [MASK], `random_token_fraction` a uniformly drawn token, the rest stay; loss
only at the chosen positions) or causal LM (next-token loss). The same blocks and the same mask serve every
snapshot of a run, so gradients at different steps see the same data.

Where this differs from attention_geometry.training, and why (docs/updates.md). The rule (which positions
are masked and how, which targets carry a loss) and the masking fields are training's; the draw and the
arithmetic are this module's. (1) The masks come from one torch.Generator seeded with --seed
(`mask_heldout`), not from training.mask_tokens's per-row numpy generators: the committed claims were
computed with these draws, and training's draws move the default's claim h_gradient_1 out of its committed
95 % interval (its verdict changes). (2) The loss is the stock transformers forward
(logit-keeping attention below) with `objective_loss` in the model's dtype, not training.lm_loss, which
never forms the logits (fused attention) and takes its cross-entropy in float32: that caps the float64
autograd check of G at ~1e-8 (1e-15 here) and moves the gradient rows by ~1e-7.

The applied update at snapshot step s is M(s') - M(s), s' the next snapshot of the run, per layer.

CLI: `attention-geometry score-updates RUN_DIR --corpus DIR --out FILE.csv` writes the update rows of
docs/contracts.md (contract.UPDATE_COLUMNS).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import RUN_KEYS, UPDATE_COLUMNS
from attention_geometry.formats.corpus import Corpus, corpus_sha256, load_corpus
from attention_geometry.formats.files import atomic_write_table, check_table_path
from attention_geometry.formats.rundir import list_snapshots, read_run_yaml, verify_snapshots
from attention_geometry.scoring.measures import ScoreError, check_num_std, scores
from attention_geometry.training.batches import IGNORE_INDEX, corrupt, make_batch, maskable
from attention_geometry.training.hyper import CAUSAL_OBJECTIVES, MASKED_OBJECTIVES, OBJECTIVES, Hyper, resolve_hyper
from attention_geometry.training.models import self_attentions
from attention_geometry.weights.safetensors_io import read_safetensors_header

__all__ = [
    "MASKING_FIELDS",
    "UpdateConfig",
    "run_masking",
    "read_run",
    "mask_heldout",
    "make_batches",
    "capture_logit_gradients",
    "objective_loss",
    "batch_qk_gradient",
    "qk_gradients",
    "load_snapshot_model",
    "snapshot_matrices",
    "score_updates",
    "run_score_updates",
]

LABEL_KEYS = ["run", *RUN_KEYS]  # run.yaml keys copied into every update row
MASKING_FIELDS = ("mlm_probability", "mask_token_fraction", "random_token_fraction")  # of training.Hyper
_ATTN_NAME = "attention_geometry_logits"


# ------------------------------------------------------------------------------------------------ config


def run_masking(run: Mapping[str, Any], mlm_probability: float | None = None) -> Hyper:
    """The run's Hyper (its size's) with the masking fields as run.yaml's `hyper` states them (the defaults
    where it does not), checked as training checks them; `mlm_probability` replaces the run's. Only the
    MASKING_FIELDS are read here."""
    hyper = run.get("hyper") if isinstance(run.get("hyper"), Mapping) else {}
    overrides = {k: hyper[k] for k in MASKING_FIELDS if hyper.get(k) is not None}
    if mlm_probability is not None:
        overrides["mlm_probability"] = mlm_probability
    return resolve_hyper(str(run.get("size", "tiny")), overrides, where="masking")


@dataclass(frozen=True)
class UpdateConfig:
    """How many held-out batches, of which size, from which seed; the directionality threshold; the masking
    (a training.Hyper, of which only MASKING_FIELDS are read)."""

    batches: int = 4
    batch_size: int = 32
    seed: int = 0
    num_std: float = 2.0
    masking: Hyper = field(default_factory=Hyper)

    def __post_init__(self) -> None:
        # named as the keyword arguments; score-updates names its flags instead (run_score_updates)
        if self.batches < 1:
            raise UserError(f"batches={self.batches}: must be at least 1")
        if self.batch_size < 1:
            raise UserError(f"batch_size={self.batch_size}: must be at least 1")
        check_num_std(self.num_std, "num_std")


def read_run(run_dir: str | os.PathLike) -> dict[str, Any]:
    """run.yaml of a run dir, checked for the keys that label update rows and for a known objective."""
    run = read_run_yaml(run_dir, LABEL_KEYS)
    if run["objective"] not in OBJECTIVES:
        raise UserError(
            f"{Path(run_dir) / 'run.yaml'}: objective {run['objective']!r} is not one of {', '.join(OBJECTIVES)}"
        )
    return run


# --------------------------------------------------------------------------------------------- batches


def mask_heldout(
    ids: torch.Tensor, special: Mapping[str, int], vocab_size: int, masking: Hyper, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(corrupted ids, labels) for masked LM: training's rule (training.batches.maskable and corrupt) with
    draws from `generator` only (why not training's draws: the module docstring). Each maskable position is
    selected with probability mlm_probability (torch.bernoulli), then corrupted by the uniform draw w and
    the random ids r, drawn in that order."""
    prob = torch.full(ids.shape, masking.mlm_probability, dtype=torch.float64)
    prob.masked_fill_(torch.from_numpy(~maskable(ids.numpy(), special)), 0.0)
    sel = torch.bernoulli(prob, generator=generator).bool()
    w = torch.rand(ids.shape, generator=generator, dtype=torch.float64)
    r = torch.randint(vocab_size, ids.shape, generator=generator, dtype=ids.dtype)
    inputs, labels = corrupt(ids.numpy(), sel.numpy(), w.numpy(), r.numpy(), masking, special)
    return torch.from_numpy(inputs), torch.from_numpy(labels)


def make_batches(corpus: Corpus, objective: str, config: UpdateConfig) -> list[dict[str, torch.Tensor]]:
    """`config.batches` held-out batches of `config.batch_size` blocks (a seeded choice without replacement),
    as model inputs with labels for the objective: input_ids, attention_mask (0 at pad), labels."""
    if objective not in OBJECTIVES:
        raise UserError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    n_blocks = corpus.heldout.shape[0]
    need = config.batches * config.batch_size
    if n_blocks < need:
        raise UserError(
            f"{corpus.path}/heldout.npy has {n_blocks} blocks; "
            f"{config.batches} batches of {config.batch_size} need {need}"
        )
    generator = torch.Generator().manual_seed(config.seed)
    chosen = torch.randperm(n_blocks, generator=generator)[:need].sort().values.numpy()
    blocks = torch.from_numpy(np.asarray(corpus.heldout[chosen], dtype=np.int64))
    if int(blocks.min()) < 0 or int(blocks.max()) >= corpus.vocab_size:
        raise UserError(
            f"{corpus.path}/heldout.npy has token ids outside [0, {corpus.vocab_size}) (manifest vocab_size)"
        )
    st = corpus.special_tokens
    batches = []
    for b in range(config.batches):
        ids = blocks[b * config.batch_size : (b + 1) * config.batch_size]
        attention_mask = (ids != st["pad"]).long()
        if objective in MASKED_OBJECTIVES:  # decoder-paper: the model's causal shift applies to these labels
            inputs, labels = mask_heldout(ids, st, corpus.vocab_size, config.masking, generator)
        else:  # next-token loss (training's labels: -100 at [PAD]); the model shifts labels by one position
            inputs, labels = (
                torch.from_numpy(a)
                for a in make_batch(ids.numpy(), objective, None, config.masking, st, corpus.vocab_size)
            )
        batches.append({"input_ids": inputs, "attention_mask": attention_mask, "labels": labels})
    return batches


# ------------------------------------------------------------------------------- gradients of the logits


def _register_attention() -> None:
    """Register the logit-keeping attention (and the eager additive mask for it) once per process."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    if _ATTN_NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(_ATTN_NAME, _logit_attention)
        AttentionMaskInterface.register(_ATTN_NAME, eager_mask)


def _logit_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """BERT's eager attention, keeping the pre-softmax logits a = scaling * q k^T (before the mask) on the
    module's recorder, if one is attached."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    logits = torch.matmul(query, key.transpose(2, 3)) * scaling
    recorder = getattr(module, "_ag_recorder", None)
    if recorder is not None:
        recorder.logits[module._ag_layer] = logits
        recorder.scaling[module._ag_layer] = float(scaling)
    weights = logits
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            weights = weights.masked_fill(~attention_mask, torch.finfo(weights.dtype).min)
        else:
            weights = weights + attention_mask
    probs = torch.nn.functional.softmax(weights, dim=-1)
    probs = torch.nn.functional.dropout(probs, p=dropout, training=module.training)
    out = torch.matmul(probs, value).transpose(1, 2).contiguous()
    return out, probs


class _Recorder:
    def __init__(self) -> None:
        self.x: dict[int, torch.Tensor] = {}
        self.logits: dict[int, torch.Tensor] = {}
        self.scaling: dict[int, float] = {}


@contextmanager
def capture_logit_gradients(model: torch.nn.Module) -> Iterator[_Recorder]:
    """While active, each forward of `model` records per layer the attention input x [B, T, d] and the
    pre-softmax logits [B, H, T, T] (graph kept) with their scale. Restores the model's attention after."""
    if not hasattr(model, "bert"):
        raise UserError(f"{type(model).__name__} has no bert.encoder.layer stack; score-updates supports BERT models")
    _register_attention()
    mods = self_attentions(model)
    recorder = _Recorder()
    previous = model.config._attn_implementation
    handles = []

    def make_hook(i):
        def hook(mod, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            recorder.x[i] = x.detach()

        return hook

    try:
        model.set_attn_implementation(_ATTN_NAME)
        if model.config._attn_implementation != _ATTN_NAME:
            raise UserError(f"{type(model).__name__} does not accept a registered attention function")
        for i, m in enumerate(mods):
            m._ag_recorder = recorder
            m._ag_layer = i
            handles.append(m.register_forward_pre_hook(make_hook(i), with_kwargs=True))
        yield recorder
    finally:
        for h in handles:
            h.remove()
        for m in mods:
            for attr in ("_ag_recorder", "_ag_layer"):
                if hasattr(m, attr):
                    delattr(m, attr)
        model.set_attn_implementation(previous)


def objective_loss(logits: torch.Tensor, labels: torch.Tensor, causal: bool) -> torch.Tensor:
    """Mean cross-entropy over the positions with a label (not -100), in the logits' own dtype. Causal: the
    logits at position t predict the token at t + 1 (next-token loss); masked: the token at t."""
    if causal:
        logits, labels = logits[:, :-1], labels[:, 1:]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX, reduction="mean"
    )


def batch_qk_gradient(model: torch.nn.Module, batch: Mapping[str, torch.Tensor]) -> tuple[float, torch.Tensor]:
    """(loss, G) for one batch: G [L, d, d] float64, G_l = c sum_h sum_(b,i,j) dL/da_h,bij x_bi x_bj^T, the
    gradient of the batch's mean loss with respect to layer l's W_qk (summed over heads). The objective is
    the model's: causal when config.is_decoder, else masked LM (loss where labels != -100)."""
    device = next(model.parameters()).device
    causal = bool(getattr(model.config, "is_decoder", False))
    inputs = {k: v.to(device) for k, v in batch.items() if k != "labels"}
    labels = batch["labels"].to(device)
    if causal:
        inputs["use_cache"] = False
    with torch.enable_grad(), capture_logit_gradients(model) as rec:
        loss = objective_loss(model(**inputs).logits, labels, causal)
        if not bool(torch.isfinite(loss)):
            raise UserError(f"the model's loss on a held-out batch is {float(loss)} (no position with a label?)")
        n = len(rec.x)
        if n == 0 or sorted(rec.logits) != list(range(n)):
            raise UserError(f"{type(model).__name__}: attention logits were not captured for every layer")
        if not loss.requires_grad:
            raise UserError(
                f"{type(model).__name__}: the loss does not depend on trainable parameters (requires_grad off)"
            )
        logits = [rec.logits[i] for i in range(n)]
        grads = torch.autograd.grad(loss, logits, allow_unused=True)
    G = []
    for i, g in enumerate(grads):
        x = rec.x[i].to(torch.float64)
        if g is None:
            G.append(torch.zeros(x.shape[-1], x.shape[-1], dtype=torch.float64, device=x.device))
            continue
        gsum = g.to(torch.float64).sum(dim=1)  # heads share x: sum_h dL/da_h  -> [B, T, T]
        G.append(rec.scaling[i] * torch.einsum("bti,btj->ij", x, gsum @ x))
    return float(loss.detach()), torch.stack(G).cpu()


def qk_gradients(
    model: torch.nn.Module, batches: Sequence[Mapping[str, torch.Tensor]], progress: bool = False
) -> torch.Tensor:
    """G per layer [L, d, d] (float64), averaged over `batches`. The model is put in eval mode (no dropout)."""
    from tqdm.auto import tqdm

    was_training = model.training
    model.eval()
    try:
        total = None
        for batch in tqdm(batches, desc="batches", leave=False, disable=not progress):
            _, G = batch_qk_gradient(model, batch)
            total = G if total is None else total + G
    finally:
        model.train(was_training)
    return total / len(batches)


# ------------------------------------------------------------------------------------------- snapshots


def _snapshot_config(path: Path) -> dict[str, Any]:
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise UserError(f"{path}/config.json: not readable JSON ({exc})") from None
    if not isinstance(cfg, dict) or cfg.get("model_type") != "bert":
        raise UserError(
            f"{path}/config.json: model_type {cfg.get('model_type') if isinstance(cfg, dict) else None!r}; "
            "score-updates supports BERT runs (bert)"
        )
    return cfg


def load_snapshot_model(
    path: str | os.PathLike, objective: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
):
    """The snapshot as BertForMaskedLM (encoder) or BertLMHeadModel (decoder, decoder-paper: is_decoder=True),
    in eval mode."""
    from transformers import BertForMaskedLM, BertLMHeadModel

    path = Path(path)
    cfg = _snapshot_config(path)
    is_decoder = bool(cfg.get("is_decoder", False))
    if is_decoder != (objective in CAUSAL_OBJECTIVES):
        raise UserError(f"{path}/config.json: is_decoder={is_decoder} does not fit objective {objective!r} of the run")
    cls = BertLMHeadModel if is_decoder else BertForMaskedLM
    read_safetensors_header(path / "model.safetensors")  # a truncated or malformed file: one LoadError line
    try:
        model = cls.from_pretrained(str(path), dtype=dtype, attn_implementation="eager", local_files_only=True)
    except (OSError, ValueError, RuntimeError) as exc:
        raise UserError(
            f"{path}: cannot load as {cls.__name__} ({(str(exc).strip().splitlines() or [type(exc).__name__])[0]})"
        ) from None
    return model.to(device).eval()


def snapshot_matrices(path: str | os.PathLike) -> torch.Tensor:
    """M = sum_h W_q,h^T W_k,h per layer [L, d, d] (float64), read from the snapshot's safetensors (the
    scoring path, checkpoints.layer_matrices)."""
    from attention_geometry.scoring.scorer import layer_matrices

    return torch.stack([m.M for m in layer_matrices(path)])


def _check_model(model, corpus: Corpus, path: Path) -> None:
    cfg = model.config
    if cfg.vocab_size < corpus.vocab_size:
        raise UserError(f"{path}: model vocab_size {cfg.vocab_size} is smaller than the corpus's {corpus.vocab_size}")
    block_len = corpus.heldout.shape[1]
    if block_len > cfg.max_position_embeddings:
        raise UserError(
            f"{corpus.path}/heldout.npy: blocks of {block_len} tokens exceed the model's "
            f"{cfg.max_position_embeddings} positions ({path})"
        )


def _scores_rows(M: torch.Tensor, what: str, num_std: float) -> list[tuple[float, float]]:
    try:
        s, d = scores(M, num_std)
    except ScoreError as exc:
        raise UserError(f"{what}: {exc}") from None
    return list(zip(s.tolist(), d.tolist()))


def _check_corpus(run: dict, corpus: Corpus, run_dir) -> None:
    """The corpus given must be the one the run trained on (run.yaml's corpus_sha256, by content: a moved copy
    is the same corpus): held-out batches of another corpus with the same vocabulary size would give gradients
    of the wrong data without any error. A run.yaml written before it recorded the hash is not checked."""
    recorded = run.get("corpus_sha256")
    if recorded and corpus_sha256(corpus) != recorded:
        raise UserError(
            f"--corpus {corpus.path}: not the corpus run {run_dir} trained on (its run.yaml records corpus_sha256 "
            f"{str(recorded)[:12]}..., this corpus is {corpus_sha256(corpus)[:12]}...; it trained on "
            f"{run.get('corpus', 'a corpus not named')})"
        )


def score_updates(
    run_dir: str | os.PathLike,
    corpus_dir: str | os.PathLike,
    steps: Sequence[int] | None = None,
    config: UpdateConfig | None = None,
    device: str | torch.device = "cpu",
    progress: bool = False,
):
    """Update rows (docs/contracts.md) of a run: per selected snapshot step and layer, the scores of the
    implicit gradient G (kind `gradient`) and, where a later snapshot exists, of M(next) - M(step)
    (kind `applied`). `config` None: UpdateConfig with the run's own masking (run_masking)."""
    import pandas as pd
    from tqdm.auto import tqdm

    run = read_run(run_dir)
    corpus = load_corpus(corpus_dir)
    _check_corpus(run, corpus, run_dir)  # before any snapshot is read
    if config is None:
        config = UpdateConfig(masking=run_masking(run))
    snapshots = list_snapshots(run_dir, verify=False)  # verified below: only the snapshots read
    all_steps = list(snapshots)
    if steps is None:
        steps = all_steps
    else:
        missing = [s for s in steps if s not in snapshots]
        if missing:
            raise UserError(f"{run_dir}/checkpoints has no snapshot for step(s) {missing}; available: {all_steps}")
        steps = sorted(set(int(s) for s in steps))
    read = set(steps) | {min((s for s in all_steps if s > step), default=step) for step in steps}
    verify_snapshots({s: snapshots[s] for s in sorted(read)})
    batches = make_batches(corpus, run["objective"], config)
    label = {k: run[k] for k in LABEL_KEYS}
    rows = []
    for step in tqdm(steps, desc=f"score-updates {run['run']}", unit="snapshot", disable=not progress):
        path = snapshots[step]
        model = load_snapshot_model(path, run["objective"], device=device)
        _check_model(model, corpus, path)
        G = qk_gradients(model, batches, progress=progress)
        del model
        for layer, (s, d) in enumerate(_scores_rows(G, f"gradient at {path}", config.num_std)):
            rows.append({**label, "step": step, "layer": layer, "kind": "gradient", "symmetry": s, "directionality": d})
        later = [s for s in all_steps if s > step]
        if later:
            nxt = later[0]
            diff = snapshot_matrices(snapshots[nxt]) - snapshot_matrices(path)
            what = f"applied update between steps {step} and {nxt} of {run_dir}"
            for layer, (s, d) in enumerate(_scores_rows(diff, what, config.num_std)):
                rows.append(
                    {**label, "step": step, "layer": layer, "kind": "applied", "symmetry": s, "directionality": d}
                )
    return pd.DataFrame(rows, columns=UPDATE_COLUMNS)


# ------------------------------------------------------------------------------------------------- CLI


def _as_flags(message: str) -> str:
    """An UpdateConfig message (naming its keyword arguments) as score-updates says it (naming its flags)."""
    for key in ("batch_size", "batches", "num_std"):
        flag = "--" + key.replace("_", "-")
        message = re.sub(rf"(?<![\w-]){key}(?!\w)(=?)", lambda m, f=flag: f + (" " if m[1] else ""), message)
    return message


def run_score_updates(args: argparse.Namespace) -> int:
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    if out.suffix != ".csv":
        raise UserError(f"--out {out}: expected a .csv file name")
    check_table_path(out)
    run = read_run(args.run_dir)
    given = {k: getattr(args, k) for k in ("batches", "batch_size", "seed", "num_std") if getattr(args, k) is not None}
    try:
        config = UpdateConfig(**given, masking=run_masking(run, args.mlm_probability))  # it has the defaults
    except UserError as exc:  # its messages name its keyword arguments: say the flags typed
        raise UserError(_as_flags(str(exc))) from None
    try:
        device = torch.device(args.device)
    except RuntimeError as exc:
        raise UserError(f"--device {args.device!r}: {exc}") from None
    table = score_updates(
        args.run_dir, args.corpus, args.steps, config, device=device, progress=not getattr(args, "no_progress", False)
    )
    atomic_write_table(table, out, float_format="%.17g")
    return 0
