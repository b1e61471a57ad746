"""The authors' objectives against the library they trained with: transformers' `Trainer` computing the loss of
`DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)` batches for `BertForMaskedLM` (encoder) and
`BertLMHeadModel` (the paper's decoder, which sees the same masking collator's batch). Our training forward
(`lm_loss` with objective `encoder` / `decoder-paper`) must give the same loss and gradients on the same batch,
and our own batches must follow the collator's rules (what is selected, how it is corrupted, which labels)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attention_geometry.training.batches import IGNORE_INDEX, make_batch, n_loss_tokens
from attention_geometry.training.hyper import resolve_hyper
from attention_geometry.training.models import build_model, lm_loss

torch.set_num_threads(1)

# real sentences (Wikipedia-style openings), padded to one length as the authors' tokenization does
DOCS = [
    "The cat sat on the mat while the dog slept by the door.",
    "A river is a natural stream of water that flows toward an ocean, a lake or another river.",
    "Paris is the capital of France.",
    "The quick brown fox jumps over the lazy dog near the river bank in the morning.",
]
WORDS = sorted({w.strip(".,").lower() for d in DOCS for w in d.split()} | {",", "."})
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import BertTokenizerFast

    return BertTokenizerFast(vocab={w: i for i, w in enumerate(SPECIALS + WORDS)}, do_lower_case=True)


def _collated(tokenizer, seed: int):
    from transformers import DataCollatorForLanguageModeling

    enc = tokenizer(DOCS, truncation=True, padding="max_length", max_length=24)
    features = [{k: enc[k][i] for k in ("input_ids", "attention_mask")} for i in range(len(DOCS))]
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, seed=seed)
    return collator(features)


def _trainer_loss_and_grads(model, batch):
    """The loss and gradients that transformers' Trainer computes for one batch (its compute_loss)."""
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir="unused",
        per_device_train_batch_size=len(DOCS),
        learning_rate=5e-5,
        weight_decay=0.01,
        warmup_steps=200,
        max_steps=200_000,
        report_to=[],
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args)
    model.zero_grad()
    loss = trainer.compute_loss(model, dict(batch))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("objective", ["encoder", "decoder-paper"])
@pytest.mark.parametrize("seed", [0, 1])
def test_our_loss_and_gradients_equal_the_trainers_on_the_collators_batch(tokenizer, objective, seed):
    batch = _collated(tokenizer, seed)
    labels = batch["labels"]
    assert int((labels != IGNORE_INDEX).sum()) > 0
    kw = dict(num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64, vocab_size=len(tokenizer))
    stock = build_model("tiny", objective, "standard", seed=3, special_tokens={"pad": tokenizer.pad_token_id}, **kw)
    ours = build_model("tiny", objective, "standard", seed=3, special_tokens={"pad": tokenizer.pad_token_id}, **kw)
    stock.train(), ours.train()  # dropout is 0 in our sizes: train mode changes nothing but is what both run
    ref_loss, ref_grads = _trainer_loss_and_grads(stock, batch)

    ours.zero_grad()
    loss = lm_loss(ours, batch["input_ids"], labels, objective, pad_id=tokenizer.pad_token_id, reduction="mean")
    loss.backward()
    assert loss.item() == pytest.approx(ref_loss.item(), abs=1e-6)
    grads = {n: p.grad for n, p in ours.named_parameters() if p.grad is not None}
    assert set(grads) == set(ref_grads)
    for n in grads:
        torch.testing.assert_close(grads[n], ref_grads[n], atol=1e-6, rtol=1e-5, msg=n)


def test_the_paper_decoder_is_scored_only_where_the_next_position_was_selected(tokenizer):
    """BertLMHeadModel shifts labels by one: position i is scored on labels[i + 1]; under the masking
    collator that is the original token of a selected position, predicted from the corrupted prefix."""
    batch = _collated(tokenizer, 0)
    kw = dict(num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32, vocab_size=len(tokenizer))
    m = build_model("tiny", "decoder-paper", "standard", seed=0, **kw).eval()
    with torch.no_grad():
        logits = m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        lab = batch["labels"]
        sel = lab[:, 1:] != IGNORE_INDEX
        ref = torch.nn.functional.cross_entropy(logits[:, :-1][sel], lab[:, 1:][sel], reduction="sum")
        mine = lm_loss(m, batch["input_ids"], lab, "decoder-paper", pad_id=tokenizer.pad_token_id)
    assert mine.item() == pytest.approx(ref.item(), rel=1e-6)
    assert n_loss_tokens(lab.numpy(), "decoder-paper") == int(sel.sum())


