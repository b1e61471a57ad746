"""SymmetryCallback in a real transformers Trainer run (a tiny random BERT, a tiny in-memory dataset, CPU) with
report_to tensorboard: the event files, read back with TensorBoard's own EventAccumulator, hold s and d per layer
and their medians at the callback's steps, equal to a float64 computation from the trained model's q/k weights.
symmetry_logs on other families (grouped-query, GPT-2's Conv1D, an encoder-decoder) agrees with score_model."""

from __future__ import annotations

import glob
import math
import os

import pytest
import torch
from test_families_cli import NEW_FAMILIES
from test_tools_inits import _built

from attention_geometry.errors import UserError
from attention_geometry.scoring.scorer import score_model
from attention_geometry.tools.callback import SymmetryCallback, symmetry_logs
from attention_geometry.tools.inits import symmetric_init


def _reference_symmetry(q: torch.Tensor, k: torch.Tensor) -> float:
    M = q.double().t() @ k.double()
    sym, anti = (M + M.t()) / 2, (M - M.t()) / 2
    return float((sym.norm() ** 2 - anti.norm() ** 2) / M.norm() ** 2)


class _Blocks(torch.utils.data.Dataset):
    def __init__(self, n: int = 16, seq: int = 12, vocab: int = 60):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(5, vocab, (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.ids[i]}


def test_trainer_run_writes_symmetry_to_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers import BertConfig, BertForMaskedLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=60)
    model = symmetric_init(BertForMaskedLM(cfg), "symmetric")
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=6,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        logging_steps=100,  # the trainer's own logging would not fall on steps 2 and 4: the callback forces them
        report_to=["tensorboard"],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    callback = SymmetryCallback(every=2)
    trainer = Trainer(model=model, args=args, train_dataset=_Blocks(), callbacks=[callback])
    assert trainer.callback_handler.callbacks[0] is callback  # before the reporters, which read the same logs
    trainer.train()

    events = glob.glob(str(tmp_path / "out" / "**" / "events.out.tfevents.*"), recursive=True)
    assert len(events) == 1, events
    acc = EventAccumulator(os.path.dirname(events[0]))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    per_layer = [f"train/{m}/encoder/layer_{i:02d}" for m in ("symmetry", "directionality") for i in range(2)]
    medians = ["train/symmetry/encoder/median", "train/directionality/encoder/median"]
    assert set(per_layer + medians) <= tags, sorted(tags)
    for tag in per_layer + medians:
        assert [e.step for e in acc.Scalars(tag)] == [2, 4, 6], tag
    # the step-6 values are those of the trained weights (float64 from the model's own q/k parameters)
    for i, layer in enumerate(trainer.model.bert.encoder.layer):
        att = layer.attention.self
        want = _reference_symmetry(att.query.weight.detach(), att.key.weight.detach())
        got = acc.Scalars(f"train/symmetry/encoder/layer_{i:02d}")[-1].value
        assert got == pytest.approx(want, abs=1e-6)  # TensorBoard stores float32
        assert got < 1 - 1e-6  # training moved W_qk away from the symmetric init
    first = acc.Scalars("train/symmetry/encoder/median")[0].value
    assert 0.5 < first < 1
    # the same values are in the Trainer's own log history
    logged = [h for h in trainer.state.log_history if "symmetry/encoder/median" in h]
    assert [h["step"] for h in logged] == [2, 4, 6]


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "t5", "albert", *NEW_FAMILIES])
def test_symmetry_logs_agree_with_the_scorer(model_type):
    model, _ = _built(model_type)
    logs = symmetry_logs(model)
    df = score_model(model, progress=False)
    for (comp, layer), row in df.set_index(["component", "layer"]).iterrows():
        assert logs[f"symmetry/{comp}/layer_{layer:02d}"] == pytest.approx(row["symmetry"], abs=1e-12)
        assert logs[f"directionality/{comp}/layer_{layer:02d}"] == pytest.approx(row["directionality"], abs=1e-12)
    for comp, g in df.groupby("component"):
        assert logs[f"symmetry/{comp}/median"] == pytest.approx(g["symmetry"].median(), abs=1e-12)
    assert all(isinstance(v, float) for v in logs.values())


def test_bad_settings_are_one_line():
    with pytest.raises(UserError, match="every must be an integer >= 1"):
        SymmetryCallback(every=0)
    with pytest.raises(UserError, match="num_std must be"):
        SymmetryCallback(num_std=-1)


