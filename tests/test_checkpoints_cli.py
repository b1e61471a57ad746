"""score_model / layer_matrices against an independent per-head computation, and the `score` and
`score-checkpoints` commands: output tables, atomic writes, one-line errors."""

import io
import json

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from transformers import BertConfig, BertForMaskedLM, BertLMHeadModel, BertModel

from attention_geometry.cli import main
from attention_geometry.errors import UserError
from attention_geometry.formats.columns import SCORE_COLUMNS, TRAINING_COLUMNS
from attention_geometry.formats.files import atomic_write_table
from attention_geometry.scoring import scorer as checkpoints
from attention_geometry.scoring.scorer import layer_matrices, score_model

N_LAYERS, N_HEADS, WIDTH = 3, 4, 16


def tiny_bert(seed=0, cls=BertModel, **kw):
    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=40,
        hidden_size=WIDTH,
        num_hidden_layers=N_LAYERS,
        num_attention_heads=N_HEADS,
        intermediate_size=32,
        max_position_embeddings=24,
        **kw,
    )
    m = cls(cfg, add_pooling_layer=False) if cls is BertModel else cls(cfg)
    return m.eval()


def reference(model, num_std=2.0):
    """Per layer: (M summed, [M_h]) by an explicit loop over the model's attention modules, and numpy scores."""
    bert = model.bert if hasattr(model, "bert") else model
    out = []
    for layer in bert.encoder.layer:
        a = layer.attention.self
        Wq = a.query.weight.detach().double().numpy()
        Wk = a.key.weight.detach().double().numpy()
        dh = Wq.shape[0] // N_HEADS
        heads = [Wq[h * dh : (h + 1) * dh].T @ Wk[h * dh : (h + 1) * dh] for h in range(N_HEADS)]
        out.append((sum(heads), heads))
    return out


def np_scores(M, num_std=2.0):
    Ms, Mn = (M + M.T) / 2, (M - M.T) / 2
    s = ((Ms**2).sum() - (Mn**2).sum()) / (M**2).sum()
    r, c = np.linalg.norm(M, axis=1), np.linalg.norm(M, axis=0)
    R = np.clip(r - (r.mean() + num_std * r.std(ddof=1)), 0, None).sum()
    C = np.clip(c - (c.mean() + num_std * c.std(ddof=1)), 0, None).sum()
    return s, (0.0 if R + C == 0 else (R - C) / (R + C))


def test_score_model_against_reference():
    m = tiny_bert()
    df = score_model(m, per_head=True, num_std=1.0, progress=False, name="tiny")
    assert list(df.columns) == SCORE_COLUMNS
    assert len(df) == N_LAYERS * (1 + N_HEADS)
    assert set(df.model) == {"tiny"} and set(df.model_type) == {"bert"}
    assert (
        set(df.architecture) == {"encoder-only"} and set(df.component) == {"encoder"} and set(df.modality) == {"text"}
    )
    assert (df.n_params == m.num_parameters()).all()
    assert (df.d_model == WIDTH).all() and (df.n_heads == N_HEADS).all() and (df.n_kv_heads == N_HEADS).all()
    ref = reference(m)
    for layer, (M, heads) in enumerate(ref):
        rows = df[df.layer == layer]
        assert list(rows["head"]) == ["all"] + [str(h) for h in range(N_HEADS)]
        for head, mat in zip(rows["head"], [M] + heads):
            s, d = np_scores(mat, num_std=1.0)
            row = rows[rows["head"] == head].iloc[0]
            assert row.symmetry == pytest.approx(s, abs=1e-12)
            assert row.directionality == pytest.approx(d, abs=1e-12)
    # num_std changes directionality, not symmetry
    df2 = score_model(m, num_std=3.0, progress=False)
    assert np.allclose(df2.symmetry, df[df["head"] == "all"].symmetry)
    assert df2.directionality.tolist() == pytest.approx([np_scores(M, 3.0)[1] for M, _ in ref], abs=1e-12)


