"""RUN.yaml: the run config (RunConfig, frozen: every key's value kind and bound in its field, the one table TYPES,
RUN_MINIMUMS and RUN_SETTINGS come from, and for a run setting how run.yaml records it; config/schema.yaml's
`run_settings` states the same, tests/test_schema.py)
and its one validation (run_config_from_dict: one UserError naming the key, before any training), which the trainer
runs on RUN.yaml and the workflow's plan on every planned run at parse time; and the run it resolves to on a
prepared corpus, or for objective `classifier` on a prepared image set (what run.yaml holds). Both are read by
attention_geometry.formats.corpus, snapshot steps and the run name come from attention_geometry.formats.rundir.

Torch- and numpy-free at module level: rules/common.smk imports it (through workflow.plan) at parse time."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import RUN_KEYS
from attention_geometry.formats.corpus import Corpus, ImageSet, corpus_sha256, images_sha256, load_corpus, load_images
from attention_geometry.formats.files import read_yaml
from attention_geometry.formats.rundir import run_name, snapshot_steps
from attention_geometry.formats.value_kinds import expected, short_repr, unknown_key
from attention_geometry.training.hyper import (
    IMAGE_OBJECTIVES,
    IMAGE_ONLY_FIELDS,
    IMAGE_SIZES,
    INITS,
    OMITTED_AT_DEFAULT,
    RUN_OBJECTIVES,
    SIZES,
    TEXT_ONLY_FIELDS,
    Hyper,
    resolve_hyper,
)

__all__ = [
    "RunConfig",
    "ResolvedRun",
    "RunRuntime",
    "read_run_data",
    "is_image_run",
    "load_run_config",
    "run_config_from_dict",
    "run_steps",
    "resolve_run",
    "DEVICES",
    "TYPES",
    "RUN_MINIMUMS",
    "RUN_SETTINGS",
    "resolved_settings",
    "REGULARIZER_MINIMUMS",
]


def is_image_run(objective: str) -> bool:
    """True for the objectives that train a ViT image classifier on an image set (IMAGE_OBJECTIVES)."""
    return objective in IMAGE_OBJECTIVES


def read_run_data(path: str | Path, objective: str) -> Corpus | ImageSet:
    """The prepared data of a run: its image set (formats.corpus.load_images) for an image objective, else
    its corpus (load_corpus); either refuses the other kind with one line."""
    return load_images(path) if is_image_run(objective) else load_corpus(path)


RUNTIME_KEYS = ("threads", "device")  # how a run is executed, not what it computes
DEVICES = ("auto", "cpu", "cuda")


RECORDS = ("always", "changed", "folded")  # how run.yaml records a run setting (run_key's `run_yaml`)


def run_key(
    kind: str,
    default: Any = dataclasses.MISSING,
    *,
    minimum: int | None = None,
    setting: bool = False,
    run_yaml: str = "changed",
    resolve: Callable[[Any, Hyper, Any], Any] | None = None,
):
    """A RUN.yaml key: its value kind (attention_geometry.formats.value_kinds), its inclusive minimum (integers;
    null allowed where the kind says so) and whether it is a run setting, a key of config/schema.yaml's
    `run_settings` that a workflow group or run entry sets (the others are a run's identity and its runtime).

    A run setting also says how the run it resolves to records it (resolved_settings, run.yaml, show-run):
    `resolve(cfg, hyper, data)` is its resolved value (None: the value given; `data` is the prepared corpus or
    image set, None before it exists), and `run_yaml` is where run.yaml holds it: "changed" (under its name where
    the value given differs from the default: a new setting's rule, so that a run dir of a run that does not use
    it resumes as before), "always" (under its name in every run.yaml: the settings run.yaml has held from its
    start) or "folded" (not under its own name: its resolution is another key's, as snapshot_every's is
    snapshot_steps' and overrides' is `hyper`)."""
    if run_yaml not in RECORDS:
        raise ValueError(f"run_yaml: {run_yaml!r} (known: {', '.join(RECORDS)})")
    meta = {"kind": kind, "minimum": minimum, "setting": setting, "run_yaml": run_yaml, "resolve": resolve}
    if isinstance(default, dict):
        return field(default_factory=dict, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class RunConfig:
    """One training run (RUN.yaml). Snapshot, eval and state steps always include 0 (snapshot, eval) and
    max_steps (all three); the steps in snapshot_steps / eval_steps are >= 0 and at most max_steps. `regularizer`:
    {"lambda": float} adds lambda * sum_l ||W_qk,l|| / ||sym(W_qk,l)|| to the loss (off when absent or 0).
    Built only by run_config_from_dict (validated); `given` names the keys its mapping gave, in order, so that
    as_mapping writes back exactly those (the workflow's RUN.yaml)."""

    corpus: str = run_key("nonempty_str")  # a prepared corpus, or for objective classifier a prepared image set
    size: str = run_key("nonempty_str", "tiny")
    objective: str = run_key("nonempty_str", "encoder")
    init: str = run_key("nonempty_str", "standard")
    seed: int = run_key("int", 0, minimum=0)
    # None: the size's default (Hyper.max_steps)
    max_steps: int | None = run_key(
        "opt_int", None, minimum=1, setting=True, run_yaml="always", resolve=lambda cfg, h, data: h.max_steps
    )
    # run.yaml: every snapshot step (run_steps: sorted, 0 and max_steps always), from these or snapshot_every
    snapshot_steps: list[int] | None = run_key(
        "opt_int_list", None, setting=True, run_yaml="always", resolve=lambda cfg, h, data: _steps(cfg, h, 0)
    )
    snapshot_every: int | None = run_key("opt_int", None, minimum=1, setting=True, run_yaml="folded")
    eval_steps: list[int] | None = run_key(
        "opt_int_list", None, setting=True, run_yaml="always", resolve=lambda cfg, h, data: _steps(cfg, h, 1)
    )
    eval_every: int | None = run_key("opt_int", None, minimum=1, setting=True, run_yaml="folded")
    # run.yaml: at most the data's held-out blocks (before the data exists: as given)
    eval_blocks: int = run_key(
        "int", 512, minimum=0, setting=True, run_yaml="always", resolve=lambda cfg, h, data: _eval_blocks(cfg, data)
    )
    # also write the resumable state every N steps (and at every snapshot)
    state_every: int | None = run_key("opt_int", 1000, minimum=1, setting=True, run_yaml="always")
    # one loss.csv row per N steps: the mean train loss of those N steps
    log_every: int = run_key("int", 1, minimum=1, setting=True, run_yaml="always")
    # run.yaml: resolved into `hyper` (resolve_hyper)
    overrides: dict = run_key("opt_dict", {}, setting=True, run_yaml="folded")
    # run.yaml: {"lambda": the weight, 0.0 when off}
    regularizer: dict | None = run_key(
        "opt_dict",
        None,
        setting=True,
        run_yaml="always",
        resolve=lambda cfg, h, data: {"lambda": float((cfg.regularizer or {}).get("lambda", 0.0))},
    )
    # the run name; default rundir.run_name: {size}-{dataset}-{objective}-{init}-s{seed}
    run: str | None = run_key("opt_nonempty_str", None)
    threads: int | None = run_key("opt_int", None, minimum=1)
    device: str = run_key("nonempty_str", "auto")
    # the keys its mapping gave, in order (None: every key); not compared: equal configs train alike
    given: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    def as_mapping(self) -> dict[str, Any]:
        """The RUN.yaml mapping of this config: the keys its source gave (`given`), with their values."""
        return {k: getattr(self, k) for k in (TYPES if self.given is None else self.given)}

    def settings(self) -> dict[str, Any]:
        """The run settings (RUN_SETTINGS) among the keys given, with their values."""
        return {k: v for k, v in self.as_mapping().items() if k in RUN_SETTINGS}


_KEYS = [f for f in dataclasses.fields(RunConfig) if "kind" in f.metadata]
TYPES = {f.name: f.metadata["kind"] for f in _KEYS}  # the value kind of each key
RUN_MINIMUMS = {f.name: f.metadata["minimum"] for f in _KEYS if f.metadata["minimum"] is not None}
RUN_SETTINGS = tuple(f.name for f in _KEYS if f.metadata["setting"])  # config/schema.yaml's run_settings
REGULARIZER_MINIMUMS = {"lambda": 0}  # the only key of `regularizer`


def _steps(cfg: RunConfig, h: Hyper, which: int) -> tuple[int, ...]:
    return tuple(run_steps(cfg, h.max_steps)[which])  # 0: snapshot steps, 1: eval steps


def _eval_blocks(cfg: RunConfig, data: Any) -> int:
    return cfg.eval_blocks if data is None else min(cfg.eval_blocks, int(data.heldout.shape[0]))


def resolved_settings(cfg: RunConfig, h: Hyper, data: Any = None) -> dict[str, Any]:
    """The run settings of the run `cfg` resolves to, as run.yaml records them (each setting's `run_yaml` and
    `resolve`, in field order; a step list as a tuple): `h` is the run's resolved Hyper, `data` its prepared corpus
    or image set (None before it exists: show-run). One loop over the fields, so a new setting needs no code here:
    its field says what it resolves to."""
    default = type(cfg)(corpus=cfg.corpus)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        if not f.metadata.get("setting") or f.metadata["run_yaml"] == "folded":
            continue
        given = getattr(cfg, f.name)
        if f.metadata["run_yaml"] == "changed" and given == getattr(default, f.name):
            continue
        resolve = f.metadata["resolve"]
        value = given if resolve is None else resolve(cfg, h, data)
        out[f.name] = value
    return out


def _typed(value: Any, kind: str, key: str, where: str) -> Any:
    what = expected(value, kind)
    if what is not None:
        raise UserError(f"{where}: {key}: expected {what}, got {short_repr(value)}")
    return value


def run_config_from_dict(raw: Any, where: str = "run config") -> RunConfig:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: expected a mapping of keys, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(TYPES))
    if unknown:
        raise UserError(f"{where}: {unknown_key(unknown[0], TYPES)}")
    if "corpus" not in raw:
        raise UserError(f"{where}: corpus: missing (a directory written by prepare-corpus)")
    kw = {k: _typed(v, TYPES[k], k, where) for k, v in raw.items()}
    if kw.get("overrides") is None:
        kw.pop("overrides", None)
    cfg = RunConfig(**kw, given=tuple(kw))
    if cfg.objective not in RUN_OBJECTIVES:
        raise UserError(f"{where}: objective: unknown objective {cfg.objective!r} (known: {', '.join(RUN_OBJECTIVES)})")
    image = is_image_run(cfg.objective)
    sizes = IMAGE_SIZES if image else SIZES
    if cfg.size not in sizes:
        other = SIZES if image else IMAGE_SIZES
        hint = f" ({cfg.size!r} is a size of the other kind of model)" if cfg.size in other else ""
        raise UserError(
            f"{where}: size: unknown size {cfg.size!r} for objective {cfg.objective}{hint} (known: {', '.join(sizes)})"
        )
    foreign = IMAGE_ONLY_FIELDS if not image else TEXT_ONLY_FIELDS
    for key in cfg.overrides or {}:
        if key in foreign:
            kind = "an image classifier" if not image else "a text model"
            raise UserError(f"{where}: overrides.{key}: only {kind} has it (objective is {cfg.objective})")
    if cfg.init not in INITS:
        raise UserError(f"{where}: init: unknown init {cfg.init!r} (known: {', '.join(INITS)})")
    if cfg.device not in DEVICES:
        raise UserError(f"{where}: device: unknown device {cfg.device!r} (known: {', '.join(DEVICES)})")
    for key, minimum in RUN_MINIMUMS.items():
        v = getattr(cfg, key)
        if v is not None and v < minimum:
            raise UserError(f"{where}: {key}: must be >= {minimum}, got {v}")
    for key in ("snapshot_steps", "eval_steps"):
        v = getattr(cfg, key)
        if v is not None and any(s < 0 for s in v):
            raise UserError(f"{where}: {key}: steps must be >= 0")
    if cfg.snapshot_steps is not None and cfg.snapshot_every is not None:
        raise UserError(f"{where}: snapshot_steps: give snapshot_steps or snapshot_every, not both")
    if cfg.eval_steps is not None and cfg.eval_every is not None:
        raise UserError(f"{where}: eval_steps: give eval_steps or eval_every, not both")
    if cfg.regularizer is not None:
        extra = sorted(set(cfg.regularizer) - set(REGULARIZER_MINIMUMS))
        if extra:
            raise UserError(f"{where}: {unknown_key(extra[0], REGULARIZER_MINIMUMS, 'regularizer.')}")
        for key, minimum in REGULARIZER_MINIMUMS.items():
            v = cfg.regularizer.get(key, 0.0)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < minimum:
                raise UserError(f"{where}: regularizer.{key}: expected a number >= {minimum}, got {v!r}")
    # unknown override fields / bad values fail here already, before the corpus is opened
    h = resolve_hyper(cfg.size, cfg.overrides, where=f"{where}: overrides")
    if image and h.compile:
        raise UserError(
            f"{where}: overrides.capture: compile is not supported for objective {cfg.objective} on the host path "
            "(the ViT runs eagerly there)"
        )
    run_steps(cfg, cfg.max_steps or h.max_steps, where)
    return cfg


def load_run_config(path: str | Path) -> RunConfig:
    p = Path(path)
    raw = read_yaml(p, "run config")
    cfg = run_config_from_dict(raw, where=str(p))
    corpus = Path(cfg.corpus)
    if not corpus.is_absolute():  # relative to the working directory, as the workflow passes it
        cfg = dataclasses.replace(cfg, corpus=str(corpus))
    return cfg


# ------------------------------------------------------------------------------------------ resolution


def run_steps(cfg: RunConfig, max_steps: int, where: str = "run config") -> tuple[list[int], list[int]]:
    """(snapshot steps, eval steps) of the run (rundir.snapshot_steps: 0 and max_steps always; an explicit
    step beyond max_steps is an error, as in the workflow)."""

    def steps(explicit, every, key):
        try:
            return snapshot_steps(explicit, every, max_steps, key=key)
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None

    return (
        steps(cfg.snapshot_steps, cfg.snapshot_every, "snapshot_steps"),
        steps(cfg.eval_steps, cfg.eval_every, "eval_steps"),
    )


@dataclass(frozen=True)
class RunRuntime:
    """How a run is executed (run.yaml `runtime`; never compared when a run dir is reused): torch threads
    (None: torch's default), the device (RUN.yaml's choice until the trainer has picked one, then its type)
    and the number of trainer processes."""

    threads: int | None
    device: str
    world_size: int = 1


@dataclass(frozen=True)
class ResolvedRun:
    """A run resolved on its prepared corpus: every setting with its value filled in, what run.yaml holds
    (`as_run_yaml`). The trainer reads it by attribute; run.yaml itself stays a plain mapping, so the readers of
    run dirs (formats.rundir.read_run_yaml) need no training code."""

    run: str  # the run name (RUN.yaml `run`, else rundir.run_name)
    size: str
    dataset: str  # the corpus manifest's
    objective: str
    init: str
    seed: int
    corpus: str  # the prepared corpus (or image set), an absolute path
    # the data's identity on resume (its path may change): formats.corpus.corpus_sha256 / images_sha256
    corpus_sha256: str
    # a corpus manifest's dataset, name, block_len, vocab_size, special_tokens; an image set's dataset, name,
    # image_size, num_channels, num_classes, class_names, normalization
    corpus_manifest: dict[str, Any]
    n_train_blocks: int  # train blocks, or train images (run.yaml: n_train_images)
    # the resolved run settings, as run.yaml records them (resolved_settings), each also read as an attribute:
    # max_steps; snapshot_steps and eval_steps (sorted tuples with 0 and max_steps); eval_blocks (at most the
    # data's held-out blocks; 0: no evaluation); state_every; log_every; regularizer ({"lambda": w}, 0.0: off);
    # and any setting whose `run_yaml` is "changed", where it differs from its default
    settings: dict[str, Any]
    hyper: Hyper
    runtime: RunRuntime

    def __getattr__(self, name: str) -> Any:  # only for names that are not fields: the resolved settings
        settings = self.__dict__.get("settings", {})
        if name in settings:
            return settings[name]
        raise AttributeError(f"{type(self).__name__} has no attribute or resolved run setting {name!r}")

    def labels(self) -> dict[str, Any]:
        """The run name and the RUN_KEYS columns (formats.columns) that label each loss.csv row."""
        return {k: getattr(self, k) for k in ("run", *RUN_KEYS)}

    def as_run_yaml(self) -> dict[str, Any]:
        """The mapping run.yaml holds (its keys in this order; the trainer compares it with an existing run
        dir's run.yaml key by key: snapshots.compare_run_yaml). The hyperparameters only the other kind of
        model has are left out (a text run's run.yaml has no patch_size; an image run's no vocabulary,
        sequence or masking fields), and an image run counts `n_train_images`."""
        image = is_image_run(self.objective)
        skip = TEXT_ONLY_FIELDS if image else IMAGE_ONLY_FIELDS
        defaults = {f.name: f.default for f in dataclasses.fields(Hyper)}
        hyper = {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in dataclasses.asdict(self.hyper).items()
            if k not in skip and not (k in OMITTED_AT_DEFAULT and v == defaults[k])
        }
        return {
            "run": self.run,
            "size": self.size,
            "dataset": self.dataset,
            "objective": self.objective,
            "init": self.init,
            "seed": self.seed,
            "corpus": self.corpus,
            "corpus_sha256": self.corpus_sha256,
            "corpus_manifest": self.corpus_manifest,
            ("n_train_images" if image else "n_train_blocks"): self.n_train_blocks,
            **{k: (list(v) if isinstance(v, tuple) else v) for k, v in self.settings.items()},
            "hyper": hyper,
            "runtime": dataclasses.asdict(self.runtime),
        }


# what run.yaml keeps of a corpus's and of an image set's manifest (ResolvedRun.corpus_manifest)
_CORPUS_RECORD = ("dataset", "name", "block_len", "vocab_size", "special_tokens", "layout", "split_characters")
_IMAGES_RECORD = ("dataset", "name", "image_size", "num_channels", "num_classes", "class_names", "normalization")


def resolve_run(cfg: RunConfig, corpus: Corpus | ImageSet) -> ResolvedRun:
    """The full resolved run (what run.yaml holds; its Hyper is `.hyper`); UserError on a corpus that does
    not fit the model (block_len > positions, token ids >= vocab size, no held-out blocks), or an image set
    whose size is not a multiple of the patch size."""
    h = resolve_hyper(cfg.size, cfg.overrides, where="overrides")
    if cfg.max_steps is not None:
        h = dataclasses.replace(h, max_steps=cfg.max_steps)
    if isinstance(corpus, ImageSet) != is_image_run(cfg.objective):  # read_run_data picks by the objective
        raise UserError(f"corpus: {corpus.path} does not hold the data of objective {cfg.objective}")
    if isinstance(corpus, ImageSet):
        return _resolve_image_run(cfg, corpus, h)
    if h.vocab_size is None:
        h = dataclasses.replace(h, vocab_size=corpus.vocab_size)
    elif h.vocab_size < corpus.vocab_size:
        raise UserError(
            f"overrides.vocab_size: {h.vocab_size} is smaller than the corpus vocabulary "
            f"({corpus.vocab_size}, {corpus.path / 'manifest.json'})"
        )
    if h.seq_len is None:
        h = dataclasses.replace(h, seq_len=corpus.block_len)
    elif h.seq_len != corpus.block_len:
        raise UserError(
            f"overrides.seq_len: {h.seq_len} but the corpus has block_len {corpus.block_len} "
            f"({corpus.path}); prepare the corpus with block_len {h.seq_len}"
        )
    if corpus.block_len > h.max_position_embeddings:
        raise UserError(
            f"corpus: block_len {corpus.block_len} is longer than the model's "
            f"max_position_embeddings {h.max_position_embeddings} (overrides.max_position_embeddings)"
        )
    if cfg.eval_blocks > 0 and corpus.heldout.shape[0] == 0:
        raise UserError(f"eval_blocks: {cfg.eval_blocks} but {corpus.path / 'heldout.npy'} has no blocks")
    layout = corpus.manifest.get("layout", "packed")
    if h.recipe == "authors" and layout != "documents":
        raise UserError(
            f"overrides.recipe: authors trains on one document per sample, but {corpus.path} holds {layout} blocks: "
            "prepare the corpus with `layout: documents`"
        )
    return _resolved(cfg, corpus, h, corpus_sha256, _CORPUS_RECORD)


def _resolve_image_run(cfg: RunConfig, images: ImageSet, h: Hyper) -> ResolvedRun:
    """resolve_run for an image classifier: the model's image size, channels and classes come from the set."""
    if h.patch_size is None or images.image_size % h.patch_size:
        raise UserError(
            f"overrides.patch_size: {h.patch_size} does not divide the images' size {images.image_size} ({images.path})"
        )
    import numpy as np  # lazily: the workflow imports this module at parse time, without numpy

    classes = np.unique(np.asarray(images.train_labels))
    if classes.size < 2:  # prepare-images refuses such a set; one prepared before it did is refused here
        raise UserError(
            f"{images.path}: every train image is of one class ({int(classes[0])}): a classifier of one class "
            "learns nothing (loss 0, accuracy 1); prepare an image set of at least two classes"
        )
    if cfg.eval_blocks > 0 and images.heldout.shape[0] == 0:
        raise UserError(f"eval_blocks: {cfg.eval_blocks} but the image set {images.path} has no held-out images")
    return _resolved(cfg, images, h, images_sha256, _IMAGES_RECORD)


def _resolved(
    cfg: RunConfig, data: Corpus | ImageSet, h: Hyper, sha256: Callable[[Any], str], record: tuple[str, ...]
) -> ResolvedRun:
    """The ResolvedRun of `cfg` on its checked data (a corpus or an image set) with the resolved `h`: `sha256`
    is the data's identity (corpus_sha256, images_sha256), `record` the keys of its manifest that run.yaml keeps."""
    run_steps(cfg, h.max_steps, "run config")  # a step beyond max_steps: one line naming the run config
    dataset = data.dataset
    return ResolvedRun(
        run=cfg.run or run_name(cfg.size, dataset, cfg.objective, cfg.init, cfg.seed),
        size=cfg.size,
        dataset=dataset,
        objective=cfg.objective,
        init=cfg.init,
        seed=cfg.seed,
        corpus=str(Path(cfg.corpus).resolve()),
        corpus_sha256=sha256(data),
        corpus_manifest={k: data.manifest[k] for k in record if k in data.manifest},
        n_train_blocks=int(data.train.shape[0]),
        settings=resolved_settings(cfg, h, data),
        hyper=h,
        runtime=RunRuntime(threads=cfg.threads, device=cfg.device),
    )
