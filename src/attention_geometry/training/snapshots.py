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
from attention_geometry.formats.columns import LOSS_COLUMNS
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
    RUN_YAML,
    STATE,
    STATE_DAMAGED,
    STATE_PREV,
    snapshot_dir,
)
from attention_geometry.training.hyper import CAUSAL_OBJECTIVES
from attention_geometry.training.model_card import model_card
from attention_geometry.training.run_config import RUNTIME_KEYS, ResolvedRun, is_image_run

__all__ = [
    "write_run_yaml",
    "open_run_yaml",
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


def open_run_yaml(out: Path, resolved: ResolvedRun) -> str | None:
    """Process 0's run.yaml at the start of a run: written, or compared with the run dir's (write_run_yaml); with
    other settings the old run is set aside and the new one starts afresh. Returns what changed, for the log."""
    out.mkdir(parents=True, exist_ok=True)
    action, keys = write_run_yaml(out, resolved)
    if action == "restart":  # other settings: the old run is kept beside, the new one starts afresh
        aside = set_aside(out)
        out.mkdir(parents=True)
        write_run_yaml(out, resolved)
        return f"settings changed ({', '.join(keys)}): the previous run is kept at {aside}; starting afresh"
    if action == "extend":
        return f"max_steps raised to {resolved.max_steps} under a constant schedule: continuing from the newest state"
    if action == "moved":
        return f"corpus moved ({keys[0]}), the same content (corpus_sha256): continuing"
    return None


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