def test_layer_matrices_and_head_chunks(monkeypatch):
    m = tiny_bert(seed=1)
    ref = reference(m)
    recs = list(layer_matrices(m, per_head=True))
    assert [(r.layer, r.head) for r in recs] == [(i, h) for i in range(N_LAYERS) for h in ["all", 0, 1, 2, 3]]
    for r in recs:
        M, heads = ref[r.layer]
        want = M if r.head == "all" else heads[r.head]
        assert r.M.dtype == torch.float64 and r.M.shape == (WIDTH, WIDTH)
        np.testing.assert_allclose(r.M.numpy(), want, rtol=1e-12, atol=1e-14)
        assert (r.component, r.n_heads, r.n_kv_heads, r.d_model) == ("encoder", N_HEADS, N_HEADS, WIDTH)
    # per-head matrices built one head at a time give the same rows
    whole = score_model(m, per_head=True, progress=False)
    monkeypatch.setattr(checkpoints, "HEAD_CHUNK_BYTES", 1)
    chunked = score_model(m, per_head=True, progress=False)
    pd.testing.assert_frame_equal(whole, chunked)


def test_path_and_model_agree(tmp_path):
    m = tiny_bert(seed=2)
    m.save_pretrained(tmp_path / "tiny")
    a = score_model(m, per_head=True, progress=False, name="x")
    b = score_model(tmp_path / "tiny", per_head=True, progress=False, name="x")
    pd.testing.assert_frame_equal(a, b)
    assert score_model(tmp_path / "tiny", progress=False).model.iloc[0] == "tiny"


def run_cli(argv, capsys):
    capsys.readouterr()  # drop what preparing the input printed (save_pretrained's bars)
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_cli_score_writes_table(tmp_path, capsys, suffix):
    m = tiny_bert(seed=3)
    m.save_pretrained(tmp_path / "tiny")
    out = tmp_path / "res" / f"scores{suffix}"
    code, _, err = run_cli(
        ["score", tmp_path / "tiny", "--out", out, "--per-head", "--num-std", "1.5", "--name", "T"], capsys
    )
    assert code == 0, err
    df = pd.read_csv(out, dtype={"head": str}) if suffix == ".csv" else pd.read_parquet(out)
    assert list(df.columns) == SCORE_COLUMNS
    want = score_model(m, per_head=True, num_std=1.5, progress=False, name="T")
    pd.testing.assert_frame_equal(df, want, check_dtype=False)
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no temporary file left


def bad_inputs(tmp_path):
    """(name, argv builder) of every bad input the score command must refuse."""
    good = tmp_path / "good"
    tiny_bert().save_pretrained(good)

    def unknown_type():
        d = tmp_path / "unknown"
        tiny_bert().save_pretrained(d)
        cfg = json.loads((d / "config.json").read_text())
        cfg["model_type"] = "made-up-family"
        (d / "config.json").write_text(json.dumps(cfg))
        return d, r"unsupported model_type 'made-up-family'; supported: .*bert"

    def missing_weights():
        d = tmp_path / "noweights"
        tiny_bert().config.save_pretrained(d)
        return d, r"noweights: no weights"

    def truncated():
        d = tmp_path / "trunc"
        tiny_bert().save_pretrained(d)
        f = d / "model.safetensors"
        f.write_bytes(f.read_bytes()[:-64])
        return d, r"trunc/model.safetensors: truncated"

    def nan_weights():
        m = tiny_bert()
        with torch.no_grad():
            m.encoder.layer[1].attention.self.key.weight[2, 3] = float("nan")
        d = tmp_path / "nan"
        m.save_pretrained(d)
        return d, r"nan: encoder layer 1 key weights .*layer\.1\.attention\.self\.key\.weight.* contain NaN or Inf"

    def inf_weights():
        m = tiny_bert()
        with torch.no_grad():
            m.encoder.layer[0].attention.self.query.weight[0, 0] = float("inf")
        d = tmp_path / "inf"
        m.save_pretrained(d)
        return d, r"inf: encoder layer 0 query weights .* contain NaN or Inf"

    def zero_qk():
        m = tiny_bert()
        with torch.no_grad():
            m.encoder.layer[2].attention.self.query.weight.zero_()
        d = tmp_path / "zero"
        m.save_pretrained(d)
        return d, r"zero encoder layer 2: matrix is all zeros"

    return {
        "unknown model_type": unknown_type,
        "missing weights": missing_weights,
        "truncated weights": truncated,
        "NaN weights": nan_weights,
        "Inf weights": inf_weights,
        "zero W_qk": zero_qk,
        "nonexistent path": lambda: (tmp_path / "absent", r"absent: no such file or directory"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "unknown model_type",
        "missing weights",
        "truncated weights",
        "NaN weights",
        "Inf weights",
        "zero W_qk",
        "nonexistent path",
    ],
)
@pytest.mark.parametrize("quiet", [True, False])
def test_cli_bad_input_one_line_no_output(tmp_path, capsys, case, quiet):
    src, pattern = bad_inputs(tmp_path)[case]()
    out = tmp_path / "out" / "scores.csv"
    out.parent.mkdir()
    code, stdout, err = run_cli(["score", src, "--out", out] + (["--quiet"] if quiet else []), capsys)
    assert code != 0
    assert err.count("\n") == 1 and "Traceback" not in err
    line = err.strip().split("\r")[-1]  # a progress bar, if one started, is cleared with carriage returns
    assert line.startswith("error: ")
    if quiet:
        assert err == line + "\n"
    import re

    assert re.search(pattern, line), line
    assert list(out.parent.iterdir()) == []


