"""What docs/python-api.md and the README say of SymmetryCallback's logs beside TensorBoard (tested in
test_tools_callback.py): transformers has no CSV reporter, and the documented route to a table, the Trainer's
log history read into pandas, holds the callback's values at its steps (equal to a float64 computation from the
trained q/k weights) and survives a CSV round trip."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, Trainer, TrainingArguments

from attention_geometry.tools.callback import SymmetryCallback
from attention_geometry.tools.inits import symmetric_init


def test_there_is_no_csv_reporter(tmp_path):
    cfg = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=60)
    args = TrainingArguments(str(tmp_path / "out"), report_to="csv", use_cpu=True)
    with pytest.raises(ValueError, match="csv is not supported"):
        Trainer(model=BertForMaskedLM(cfg), args=args, callbacks=[SymmetryCallback()])


def test_the_log_history_in_pandas_is_the_table(tmp_path):
    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=60)
    model = symmetric_init(BertForMaskedLM(cfg), "symmetric")
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(5, 60, (16, 8))]
    args = TrainingArguments(
        str(tmp_path / "out"),
        max_steps=5,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        logging_steps=100,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[SymmetryCallback(every=2)])
    trainer.train()
    # the documented line
    pd.DataFrame(trainer.state.log_history).to_csv(tmp_path / "symmetry.csv", index=False)
    table = pd.read_csv(tmp_path / "symmetry.csv")
    rows = table.dropna(subset=["symmetry/encoder/median"])
    assert rows["step"].tolist() == [2, 4, 5]  # every 2 steps and the last, though logging_steps is 100
    last = rows.iloc[-1]
    for i, layer in enumerate(trainer.model.bert.encoder.layer):
        att = layer.attention.self
        M = att.query.weight.detach().double().t() @ att.key.weight.detach().double()
        sym, anti = (M + M.t()) / 2, (M - M.t()) / 2
        want = float((sym.norm() ** 2 - anti.norm() ** 2) / M.norm() ** 2)
        assert last[f"symmetry/encoder/layer_{i:02d}"] == pytest.approx(want, abs=1e-12)
