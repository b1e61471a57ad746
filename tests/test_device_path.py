"""The device path (`batch_path: device`, training/device_path.py), on the CPU: its masking against transformers'
DataCollatorForLanguageModeling, its one-batch passes against the host path's accumulate loop (gradients), its
runs (resume, the clean decoder and the ViT against the host path), and its settings. The CUDA-only parts (CUDA
graphs, the pinned copies) are measured by benchmarks/gpu_measure.sh."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from attention_geometry.errors import UserError
from attention_geometry.formats.corpus import load_corpus
from attention_geometry.training.batches import IGNORE_INDEX, make_batch, n_loss_tokens
from attention_geometry.training.device_path import (
    DeviceBatches,
    capacity,
    device_mask_seed,
    device_masks,
    pass_kind,
    real_first,
)
from attention_geometry.training.hyper import resolve_hyper
from attention_geometry.training.loop import train
from attention_geometry.training.models import build_model, segment_bounds, segment_mask
from attention_geometry.training.run_config import load_run_config
from attention_geometry.training.step import HostBatches, LossModule, Step

torch.set_num_threads(1)

SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
SHAPE = dict(num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64)


def _documents(n: int, L: int, V: int, seed: int = 0, padded_every: int = 3) -> np.ndarray:
    """[CLS] random ids [SEP], every `padded_every`-th row a shorter document padded with [PAD]; a few [UNK]."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, V, size=(n, L))
    ids[rng.random((n, L)) < 0.02] = SPECIAL["unk"]
    ids[:, 0], ids[:, -1] = SPECIAL["cls"], SPECIAL["sep"]
    for i in range(0, n, padded_every):
        k = int(rng.integers(4, L))
        ids[i, k - 1], ids[i, k:] = SPECIAL["sep"], SPECIAL["pad"]
    return ids


# ------------------------------------------------------------------------------------ the masking vs the collator


@pytest.fixture(scope="module")
def collator_batch():
    """4000 documents of 64 tokens, vocabulary 300, masked by transformers' DataCollatorForLanguageModeling (a
    tokenizer whose special tokens are the corpus's ids) and by device_masks under the authors' recipe."""
    from transformers import BertTokenizerFast, DataCollatorForLanguageModeling

    V = 300
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}
    vocab.update({f"w{i}": i for i in range(5, V)})
    tok = BertTokenizerFast(vocab=vocab)
    ids = _documents(4000, 64, V)
    collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.15, seed=11)
    theirs = collator([{"input_ids": row.tolist()} for row in ids])
    h = resolve_hyper("tiny", {"recipe": "authors"})
    gen = torch.Generator().manual_seed(device_mask_seed(0, 1))
    t = torch.from_numpy(ids)
    ours = device_masks(t, gen, h, SPECIAL, V)
    return ids, V, (theirs["input_ids"].numpy(), theirs["labels"].numpy()), tuple(x.numpy() for x in ours)


def _shares(ids, inputs, labels, V):
    """Selection rate among the maskable positions, and the shares of the selected that became [MASK], another id,
    or stayed (a random id may equal the original or [MASK]: both outputs are read the same way)."""
    sel = labels != IGNORE_INDEX
    maskable = ~np.isin(ids, list(SPECIAL.values()))
    s_in, s_id = inputs[sel], ids[sel]
    return {
        "n_maskable": int(maskable.sum()),
        "n_selected": int(sel.sum()),
        "rate": sel.sum() / maskable.sum(),
        "mask": float((s_in == SPECIAL["mask"]).mean()),
        "other": float(((s_in != SPECIAL["mask"]) & (s_in != s_id)).mean()),
        "kept": float((s_in == s_id).mean()),
    }