def test_cli_bad_output_suffix(tmp_path, capsys):
    tiny_bert().save_pretrained(tmp_path / "m")
    code, _, err = run_cli(["score", tmp_path / "m", "--out", tmp_path / "scores.xlsx"], capsys)
    assert (
        code == 2 and err == f"error: {tmp_path / 'scores.xlsx'}: unknown output suffix '.xlsx'; use .csv or .parquet\n"
    )
    assert not (tmp_path / "scores.xlsx").exists()


def test_failed_write_leaves_old_output(tmp_path, monkeypatch):
    """A failure while writing removes the temporary file and leaves an existing output untouched."""
    out = tmp_path / "scores.csv"
    out.write_text("old\n")
    df = score_model(tiny_bert(), progress=False)

    def boom(self, path, **kw):
        open(path, "w").write("partial")
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", boom)
    with pytest.raises(OSError):
        atomic_write_table(df, out)
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["scores.csv"]


def test_cuda_refused_without_gpu(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the refusal only applies without it")
    with pytest.raises(UserError, match="CUDA is not available"):
        score_model(tiny_bert(), device="cuda", progress=False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    m = tiny_bert(seed=7)
    a = score_model(m, per_head=True, progress=False)
    b = score_model(m, per_head=True, progress=False, device="cuda")
    np.testing.assert_allclose(a.symmetry, b.symmetry, rtol=1e-10)
    np.testing.assert_allclose(a.directionality, b.directionality, rtol=1e-9, atol=1e-12)


# ----------------------------------------------------------------------------------- score-checkpoints

RUN_META = dict(size="tiny", dataset="toy", objective="decoder", init="standard", seed=3)


def fake_run(tmp_path, steps=(100, 0, 20)):
    run = tmp_path / "tiny-toy-decoder-standard-s3"
    models = {}
    for i, step in enumerate(steps):
        m = tiny_bert(seed=10 + i, cls=BertForMaskedLM, is_decoder=True)
        m.save_pretrained(run / "checkpoints" / f"step-{step:07d}")
        models[step] = m
    # a snapshot still being written (temporary name) is not a snapshot
    (run / "checkpoints" / "step-0000200.tmp").mkdir()
    (run / "run.yaml").write_text(yaml.safe_dump(dict(RUN_META, lr=1e-3, steps=100)))
    return run, models


def test_score_checkpoints_cli(tmp_path, capsys):
    run, models = fake_run(tmp_path)
    out = tmp_path / "training_scores.parquet"
    code, _, err = run_cli(["score-checkpoints", run, "--out", out, "--per-head"], capsys)
    assert code == 0, err
    df = pd.read_parquet(out)
    assert list(df.columns) == TRAINING_COLUMNS
    assert df.step.tolist() == sorted(df.step.tolist()) and sorted(set(df.step)) == [0, 20, 100]
    assert len(df) == 3 * N_LAYERS * (1 + N_HEADS)
    assert set(df.run) == {run.name} and set(df.model) == {run.name}
    for k, v in RUN_META.items():
        assert set(df[k]) == {v}, k
    # a BERT trained with is_decoder=True is a decoder
    assert set(df.component) == {"decoder"} and set(df.architecture) == {"decoder-only"}
    for step, m in models.items():
        for layer, (M, heads) in enumerate(reference(m)):
            rows = df[(df.step == step) & (df.layer == layer)]
            for head, mat in zip(["all", "0", "1", "2", "3"], [M] + heads):
                s, d = np_scores(mat)
                row = rows[rows["head"] == head].iloc[0]
                assert (row.symmetry, row.directionality) == (pytest.approx(s, abs=1e-12), pytest.approx(d, abs=1e-12))


def test_score_checkpoints_without_out_writes_csv_on_stdout(tmp_path, capsys):
    """Issue 58.2: `score-checkpoints RUN_DIR`, as the README shows it, writes the table on stdout (it failed with
    "the following arguments are required: --out"); the rows are those of `--out -`."""
    import io

    run, models = fake_run(tmp_path, steps=(0, 20))
    code, plain, err = run_cli(["score-checkpoints", run, "--no-progress"], capsys)
    assert code == 0, err
    df = pd.read_csv(io.StringIO(plain))
    assert list(df.columns) == TRAINING_COLUMNS and sorted(set(df.step)) == [0, 20]
    for step, m in models.items():
        for layer, (M, _) in enumerate(reference(m)):
            s, d = np_scores(M)
            row = df[(df.step == step) & (df.layer == layer) & (df["head"].astype(str) == "all")].iloc[0]
            assert (row.symmetry, row.directionality) == (pytest.approx(s, abs=1e-9), pytest.approx(d, abs=1e-9))


def test_score_checkpoints_bad_runs(tmp_path, capsys):
    run, _ = fake_run(tmp_path, steps=(0,))
    (run / "run.yaml").write_text(yaml.safe_dump({"size": "tiny", "dataset": "toy"}))
    out = tmp_path / "t.csv"
    code, _, err = run_cli(["score-checkpoints", run, "--out", out, "--quiet"], capsys)
    assert code == 2 and err.startswith("error: ") and "run.yaml: missing key(s) objective, init, seed" in err
    assert err.count("\n") == 1 and not out.exists()
    empty = tmp_path / "empty-run"
    (empty / "checkpoints").mkdir(parents=True)
    (empty / "run.yaml").write_text(yaml.safe_dump(RUN_META))
    code, _, err = run_cli(["score-checkpoints", empty, "--out", out], capsys)
    assert code == 2 and "no step-XXXXXXX snapshot folders" in err and not out.exists()


def test_score_checkpoints_refuses_a_missing_middle_snapshot(tmp_path, capsys):
    """run.yaml's snapshot_steps up to the newest snapshot on disk must all be there: a missing one is one line
    naming it, not a table that silently lacks a step (steps after the newest one: a run still training)."""
    run, _ = fake_run(tmp_path, steps=(0, 100))
    (run / "run.yaml").write_text(yaml.safe_dump(dict(RUN_META, snapshot_steps=[0, 20, 100, 200])))
    out = tmp_path / "t.csv"
    code, _, err = run_cli(["score-checkpoints", run, "--out", out, "--quiet"], capsys)
    errors = [line for line in err.splitlines() if not line.startswith("warning: ")]  # hand-made: no checksums
    assert code == 2 and len(errors) == 1 and errors[0].startswith("error: ") and not out.exists()
    assert "no snapshot of step(s) 20, which run.yaml's snapshot_steps imply (the run reached step 100)" in err
    (run / "run.yaml").write_text(yaml.safe_dump(dict(RUN_META, snapshot_steps=[0, 100, 200])))
    code, _, err = run_cli(["score-checkpoints", run, "--out", out, "--quiet"], capsys)
    assert code == 0, err
    assert sorted(set(pd.read_csv(out).step)) == [0, 100]


@pytest.mark.parametrize("n_heads,n_kv", [(6, 2), (6, 1), (6, 6), (8, 4)])
def test_wqk_grouped_query(n_heads, n_kv):
    """M of a grouped-/multi-query layer (group-summed queries) equals the explicit per-head sum, and the sum of
    the per-head matrices."""
    from attention_geometry.scoring.extract import LayerQK, wqk

    torch.manual_seed(n_heads * 10 + n_kv)
    dh, d = 5, 12
    wq = torch.randn(n_heads, dh, d).to(torch.bfloat16)
    wk = torch.randn(n_kv, dh, d).to(torch.bfloat16)
    explicit = sum(wq[h].double().T @ wk[h // (n_heads // n_kv)].double() for h in range(n_heads))
    layer = LayerQK("decoder", 0, wq, wk)
    got = wqk(layer)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, explicit, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got, wqk(layer, per_head=True).sum(0), rtol=1e-12, atol=1e-12)
    if n_kv not in (1, n_heads):  # pairing h with h % n_kv instead gives another matrix
        wrong = sum(wq[h].double().T @ wk[h % n_kv].double() for h in range(n_heads))
        assert not torch.allclose(got, wrong, rtol=1e-3)


def test_in_memory_vision_model_scores_like_its_saved_checkpoint(tmp_path):
    """transformers renames ViT's attention modules in memory; scoring the live model must still find them
    and agree with scoring the checkpoint written by save_pretrained."""
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    cfg = ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=16, patch_size=8
    )
    model = ViTModel(cfg).eval()
    model.save_pretrained(tmp_path / "vit")
    live = score_model(model, progress=False)
    saved = score_model(str(tmp_path / "vit"), progress=False)
    assert len(live) == 2
    np.testing.assert_allclose(live["symmetry"], saved["symmetry"], rtol=1e-12)
    np.testing.assert_allclose(live["directionality"], saved["directionality"], rtol=1e-12)


# the run keys a Trainer output folder's rows need (it has no run.yaml); init given apart
LABELS = [f"--label={k}={v}" for k, v in (("size", "bert-mini"), ("dataset", "jigsaw"), ("objective", "decoder"))]
LABELS += ["--label=seed=0"]


def test_score_checkpoints_reads_a_hugging_face_trainer_output_folder(tmp_path, capsys):
    """checkpoint-N/ folders as transformers' Trainer writes them (the paper's code): the step from each
    trainer_state.json, the run keys from --label; the scores equal those of the same weights scored alone."""
    out_dir = tmp_path / "bert-decoder-jigsaw--symmetric-init"
    models = {}
    for i, step in enumerate((10, 20)):
        m = tiny_bert(seed=30 + i, cls=BertForMaskedLM, is_decoder=True)
        folder = out_dir / f"checkpoint-{step}"
        m.save_pretrained(folder)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
        (folder / "optimizer.pt").write_bytes(b"never read")
        models[step] = m
    (out_dir / "runs").mkdir()  # TensorBoard logs beside them are not checkpoints
    out = tmp_path / "t.csv"
    code, _, err = run_cli(
        ["score-checkpoints", out_dir, "--out", out, "--quiet", *LABELS, "--label", "init=symmetric-fresh"],
        capsys,
    )
    assert code == 0, err
    df = pd.read_csv(out)
    assert sorted(set(df.step)) == [10, 20] and set(df.run) == {out_dir.name}
    assert set(df.init) == {"symmetric-fresh"} and set(df.seed) == {0}
    for step, m in models.items():
        for layer, (M, _) in enumerate(reference(m)):
            s, d = np_scores(M)
            row = df[(df.step == step) & (df.layer == layer)].iloc[0]
            assert (row.symmetry, row.directionality) == (pytest.approx(s, abs=1e-12), pytest.approx(d, abs=1e-12))
    # a trainer_state.json that disagrees with its folder, and a bad label, are one line each
    (out_dir / "checkpoint-20" / "trainer_state.json").write_text(json.dumps({"global_step": 30}))
    code, _, err = run_cli(["score-checkpoints", out_dir, "--out", out, "--quiet", *LABELS], capsys)
    assert code == 2 and "global_step 30, but the folder is checkpoint-20" in err
    code, _, err = run_cli(["score-checkpoints", out_dir, "--out", out, "--label", "lr=1"], capsys)
    assert code == 2 and "--label 'lr=1': expected KEY=VALUE" in err


def authors_checkpoint(folder, model):
    """A stand-in of one of the authors' released checkpoints: checkpoint-200000/ with the model saved by
    save_pretrained, a minimal trainer_state.json and an optimizer file that is never read."""
    ckpt = folder / "checkpoint-200000"
    model.save_pretrained(ckpt)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 200000}))
    (ckpt / "optimizer.pt").write_bytes(b"never read")
    return folder


