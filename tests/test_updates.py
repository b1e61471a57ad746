"""attention_geometry.scoring.updates: the implicit gradient dL/dW_qk against autograd on an explicitly
reparametrized model, the applied updates against an independent computation, the held-out batches (the
trainer's masking rule and fields), the CLI and the figure notebook."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from helpers import SPECIAL
from helpers import TOY_VOCAB as VOCAB
from helpers import tiny_bert as tiny_model
from helpers import token_blocks as blocks
from helpers import toy_manifest as manifest
from helpers import write_heldout_corpus as write_corpus
from helpers import write_snapshot_run as write_run
from safetensors.torch import load_file

from attention_geometry.cli import main
from attention_geometry.errors import UserError
from attention_geometry.formats.columns import UPDATE_COLUMNS
from attention_geometry.formats.corpus import Corpus, load_corpus
from attention_geometry.scoring import updates as U
from attention_geometry.scoring.measures import scores

ROOT = Path(__file__).resolve().parents[1]


def corpus_obj(heldout: np.ndarray) -> Corpus:
    return Corpus(Path("toy"), manifest(heldout), heldout[:2], heldout)


# ---------------------------------------------------------------- the reference: explicit W_qk parameters


class ExplicitQKAttention(torch.nn.Module):
    """BERT self-attention rewritten with one explicit parameter M_h = W_q,h^T W_k,h per head:
    logit_h,ij = c (x_i^T M_h x_j + x_i^T u_h + v_h^T x_j + b_q,h . b_k,h), c = 1/sqrt(d_head),
    u_h = W_q,h^T b_k,h, v_h = W_k,h^T b_q,h. Same function as the original, different parameters."""

    def __init__(self, orig):
        super().__init__()
        H, dh = orig.num_attention_heads, orig.attention_head_size
        d = orig.query.weight.shape[1]
        wq = orig.query.weight.detach().reshape(H, dh, d)
        wk = orig.key.weight.detach().reshape(H, dh, d)
        bq = orig.query.bias.detach().reshape(H, dh)
        bk = orig.key.bias.detach().reshape(H, dh)
        self.H, self.dh = H, dh
        self.M = torch.nn.Parameter(torch.einsum("hed,hef->hdf", wq, wk).clone())
        self.u = torch.nn.Parameter(torch.einsum("hed,he->hd", wq, bk).clone())
        self.v = torch.nn.Parameter(torch.einsum("hed,he->hd", wk, bq).clone())
        self.register_buffer("c0", (bq * bk).sum(-1).clone())
        self.value = copy.deepcopy(orig.value)

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        x = hidden_states
        B, T, _ = x.shape
        bil = torch.einsum("bid,hdf,bjf->bhij", x, self.M, x)
        a = (
            bil
            + torch.einsum("bid,hd->bhi", x, self.u)[..., None]
            + torch.einsum("bjd,hd->bhj", x, self.v)[:, :, None, :]
        )
        a = (a + self.c0[None, :, None, None]) / math.sqrt(self.dh)
        if attention_mask is not None:
            if attention_mask.dtype == torch.bool:
                a = a.masked_fill(~attention_mask, torch.finfo(a.dtype).min)
            else:
                a = a + attention_mask
        p = torch.softmax(a, dim=-1)
        val = self.value(x).reshape(B, T, self.H, self.dh).transpose(1, 2)
        return (p @ val).transpose(1, 2).reshape(B, T, self.H * self.dh), p


def reference_loss(logits, labels, objective):
    """Mean over the labelled positions of -log p(target); decoder: position t predicts token t + 1."""
    logp = torch.log_softmax(logits, dim=-1)
    if objective == "decoder":
        logp, labels = logp[:, :-1], labels[:, 1:]
    keep = labels != -100
    return -logp[keep].gather(-1, labels[keep][:, None]).mean()


def explicit_copy(model):
    ref = copy.deepcopy(model)
    for layer in ref.bert.encoder.layer:
        layer.attention.self = ExplicitQKAttention(layer.attention.self)
    return ref


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_gradient_equals_autograd_of_explicit_wqk(objective):
    model = tiny_model(objective, seed=1).double()
    batches = U.make_batches(corpus_obj(blocks()), objective, U.UpdateConfig(batches=3, batch_size=4, seed=5))
    G = U.qk_gradients(model, batches)
    assert model.config._attn_implementation == "eager"  # restored after capture

    ref = explicit_copy(model)
    total = 0.0
    for batch in batches:
        inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        logits_ref = ref(**inputs).logits
        with torch.no_grad():
            logits_orig = model(**inputs).logits
        # the reparametrized model computes the same function
        assert torch.allclose(logits_ref, logits_orig, rtol=0, atol=1e-12)
        total = total + reference_loss(logits_ref, batch["labels"], objective) / len(batches)
    total.backward()
    want = torch.stack([layer.attention.self.M.grad.sum(0) for layer in ref.bert.encoder.layer])
    assert G.shape == want.shape == (2, 24, 24)
    rel = float(torch.linalg.vector_norm(G - want) / torch.linalg.vector_norm(want))
    assert rel < 1e-6, rel
    print(f"{objective}: relative error of G against autograd {rel:.1e}")
    # the comparison can fail: the transposed matrix (key side as rows) is far off
    rel_t = float(torch.linalg.vector_norm(G.transpose(-1, -2) - want) / torch.linalg.vector_norm(want))
    assert rel_t > 1e-2


def test_decoder_gradient_is_not_symmetric_by_construction():
    model = tiny_model("decoder", seed=2).double()
    batches = U.make_batches(corpus_obj(blocks()), "decoder", U.UpdateConfig(batches=2, batch_size=6, seed=0))
    G = U.qk_gradients(model, batches)
    asym = torch.linalg.vector_norm(G - G.transpose(-1, -2), dim=(-2, -1)) / torch.linalg.vector_norm(G, dim=(-2, -1))
    assert bool((asym > 0.1).all()), asym
    s, _ = scores(G)
    assert bool((s < 0.95).all()), s


# ------------------------------------------------------------------------------------ held-out batches


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_objective_loss_is_the_models_own(objective):
    """The loss behind G is the one transformers trains these heads with (masked: labelled positions;
    causal: shifted by one), here in the model's dtype (transformers upcasts only to float32)."""
    model = tiny_model(objective, seed=3).double()
    (batch,) = U.make_batches(corpus_obj(blocks()), objective, U.UpdateConfig(batches=1, batch_size=12, seed=1))
    with torch.no_grad():
        out = model(**batch)
        mine = U.objective_loss(out.logits, batch["labels"], causal=objective == "decoder")
        want = reference_loss(out.logits, batch["labels"], objective)
    assert float(mine) == pytest.approx(float(want), rel=1e-12)
    assert float(mine) == pytest.approx(float(out.loss), rel=1e-6)