def test_symmetry_logs_of_a_meta_model_is_one_clear_error():
    model, _ = _built("bert")
    with torch.device("meta"):
        meta = type(model)(model.config)
    with pytest.raises(UserError, match=r"^symmetry_logs: .* is on the meta device"):
        symmetry_logs(meta)


def _train_with(model, tmp_path, callback, steps=4):
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=4, learning_rate=1e-3,
        logging_steps=100, report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, seed=0,
    )  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=_Blocks(), callbacks=[callback])
    trainer.train()
    return trainer


def test_an_undefined_layer_logs_nan_and_training_goes_on(tmp_path):
    """A frozen zero-init query makes layer 0's W_qk all zeros: its scores are NaN in the logs (they raised and
    ended training before), layer 1's are numbers, and the run reaches its last step."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=60)
    model = BertForMaskedLM(cfg)
    query = model.bert.encoder.layer[0].attention.self.query
    with torch.no_grad():
        query.weight.zero_()
    query.weight.requires_grad_(False)
    trainer = _train_with(model, tmp_path, callback := SymmetryCallback(every=2))
    assert trainer.state.global_step == 4 and callback.off is None
    logged = [h for h in trainer.state.log_history if "symmetry/encoder/layer_00" in h]
    assert [h["step"] for h in logged] == [2, 4]
    assert all(math.isnan(h["symmetry/encoder/layer_00"]) for h in logged)
    assert all(math.isfinite(h["symmetry/encoder/layer_01"]) for h in logged)
    assert logged[-1]["symmetry/encoder/median"] == logged[-1]["symmetry/encoder/layer_01"]
    with pytest.raises(UserError, match="encoder layer 0: matrix is all zeros"):
        symmetry_logs(model)  # outside a Trainer the default still says why


def test_an_unsupported_family_turns_the_callback_off_with_one_warning(tmp_path):
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    model = MambaForCausalLM(MambaConfig(vocab_size=60, hidden_size=16, state_size=4, num_hidden_layers=1))
    callback = SymmetryCallback(every=2)
    with pytest.warns(UserWarning, match="SymmetryCallback: cannot score this model .*turns itself off"):
        trainer = _train_with(model, tmp_path, callback)
    assert trainer.state.global_step == 4 and callback.off
    assert not any("symmetry/decoder/median" in h for h in trainer.state.log_history)


def test_the_callback_never_ends_training_under_warnings_as_errors(tmp_path, caplog):
    """Issue 59.7: under `-W error` (pytest's `filterwarnings = error`), turning itself off used to raise its own
    warning as an exception and end the training it watched; now the message goes to transformers' logger."""
    import warnings

    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    model = MambaForCausalLM(MambaConfig(vocab_size=60, hidden_size=16, state_size=4, num_hidden_layers=1))
    callback = SymmetryCallback(every=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=DeprecationWarning)  # the libraries' own, not the callback's
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*(fast path|cuda|kernels).*")
        trainer = _train_with(model, tmp_path, callback)
    assert trainer.state.global_step == 4 and callback.off


def test_non_finite_weights_are_one_error_naming_them_and_turn_the_callback_off(tmp_path):
    """symmetry_logs' docstring and behaviour agree (issue 59, LOW): NaN weights are a UserError naming them, with
    undefined="nan" too; in a Trainer the callback turns itself off with one warning and training goes on."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=60)
    model = BertForMaskedLM(cfg)
    with torch.no_grad():
        model.bert.encoder.layer[0].attention.self.query.weight.fill_(float("nan"))
    with pytest.raises(UserError, match="query weights .* contain NaN or Inf"):
        symmetry_logs(model, undefined="nan")
    assert "NaN or Inf after a divergence" in symmetry_logs.__doc__.replace("\n    ", " ")


# ---------------------------------------------------------------------------------------- the OV circuit


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "t5", "bert"])
def test_symmetry_logs_of_the_ov_circuit_agree_with_the_scorer(model_type):
    """matrix="both": the W_qk keys as before plus `symmetry_ov/...`, `directionality_ov/...` per layer and their
    medians, equal to score_model(matrix="both")'s OV rows; the default logs no OV key."""
    model, _ = _built(model_type)
    logs = symmetry_logs(model, matrix="both")
    df = score_model(model, progress=False, matrix="both")
    assert {k: v for k, v in logs.items() if "_ov/" not in k} == pytest.approx(symmetry_logs(model))
    assert not any("_ov/" in k for k in symmetry_logs(model))
    ov = df[df.matrix == "ov"]
    assert len(ov) == len(df) // 2
    for (comp, layer), row in ov.set_index(["component", "layer"]).iterrows():
        assert logs[f"symmetry_ov/{comp}/layer_{layer:02d}"] == pytest.approx(row["symmetry"], abs=1e-12)
        assert logs[f"directionality_ov/{comp}/layer_{layer:02d}"] == pytest.approx(row["directionality"], abs=1e-12)
    for comp, g in ov.groupby("component"):
        assert logs[f"symmetry_ov/{comp}/median"] == pytest.approx(g["symmetry"].median(), abs=1e-12)
        assert logs[f"directionality_ov/{comp}/median"] == pytest.approx(g["directionality"].median(), abs=1e-12)
    only_ov = symmetry_logs(model, matrix="ov")
    assert only_ov == pytest.approx({k: v for k, v in logs.items() if "_ov/" in k})


def test_the_callback_logs_the_ov_circuit_in_a_trainer_run(tmp_path):
    """SymmetryCallback(matrix="both") puts W_qk's and the OV circuit's values in the Trainer's logs at its steps;
    the step-4 OV values are those of the trained W_o W_v (float64 from the model's own weights)."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=60)
    trainer = _train_with(BertForMaskedLM(cfg), tmp_path, callback := SymmetryCallback(every=2, matrix="both"))
    assert callback.off is None and callback.matrix == ("qk", "ov")
    logged = [h for h in trainer.state.log_history if "symmetry_ov/encoder/median" in h]
    assert [h["step"] for h in logged] == [2, 4] and all("symmetry/encoder/median" in h for h in logged)
    for i, layer in enumerate(trainer.model.bert.encoder.layer):
        M = layer.attention.output.dense.weight.detach().double() @ layer.attention.self.value.weight.detach().double()
        sym, anti = (M + M.t()) / 2, (M - M.t()) / 2
        want = float((sym.norm() ** 2 - anti.norm() ** 2) / M.norm() ** 2)
        assert logged[-1][f"symmetry_ov/encoder/layer_{i:02d}"] == pytest.approx(want, abs=1e-12)
    with pytest.raises(UserError, match="matrix="):
        SymmetryCallback(matrix="vo")


# ------------------------------------------------------------------------------- adapters (PEFT / LoRA)


def _lora_bert(in_place: bool):
    """A tiny BERT with LoRA on query and key (B drawn at random, so the adapters change W_qk), wrapped by
    get_peft_model or injected in place (peft's inject_adapter_in_model: the model keeps its class)."""
    peft = pytest.importorskip("peft")
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=60)
    base = BertForMaskedLM(cfg)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["query", "key"], init_lora_weights=False)
    if in_place:
        return peft.inject_adapter_in_model(lora, base)
    return peft.get_peft_model(base, lora)