def test_the_device_masking_has_the_collators_proportions(collator_batch):
    ids, V, theirs, ours = collator_batch
    a, b = _shares(ids, *theirs, V), _shares(ids, *ours, V)
    n, k = a["n_maskable"], min(a["n_selected"], b["n_selected"])
    assert n > 200_000 and k > 30_000
    # expected shares: a random replacement is uniform over the V ids (the collator's and ours)
    want = {"rate": 0.15, "mask": 0.8 + 0.1 / V, "other": 0.1 * (V - 2) / V, "kept": 0.1 + 0.1 / V}
    for key, p in want.items():
        sd = math.sqrt(p * (1 - p) / (n if key == "rate" else k))  # binomial sd of one share
        # 6 sd from the expectation each, 6 sd x sqrt(2) from each other: a wrong rule (a rate of 0.12 or 0.18,
        # a 70/20/10 split) is far outside; the seeds are fixed, so the test cannot flake
        assert abs(a[key] - p) < 6 * sd, ("collator", key, a[key], p)
        assert abs(b[key] - p) < 6 * sd, ("device", key, b[key], p)
        assert abs(a[key] - b[key]) < 6 * math.sqrt(2) * sd, (key, a[key], b[key])


def test_the_device_masking_has_the_collators_layout_and_never_selects_a_special_token(collator_batch):
    ids, V, theirs, ours = collator_batch
    for name, (inputs, labels) in (("collator", theirs), ("device", ours)):
        sel = labels != IGNORE_INDEX
        assert not sel[np.isin(ids, list(SPECIAL.values()))].any(), name  # [UNK] included (the authors' recipe)
        assert np.array_equal(labels[sel], ids[sel]), name  # the original id where selected, -100 elsewhere
        assert (labels[~sel] == IGNORE_INDEX).all(), name
        assert np.array_equal(inputs[~sel], ids[~sel]), name  # nothing else is touched
        assert inputs.min() >= 0 and inputs.max() < V, name
    # the random replacements cover the vocabulary evenly (mean of a uniform id in [0, V): (V - 1) / 2)
    inputs, labels = ours
    sel = labels != IGNORE_INDEX
    other = inputs[sel & (inputs != SPECIAL["mask"]) & (inputs != ids)]
    assert abs(other.mean() - (V - 1) / 2) < 6 * (V / math.sqrt(12)) / math.sqrt(other.size)


def test_the_packed_recipe_can_select_unk_but_no_other_special_token():
    ids = _documents(2000, 64, 300)
    gen = torch.Generator().manual_seed(5)
    inputs, labels = device_masks(torch.from_numpy(ids), gen, resolve_hyper("tiny"), SPECIAL, 300)
    sel = labels.numpy() != IGNORE_INDEX
    assert sel[ids == SPECIAL["unk"]].any()
    assert not sel[np.isin(ids, [SPECIAL[k] for k in ("cls", "sep", "pad", "mask")])].any()


def test_the_masks_are_keyed_by_seed_and_step_and_the_cap_keeps_the_first_selections():
    ids = torch.from_numpy(_documents(64, 32, 300))
    h = resolve_hyper("tiny")

    def draw(seed, step, chunks=1, cap=None):
        gen = torch.Generator().manual_seed(device_mask_seed(seed, step))
        return device_masks(ids, gen, h, SPECIAL, 300, chunks, cap)

    a, b = draw(0, 7), draw(0, 7)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(draw(0, 8)[1], a[1]) and not torch.equal(draw(1, 7)[1], a[1])
    capped = draw(0, 7, chunks=8, cap=3)[1] != IGNORE_INDEX  # 8 chunks of 8 rows, at most 3 selections each
    free = a[1] != IGNORE_INDEX
    assert (capped & ~free).sum() == 0
    for c_cap, c_free in zip(capped.view(8, -1), free.view(8, -1)):
        first = c_free & (c_free.cumsum(0) <= 3)
        assert torch.equal(c_cap, first)
    # the capacity: expected + 10 sd, so that a real cap never binds (256 x 512 positions: about 6.6 % above)
    assert capacity(256 * 512, 0.15) == math.ceil(0.15 * 131072 + 10 * math.sqrt(131072 * 0.15 * 0.85)) + 1
    assert capacity(10, 0.5) == 10


# ------------------------------------------------------------------------ one batch of passes vs the accumulate loop


def _step(path: str, objective: str, h, model, corpus=None) -> Step:
    """The one update of `model` fed by the host source or the device source (`path`), on the CPU, one process."""
    corpus = corpus if corpus is not None else SimpleNamespace(special_tokens=SPECIAL)
    dev = torch.device("cpu")
    if path == "host":
        source = HostBatches(corpus, h, objective, 0, dev, LossModule(model, objective))
    else:
        source = DeviceBatches(corpus, h, objective, 0, model, dev)
    return Step(model, torch.optim.AdamW(model.parameters()), h, source, dev)