@pytest.mark.parametrize(
    "name, cls, keys",
    [
        ("bert-encoder-jigsaw", BertForMaskedLM, ("bert-base", "jigsaw", "encoder", "standard")),
        (
            "bert_small-decoder-red_pajama--symmetric-init",
            BertLMHeadModel,
            ("bert-mini", "red_pajama", "decoder-paper", "symmetric-fresh"),
        ),
        ("bert-decoder-wikipedia", BertLMHeadModel, ("bert-base", "wikipedia", "decoder-paper", "standard")),
    ],
)
def test_the_authors_released_checkpoints_are_labelled_from_their_folder_name(tmp_path, capsys, name, cls, keys):
    """checkpoints/{model}-{mode}-{dataset}[--symmetric-init]/checkpoint-200000/ scores without --label: their
    bert_small is bert-mini and bert bert-base, their decoder (the masking collator's batch) decoder-paper,
    --symmetric-init symmetric-fresh, the seed their set_seed(0); the scores are the saved weights'."""
    model = tiny_bert(seed=5, cls=cls, is_decoder=cls is BertLMHeadModel)
    folder = authors_checkpoint(tmp_path / "checkpoints" / name, model)
    out = tmp_path / "t.csv"
    code, _, err = run_cli(["score-checkpoints", folder, "--out", out], capsys)
    assert code == 0, err
    assert "run keys from the authors' folder name: size=" in err
    df = pd.read_csv(out)
    assert set(df.run) == {name} and set(df.step) == {200000} and len(df) == N_LAYERS
    got = df[["size", "dataset", "objective", "init", "seed"]].drop_duplicates().values.tolist()
    assert got == [[*keys, 0]]
    for layer, (M, _) in enumerate(reference(model)):
        s, d = np_scores(M)
        row = df[df.layer == layer].iloc[0]
        assert (row.symmetry, row.directionality) == (pytest.approx(s, abs=1e-12), pytest.approx(d, abs=1e-12))
    # --label wins key by key; the other keys still come from the name
    code, _, err = run_cli(["score-checkpoints", folder, "--out", out, "--quiet", "--label=seed=7"], capsys)
    assert code == 0, err
    df = pd.read_csv(out)
    assert set(df.seed) == {7} and set(df["size"]) == {keys[0]} and set(df.objective) == {keys[2]}


