"""The scoring side of fault handling: every bad input to the scoring commands is one `error:` line with a non-zero exit
and no output file, never a traceback and never a number made of garbage. Each case is built here by hand
(the safetensors bytes, the GGUF file, the config) and, where a number comes out, compared with an
independent computation (the safetensors library or gguf's reader, and numpy); the fuzz tests at the end
mutate small valid files at random and ask the same of every outcome."""

from __future__ import annotations

import json
import os
import re
import struct
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from helpers import cli_in_process
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from safetensors import safe_open

from attention_geometry.scoring import scorer as checkpoints
from attention_geometry.scoring.measures import ScoreError, directionality, scores

D, H = 16, 4  # width and heads of the hand-made BERT checkpoints
QK = "encoder.layer.{i}.attention.self.{p}.weight"
ST_DTYPES = {
    np.dtype("float32"): "F32",
    np.dtype("float64"): "F64",
    np.dtype("float16"): "F16",
    np.dtype("int32"): "I32",
}


# ------------------------------------------------------------------------------------------------ helpers


def bert_weights(n_layers=2, seed=0, dtype=np.float32, scale=1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {"embeddings.word_embeddings.weight": rng.normal(0, 0.2, (24, D)).astype(dtype)}
    for i in range(n_layers):
        for p in ("query", "key", "value"):
            out[QK.format(i=i, p=p)] = (rng.normal(0, 0.2, (D, D)) * scale).astype(dtype)
    return out


def safetensors_bytes(tensors: dict[str, np.ndarray], edit=None) -> bytes:
    """The safetensors format written by hand: 8-byte little-endian header length, the JSON header, the data
    in order. `edit(header)` may change the header before it is written."""
    header, data, offset = {}, [], 0
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {
            "dtype": ST_DTYPES[arr.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(b)],
        }
        data.append(b)
        offset += len(b)
    header["__metadata__"] = {"format": "pt"}
    if edit is not None:
        edit(header)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(data)


def bert_config(n_layers=2, **changes) -> dict:
    cfg = {
        "model_type": "bert",
        "hidden_size": D,
        "num_hidden_layers": n_layers,
        "num_attention_heads": H,
        "intermediate_size": 32,
        "vocab_size": 24,
        "max_position_embeddings": 16,
    }
    cfg.update(changes)
    return cfg


def model_dir(path: Path, tensors=None, edit=None, config=None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    tensors = bert_weights() if tensors is None else tensors
    (path / "model.safetensors").write_bytes(safetensors_bytes(tensors, edit))
    (path / "config.json").write_text(json.dumps(bert_config() if config is None else config))
    return path


def np_scores(M: np.ndarray, num_std=2.0) -> tuple[float, float]:
    """Symmetry and directionality by their definitions, in numpy; M is first divided by its largest |entry|
    (both scores are scale-invariant), so that squares of huge entries stay finite."""
    M = M / np.abs(M).max()
    Ms, Mn = (M + M.T) / 2, (M - M.T) / 2
    s = ((Ms**2).sum() - (Mn**2).sum()) / (M**2).sum()
    r, c = np.linalg.norm(M, axis=1), np.linalg.norm(M, axis=0)
    R = np.clip(r - (r.mean() + num_std * r.std(ddof=1)), 0, None).sum()
    C = np.clip(c - (c.mean() + num_std * c.std(ddof=1)), 0, None).sum()
    return float(s), (0.0 if R + C == 0 else float((R - C) / (R + C)))


BAR = re.compile(r"^(\r[^\r\n]*\d+/\d+ \[[^\r\n]*)+\n?", re.M)


def cli(argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the console script run in this process; argparse's exit included.
    tqdm reads TQDM_DISABLE when it is imported, which in this process (pytest) precedes `--no-progress`, so
    the bars of transformers' GGUF loader are dropped from stderr here (test_gguf_refusals_are_one_line_in_a_
    real_process checks the console script's whole stderr)."""
    code, out, err = cli_in_process(argv)
    return code, out, BAR.sub("", err)


def assert_one_line(result, pattern: str) -> str:
    code, _, err = result
    assert code not in (0, None), err
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert re.search(pattern, err), err
    return err


def score(src, out, *extra):
    return cli(["score", src, "--out", out, "--no-progress", *extra])


def library_refuses(path: Path) -> bool:
    try:
        with safe_open(str(path), framework="pt") as f:
            for k in f.keys():
                f.get_tensor(k)
    except Exception:  # noqa: BLE001 - SafetensorError and whatever else the library raises
        return True
    return False


# ------------------------------------------------------------------------- item 6: garbage in, a number out


def test_overlapping_offsets_are_refused(tmp_path):
    """The query's data offsets are the key's: the library refuses the file, so must the streaming reader."""
    q, k = QK.format(i=0, p="query"), QK.format(i=0, p="key")

    def overlap(h):
        h[q]["data_offsets"] = list(h[k]["data_offsets"])

    d = model_dir(tmp_path / "m", edit=overlap)
    assert library_refuses(d / "model.safetensors")
    out = tmp_path / "s.csv"
    assert_one_line(
        score(d, out),
        r"model\.safetensors: malformed safetensors header: tensor .* "
        r"\(overlapping or non-contiguous offsets\)",
    )
    assert not out.exists()


def test_offsets_with_a_gap_or_trailing_bytes_are_refused(tmp_path):
    d = model_dir(tmp_path / "m")
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes() + b"\0" * 8)
    assert library_refuses(f)
    assert_one_line(score(d, tmp_path / "s.csv"), r"8 bytes after the last tensor")


def test_integer_query_weights_are_refused(tmp_path):
    """An I32 query weight of the right byte size is a valid file (the library reads it); it is no weight."""
    q = QK.format(i=1, p="query")

    def as_int(h):
        h[q]["dtype"] = "I32"

    d = model_dir(tmp_path / "m", edit=as_int)
    assert not library_refuses(d / "model.safetensors")
    out = tmp_path / "s.csv"
    assert_one_line(score(d, out), re.escape(q) + r": dtype int32 is not a floating-point type")
    assert not out.exists()


@pytest.mark.parametrize("scale", [1e150, 1e-140])
def test_float64_weights_out_of_squaring_range_score_exactly(tmp_path, scale):
    """Weights times 1e150 (M ~ 1e298, its squares beyond float64) or 1e-140 (squares below it) score what the
    unscaled weights score: both scores are scale-invariant."""
    plain = bert_weights(dtype=np.float64)
    scaled = {k: v * scale for k, v in plain.items()}
    d = model_dir(tmp_path / "m", tensors=scaled)
    out = tmp_path / "s.csv"
    code, _, err = score(d, out)
    assert code == 0, err
    df = pd.read_csv(out)
    assert list(df.layer) == [0, 1]
    for i in (0, 1):
        M = plain[QK.format(i=i, p="query")].T @ plain[QK.format(i=i, p="key")]
        s, dd = np_scores(M)
        row = df[df.layer == i].iloc[0]
        assert row.symmetry == pytest.approx(s, abs=1e-12) and row.directionality == pytest.approx(dd, abs=1e-12)


def test_scores_of_powers_of_two_multiples_are_the_same():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(3, 12, 12))
    want = [np_scores(a, 1.5) for a in A]
    for e in (-900, -600, 0, 600, 1000):
        s, d = scores(torch.from_numpy(A * 2.0**e), 1.5)
        assert s.tolist() == pytest.approx([w[0] for w in want], abs=1e-12)
        assert d.tolist() == pytest.approx([w[1] for w in want], abs=1e-12)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1"])
def test_num_std_must_be_finite_and_non_negative(tmp_path, value):
    d = model_dir(tmp_path / "m")
    out = tmp_path / "s.csv"
    for argv in (
        ["score", d],
        ["score-checkpoints", tmp_path / "run"],
        ["score-updates", tmp_path / "run", "--corpus", tmp_path / "corpus"],
    ):
        assert_one_line(
            cli(argv + ["--out", out, f"--num-std={value}"]),
            rf"^error: argument --num-std: must be a finite number >= 0, got '{re.escape(value)}'",
        )
    assert_one_line(
        cli(["score-null", "--run-config", tmp_path / "RUN.yaml", "--out", out, f"--num-std={value}"]),
        rf"^error: --num-std must be a finite number >= 0, got {float(value)}",
    )
    assert not out.exists()
    with pytest.raises(ScoreError, match="num_std must be a finite number >= 0"):
        directionality(torch.eye(3) + 0.1, float(value))


def test_checkpoint_with_more_layers_than_the_config(tmp_path):
    d = model_dir(tmp_path / "m", tensors=bert_weights(n_layers=6), config=bert_config(n_layers=3))
    out = tmp_path / "s.csv"
    assert_one_line(
        score(d, out),
        r"the config names 3 encoder layers, but the checkpoint holds attention weights of "
        r"layer 3 \(encoder\.layer\.3\.attention\.self\.query\.weight\)",
    )
    assert not out.exists()


def test_checkpoint_with_fewer_layers_than_the_config(tmp_path):
    d = model_dir(tmp_path / "m", tensors=bert_weights(n_layers=2), config=bert_config(n_layers=3))
    assert_one_line(score(d, tmp_path / "s.csv"), r"checkpoint has no tensor named \*encoder\.layer\.2\.attention")


# --------------------------------------------------------------------- item 7: tracebacks for one line


def _never_open(*a, **k):
    raise AssertionError("the model was opened before --out was checked")


@pytest.mark.parametrize("where", ["file-parent", "dev-null"])
def test_unwritable_out_is_checked_before_loading(tmp_path, monkeypatch, where):
    d = model_dir(tmp_path / "m")
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "sub" / "s.csv" if where == "file-parent" else Path("/dev/null/s.csv")
    monkeypatch.setattr(checkpoints, "open_source", _never_open)
    assert_one_line(score(d, out), rf"{re.escape(str(out))}: cannot write there \(.* is not a directory\)")
    assert_one_line(cli(["score-checkpoints", tmp_path / "run", "--out", out]), r"cannot write there")
    assert_one_line(cli(["extract-wqk", d, "--name", "x", "--out", out.with_suffix(".npz")]), r"cannot write there")
    table = tmp_path / "t.csv"
    table.write_text("a,b\n1,2\n")
    assert_one_line(cli(["concat-tables", table, "--out", out]), r"cannot write there")
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in a read-only folder")
def test_out_in_a_read_only_folder(tmp_path, monkeypatch):
    d = model_dir(tmp_path / "m")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    monkeypatch.setattr(checkpoints, "open_source", _never_open)
    try:
        assert_one_line(score(d, ro / "s.csv"), r"cannot write there \(.* is not writable\)")
    finally:
        ro.chmod(0o700)


def test_missing_out_folders_are_still_created(tmp_path):
    d = model_dir(tmp_path / "m")
    out = tmp_path / "new" / "deeper" / "s.csv"
    code, _, err = score(d, out)
    assert code == 0, err
    assert sorted(p.name for p in out.parent.iterdir()) == ["s.csv"]


@pytest.mark.parametrize(
    "shape",
    [
        "[Infinity, 16]",
        "[1e20, 0]",
        "[100000000000000000000, 0]",
        "[-16, -16]",
        "[16.0, 16]",
        "[NaN, 16]",
        "[true, 16]",
    ],
)
def test_header_shapes_that_are_not_integers(tmp_path, shape):
    d = model_dir(tmp_path / "m")
    f = d / "model.safetensors"
    q = QK.format(i=0, p="query")
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = raw[8 : 8 + n].decode()
    header = header.replace(f'"{q}": {{"dtype": "F32", "shape": [16, 16]', f'"{q}": {{"dtype": "F32", "shape": {shape}')
    assert shape in header
    h = header.encode()
    f.write_bytes(struct.pack("<Q", len(h)) + h + raw[8 + n :])
    assert library_refuses(f)
    out = tmp_path / "s.csv"
    assert_one_line(score(d, out), r"model\.safetensors: malformed safetensors header")
    assert not out.exists()


@pytest.mark.parametrize(
    "change,pattern",
    [
        ({"model_type": ["bert"]}, r"config\.json: model_type must be a non-empty string, got \['bert'\]"),
        ({"model_type": 7}, r"config\.json: model_type must be a non-empty string, got 7"),
        ({"num_attention_heads": "twelve"}, r"num_attention_heads.*'twelve'"),
        ({"num_attention_heads": 0}, r"num_attention_heads.*0"),
        ({"num_hidden_layers": 2.5}, r"num_hidden_layers.*2\.5"),
        ({"hidden_size": True}, r"hidden_size.*True"),
    ],
)
def test_config_values_of_the_wrong_kind(tmp_path, change, pattern):
    d = model_dir(tmp_path / "m", config=bert_config(**change))
    out = tmp_path / "s.csv"
    assert_one_line(score(d, out), pattern)
    assert not out.exists()


def test_concat_tables_on_a_binary_file(tmp_path):
    good = tmp_path / "a.csv"
    good.write_text("x,y\n1,2\n")
    binary = tmp_path / "b.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    out = tmp_path / "all.csv"
    assert_one_line(
        cli(["concat-tables", good, binary, "--out", out]), rf"{re.escape(str(binary))}: not a UTF-8 CSV table"
    )
    assert not out.exists()


def test_prepare_corpus_refuses_a_negative_seed(tmp_path):
    cfg = tmp_path / "CORPUS.yaml"
    cfg.write_text(yaml.safe_dump({"dataset": "text_files", "paths": [str(tmp_path)], "seed": -1}))
    out = tmp_path / "corpus"
    assert_one_line(cli(["prepare-corpus", "--config", cfg, "--out", out]), r"`seed` must be >= 0, got -1")
    assert not out.exists()


def test_score_updates_on_a_truncated_snapshot(tmp_path):
    from helpers import tiny_bert as tiny_model
    from helpers import token_blocks as blocks
    from helpers import write_heldout_corpus as write_corpus
    from helpers import write_snapshot_run as write_run

    corpus = write_corpus(tmp_path / "corpus", blocks(n_blocks=12))
    run = write_run(tmp_path / "run", "encoder", {0: tiny_model("encoder", 1), 10: tiny_model("encoder", 2)}, corpus)
    f = run / "checkpoints" / "step-0000000" / "model.safetensors"  # the first snapshot transformers loads
    f.write_bytes(f.read_bytes()[:-100])
    out = tmp_path / "u.csv"
    argv = [
        "score-updates",
        run,
        "--corpus",
        corpus,
        "--out",
        out,
        "--batches",
        "1",
        "--batch-size",
        "4",
        "--no-progress",
    ]
    code, stdout, err = cli(argv)
    # hand-written snapshots have no checksums.json: one legacy warning, then the one error line
    legacy, _, rest = err.partition("\n")
    assert legacy.startswith("warning: ") and "no checksums.json" in legacy, err
    assert_one_line((code, stdout, rest), r"step-0000000/model\.safetensors: truncated")
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ GGUF

G_D, G_HEADS, G_KV, G_FF, G_VOCAB = 16, 2, 2, 32, 32


def write_gguf(path: Path, n_blocks=2, block_count=None, seed=0) -> dict[str, np.ndarray]:
    """A tiny llama GGUF written with the gguf package's writer; returns the tensors written."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_block_count(n_blocks if block_count is None else block_count)
    w.add_context_length(32)
    w.add_embedding_length(G_D)
    w.add_feed_forward_length(G_FF)
    w.add_head_count(G_HEADS)
    w.add_head_count_kv(G_KV)
    w.add_rope_dimension_count(G_D // G_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(G_VOCAB)
    dh = G_D // G_HEADS
    t = {"token_embd.weight": rng.normal(0, 0.2, (G_VOCAB, G_D)), "output_norm.weight": np.ones(G_D)}
    for i in range(n_blocks):
        t.update(
            {
                f"blk.{i}.attn_norm.weight": np.ones(G_D),
                f"blk.{i}.ffn_norm.weight": np.ones(G_D),
                f"blk.{i}.attn_q.weight": rng.normal(0, 0.2, (G_HEADS * dh, G_D)),
                f"blk.{i}.attn_k.weight": rng.normal(0, 0.2, (G_KV * dh, G_D)),
                f"blk.{i}.attn_v.weight": rng.normal(0, 0.2, (G_KV * dh, G_D)),
                f"blk.{i}.attn_output.weight": rng.normal(0, 0.2, (G_D, G_HEADS * dh)),
                f"blk.{i}.ffn_gate.weight": rng.normal(0, 0.2, (G_FF, G_D)),
                f"blk.{i}.ffn_up.weight": rng.normal(0, 0.2, (G_FF, G_D)),
                f"blk.{i}.ffn_down.weight": rng.normal(0, 0.2, (G_D, G_FF)),
            }
        )
    t = {k: v.astype(np.float32) for k, v in t.items()}
    for k, v in t.items():
        w.add_tensor(k, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return t


def gguf_reference(path: Path):
    """Per layer (symmetry, directionality) read with gguf's own reader and numpy, or None where no score is
    defined: a file the reader refuses, a metadata/tensor mismatch, a missing or non-finite q/k weight. The
    q/k rows are in llama.cpp's order (rotary pairs permuted within each head), which leaves each head's
    W_q,h^T W_k,h unchanged, so heads are contiguous row blocks here."""
    import gguf

    try:
        r = gguf.GGUFReader(str(path))
        meta = {k: f.contents() for k, f in r.fields.items()}
        names = [t.name for t in r.tensors]
        tensors = {
            t.name: np.asarray(gguf.dequantize(t.data, t.tensor_type), dtype=np.float64)
            for t in r.tensors
            if re.fullmatch(r"blk\.\d+\.attn_[qk]\.weight", t.name)
        }
        n, heads = meta["llama.block_count"], meta["llama.attention.head_count"]
        kv = meta.get("llama.attention.head_count_kv", heads)  # llama.cpp's default: one per query head
    except Exception:  # noqa: BLE001 - the reference refuses the file
        return None
    stored = {int(m.group(1)) for x in names if (m := re.match(r"blk\.(\d+)\.", x))}
    if not all(isinstance(v, int) and v >= 1 for v in (n, heads, kv)) or stored != set(range(n)) or heads % kv:
        return None
    rows = []
    for i in range(n):
        q, k = tensors.get(f"blk.{i}.attn_q.weight"), tensors.get(f"blk.{i}.attn_k.weight")
        if q is None or k is None or q.ndim != 2 or q.shape[0] % heads or q.shape[1] != G_D:
            return None
        dh = q.shape[0] // heads
        if dh == 0 or k.shape != (kv * dh, G_D) or not (np.isfinite(q).all() and np.isfinite(k).all()):
            return None
        M = sum(
            q[h * dh : (h + 1) * dh].T @ k[(h // (heads // kv)) * dh : (h // (heads // kv) + 1) * dh]
            for h in range(heads)
        )
        if not np.isfinite(M).all() or not M.any():
            return None
        rows.append(np_scores(M))
    return rows


def test_gguf_scores_equal_an_independent_read(tmp_path):
    f = tmp_path / "tiny.gguf"
    write_gguf(f)
    out = tmp_path / "s.csv"
    code, _, err = score(f, out)
    assert code == 0, err
    df = pd.read_csv(out)
    want = gguf_reference(f)
    assert want is not None and len(df) == len(want) == 2
    for (s, d), row in zip(want, df.itertuples()):
        assert row.symmetry == pytest.approx(s, abs=1e-6) and row.directionality == pytest.approx(d, abs=1e-6)


def test_gguf_cut_at_1000_bytes(tmp_path):
    f = tmp_path / "tiny.gguf"
    write_gguf(f)
    f.write_bytes(f.read_bytes()[:1000])
    out = tmp_path / "s.csv"
    assert_one_line(score(f, out), r"tiny\.gguf: cannot (read GGUF (config|metadata)|load GGUF weights) \(")
    assert not out.exists()


@pytest.mark.parametrize(
    "n_blocks,block_count,pattern",
    [
        (2, 1, r"stores tensors of block 1, but its metadata names 1 layers"),
        (2, 3, r"stores no tensor for model\.layers\.2\.self_attn\.[qk]_proj\.weight"),
    ],
)
def test_gguf_metadata_and_tensors_disagree(tmp_path, n_blocks, block_count, pattern):
    f = tmp_path / "tiny.gguf"
    write_gguf(f, n_blocks=n_blocks, block_count=block_count)
    assert gguf_reference(f) is None
    assert_one_line(score(f, tmp_path / "s.csv"), pattern)


@pytest.mark.slow
def test_gguf_refusals_are_one_line_in_a_real_process(tmp_path):
    """transformers logs through its own stderr handler, which the in-process tests do not see: the console
    script's whole stderr must still be the one error line."""
    import subprocess
    import sys

    cut, short = tmp_path / "cut.gguf", tmp_path / "short.gguf"
    write_gguf(cut)
    cut.write_bytes(cut.read_bytes()[:1000])
    write_gguf(short, n_blocks=2, block_count=3)
    for f in (cut, short):
        out = tmp_path / f"{f.stem}.csv"
        r = subprocess.run(
            [sys.executable, "-m", "attention_geometry.cli", "score", str(f), "--out", str(out), "--no-progress"],
            capture_output=True,
            text=True,
        )
        assert_one_line((r.returncode, r.stdout, r.stderr), re.escape(f.name))
        assert not out.exists()


# ------------------------------------------------------------------------------------------------ fuzz

FUZZ = dict(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
N_TENSORS = len(bert_weights())
JSON_VALUES = st.one_of(
    st.integers(-3, 2**66),
    st.floats(),
    st.text(max_size=3),
    st.none(),
    st.lists(st.integers(-2, 1100), max_size=3),
    st.sampled_from(["F32", "F16", "F64", "I32", "BF16"]),
)
BYTE = st.tuples(st.just("byte"), st.floats(0, 1, exclude_max=True), st.integers(0, 255), st.booleans())
MUTATION = st.one_of(
    st.tuples(
        st.just("header"),
        st.integers(0, N_TENSORS - 1),
        st.sampled_from(["dtype", "shape", "data_offsets"]),
        JSON_VALUES,
    ),
    st.tuples(st.just("swap"), st.integers(0, N_TENSORS - 1), st.integers(0, N_TENSORS - 1)),
    BYTE,
    BYTE,
    BYTE,
    BYTE,
    BYTE,
    BYTE,  # most byte changes land in the data: a number must come out, the right one
    st.tuples(st.just("cut"), st.floats(0, 1)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("length"), st.integers(-16, 16)),
)


def mutate_bytes(raw: bytes, mutations, header_end: int) -> bytes:
    """Byte-level mutations: set one byte (in the first header_end bytes when asked), cut, append, or change
    the 8-byte header length (safetensors)."""
    b = bytearray(raw)
    for m in mutations:
        if m[0] == "byte" and b:
            b[int(m[1] * (min(header_end, len(b)) if m[3] else len(b)))] = m[2]
        elif m[0] == "cut":
            del b[int(m[1] * len(b)) :]
        elif m[0] == "append":
            b += m[1]
        elif m[0] == "length" and len(b) >= 8:
            b[:8] = struct.pack("<Q", max(0, struct.unpack("<Q", bytes(b[:8]))[0] + m[1]))
    return bytes(b)


def st_reference(d: Path, n_layers=2):
    """Per layer (symmetry, directionality) of a BERT folder read with the safetensors library and numpy, or
    None where no score is defined."""
    try:
        with safe_open(str(d / "model.safetensors"), framework="pt") as f:
            ws = {k: f.get_tensor(k) for k in f.keys()}
    except Exception:  # noqa: BLE001 - the library refuses the file
        return None
    layers = {int(m.group(1)) for k in ws if (m := re.search(r"encoder\.layer\.(\d+)\.attention\.self\.", k))}
    if layers - set(range(n_layers)):
        return None
    rows = []
    for i in range(n_layers):
        q, k = ws.get(QK.format(i=i, p="query")), ws.get(QK.format(i=i, p="key"))
        if q is None or k is None or not (q.is_floating_point() and k.is_floating_point()):
            return None
        if q.ndim != 2 or q.shape != k.shape or q.shape[1] != D or q.shape[0] % H or q.shape[0] == 0:
            return None
        qn, kn = q.double().numpy(), k.double().numpy()
        if not (np.isfinite(qn).all() and np.isfinite(kn).all()):
            return None
        M = qn.T @ kn
        if not np.isfinite(M).all() or not M.any():
            return None
        rows.append(np_scores(M))
    return rows


def outcome(src: Path, out: Path):
    """The scores the CLI wrote, or None after one `error:` line (anything else fails the test)."""
    code, _, err = score(src, out)
    event("scored" if code == 0 else "refused: " + re.sub(r"\(.*", "", err.split(": ", 2)[-1])[:40])
    if code == 0:
        df = pd.read_csv(out)
        return list(zip(df.symmetry, df.directionality))
    assert_one_line((code, "", err), r".")
    assert not out.exists()
    return None


@settings(max_examples=200, **FUZZ)
@given(mutations=st.lists(MUTATION, min_size=1, max_size=2))
def test_fuzz_safetensors_reader(mutations):
    names = list(bert_weights())

    def edit(h):
        for m in mutations:
            if m[0] == "header":
                h[names[m[1]]][m[2]] = m[3]
            elif m[0] == "swap":
                a, b = h[names[m[1]]], h[names[m[2]]]
                a["data_offsets"], b["data_offsets"] = b["data_offsets"], a["data_offsets"]

    with tempfile.TemporaryDirectory() as tmp:
        d = model_dir(Path(tmp) / "m", edit=edit)
        f = d / "model.safetensors"
        raw = f.read_bytes()
        f.write_bytes(mutate_bytes(raw, mutations, 8 + struct.unpack("<Q", raw[:8])[0]))
        want = st_reference(d)
        got = outcome(d, Path(tmp) / "s.csv")
        assert (got is None) == (want is None), (got, want)
        if got is not None:
            assert len(got) == len(want)
            for (s, dd), (ws, wd) in zip(got, want):
                assert s == pytest.approx(ws, abs=1e-9) and dd == pytest.approx(wd, abs=1e-9)


GGUF_MUTATION = st.one_of(
    BYTE,
    BYTE,
    BYTE,
    BYTE,
    BYTE,
    BYTE,
    st.tuples(st.just("cut"), st.floats(0, 1)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=16)),
)


@settings(max_examples=50, **FUZZ)
@given(mutations=st.lists(GGUF_MUTATION, min_size=1, max_size=2))
def test_fuzz_gguf_reader(mutations):
    """A GGUF with random byte changes (most in its metadata and tensor table), cut or extended: one error
    line, or the scores of gguf's own reader. The reference refusing the file means the CLI must refuse it."""
    gguf = pytest.importorskip("gguf")
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "tiny.gguf"
        write_gguf(f)
        raw = f.read_bytes()
        f.write_bytes(mutate_bytes(raw, mutations, gguf.GGUFReader(str(f)).data_offset))
        want = gguf_reference(f)
        got = outcome(f, Path(tmp) / "s.csv")
        if want is None:
            assert got is None
        if got is not None:
            assert len(got) == len(want)
            for (s, dd), (ws, wd) in zip(got, want):
                assert s == pytest.approx(ws, abs=1e-9) and dd == pytest.approx(wd, abs=1e-9)