def _passes_against_accumulate(objective: str, loss_mean: str, passes: int, recipe: str, attention: str) -> None:
    """One update of 4 micro-batches of 2 documents (every third padded at its end) through the host path's
    Step.accumulate (the key-padding mask) and through the device path's passes with `padded_attention` =
    `attention`, the same inputs and labels: the gradients agree to 1e-6 in fp32, the summed loss to 1e-6
    relative."""
    V, L, B = 61, 24, 8
    h = resolve_hyper(
        "tiny",
        dict(SHAPE, vocab_size=V, seq_len=L, batch_size=B, grad_accum=4, loss_mean=loss_mean, recipe=recipe)
        | dict(batch_path="device", device_passes=passes, padded_attention=attention),
    )
    blocks = _documents(B, L, V, seed=1)
    inp, lab = make_batch(blocks, objective, [[0, 0, 1, i] for i in range(B)], h, SPECIAL, V)
    real = blocks != SPECIAL["pad"]
    grads, totals = [], []
    for path in ("host", "device"):
        model = build_model("tiny", objective, "standard", 3, special_tokens=SPECIAL, _hyper=h).train()
        step = _step(path, objective, h, model)
        if path == "host":
            n = n_loss_tokens(lab, objective)
            total = step.accumulate(step.source.pieces(inp, lab, n, SPECIAL, real if recipe == "authors" else None))
        else:
            x, y = torch.from_numpy(inp), torch.from_numpy(lab)
            keys = torch.from_numpy(real) if recipe == "authors" else x != SPECIAL["pad"]
            padded = (~keys.numpy()).reshape(passes, -1).any(axis=1).tolist()
            batch = step.source.passes(x, y, keys, padded, varlen=[attention == "varlen"] * passes)
            if attention == "varlen":  # every pass is padded here: segments, or no mask for a causal one
                assert batch.keys() == ["segments" if objective == "encoder" else "none"] * passes
            assert int(batch.n_tokens) == n_loss_tokens(lab, objective)
            total = step.accumulate(batch.pieces)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        totals.append(float(total))
    assert set(grads[0]) == set(grads[1])
    for name, g in grads[0].items():
        assert float((g - grads[1][name]).abs().max()) <= 1e-6, name
    assert totals[1] == pytest.approx(totals[0], rel=1e-6)


@pytest.mark.parametrize("objective", ["encoder", "decoder-paper", "decoder"])
@pytest.mark.parametrize("loss_mean", ["tokens", "micro_batches"])
@pytest.mark.parametrize("passes", [1, 2])
@pytest.mark.parametrize("recipe", ["authors", "packed"])
def test_the_passes_give_the_accumulate_loops_gradients(objective, loss_mean, passes, recipe):
    """The masked passes (all micro-batches in one pass, or two) against the accumulate loop (measured: under 1e-7
    on the gradients). The packed recipe masks the keys that are [PAD] in the corrupted input (the host path's
    rule)."""
    _passes_against_accumulate(objective, loss_mean, passes, recipe, "mask")


# ---------------------------------------------------------------------- padded passes as segments (varlen)


@pytest.mark.parametrize("objective", ["encoder", "decoder-paper", "decoder"])
@pytest.mark.parametrize("passes", [1, 2])
def test_varlen_passes_give_the_accumulate_loops_gradients(objective, passes):
    """`padded_attention: varlen` under the authors' recipe: a bidirectional pass attends within segments, a
    causal one without a mask; the gradients are the accumulate loop's (with its key-padding mask) as the masked
    passes' are. On the CPU the segments run as a dense mask (models.segment_mask); CUDA's variable-length flash
    kernel is compared with the masked kernel by benchmarks/gpu_measure.py varlen_check."""
    _passes_against_accumulate(objective, "micro_batches", passes, "authors", "varlen")