def test_the_authors_training_output_folder_is_labelled_from_its_run_folder(tmp_path, capsys):
    """Their train.py writes NAME/training_output/RUN_ID/checkpoint-N/: the name two levels up states the keys."""
    folder = tmp_path / "bert_small-encoder-wikipedia--symmetric-init" / "training_output" / "a1b2c3"
    authors_checkpoint(folder, tiny_bert(seed=6, cls=BertForMaskedLM))
    out = tmp_path / "t.csv"
    code, _, err = run_cli(["score-checkpoints", folder, "--out", out, "--quiet"], capsys)
    assert code == 0, err
    df = pd.read_csv(out)
    assert set(df.run) == {"a1b2c3"}
    got = df[["size", "dataset", "objective", "init", "seed"]].drop_duplicates().values.tolist()
    assert got == [["bert-mini", "wikipedia", "encoder", "symmetric-fresh", 0]]


@pytest.mark.parametrize(
    "name",
    # a model, mode or dataset their train.py does not name, a near miss, and a folder of another layout
    ["bert_large-encoder-wikipedia", "bert-encoder-imdb", "bert-decoder-jigsaw-symmetric-init", "run-7"],
)
def test_a_folder_not_named_as_the_authors_is_scored_with_its_keys_empty(tmp_path, capsys, name):
    """Any Trainer output folder scores with no flag: its name is the run, the keys nothing states stay empty, and
    one stderr line names them (none with --quiet)."""
    model = tiny_bert(seed=7, cls=BertForMaskedLM)
    folder = authors_checkpoint(tmp_path / name, model)
    out = tmp_path / "t.csv"
    code, _, err = run_cli(["score-checkpoints", folder, "--out", out, "--no-progress"], capsys)
    assert (code, err) == (0, "")
    code, _, err = run_cli(["score-checkpoints", folder, "--out", out], capsys)
    assert code == 0, err
    assert [ln for ln in err.splitlines() if "run key" in ln] == [
        f"{folder}: a Trainer output folder without run.yaml: run key(s) size, dataset, objective, init, seed left "
        "empty (give them with --label KEY=VALUE to join these rows with other runs' tables)"
    ]
    df = pd.read_csv(out)
    assert list(df.columns) == TRAINING_COLUMNS and set(df.run) == set(df.model) == {name}
    assert df[["size", "dataset", "objective", "init", "seed"]].isna().all().all()
    for layer, (M, _) in enumerate(reference(model)):
        assert df[df.layer == layer].symmetry.iloc[0] == pytest.approx(np_scores(M)[0], abs=1e-12)