def test_our_paper_decoder_batches_follow_the_collators_rules():
    """Our decoder-paper batch is the encoder's masking (BERT's 80/10/10 corruption of a mlm_probability
    selection that never picks [CLS]/[SEP]/[PAD]/[MASK]) at the authors' 15 %; the clean `decoder` is not."""
    special = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    rng = np.random.default_rng(0)
    n, L, V = 4000, 32, 300
    ids = rng.integers(5, V, size=(n, L))
    ids[:, 0], ids[:, -1] = special["cls"], special["sep"]
    keys = [[5, 0, 1, i] for i in range(n)]
    h = resolve_hyper("tiny")  # mlm_probability 0.15, the collator's default and the authors' value
    inp, lab = make_batch(ids, "decoder-paper", keys, h, special, V)
    enc_inp, enc_lab = make_batch(ids, "encoder", keys, h, special, V)
    assert np.array_equal(inp, enc_inp) and np.array_equal(lab, enc_lab)
    sel = lab != IGNORE_INDEX
    assert not sel[:, 0].any() and not sel[:, -1].any()
    rate = sel.sum() / (n * (L - 2))  # binomial sd ~0.0004 over 120k positions
    assert abs(rate - 0.15) < 0.003
    assert abs((inp[sel] == special["mask"]).mean() - 0.8) < 0.01
    dec_inp, dec_lab = make_batch(ids, "decoder", None, h, special, V)
    assert np.array_equal(dec_inp, ids) and np.array_equal(dec_lab, ids)


# ------------------------------------------------------------------------ the authors' recipe, one update


def _authors_hyper(vocab_size: int, loss_mean: str, **kw):
    """The authors' optimization (train.py's TrainingArguments and the Trainer's defaults) on a tiny BERT."""
    return resolve_hyper(
        "tiny",
        dict(
            num_layers=2,
            hidden_size=32,
            num_heads=2,
            intermediate_size=64,
            vocab_size=vocab_size,
            recipe="authors",
            weight_decay_params="trainer",
            loss_mean=loss_mean,
            lr=5e-5,
            betas=[0.9, 0.999],
            eps=1e-8,
            weight_decay=0.01,
            grad_clip=1.0,
            warmup_steps=200,
            max_steps=200_000,
            schedule="trainer-linear",
            **kw,
        ),
    )


def _authors_args(out, **kw):
    from transformers import TrainingArguments

    # train.py's arguments; fp16=True there (a GPU): fp32 on this CPU, where the comparison is exact
    base = dict(
        output_dir=str(out),
        max_steps=200_000,
        per_device_train_batch_size=32,
        gradient_accumulation_steps=8,
        warmup_steps=200,
        weight_decay=0.01,
        learning_rate=5e-5,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
    )
    return TrainingArguments(**{**base, **kw})


def _our_step(model, objective: str, h, pad: int):
    """Our one update (training/step.Step) of `model` fed by the host source: one process on the CPU, fp32."""
    from types import SimpleNamespace

    from attention_geometry.training.step import HostBatches, LossModule, Step

    dev = torch.device("cpu")
    corpus = SimpleNamespace(special_tokens={"pad": pad})
    source = HostBatches(corpus, h, objective, 0, dev, LossModule(model, objective))
    return Step(model, torch.optim.AdamW(model.parameters()), h, source, dev)