def test_masked_batches_follow_the_objective_and_the_seed():
    heldout = np.random.default_rng(3).integers(5, VOCAB, size=(400, 32))
    heldout[:, 0] = SPECIAL["cls"]
    cfg = U.UpdateConfig(batches=4, batch_size=100, seed=7)
    a = U.make_batches(corpus_obj(heldout), "encoder", cfg)
    b = U.make_batches(corpus_obj(heldout), "encoder", cfg)
    c = U.make_batches(corpus_obj(heldout), "encoder", U.UpdateConfig(batches=4, batch_size=100, seed=8))
    for x, y in zip(a, b):
        assert all(torch.equal(x[k], y[k]) for k in x)
    assert not torch.equal(a[0]["labels"], c[0]["labels"])
    ids = torch.cat([x["input_ids"] for x in a])
    labels = torch.cat([x["labels"] for x in a])
    orig = torch.from_numpy(heldout)  # all 400 blocks are used, in sorted order
    chosen = labels != -100
    assert not bool(chosen[:, 0].any())  # [CLS] is never chosen
    assert torch.equal(labels[chosen], orig[chosen])
    assert torch.equal(ids[~chosen], orig[~chosen])  # unchosen tokens are untouched
    n = int((orig != SPECIAL["cls"]).sum())
    rate = int(chosen.sum()) / n
    assert abs(rate - 0.15) < 0.01, rate
    k = int(chosen.sum())
    frac_mask = int((ids[chosen] == SPECIAL["mask"]).sum()) / k
    frac_kept = int((ids[chosen] == orig[chosen]).sum()) / k
    assert abs(frac_mask - 0.8) < 0.03, frac_mask
    # kept: the 10 % left alone plus random draws that hit the original token (1/VOCAB of 10 %)
    assert abs(frac_kept - 0.1 - 0.1 / VOCAB) < 0.03, frac_kept


def test_causal_batches_and_padding():
    heldout = blocks()
    (batch,) = U.make_batches(corpus_obj(heldout), "decoder", U.UpdateConfig(batches=1, batch_size=12, seed=0))
    orig = torch.from_numpy(heldout)
    pad = orig == SPECIAL["pad"]
    assert torch.equal(batch["input_ids"], orig)
    assert torch.equal(batch["attention_mask"], (~pad).long())
    assert torch.equal(batch["labels"], orig.masked_fill(pad, -100))