# -------------------------------------------------------------------------------------------- the OV circuit


def reference_ov(model):
    """Per layer: (M_ov summed, [M_ov,h]) by an explicit loop over the heads: W_o's columns of head h times the
    rows of W_v of head h (nn.Linear weights, out = W_o z, v = W_v x)."""
    bert = model.bert if hasattr(model, "bert") else model
    out = []
    for layer in bert.encoder.layer:
        Wv = layer.attention.self.value.weight.detach().double().numpy()
        Wo = layer.attention.output.dense.weight.detach().double().numpy()
        dh = Wv.shape[0] // N_HEADS
        heads = [Wo[:, h * dh : (h + 1) * dh] @ Wv[h * dh : (h + 1) * dh] for h in range(N_HEADS)]
        out.append((sum(heads), heads))
    return out


def test_score_model_ov_against_reference():
    """matrix="ov" scores M_ov = sum_h W_o,h W_v,h (and per head), rows tagged in a `matrix` column after `head`;
    "both" gives per layer its W_qk rows then its OV rows; the default table is unchanged (no matrix column)."""
    from attention_geometry.formats.columns import with_matrix_column

    m = tiny_bert(seed=11)
    df = score_model(m, per_head=True, num_std=1.0, progress=False, name="tiny", matrix="ov")
    assert list(df.columns) == with_matrix_column(SCORE_COLUMNS) and set(df.matrix) == {"ov"}
    assert list(df.columns).index("matrix") == list(df.columns).index("head") + 1
    assert len(df) == N_LAYERS * (1 + N_HEADS)
    for layer, (M, heads) in enumerate(reference_ov(m)):
        rows = df[df.layer == layer]
        assert list(rows["head"]) == ["all"] + [str(h) for h in range(N_HEADS)]
        for (_, row), mat in zip(rows.iterrows(), [M] + heads):
            s, d = np_scores(mat, num_std=1.0)
            assert (row.symmetry, row.directionality) == (pytest.approx(s, abs=1e-12), pytest.approx(d, abs=1e-12))
    # the OV matrix is not W_qk, nor its transpose (directionality would flip sign)
    M = reference_ov(m)[0][0]
    assert not np.allclose(M, reference(m)[0][0])
    assert np_scores(M.T)[1] == pytest.approx(-np_scores(M)[1])
    both = score_model(m, per_head=True, num_std=1.0, progress=False, name="tiny", matrix="both")
    assert both.matrix.tolist()[: 2 * (1 + N_HEADS)] == ["qk"] * (1 + N_HEADS) + ["ov"] * (1 + N_HEADS)
    default = score_model(m, per_head=True, num_std=1.0, progress=False, name="tiny")
    assert list(default.columns) == SCORE_COLUMNS
    qk_only = score_model(m, per_head=True, num_std=1.0, progress=False, name="tiny", matrix="qk")
    pd.testing.assert_frame_equal(qk_only, default)
    qk = both[both.matrix == "qk"].drop(columns="matrix").reset_index(drop=True)
    pd.testing.assert_frame_equal(qk, default)
    pd.testing.assert_frame_equal(both[both.matrix == "ov"].reset_index(drop=True), df)
    # layer_matrices yields the matrices themselves, tagged
    recs = list(layer_matrices(m, matrix="ov", per_head=True))
    assert [r.matrix for r in recs] == ["ov"] * len(recs) and recs[0].head == "all"
    np.testing.assert_allclose(recs[0].M.numpy(), M, rtol=0, atol=1e-12)
    np.testing.assert_allclose(recs[1].M.numpy(), reference_ov(m)[0][1][0], rtol=0, atol=1e-12)
    assert {r.matrix for r in layer_matrices(m)} == {"qk"}