@pytest.mark.parametrize(
    "objective, loss_mean",
    [("encoder", "micro_batches"), ("decoder-paper", "micro_batches"), ("decoder-paper", "tokens")],
)
def test_one_update_of_the_authors_recipe_equals_the_trainers(tokenizer, tmp_path, objective, loss_mean):
    """One optimizer update of 2 micro-batches of 2 padded documents: transformers' Trainer (train() for one
    step, the collator's batches recorded, the gradient read after its clipping, before its optimizer step)
    against our Step.accumulate and clipping on the same batches, under recipe authors. `micro_batches` is the
    Trainer of transformers 4.39.1 (the authors' pin), which divided each micro-batch's mean by the
    accumulation steps: the installed Trainer with model_accepts_loss_kwargs off takes that path. `tokens` is the
    installed Trainer as it is for BertLMHeadModel, whose loss takes num_items_in_batch (the token mean over the
    update). The installed Trainer's encoder is neither: BertForMaskedLM accepts **kwargs but ignores
    num_items_in_batch, so the Trainer neither counts nor divides, and sums the micro-batch means."""
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback

    enc = tokenizer(DOCS, truncation=True, padding="max_length", max_length=24)
    features = [{k: enc[k][i] for k in ("input_ids", "attention_mask")} for i in range(len(DOCS))]
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, seed=7)
    seen = []

    def recording(examples):
        batch = collator(examples)
        seen.append({k: v.clone() for k, v in batch.items()})
        return batch

    grads = {}

    class Grab(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
            grads.update({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})

    V, pad = len(tokenizer), tokenizer.pad_token_id
    h = _authors_hyper(V, loss_mean, batch_size=4, grad_accum=2, per_device_batch_size=2)
    kw = dict(num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64, vocab_size=V)
    stock = build_model("tiny", objective, "standard", seed=3, special_tokens={"pad": pad}, **kw)
    ours = build_model("tiny", objective, "standard", seed=3, special_tokens={"pad": pad}, **kw)
    args = _authors_args(tmp_path, max_steps=1, per_device_train_batch_size=2, gradient_accumulation_steps=2)
    trainer = Trainer(model=stock, args=args, train_dataset=features, data_collator=recording, callbacks=[Grab()])
    if loss_mean == "micro_batches":
        trainer.model_accepts_loss_kwargs = False
    trainer.train()
    assert len(seen) == 2 and grads
    # the update's loss as the Trainer's compute_loss gives it on each recorded micro-batch (train()'s logged
    # training_loss is another, reporting, scale); the first update's learning rate is 0, so the weights are
    # still the initial ones
    n_items = sum(
        int((b["labels"][:, 1:] if objective == "decoder-paper" else b["labels"]).ne(-100).sum()) for b in seen
    )
    with torch.no_grad():
        if loss_mean == "tokens":
            ref_loss = sum(trainer.compute_loss(stock, dict(b), num_items_in_batch=n_items).item() for b in seen)
        else:
            ref_loss = sum(trainer.compute_loss(stock, dict(b)).item() for b in seen) / len(seen)

    inp = torch.cat([b["input_ids"] for b in seen]).numpy()
    lab = torch.cat([b["labels"] for b in seen]).numpy()
    real = torch.cat([b["attention_mask"] for b in seen]).numpy().astype(bool)
    n_tokens = n_loss_tokens(lab, objective)
    step = _our_step(ours, objective, h, pad)
    ours.train()
    total = step.accumulate(step.source.pieces(inp, lab, n_tokens, {"pad": pad}, real))
    torch.nn.utils.clip_grad_norm_(ours.parameters(), h.grad_clip)
    if loss_mean == "tokens":
        loss = total.item() / n_tokens
    else:
        with torch.no_grad():
            loss = (
                sum(
                    lm_loss(
                        ours, torch.from_numpy(inp[a : a + 2]), torch.from_numpy(lab[a : a + 2]), objective, pad, "mean"
                    )
                    for a in (0, 2)
                ).item()
                / 2
            )
    assert loss == pytest.approx(ref_loss, abs=1e-6)
    mine = {n: p.grad for n, p in ours.named_parameters() if p.grad is not None}
    assert set(mine) == set(grads)
    for n in mine:
        torch.testing.assert_close(mine[n], grads[n], atol=1e-6, rtol=1e-5, msg=n)


# the schedule is stepped alone to read its learning rates, so torch's warning that no optimizer step came first is
# expected here
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")
def test_the_authors_schedule_and_param_groups_are_the_trainers(tokenizer, tmp_path):
    """The Trainer's own scheduler and AdamW (create_optimizer_and_scheduler under train.py's arguments) against
    lr_at and our optimizer under recipe authors: the learning rate of the update after scheduler step s, s in
    0, 100, 200, 1000 and the last, and which parameters are decayed, with the same AdamW settings."""
    from transformers import Trainer

    from attention_geometry.training.batches import lr_at
    from attention_geometry.training.step import build_optimizer

    h = _authors_hyper(len(tokenizer), "micro_batches", fused_optimizer="fused")
    for objective in ("encoder", "decoder-paper"):
        model = build_model("tiny", objective, "standard", seed=0, special_tokens={"pad": 0}, _hyper=h)
        trainer = Trainer(model=model, args=_authors_args(tmp_path))
        trainer.create_optimizer_and_scheduler(num_training_steps=200_000)
        sched, opt = trainer.lr_scheduler, trainer.optimizer
        done = 0
        for s in (0, 100, 200, 1000, 199_999):
            for _ in range(s - done):
                sched.step()
            done = s
            assert lr_at(h, s + 1) == pytest.approx(sched.get_last_lr()[0], rel=1e-12, abs=1e-20), s
        assert lr_at(h, 1) == 0.0 and lr_at(h, 201) == 5e-5 and lr_at(h, 200_001) == 0.0
        ours = build_optimizer(model, h)
        for group in (ours, opt):
            assert [g["weight_decay"] for g in group.param_groups] == [0.01, 0.0]
        for g_ours, g_ref in zip(ours.param_groups, opt.param_groups):
            assert {id(p) for p in g_ours["params"]} == {id(p) for p in g_ref["params"]}
            for key in ("betas", "eps"):
                assert tuple(np.atleast_1d(g_ours[key])) == tuple(np.atleast_1d(g_ref[key])), key
        assert opt.defaults.get("fused") is True  # the installed Trainer's default optim, adamw_torch_fused
        # for BERT the Trainer's selection (no bias, no LayerNorm) is ours by dimension (>= 2-d) too
        ndim = build_optimizer(model, resolve_hyper("tiny", {"weight_decay_params": "ndim"}))
        assert [{id(p) for p in g["params"]} for g in ndim.param_groups] == [
            {id(p) for p in g["params"]} for g in ours.param_groups
        ]
