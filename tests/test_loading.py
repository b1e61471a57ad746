"""Weight sources: the streaming safetensors reader against the safetensors library, sharded checkpoints,
.bin (weights only), in-memory models, hub routing, and every bad input as a one-line LoadError."""

import json
import struct

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import BertConfig, BertModel

from attention_geometry.architectures.registry import UnsupportedArchitecture
from attention_geometry.errors import UserError
from attention_geometry.weights import safetensors_io
from attention_geometry.weights.base import LoadError, StateDictSource
from attention_geometry.weights.loading import open_source
from attention_geometry.weights.safetensors_io import SafetensorsSource


def tiny_bert(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=32,
        max_position_embeddings=24,
        **kw,
    )
    return BertModel(cfg, add_pooling_layer=False).eval()


@pytest.fixture
def saved(tmp_path):
    m = tiny_bert()
    d = tmp_path / "tiny-bert"
    m.save_pretrained(d)
    return m, d


def test_streaming_reader_matches_safetensors_library(saved):
    m, d = saved
    src = open_source(d)
    assert isinstance(src, SafetensorsSource)
    assert src.name == "tiny-bert" and src.model_type == "bert"
    with safe_open(str(d / "model.safetensors"), framework="pt") as f:
        ref_keys = list(f.keys())
        assert sorted(src.keys()) == sorted(ref_keys)
        for k in ref_keys:
            t = src.get(k)
            r = f.get_tensor(k)
            assert t.dtype == r.dtype and t.shape == r.shape and torch.equal(t, r), k
    assert src.n_params == m.num_parameters()


def test_streaming_reader_dtypes(tmp_path):
    torch.manual_seed(1)
    tensors = {
        "a.bf16": torch.randn(3, 5).to(torch.bfloat16),
        "b.f16": torch.randn(7).to(torch.float16),
        "c.f64": torch.randn(2, 2, 2, dtype=torch.float64),
        "d.i64": torch.arange(6).reshape(2, 3),
        "e.bool": torch.tensor([True, False, True]),
        "f.scalar": torch.tensor(2.5),
        "g.empty": torch.zeros(0, 4),
    }
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    BertConfig(hidden_size=8, num_attention_heads=2).save_pretrained(tmp_path)
    src = open_source(tmp_path)
    for k, v in tensors.items():
        got = src.get(k)
        assert got.dtype == v.dtype and got.shape == v.shape and torch.equal(got, v), k
    # floating-point tensors only: 15 + 7 + 8 + 1 + 0
    assert src.n_params == 31


def test_streaming_reads_only_requested_bytes(saved, monkeypatch):
    """The scorer reads the headers and the q/k tensors, nothing else, and never maps the file."""
    _, d = saved
    import mmap

    monkeypatch.setattr(mmap, "mmap", lambda *a, **k: pytest.fail("the streaming reader must not mmap"))
    read = {"bytes": 0}
    real_open = open

    class Counting:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def read(self, n=-1):
            b = self.f.read(n)
            read["bytes"] += len(b)
            return b

        def readinto(self, buf):
            n = self.f.readinto(buf)
            read["bytes"] += n
            return n

        def seek(self, *a):
            return self.f.seek(*a)

    monkeypatch.setattr(safetensors_io, "open", lambda *a, **k: Counting(real_open(*a, **k)), raising=False)
    from attention_geometry.scoring.scorer import score_model

    score_model(d, progress=False)
    with safe_open(str(d / "model.safetensors"), framework="pt") as f:
        qk = sum(
            f.get_tensor(k).numel() * 4
            for k in f.keys()
            if k.endswith(("attention.self.query.weight", "attention.self.key.weight"))
        )
    (n,) = struct.unpack("<Q", (d / "model.safetensors").read_bytes()[:8])
    assert read["bytes"] == 8 + n + qk
    assert qk < (d / "model.safetensors").stat().st_size / 4


def test_sharded_safetensors(tmp_path):
    m = tiny_bert(seed=2)
    m.save_pretrained(tmp_path, max_shard_size="8KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    assert not (tmp_path / "model.safetensors").exists()
    src = open_source(tmp_path)
    sd = m.state_dict()
    assert sorted(src.keys()) == sorted(index["weight_map"])
    for k in src.keys():
        assert torch.equal(src.get(k), sd[k]), k
    assert src.n_params == m.num_parameters()


def test_sharded_missing_shard(tmp_path):
    tiny_bert().save_pretrained(tmp_path, max_shard_size="8KB")
    shard = sorted(tmp_path.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(LoadError, match=shard.name):
        open_source(tmp_path)


def test_truncated_file(saved):
    _, d = saved
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 100])
    with pytest.raises(LoadError, match=r"model\.safetensors: truncated"):
        open_source(d)