def test_real_first_finds_the_rows_whose_padding_is_a_suffix():
    """real_first against a row-by-row reading: no [PAD] is followed by a real token."""
    rng = np.random.default_rng(5)
    is_pad = rng.random((400, 12)) < 0.3
    is_pad[::4] = False  # rows without padding
    is_pad[1::4] = np.arange(12) >= rng.integers(1, 12, size=(100, 1))  # suffix padding
    want = [not any(row[i] and not row[i + 1] for i in range(11)) for row in is_pad.tolist()]
    assert real_first(is_pad).tolist() == want
    assert 100 < sum(want) < 400  # both kinds present


@pytest.mark.parametrize("causal", [False, True])
def test_the_segments_attend_as_the_key_padding_mask_for_every_real_query(causal):
    """segment_bounds of rows with 0-11 padding positions against boundaries written out by hand, and the
    attention within its segments (segment_mask) against the key-padding mask (and the causal one): the same row
    for every real query; a padding query attends only the padding of its row."""
    L = 12
    n_real = [12, 1, 5, 11, 12, 7]
    real = torch.tensor([[i < n for i in range(L)] for n in n_real])
    bounds = segment_bounds(real)
    want = [x for b, n in enumerate(n_real) for x in (b * L, b * L + n)] + [len(n_real) * L]
    assert bounds.dtype == torch.int32 and bounds.tolist() == want
    mask = segment_mask(bounds, len(n_real), L, causal)
    for b, n in enumerate(n_real):
        for i in range(L):
            allowed = [j <= i or not causal for j in range(L)]
            if i < n:
                assert mask[b, i].tolist() == [bool(real[b, j]) and allowed[j] for j in range(L)]
            else:
                assert mask[b, i].tolist() == [j >= n and allowed[j] for j in range(L)]


def test_a_varlen_run_trains_as_the_masked_run_and_a_pass_with_inner_padding_keeps_the_mask(tmp_path):
    """An encoder run of the authors' recipe (dropout, 2 passes) with `padded_attention: varlen` trains to the
    masked run's losses up to float rounding and records the setting in run.yaml; a corpus with a [PAD] before a
    real token in one document runs that document's pass with the mask (pass_kind), the others as segments."""
    corpus = _corpus(tmp_path / "c")
    losses = []
    for name, extra in (("mask", {}), ("varlen", {"padded_attention": "varlen"})):
        cfg = load_run_config(_config(tmp_path / f"{name}.yaml", corpus, "encoder", 8, **AUTHORS_DEVICE, **extra))
        train(cfg, tmp_path / name, progress=False)
        losses.append(_train_losses(tmp_path / name / "loss.csv"))
    assert len(losses[0]) == 8
    assert losses[1] == pytest.approx(losses[0], rel=1e-6)
    hyper = yaml.safe_load((tmp_path / "varlen" / "run.yaml").read_text())["hyper"]
    assert hyper["padded_attention"] == "varlen"
    assert "padded_attention" not in yaml.safe_load((tmp_path / "mask" / "run.yaml").read_text())["hyper"]

    train_blocks = np.load(corpus / "train.npy")
    train_blocks[1, 2] = SPECIAL["pad"]  # a hole in a document that is not padded at its end
    np.save(corpus / "train.npy", train_blocks)
    h = resolve_hyper(
        "tiny", dict(SHAPE, vocab_size=128, seq_len=16, batch_size=8, **AUTHORS_DEVICE, padded_attention="varlen")
    )
    model = build_model("tiny", "encoder", "standard", 3, special_tokens=SPECIAL, _hyper=h)
    step = _step("device", "encoder", h, model, corpus=load_corpus(corpus))
    kinds = step.source.batch_passes(1, np.arange(8)).keys()  # rows 0-3 (0, 3 padded at the end; 1 with the hole)
    assert kinds == ["mask", "segments"]  # and 4-7 (6 padded at its end)
    assert pass_kind(None) == "none"


# ------------------------------------------------------------------------------------------------------ runs


def _corpus(d: Path, layout: str = "documents", V: int = 128, L: int = 16) -> Path:
    import json

    d.mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("train", 96, 0), ("heldout", 8, 1)):
        np.save(d / f"{name}.npy", _documents(n, L, V, seed).astype(np.int32))
    manifest = {"dataset": "random", "name": "random", "block_len": L, "vocab_size": V, "special_tokens": SPECIAL}
    (d / "manifest.json").write_text(json.dumps({**manifest, "layout": layout}))
    return d