def test_too_few_blocks_is_a_user_error():
    with pytest.raises(UserError, match="heldout.npy has 12 blocks"):
        U.make_batches(corpus_obj(blocks()), "encoder", U.UpdateConfig(batches=2, batch_size=7))
    with pytest.raises(UserError, match="mlm_probability"):
        U.run_masking({"size": "tiny"}, mlm_probability=1.5)


def test_masking_comes_from_the_run():
    def fields(h):
        return tuple(getattr(h, k) for k in U.MASKING_FIELDS)

    run = {"size": "tiny", "hyper": {"mlm_probability": 0.3, "mask_token_fraction": 0.5, "random_token_fraction": 0.25}}
    assert fields(U.run_masking(run)) == (0.3, 0.5, 0.25)
    assert fields(U.run_masking({"size": "tiny"})) == (0.15, 0.8, 0.1)
    assert fields(U.run_masking(run, mlm_probability=0.2)) == (0.2, 0.5, 0.25)
    heldout = np.random.default_rng(4).integers(1, VOCAB, size=(200, 32))  # [UNK] (1) is maskable, as in training
    (batch,) = U.make_batches(
        corpus_obj(heldout), "encoder", U.UpdateConfig(batches=1, batch_size=200, masking=U.run_masking(run))
    )
    chosen = batch["labels"] != -100
    maskable = ~torch.isin(torch.from_numpy(heldout), torch.tensor([2, 3, 4]))
    assert not bool((chosen & ~maskable).any())
    assert abs(int(chosen.sum()) / int(maskable.sum()) - 0.3) < 0.02
    assert bool(chosen[torch.from_numpy(heldout) == SPECIAL["unk"]].any())
    assert abs(int((batch["input_ids"][chosen] == SPECIAL["mask"]).sum()) / int(chosen.sum()) - 0.5) < 0.03


# ------------------------------------------------------------------------------ applied updates and CLI


def _np_scores(M: np.ndarray, num_std=2.0) -> tuple[float, float]:
    sym, anti = (M + M.T) / 2, (M - M.T) / 2
    s = ((sym**2).sum() - (anti**2).sum()) / (M**2).sum()
    r, c = np.sqrt((M**2).sum(1)), np.sqrt((M**2).sum(0))
    R = np.clip(r - (r.mean() + num_std * r.std(ddof=1)), 0, None).sum()
    C = np.clip(c - (c.mean() + num_std * c.std(ddof=1)), 0, None).sum()
    return float(s), float((R - C) / (R + C)) if R + C > 0 else 0.0


def _np_wqk(snapshot: Path, layer: int) -> np.ndarray:
    sd = load_file(str(snapshot / "model.safetensors"))
    wq = sd[f"bert.encoder.layer.{layer}.attention.self.query.weight"].double().numpy()
    wk = sd[f"bert.encoder.layer.{layer}.attention.self.key.weight"].double().numpy()
    return wq.T @ wk  # sum over heads of W_q,h^T W_k,h