@pytest.mark.parametrize("matrix", ["vo", "", ["qk", "x"], [], 3])
def test_an_unknown_matrix_is_one_error(matrix):
    with pytest.raises(UserError, match=r"matrix=.*one of qk, ov, 'both'") as e:
        score_model(tiny_bert(), progress=False, matrix=matrix)
    assert "--" not in str(e.value)


def test_the_paper_gqa_method_is_of_w_qk_only():
    with pytest.raises(UserError, match="grouped-query expansion is of W_qk only") as e:
        score_model(tiny_bert(), progress=False, matrix="both", gqa_method="paper")
    assert "--" not in str(e.value)


def test_cli_matrix_keeps_the_default_table_byte_identical(tmp_path, capsys):
    """`score` without --matrix writes today's table, byte for byte the same as --matrix qk; --matrix both adds the
    OV rows and a matrix column, and the summary gives one line per component and matrix."""
    m = tiny_bert(seed=12)
    m.save_pretrained(tmp_path / "m")
    tables = {}
    for flag in ([], ["--matrix", "qk"], ["--matrix", "both"], ["--matrix", "ov"]):
        code, out, err = run_cli(["score", tmp_path / "m", "--out", "-", "--quiet", "--per-head", *flag], capsys)
        assert code == 0, err
        tables[" ".join(flag)] = (out, err)
    assert tables[""] == tables["--matrix qk"]
    assert pd.read_csv(io.StringIO(tables[""][0])).columns.tolist() == SCORE_COLUMNS
    both = pd.read_csv(io.StringIO(tables["--matrix both"][0]), dtype={"head": str})
    assert both.matrix.value_counts().to_dict() == {"qk": N_LAYERS * (1 + N_HEADS), "ov": N_LAYERS * (1 + N_HEADS)}
    lines = tables["--matrix both"][1].strip().splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["m encoder qk", "m encoder ov"]
    ov = pd.read_csv(io.StringIO(tables["--matrix ov"][0]), dtype={"head": str})
    pd.testing.assert_frame_equal(ov, both[both.matrix == "ov"].reset_index(drop=True))
    with pytest.raises(SystemExit) as e:
        run_cli(["score", tmp_path / "m", "--out", "-", "--matrix", "vo"], capsys)
    assert e.value.code == 2 and "invalid choice: 'vo'" in capsys.readouterr().err