def test_header_beyond_file(saved):
    _, d = saved
    f = d / "model.safetensors"
    f.write_bytes(struct.pack("<Q", 10**6) + b"{}")
    with pytest.raises(LoadError, match="model.safetensors: malformed or truncated"):
        open_source(d)


@pytest.mark.parametrize(
    "header",
    [
        b"not json at all",
        b'["a list"]',
        b'{"w": {"dtype": "F32", "shape": [2]}}',
        b'{"w": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}}',
        b'{"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 4]}}',
    ],
)
def test_malformed_header(saved, header):
    _, d = saved
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 16)
    with pytest.raises(LoadError, match=r"model\.safetensors: malformed"):
        open_source(d)


def test_missing_pieces(tmp_path):
    with pytest.raises(LoadError, match="no config.json"):
        open_source(tmp_path)
    BertConfig().save_pretrained(tmp_path)
    (tmp_path / "weights.gguf").write_bytes(b"")
    with pytest.raises(LoadError, match=r"no weights .*weights\.gguf: pass --gguf-file"):
        open_source(tmp_path)
    with pytest.raises(LoadError, match="no such file or directory"):
        open_source(tmp_path / "absent")
    with pytest.raises(LoadError, match="no such file or directory"):
        open_source("./not/a/hub/id")
    with pytest.raises(LoadError, match="GGUF file does not exist"):
        open_source(tmp_path, gguf_file="other.gguf")