def _config(path: Path, corpus: Path, objective: str, max_steps: int, **overrides) -> Path:
    cfg = {
        "corpus": str(corpus),
        "size": "tiny",
        "objective": objective,
        "seed": 0,
        "max_steps": max_steps,
        "snapshot_every": 4,
        "eval_every": 4,
        "eval_blocks": 8,
        "state_every": 4,
        "threads": 1,
        "device": "cpu",
        "overrides": {**SHAPE, "batch_size": 8, "warmup_steps": 2, "schedule": "constant", **overrides},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


AUTHORS_DEVICE = dict(
    recipe="authors",
    grad_accum=2,
    loss_mean="micro_batches",
    hidden_dropout=0.1,
    attention_dropout=0.1,
    batch_path="device",
    device_passes=2,
)


def test_a_device_run_is_reproducible_resumes_bit_for_bit_and_records_its_path(tmp_path):
    """The same device-path run twice gives the same loss.csv; one trained to step 4 and extended to 8 (masks and
    dropout keyed by the step) gives the straight run's; run.yaml records the path's settings, and a run dir of
    the host path is not continued on the device path (other settings: a fresh start)."""
    corpus = _corpus(tmp_path / "c")
    straight = load_run_config(_config(tmp_path / "a.yaml", corpus, "decoder-paper", 8, **AUTHORS_DEVICE))
    train(straight, tmp_path / "a", progress=False)
    torch.rand(100)
    train(straight, tmp_path / "b", progress=False)
    loss = (tmp_path / "a" / "loss.csv").read_text()
    assert loss == (tmp_path / "b" / "loss.csv").read_text()
    assert len(loss.splitlines()) == 10
    short = load_run_config(_config(tmp_path / "s.yaml", corpus, "decoder-paper", 4, **AUTHORS_DEVICE))
    train(short, tmp_path / "r", progress=False)
    assert train(straight, tmp_path / "r", progress=False)["status"] == "resumed"
    assert (tmp_path / "r" / "loss.csv").read_text() == loss
    hyper = yaml.safe_load((tmp_path / "a" / "run.yaml").read_text())["hyper"]
    assert (hyper["batch_path"], hyper["device_passes"]) == ("device", 2) and "capture" not in hyper
    host = {k: v for k, v in AUTHORS_DEVICE.items() if k not in ("batch_path", "device_passes")}
    host_cfg = load_run_config(_config(tmp_path / "h.yaml", corpus, "decoder-paper", 8, **host))
    assert train(host_cfg, tmp_path / "r", progress=False)["status"] == "trained"  # set aside, trained afresh


def _train_losses(path: Path) -> list[float]:
    rows = path.read_text().splitlines()[1:]
    return [float(r.split(",")[7]) for r in rows if r.split(",")[7]]


@pytest.mark.parametrize("objective", ["decoder", "classifier"])
def test_without_random_masks_the_device_path_trains_as_the_host_path(tmp_path, objective):
    """The clean decoder and the ViT draw no masks: their device-path runs see the host path's batches (the same
    data order) and train to the same losses up to float rounding."""
    if objective == "classifier":
        from attention_geometry.training.measure import write_random_images

        data = write_random_images(tmp_path / "img", image_size=8, channels=1, classes=4, n_train=64)
        vit = dict(num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32, patch_size=4, batch_size=8)
        kw = dict(size="vit-tiny", overrides=dict(vit, warmup_steps=2))
    else:
        data = _corpus(tmp_path / "c")
        kw = dict(overrides={**SHAPE, "batch_size": 8, "warmup_steps": 2, "recipe": "authors", "grad_accum": 2})
    losses = []
    for path in ("host", "device"):
        cfg = yaml.safe_load(_config(tmp_path / f"{path}.yaml", data, objective, 8).read_text())
        cfg.update(kw, run=f"r-{path}")
        if path == "device":
            cfg["overrides"] = {**cfg["overrides"], "batch_path": "device", "device_passes": 2}
        (tmp_path / f"{path}.yaml").write_text(yaml.safe_dump(cfg))
        train(load_run_config(tmp_path / f"{path}.yaml"), tmp_path / path, progress=False)
        losses.append(_train_losses(tmp_path / path / "loss.csv"))
    assert len(losses[0]) == 8
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)