def test_score_checkpoints_matrix_ov(tmp_path, capsys):
    """score-checkpoints --matrix ov: the training columns with `matrix` after `head`, OV rows of every snapshot
    equal to the explicit per-head computation."""
    from attention_geometry.formats.columns import with_matrix_column

    run, models = fake_run(tmp_path)
    out = tmp_path / "t.csv"
    code, _, err = run_cli(["score-checkpoints", run, "--out", out, "--quiet", "--matrix", "ov", "--per-head"], capsys)
    assert code == 0, err
    df = pd.read_csv(out, dtype={"head": str})
    assert list(df.columns) == with_matrix_column(TRAINING_COLUMNS) and set(df.matrix) == {"ov"}
    assert len(df) == 3 * N_LAYERS * (1 + N_HEADS)
    for step, m in models.items():
        for layer, (M, heads) in enumerate(reference_ov(m)):
            rows = df[(df.step == step) & (df.layer == layer)]
            for head, mat in zip(["all", "0", "1", "2", "3"], [M] + heads):
                row = rows[rows["head"] == head].iloc[0]
                assert row.symmetry == pytest.approx(np_scores(mat)[0], abs=1e-12)
    code, _, err = run_cli(["score-checkpoints", run, "--out", out, "--quiet"], capsys)
    assert code == 0 and list(pd.read_csv(out).columns) == TRAINING_COLUMNS


def test_ov_of_a_prefetched_qk_subset_is_one_line(tmp_path, capsys):
    """A folder holding only the q/k tensors (what prefetch-qk writes) has no value weights: one error line."""
    from safetensors.torch import save_file

    m = tiny_bert(seed=13)
    m.config.save_pretrained(tmp_path / "qk")
    sd = {k: v.contiguous() for k, v in m.state_dict().items() if ".query." in k or ".key." in k}
    save_file(sd, str(tmp_path / "qk" / "model.safetensors"))
    code, _, err = run_cli(["score", tmp_path / "qk", "--out", "-", "--quiet", "--matrix", "ov"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "no tensor named *encoder.layer.0.attention.self.value.weight" in err


def test_score_to_stdout_with_a_summary(tmp_path, capsys):
    """`--out -` writes the CSV table on stdout; a per-component summary (median s and d over layers) goes to
    stderr, computed here from the table's own rows."""
    m = tiny_bert(seed=3)
    m.save_pretrained(tmp_path / "m")
    code, out, err = run_cli(["score", tmp_path / "m", "--out", "-", "--quiet"], capsys)
    assert code == 0, err
    df = pd.read_csv(io.StringIO(out))
    assert list(df.columns) == SCORE_COLUMNS and len(df) == N_LAYERS
    s, d = df["symmetry"].median(), df["directionality"].median()
    assert err.strip() == (
        f"m encoder: {N_LAYERS} layers, median symmetry {s:+.3f}, median directionality {d:+.3f} "
        f"({N_HEADS} heads, {N_HEADS} key/value heads)"
    )