def test_unknown_model_type(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-family"}))
    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(UnsupportedArchitecture, match=r"'no-such-family'.*supported: .*bert"):
        open_source(tmp_path)
    (tmp_path / "config.json").write_text("{ not json")
    with pytest.raises(LoadError, match="config.json: malformed config"):
        open_source(tmp_path)


def test_bin_weights_only(tmp_path):
    m = tiny_bert(seed=3)
    m.config.save_pretrained(tmp_path)
    torch.save(m.state_dict(), tmp_path / "pytorch_model.bin")
    src = open_source(tmp_path)
    assert isinstance(src, StateDictSource)
    sd = m.state_dict()
    assert sorted(src.keys()) == sorted(sd)
    for k in sd:
        assert torch.equal(src.get(k), sd[k])
    assert src.n_params == m.num_parameters()


class Payload:  # anything but plain tensors must be refused
    def __reduce__(self):
        return (print, ("unpickled!",))


def test_bin_refuses_arbitrary_pickles(tmp_path, capsys):
    BertConfig().save_pretrained(tmp_path)
    torch.save({"w": torch.zeros(2), "x": Payload()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(LoadError, match="pytorch_model.bin: refused to unpickle"):
        open_source(tmp_path)
    assert "unpickled!" not in capsys.readouterr().out


def test_bin_truncated(tmp_path):
    m = tiny_bert()
    m.config.save_pretrained(tmp_path)
    torch.save(m.state_dict(), tmp_path / "pytorch_model.bin")
    data = (tmp_path / "pytorch_model.bin").read_bytes()
    (tmp_path / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(LoadError, match="pytorch_model.bin: cannot read"):
        open_source(tmp_path)


def test_in_memory_model():
    m = tiny_bert(seed=4)
    src = open_source(m, name="mine")
    assert src.name == "mine" and src.model_type == "bert" and src.model is m
    sd = m.state_dict()
    assert sorted(src.keys()) == sorted(sd)
    assert src.n_params == m.num_parameters()
    with pytest.raises(UserError, match="not a transformers model"):
        open_source(object())


def test_hub_id_routing(saved, monkeypatch):
    _, d = saved
    calls = []

    def fake_snapshot_download(repo_id, revision=None, allow_patterns=None, **kw):
        calls.append((repo_id, revision, list(allow_patterns)))
        return str(d)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    src = open_source("some-org/tiny-bert", revision="v1.0")
    assert isinstance(src, SafetensorsSource) and src.name == "some-org/tiny-bert"
    assert len(calls) == 1
    repo, rev, patterns = calls[0]
    assert (repo, rev) == ("some-org/tiny-bert", "v1.0")
    assert "config.json" in patterns and "model.safetensors" in patterns
    assert not any(p.endswith((".bin", ".py", "*")) for p in patterns)  # nothing else is fetched
    calls.clear()
    open_source("tiny-bert")
    assert calls[0][1] == "main"


def test_hub_id_falls_back_to_bin(tmp_path, monkeypatch):
    m = tiny_bert(seed=5)
    m.config.save_pretrained(tmp_path)
    torch.save(m.state_dict(), tmp_path / "pytorch_model.bin")
    seen = []

    def fake(repo_id, revision=None, allow_patterns=None, **kw):
        seen.append(list(allow_patterns))
        return str(tmp_path)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    src = open_source("org/bin-only")
    assert isinstance(src, StateDictSource)
    assert len(seen) == 2 and "pytorch_model.bin" in seen[1] and "model.safetensors" in seen[0]


def test_hub_unreachable(monkeypatch):
    import huggingface_hub

    def offline(*a, **k):
        raise OSError("We couldn't connect to the hub\nmore lines")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(LoadError, match=r"^org/model@main: not a local path, and the hub download failed") as e:
        open_source("org/model")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("revision", [None, "main", "v1.0", "abc123"])
def test_remote_code_needs_a_pinned_commit(revision):
    # refused before anything is downloaded (no network is touched): a moving branch, a tag or a short hash
    # would run whatever code the repository holds on the day the job runs
    from attention_geometry.weights.base import LoadError
    from attention_geometry.weights.loading import open_source

    with pytest.raises(LoadError, match="40-hex commit hash"):
        open_source("facebook/MobileLLM-125M", revision=revision, trust_remote_code=True)
    with pytest.raises(LoadError, match="40-hex commit hash"):
        open_source("some-org/some-gguf-repo", gguf_file="m.gguf", revision=revision, trust_remote_code=True)


def test_remote_code_refusal_is_one_cli_line(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "x.csv"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "attention_geometry.cli",
            "score",
            "facebook/MobileLLM-125M",
            "--trust-remote-code",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: facebook/MobileLLM-125M: trust_remote_code")
    assert not out.exists()


def test_default_name_is_the_repo_id_the_folder_records(saved, tmp_path):
    """`--name` unset: a model card that loads exactly one repo id, or a hub cache snapshot, names the model;
    otherwise the folder's name (config.json's _name_or_path, the model it was loaded from, never)."""
    m, d = saved
    assert json.loads((d / "config.json").read_text()).get("_name_or_path", "") in ("", str(d))
    assert open_source(d).name == "tiny-bert"  # no card
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "_name_or_path": "base-org/base-model"}))
    assert open_source(d).name == "tiny-bert"
    (d / "README.md").write_text(
        "# tiny\n```python\nmodel = SentenceTransformer('my-org/tiny-bert-v2')\n"
        'tok = AutoTokenizer.from_pretrained("my-org/tiny-bert-v2")\n```\n'
    )
    assert open_source(d).name == "my-org/tiny-bert-v2"
    assert open_source(d, name="mine").name == "mine"  # an explicit --name wins
    # a card that loads two repos (e.g. a base and this model) does not say which is this one
    (d / "README.md").write_text("AutoModel.from_pretrained('org/a')\nAutoModel.from_pretrained('org/b')\n")
    assert open_source(d).name == "tiny-bert"
    snap = tmp_path / "hub" / "models--some-org--tiny-bert" / "snapshots" / "0123abcd"
    m.save_pretrained(snap)
    assert open_source(snap).name == "some-org/tiny-bert"


def test_default_name_of_a_gguf_file_is_its_source_repo(tmp_path):
    from attention_geometry.weights import loading

    gguf = pytest.importorskip("gguf")

    def write(path, **fields):
        w = gguf.GGUFWriter(str(path), "llama")
        for key, value in fields.items():
            w.add_string(key, value)
        w.add_tensor("blk.0.attn_q.weight", torch.zeros(4, 4).numpy())
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return gguf.GGUFReader(str(path))

    converted = write(
        tmp_path / "model.Q8_0.gguf",
        **{"general.name": "Some Run Name", "general.source.huggingface.repository": "org/Model-1B"},
    )
    assert loading.gguf_model_name(converted, "model.Q8_0.gguf") == "org/Model-1B"
    bare = write(tmp_path / "other.gguf", **{"general.name": "Some Run Name"})
    assert loading.gguf_model_name(bare, "other.gguf") == "other"
    # the q/k reader's header gives the same labels
    from attention_geometry.weights.gguf_qk import read_gguf_header

    assert loading.gguf_model_name(read_gguf_header(tmp_path / "model.Q8_0.gguf"), "model.Q8_0.gguf") == "org/Model-1B"
    assert loading.gguf_model_name(read_gguf_header(tmp_path / "other.gguf"), "other.gguf") == "other"