def test_one_compile_setting_for_both_paths():
    """Issue 57.1: `capture` is the one compile setting. On the host path `capture: compile` compiles the
    transformer stack (run.yaml's `compile`, which every run.yaml records, is derived from it); on the device path
    it compiles the whole pass; `compile` itself is refused with the new name (tested below)."""
    host = resolve_hyper("tiny", {"capture": "compile"})
    assert host.compile is True and host.capture == "compile"
    device = resolve_hyper("tiny", {"batch_path": "device", "capture": "compile"})
    assert device.compile is False and device.capture == "compile"
    assert resolve_hyper("tiny", {}).compile is False


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"device_passes": 2}, r"overrides\.device_passes: only the device path reads it"),
        ({"batch_path": "device", "compile": True}, r"overrides\.compile: renamed: give `capture: compile`"),
        ({"compile": True}, r"overrides\.compile: renamed: give `capture: compile`"),
        ({"capture": "cuda-graphs"}, r"overrides\.capture: cuda-graphs only on the device path"),
        ({"batch_path": "device", "device_passes": 3}, r"overrides\.device_passes: batch_size 8 is not a multiple"),
        ({"batch_path": "gpu"}, r"overrides\.batch_path: unknown value 'gpu'"),
        ({"padded_attention": "varlen"}, r"overrides\.padded_attention: only the device path reads it"),
        ({"batch_path": "device", "padded_attention": "flash"}, r"overrides\.padded_attention: unknown value 'flash'"),
    ],
)
def test_the_device_settings_are_checked_before_anything_is_written(tmp_path, overrides, match):
    cfg = _config(tmp_path / "x.yaml", _corpus(tmp_path / "c"), "encoder", 4, **overrides)
    with pytest.raises(UserError, match=match):
        load_run_config(cfg)


def test_cuda_graphs_need_a_cuda_device(tmp_path):
    cfg = _config(
        tmp_path / "x.yaml", _corpus(tmp_path / "c"), "encoder", 4, batch_path="device", capture="cuda-graphs"
    )
    with pytest.raises(UserError, match=r"^overrides\.capture: cuda-graphs needs a CUDA device and one process"):
        train(load_run_config(cfg), tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_two_ddp_processes_train_as_one(tmp_path):
    """Under torchrun (2 gloo processes) the device path draws the global batch's masks on each process and takes
    its slice: the same losses as one process (within float summation order). loss_mean tokens: under
    micro_batches the micro-batches themselves change with the processes (batch_size / processes / grad_accum
    sequences each), on either path."""
    import os
    import subprocess
    import sys

    overrides = {k: v for k, v in AUTHORS_DEVICE.items() if "dropout" not in k} | {"loss_mean": "tokens"}
    cfg = _config(tmp_path / "run.yaml", _corpus(tmp_path / "c"), "decoder-paper", 8, **overrides)
    train(load_run_config(cfg), tmp_path / "one", progress=False)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "attention_geometry.cli", "train", "--config", str(cfg), "--out", str(tmp_path / "two")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [*cmd, "--no-progress", "--device", "cpu"], capture_output=True, text=True, timeout=300, env=env
    )
    assert res.returncode == 0, res.stderr[-3000:]
    one, two = (_train_losses(tmp_path / d / "loss.csv") for d in ("one", "two"))
    assert len(one) == 8 and two == pytest.approx(one, rel=1e-4)


@pytest.mark.slow
def test_compiled_passes_train_as_eager_ones(tmp_path):
    """`capture: compile` (torch.compile of the whole pass; on this CPU about 40 s of compiling, passes with and
    without an attention mask) trains to the eager passes' losses (measured: equal to 1e-7)."""
    corpus = _corpus(tmp_path / "c")
    overrides = {k: v for k, v in AUTHORS_DEVICE.items() if "dropout" not in k}
    losses = []
    for capture in ("eager", "compile"):
        cfg = _config(tmp_path / f"{capture}.yaml", corpus, "decoder-paper", 6, **overrides, capture=capture)
        train(load_run_config(cfg), tmp_path / capture, progress=False)
        losses.append(_train_losses(tmp_path / capture / "loss.csv"))
    assert len(losses[0]) == 6 and losses[1] == pytest.approx(losses[0], rel=1e-5)