@pytest.mark.parametrize("in_place", [False, True])
def test_a_lora_model_is_scored_with_its_adapters_merged(in_place, tmp_path):
    """A LoRA model (LoraConfig on query and key) crashed the callback ("no tensor named ...query.weight"): its
    layers are scored as they compute, W + B A * scaling, checked against peft's own merge (merge_and_unload on a
    copy, then the reference computation from the merged q and k weights); the base weights alone give other
    scores; the callback measures it in a Trainer run."""
    import copy

    model = _lora_bert(in_place)
    logs = symmetry_logs(model)
    if in_place:
        merged = copy.deepcopy(model)
        attention = [lay.attention.self for lay in merged.bert.encoder.layer]
        for a in attention:
            a.query.merge(), a.key.merge()  # peft's own merge, into the base layers
        weights = [(a.query.base_layer.weight, a.key.base_layer.weight) for a in attention]
        assert symmetry_logs(merged) == pytest.approx(logs, abs=1e-12)  # a merged adapter is not added twice
    else:
        merged = copy.deepcopy(model).merge_and_unload()
        weights = [(a.query.weight, a.key.weight) for a in (lay.attention.self for lay in merged.bert.encoder.layer)]
    base = model.base_model.model if not in_place else model
    for i, (q, k) in enumerate(weights):
        want = _reference_symmetry(q.detach(), k.detach())
        assert logs[f"symmetry/encoder/layer_{i:02d}"] == pytest.approx(want, abs=1e-9)
        a = base.bert.encoder.layer[i].attention.self
        alone = _reference_symmetry(a.query.base_layer.weight.detach(), a.key.base_layer.weight.detach())
        assert abs(alone - want) > 1e-3  # the adapters matter: reading the base weights alone would fail
    trainer = _train_with(model, tmp_path, callback := SymmetryCallback(every=2))
    assert callback.off is None and trainer.state.global_step == 4
    assert [h["step"] for h in trainer.state.log_history if "symmetry/encoder/median" in h] == [2, 4]