@pytest.fixture
def encoder_run(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", blocks(n_blocks=20))
    models = {
        0: tiny_model("encoder", 10, False),
        100: tiny_model("encoder", 11, False),
        200: tiny_model("encoder", 12, False),
    }
    return write_run(tmp_path / "run", "encoder", models, corpus), corpus


def test_cli_rows_gradient_and_applied(encoder_run, tmp_path):
    run, corpus = encoder_run
    out = tmp_path / "out" / "update_scores.csv"
    args = [
        "score-updates",
        str(run),
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--steps",
        "0",
        "200",
        "--batches",
        "2",
        "--batch-size",
        "5",
        "--threads",
        "1",
    ]
    assert main(args) == 0
    df = pd.read_csv(out)
    assert list(df.columns) == UPDATE_COLUMNS
    assert set(df["run"]) == {"tiny-toy-encoder-standard-s0"} and set(df["objective"]) == {"encoder"}
    # step 0: gradient + applied (0 -> 100, the next snapshot); step 200: gradient only (no later snapshot)
    assert sorted(zip(df["step"], df["kind"], df["layer"])) == sorted(
        [
            (0, "gradient", 0),
            (0, "gradient", 1),
            (0, "applied", 0),
            (0, "applied", 1),
            (200, "gradient", 0),
            (200, "gradient", 1),
        ]
    )
    snaps = run / "checkpoints"
    for layer in (0, 1):
        diff = _np_wqk(snaps / "step-0000100", layer) - _np_wqk(snaps / "step-0000000", layer)
        s, d = _np_scores(diff)
        row = df[(df.kind == "applied") & (df.layer == layer)].iloc[0]
        assert row.symmetry == pytest.approx(s, abs=1e-12) and row.directionality == pytest.approx(d, abs=1e-12)
    # gradient rows: the scores of G of the loaded snapshot on the same batches
    batches = U.make_batches(load_corpus(corpus), "encoder", U.UpdateConfig(batches=2, batch_size=5))
    G = U.qk_gradients(U.load_snapshot_model(snaps / "step-0000200", "encoder"), batches)
    for layer in (0, 1):
        s, d = _np_scores(G[layer].numpy())
        row = df[(df.kind == "gradient") & (df.step == 200) & (df.layer == layer)].iloc[0]
        assert row.symmetry == pytest.approx(s, abs=1e-9) and row.directionality == pytest.approx(d, abs=1e-9)
    # same command, same bytes; no temporary file left behind
    first = out.read_bytes()
    assert main(args) == 0
    assert out.read_bytes() == first
    assert sorted(p.name for p in out.parent.iterdir()) == ["update_scores.csv"]


def test_cli_bad_input(encoder_run, tmp_path, capsys):
    run, corpus = encoder_run
    out = tmp_path / "u.csv"
    base = [
        "score-updates",
        str(run),
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--batch-size",
        "5",
        "--batches",
        "2",
    ]
    assert main(base + ["--steps", "50"]) == 2
    assert "no snapshot for step(s) [50]" in capsys.readouterr().err
    assert main(["score-updates", str(run), "--corpus", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert "corpus directory not found" in capsys.readouterr().err
    assert main(base[:-4] + ["--batch-size", "30"]) == 2  # 2 x 30 > 20 held-out blocks
    assert "heldout.npy has 20 blocks" in capsys.readouterr().err
    # a run that says decoder but holds encoder snapshots
    y = yaml.safe_load((run / "run.yaml").read_text())
    (run / "run.yaml").write_text(yaml.safe_dump({**y, "objective": "decoder"}))
    assert main(base) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1].split("\r")[-1]
    assert last.startswith("error: ") and "is_decoder=False does not fit objective 'decoder'" in last
    assert not out.exists()


# ---------------------------------------------------------------------------------------------- notebook


@pytest.mark.notebook
def test_notebook_runs_and_is_byte_stable(tmp_path):
    papermill = pytest.importorskip("papermill")
    rng = np.random.default_rng(0)
    rows = []
    for objective in ("encoder", "decoder"):
        for step in (0, 100, 200):
            for kind in ("gradient", "applied"):
                for layer in range(3):
                    rows.append(
                        {
                            "run": f"tiny-toy-{objective}-standard-s0",
                            "size": "tiny",
                            "dataset": "toy",
                            "objective": objective,
                            "init": "standard",
                            "seed": 0,
                            "step": step,
                            "layer": layer,
                            "kind": kind,
                            "symmetry": rng.uniform(-1, 1),
                            "directionality": rng.uniform(-1, 1),
                        }
                    )
    csv = tmp_path / "update_scores.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    nb_path = ROOT / "notebooks" / "fig_theory_updates.ipynb"
    first = {"pdf": str(tmp_path / "a.pdf"), "png": str(tmp_path / "a.png")}
    papermill.execute_notebook(
        str(nb_path),
        str(tmp_path / "executed.ipynb"),
        kernel_name="python3",
        parameters={"inputs": {"updates": str(csv)}, "outputs": first, "params": {}},
        progress_bar=False,
    )
    # a rerun (here: the same cells in this process) writes the same bytes
    import nbformat

    nb = nbformat.read(str(nb_path), as_version=4)
    assert [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])], "no cell tagged parameters"
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook stripped"
    second = {"pdf": str(tmp_path / "b.pdf"), "png": str(tmp_path / "b.png")}
    scope = {}
    for cell in nb.cells:
        if cell.cell_type == "code":
            exec(cell.source, scope)
            if "parameters" in cell.metadata.get("tags", []):
                scope.update(inputs={"updates": str(csv)}, outputs=second, params={})
    for fmt, magic in (("pdf", b"%PDF"), ("png", b"\x89PNG")):
        data = Path(first[fmt]).read_bytes()
        assert data.startswith(magic)
        assert data == Path(second[fmt]).read_bytes(), f"{fmt} differs between reruns"
