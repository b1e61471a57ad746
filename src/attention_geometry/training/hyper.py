"""Hyperparameters of a training run, torch-free: the named sizes, the `Hyper` dataclass, its bounds and
enums (config/schema.yaml states the same; tests/test_schema.py) and `resolve_hyper`, which the trainer
and the workflow (at parse time, rules/common.smk) both call, so a bad override is refused before any run
directory is written."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from attention_geometry.errors import UserError
from attention_geometry.formats.value_kinds import closest_hint, expected, short_repr

# the language-model objectives of BERT runs on a text corpus (docs/training.md, "Objectives"):
# `encoder` masked LM; `decoder` next-token prediction at every position of clean text; `decoder-paper` the
# authors' decoder objective: causal attention over the masked-LM corruption of the input, next-token labels
# only where the next position was selected for masking (their script's DataCollatorForLanguageModeling, which
# masks by default, in front of BertLMHeadModel, whose loss shifts the labels by one)
OBJECTIVES = ("encoder", "decoder", "decoder-paper")
CAUSAL_OBJECTIVES = ("decoder", "decoder-paper")  # causal attention, BertLMHeadModel, labels shifted by one
MASKED_OBJECTIVES = ("encoder", "decoder-paper")  # inputs corrupted by BERT's masking, labels at the selection
IMAGE_OBJECTIVES = ("classifier",)  # a ViT image classifier on a prepared image set (training/vit.py)
RUN_OBJECTIVES = OBJECTIVES + IMAGE_OBJECTIVES  # what RUN.yaml `objective` takes
INITS = ("standard", "symmetric", "symmetric-fresh", "fresh")
# linear: warmup, then linear decay to lr / (max_steps - warmup + 1) at the last update; constant: flat after
# warmup; trainer-linear: transformers' get_linear_schedule_with_warmup as the Trainer steps it (update t uses
# lr * lambda(t - 1): 0 at the first update, lr at update warmup + 1, lr / (max_steps - warmup) at the last)
SCHEDULES = ("linear", "constant", "trainer-linear")
# the two training recipes (docs/paper-code.md): `packed` (ours: packed blocks, every next token of a decoder,
# BERT masking that can select [UNK]); `authors` (the authors' train.py: one document per sample padded to the
# corpus's block_len, DataCollatorForLanguageModeling's masking, which never selects a special token, [UNK]
# included, and attention masked where the tokenizer padded, not where a random replacement drew [PAD])
RECIPES = ("packed", "authors")
# which parameters AdamW decays: `ndim` those with >= 2 dims (matrices, embeddings); `trainer` those that
# transformers' Trainer.get_decay_parameter_names keeps (not in a LayerNorm, no "bias"/"norm" in the name)
DECAY_PARAMS = ("ndim", "trainer")
# the loss of an update: `tokens` the token mean over the whole global batch (ours; transformers' Trainer from
# 4.46 on for models that take num_items_in_batch); `micro_batches` the mean over micro-batches (and processes)
# of each micro-batch's token mean (the Trainer of transformers 4.39.1, the authors' pinned version)
LOSS_MEANS = ("tokens", "micro_batches")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# where an update's batch is made (docs/training.md, "The device path (GPU)"): `host` the numpy masking of
# training/batches.py and one forward and backward per micro-batch (the default, what every CPU study trained);
# `device` the corpus on the device, the masks drawn there from a torch generator keyed by (seed, step), and the
# micro-batches run together in `device_passes` passes (training/device_path.py)
BATCH_PATHS = ("host", "device")
# the one compile setting: eagerly, through torch.compile (the host path: its transformer stack; the device path: its
# whole pass), or replayed from a captured CUDA graph (the device path only)
CAPTURES = ("eager", "compile", "cuda-graphs")
# how the device path attends in a pass with padded rows: `mask` the key-padding mask (SDPA's masked kernel);
# `varlen` each row's real tokens and its padding as two segments of variable-length flash attention on CUDA
# (rows whose real tokens come first; a pass with another row keeps the mask; training/models.py segment_bounds)
PADDED_ATTENTIONS = ("mask", "varlen")
FUSED_OPTIMIZERS = ("auto", "fused", "foreach", "none")
HIDDEN_ACTS = ("gelu", "relu", "gelu_new", "silu")
# the bounds resolve_hyper checks (config/schema.yaml's `overrides` states the same: tests/test_schema.py);
# mlm_probability is in (0, 1), mask_token_fraction + random_token_fraction <= 1
# bounds of the hyperparameters in JSON-schema words (config/schema.yaml states the same; tests/test_schema.py)
_POSITIVE_INT = {"minimum": 1}
HYPER_BOUNDS: dict[str, dict[str, float]] = {
    **{
        k: _POSITIVE_INT
        for k in (
            "num_layers",
            "hidden_size",
            "num_heads",
            "intermediate_size",
            "batch_size",
            "grad_accum",
            "max_position_embeddings",
            "max_steps",
        )
    },
    "patch_size": _POSITIVE_INT,  # or null (text models)
    "per_device_batch_size": _POSITIVE_INT,  # or null (not checked)
    "device_passes": _POSITIVE_INT,
    "warmup_steps": {"minimum": 0},
    "lr": {"exclusiveMinimum": 0},
    "eps": {"exclusiveMinimum": 0},
    "layer_norm_eps": {"exclusiveMinimum": 0},
    "initializer_range": {"exclusiveMinimum": 0},
    "weight_decay": {"minimum": 0},
    "grad_clip": {"minimum": 0},
    "hidden_dropout": {"minimum": 0, "exclusiveMaximum": 1},
    "attention_dropout": {"minimum": 0, "exclusiveMaximum": 1},
    "mlm_probability": {"exclusiveMinimum": 0, "exclusiveMaximum": 1},
    "mask_token_fraction": {"minimum": 0, "maximum": 1},
    "random_token_fraction": {"minimum": 0, "maximum": 1},
}
BETA_BOUNDS = {"minimum": 0, "exclusiveMaximum": 1}  # each of the two Adam betas
_BOUND_TESTS = {
    "minimum": (lambda v, b: v >= b, ">="),
    "exclusiveMinimum": (lambda v, b: v > b, ">"),
    "maximum": (lambda v, b: v <= b, "<="),
    "exclusiveMaximum": (lambda v, b: v < b, "<"),
}


def _out_of_bounds(value: float, bounds: dict[str, float]) -> str | None:
    """None when `value` is finite and within `bounds`, else what it must be."""
    if not math.isfinite(value):
        return "must be a finite number"
    for kind, bound in bounds.items():
        ok, sign = _BOUND_TESTS[kind]
        if not ok(value, bound):
            return f"must be {sign} {bound}"
    return None


HYPER_ENUMS = {
    "schedule": SCHEDULES,
    "precision": PRECISIONS,
    "fused_optimizer": FUSED_OPTIMIZERS,
    "hidden_act": HIDDEN_ACTS,
    "recipe": RECIPES,
    "weight_decay_params": DECAY_PARAMS,
    "loss_mean": LOSS_MEANS,
    "batch_path": BATCH_PATHS,
    "capture": CAPTURES,
    "padded_attention": PADDED_ATTENTIONS,
}


@dataclass(frozen=True)
class Hyper:
    """Every model and optimization hyperparameter of a run (a named size's defaults, then RUN.yaml
    `overrides` field by field). `vocab_size` / `seq_len` None: taken from the corpus manifest. Frozen: a value
    filled in later (the corpus's vocabulary, the run's max_steps) makes a new one (dataclasses.replace)."""

    num_layers: int = 2
    hidden_size: int = 128
    num_heads: int = 2
    intermediate_size: int = 512
    vocab_size: int | None = None
    seq_len: int | None = None
    patch_size: int | None = None  # ViT (objective classifier): the side of its square patches; None for text
    max_position_embeddings: int = 512
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    batch_size: int = 32  # global batch (all processes, all accumulation micro-steps together)
    grad_accum: int = 1
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-8
    weight_decay: float = 0.01  # on parameters with >= 2 dims only (matrices, embeddings)
    grad_clip: float = 1.0  # max global L2 norm; 0 = off
    warmup_steps: int = 100
    schedule: str = "linear"  # linear warmup to lr, then linear decay towards 0 at max_steps
    max_steps: int = 5000
    mlm_probability: float = 0.15
    mask_token_fraction: float = 0.8  # of the selected positions: [MASK]
    random_token_fraction: float = 0.1  # of the selected positions: a uniform random token (rest unchanged)
    precision: str = (
        "auto"  # auto (bf16 autocast on a GPU with bf16, else fp16 there; fp32 on CPU) | fp32 | bf16 | fp16
    )
    compile: bool = False  # derived (resolve_hyper): the host path's `capture: compile`; run.yaml records it
    fused_optimizer: str = "auto"  # auto (= fused) | fused | foreach | none
    # the fields below came with the authors' recipe; at their defaults (today's behaviour) run.yaml leaves them
    # out (ResolvedRun.as_run_yaml), so a run.yaml of the packed recipe is what it was before they existed
    recipe: str = "packed"  # packed | authors (RECIPES)
    weight_decay_params: str = "ndim"  # ndim | trainer (DECAY_PARAMS)
    loss_mean: str = "tokens"  # tokens | micro_batches (LOSS_MEANS)
    # the batch of one process's micro-batch, checked against batch_size / (processes x grad_accum) when the run
    # starts (the authors' 32 per GPU: batch_size = 32 x grad_accum x GPUs); None: not checked
    per_device_batch_size: int | None = None
    # the device path (GPU runs; training/device_path.py); at their defaults run.yaml leaves these out too
    batch_path: str = "host"  # host | device (BATCH_PATHS)
    device_passes: int = 1  # the device path's forward and backward passes per update (1: the whole batch at once)
    capture: str = "eager"  # eager | compile (both paths) | cuda-graphs (the device path) (CAPTURES)
    padded_attention: str = "mask"  # the device path's attention in a padded pass: mask | varlen (PADDED_ATTENTIONS)


# the fields only one kind of model reads: a run of the other kind may not override them, and its run.yaml leaves
# them out (a text run's run.yaml is what it was before ViTs existed)
TEXT_ONLY_FIELDS = (
    "vocab_size",
    "seq_len",
    "max_position_embeddings",
    "mlm_probability",
    "mask_token_fraction",
    "random_token_fraction",
    "padded_attention",
)
IMAGE_ONLY_FIELDS = ("patch_size",)
# the fields of the authors' recipe, left out of run.yaml at their defaults (ResolvedRun.as_run_yaml)
RECIPE_FIELDS = ("recipe", "weight_decay_params", "loss_mean", "per_device_batch_size")
# the device path's fields, also left out of run.yaml at their defaults (a run of the host path records what it
# recorded before they existed)
DEVICE_PATH_FIELDS = ("batch_path", "device_passes", "capture", "padded_attention")
OMITTED_AT_DEFAULT = RECIPE_FIELDS + DEVICE_PATH_FIELDS


def _kind(name: str, default) -> str:
    """The value kind (attention_geometry.formats.value_kinds) of a Hyper field, from its default."""
    if name == "betas":
        return "number_pair"
    if default is None:
        return "opt_int"  # vocab_size, seq_len: None = the corpus's; patch_size: None for text models
    return {bool: "bool", float: "number", int: "int", str: "str"}[type(default)]


HYPER_KINDS = {f.name: _kind(f.name, f.default) for f in dataclasses.fields(Hyper)}

_PAPER = dict(
    lr=5e-5,
    betas=(0.9, 0.999),
    warmup_steps=200,
    weight_decay=0.01,
    max_steps=200_000,
    seq_len=512,
    hidden_dropout=0.1,
    attention_dropout=0.1,
    batch_size=32,
)

SIZES: dict[str, dict] = {
    # the embedded default's size; what it shows on a 2-core CPU: docs/experiment-design.md (pilots)
    "tiny": dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512),
    # the paper's depth at the default's width (study 3, docs/preregistration-3.md): 4 layers x 128, 2 heads of 64
    # (bert-mini's head size), intermediate 4 x 128; the default's optimization
    "tiny-4l": dict(num_layers=4, hidden_size=128, num_heads=2, intermediate_size=512),
    # the paper's (Saponati et al. 2025) sizes and optimization
    "bert-mini": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024, **_PAPER),
    "bert-base": dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072, **_PAPER),
    "bert-large": dict(num_layers=24, hidden_size=1024, num_heads=16, intermediate_size=4096, **_PAPER),
}


# the ViT image classifiers' sizes (objective classifier; docs/training.md "Vision"): a ViT of this shape on
# 2x2 patches of the 8x8 digits, AdamW at a constant learning rate after warmup, no dropout, no augmentation;
# chosen by the pilots in docs/training.md ("Vision pilots")
_VIT_DIGITS = dict(batch_size=64, lr=1e-3, warmup_steps=100, schedule="constant", max_steps=1500)
IMAGE_SIZES: dict[str, dict] = {
    "vit-tiny": dict(num_layers=2, hidden_size=64, num_heads=2, intermediate_size=256, patch_size=2, **_VIT_DIGITS),
}


def uses_dropout(h: Hyper) -> bool:
    """Whether a run draws dropout masks (its generator is then keyed per update: training.batches.dropout_seed)."""
    return h.hidden_dropout > 0 or h.attention_dropout > 0


def resolve_hyper(size: str, overrides: dict | None = None, where: str = "overrides") -> Hyper:
    """The size's defaults (SIZES, IMAGE_SIZES) with `overrides` applied field by field (UserError naming an
    unknown field or a value of the wrong type)."""
    if size not in SIZES and size not in IMAGE_SIZES:
        raise UserError(f"size: unknown size {size!r} (known: {', '.join([*SIZES, *IMAGE_SIZES])})")
    values = dict(SIZES.get(size) or IMAGE_SIZES[size])
    fields = {f.name: f for f in dataclasses.fields(Hyper)}
    if "compile" in (overrides or {}):  # one compile setting for both batch paths (issue 57)
        raise UserError(
            f"{where}.compile: renamed: give `capture: compile` (one setting for both batch paths: the host path "
            "compiles its transformer stack, the device path its whole pass)"
        )
    for key, value in (overrides or {}).items():
        if key not in fields:
            raise UserError(f"{where}.{key}: unknown hyperparameter ({closest_hint(key, fields)})")
        what = expected(value, HYPER_KINDS[key])
        if what is not None:
            raise UserError(f"{where}.{key}: expected {what}, got {short_repr(value)}")
        if HYPER_KINDS[key] == "number_pair":
            value = (float(value[0]), float(value[1]))
        elif HYPER_KINDS[key] == "number":
            value = float(value)
        values[key] = value
    h = Hyper(**values)
    _check_hyper(h, where)
    # run.yaml's `compile` (every run.yaml records it) is the host path's `capture: compile`, derived
    return dataclasses.replace(h, compile=h.batch_path == "host" and h.capture == "compile")


def _check_hyper(h: Hyper, where: str) -> None:
    def bad(key, msg):
        raise UserError(f"{where}.{key}: {msg}")

    for key, bounds in HYPER_BOUNDS.items():
        if getattr(h, key) is None:  # patch_size of a text model
            continue
        msg = _out_of_bounds(getattr(h, key), bounds)
        if msg:
            bad(key, f"{msg}, got {getattr(h, key)}")
    for beta in h.betas:
        msg = _out_of_bounds(beta, BETA_BOUNDS)
        if msg:
            bad("betas", f"each {msg}, got {list(h.betas)}")
    if h.hidden_size % h.num_heads:
        bad("num_heads", f"hidden_size {h.hidden_size} is not a multiple of num_heads {h.num_heads}")
    if h.batch_size % h.grad_accum:
        bad("grad_accum", f"batch_size {h.batch_size} is not a multiple of grad_accum {h.grad_accum}")
    if h.schedule not in SCHEDULES:
        bad("schedule", f"unknown schedule {h.schedule!r} (known: {', '.join(SCHEDULES)})")
    if h.precision not in PRECISIONS:
        bad("precision", f"unknown precision {h.precision!r} (known: {', '.join(PRECISIONS)})")
    if h.fused_optimizer not in FUSED_OPTIMIZERS:
        bad("fused_optimizer", f"unknown value {h.fused_optimizer!r} (known: {', '.join(FUSED_OPTIMIZERS)})")
    if h.mask_token_fraction + h.random_token_fraction > 1:
        bad("mask_token_fraction", "mask_token_fraction and random_token_fraction must be >= 0 and sum to <= 1")
    if h.hidden_act not in HIDDEN_ACTS:
        bad("hidden_act", f"unsupported activation {h.hidden_act!r}")
    for key in ("recipe", "weight_decay_params", "loss_mean", "batch_path", "capture", "padded_attention"):
        if getattr(h, key) not in HYPER_ENUMS[key]:
            bad(key, f"unknown value {getattr(h, key)!r} (known: {', '.join(HYPER_ENUMS[key])})")
    if h.per_device_batch_size is not None and h.batch_size % (h.per_device_batch_size * h.grad_accum):
        bad(
            "per_device_batch_size",
            f"batch_size {h.batch_size} is not a multiple of per_device_batch_size x grad_accum "
            f"({h.per_device_batch_size} x {h.grad_accum})",
        )
    if h.batch_path == "host":  # the device path's settings mean nothing on the host path: refused, not ignored
        if h.device_passes != 1:
            bad("device_passes", "only the device path reads it (batch_path: device)")
        if h.capture == "cuda-graphs":
            bad("capture", "cuda-graphs only on the device path (batch_path: device); the host path: eager or compile")
        if h.padded_attention != "mask":
            bad("padded_attention", "only the device path reads it (batch_path: device)")
    else:
        if h.batch_size % h.device_passes:
            bad("device_passes", f"batch_size {h.batch_size} is not a multiple of device_passes {h.device_passes}")
