"""Hub scoring reads only the safetensors headers and the q/k tensors (HTTP range requests, hub.py), measured
against a local range-capable server standing in for the hub (tests/fakehub.py); a server without range
support falls back to the download; `prefetch-qk` writes the q/k subset that scoring then reads offline.
Servers that misbehave (fakehub's switches): a whole file for a tensor read, bytes trickled past the deadline,
a 416 for a valid span, short partial answers, a wrong Content-Range total."""

from __future__ import annotations

import json
import struct

import fakehub
import pytest
import torch
from safetensors import safe_open

from attention_geometry.cli import main
from attention_geometry.scoring.scorer import score_model
from attention_geometry.weights.base import LoadError
from attention_geometry.weights.loading import open_source
from attention_geometry.weights.prefetch import PREFETCH_MARKER

REPO = "org/tiny-llama"
QK = ("self_attn.q_proj.weight", "self_attn.k_proj.weight")


@pytest.fixture
def checkpoint(tmp_path):
    return fakehub.tiny_llama(tmp_path / "tiny-llama")


@pytest.fixture
def online(monkeypatch, tmp_path):
    """huggingface_hub pointed at a local endpoint, online, with an empty cache (its constants are read at
    import, so they are set here rather than through HF_ENDPOINT / HF_HUB_OFFLINE)."""
    return fakehub.point_hub(monkeypatch, tmp_path / "hub-cache")


def expected_bytes(d):
    """(weight-file bytes a q/k-only reader needs: each shard's 8-byte length + header + its q/k tensors,
    the checkpoint's weight-file bytes), computed with the safetensors library."""
    need = total = 0
    for f in sorted(d.glob("*.safetensors")):
        (n,) = struct.unpack("<Q", f.read_bytes()[:8])
        need += 8 + n
        total += f.stat().st_size
        with safe_open(str(f), framework="pt") as st:
            need += sum(st.get_tensor(k).numel() * 2 for k in st.keys() if k.endswith(QK))
    return need, total


def same_scores(a, b):
    assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0
    assert (
        (a.drop(columns=["symmetry", "directionality"]) == b.drop(columns=["symmetry", "directionality"])).all().all()
    )
    for c in ("symmetry", "directionality"):
        assert (a[c] - b[c]).abs().max() <= 1e-6


def test_hub_scoring_reads_only_headers_and_qk_tensors(checkpoint, online):
    ref = score_model(checkpoint, per_head=True, progress=False, name=REPO)
    with fakehub.serve({REPO: checkpoint}) as (hub, url):
        online(url)
        src = open_source(REPO)
        assert src.n_params == ref.n_params[0]
        df = score_model(src, per_head=True, progress=False)
    same_scores(df, ref)
    need, total = expected_bytes(checkpoint)
    weights = sum(v for k, v in hub.sent.items() if k.endswith(".safetensors"))
    assert weights == need and need < total / 10
    small = {f"{REPO}/config.json", f"{REPO}/model.safetensors.index.json"}
    assert set(hub.sent) - small == {f"{REPO}/{f.name}" for f in checkpoint.glob("*.safetensors")}
    assert hub.total_sent == need + sum((checkpoint / k.split("/")[-1]).stat().st_size for k in small)
    ranged = [r for m, p, r in hub.requests if p.endswith(".safetensors")]
    assert ranged and all(r and r.startswith("bytes=") for r in ranged)  # never a whole weight file
    assert all(f"/resolve/{fakehub.COMMIT}/" in p for m, p, r in hub.requests if "/resolve/" in p)  # one commit


def test_a_connection_lost_mid_tensor_is_resumed(checkpoint, online):
    ref = score_model(checkpoint, progress=False, name=REPO)
    with fakehub.serve({REPO: checkpoint}) as (hub, url):
        online(url)
        hub.drop_after = 1000  # the first weight-file body longer than this is cut after 1000 bytes
        df = score_model(REPO, progress=False)
    same_scores(df, ref)
    assert hub.drop_after is None  # the cut happened
    need, _ = expected_bytes(checkpoint)
    weights = sum(v for k, v in hub.sent.items() if k.endswith(".safetensors"))
    assert need <= weights <= need + 1000  # the rest was asked for, not the whole span again
    spans = [(p, *map(int, r[6:].split("-"))) for m, p, r in hub.requests if p.endswith(".safetensors")]
    resumed = [(a, b) for a, b in zip(spans, spans[1:]) if a[0] == b[0] and a[2] == b[2]]  # same file, same end
    assert len(resumed) == 1 and 0 <= resumed[0][1][1] - resumed[0][0][1] <= 1000


def test_server_without_ranges_falls_back_to_the_download(checkpoint, online):
    ref = score_model(checkpoint, progress=False, name=REPO)
    with fakehub.serve({REPO: checkpoint}, ranges=False) as (hub, url):
        online(url)
        df = score_model(REPO, progress=False)
    same_scores(df, ref)
    for f in checkpoint.glob("*.safetensors"):  # downloaded whole
        assert hub.sent[f"{REPO}/{f.name}"] >= f.stat().st_size


def test_prefetch_then_score_offline(checkpoint, online, tmp_path, monkeypatch):
    ref = score_model(checkpoint, per_head=True, progress=False, name=REPO)
    out = tmp_path / "hub-qk" / "tiny-llama"
    with fakehub.serve({REPO: checkpoint}) as (hub, url):
        online(url)
        assert main(["prefetch-qk", REPO, "--out", str(out), "--no-progress"]) == 0
    need, total = expected_bytes(checkpoint)
    assert sum(v for k, v in hub.sent.items() if k.endswith(".safetensors")) == need
    assert sorted(p.name for p in out.iterdir()) == [PREFETCH_MARKER, "config.json", "model.safetensors"]
    assert (out / "config.json").read_bytes() == (checkpoint / "config.json").read_bytes()
    with safe_open(str(out / "model.safetensors"), framework="pt") as st:  # the library reads what we wrote
        assert sorted(st.keys()) == sorted(f"model.layers.{i}.{t}" for i in range(3) for t in QK)
        assert st.metadata()["attention_geometry.origin"] == f"{REPO}@{fakehub.COMMIT}"
        for k in st.keys():
            ref_file = json.loads((checkpoint / "model.safetensors.index.json").read_text())["weight_map"][k]
            with safe_open(str(checkpoint / ref_file), framework="pt") as full:
                assert torch.equal(st.get_tensor(k), full.get_tensor(k))
    assert (out / "model.safetensors").stat().st_size < total / 10
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # the server is gone; nothing may reach for it
    df = score_model(out, per_head=True, progress=False, name=REPO)
    same_scores(df, ref)  # n_params included: the full checkpoint's, from the subset's metadata


def test_prefetch_of_a_bin_folder(tmp_path):
    # a .bin-only model (read weights-only, the download fallback's format) gives the same subset
    from transformers import BertConfig, BertModel

    torch.manual_seed(3)
    m = BertModel(
        BertConfig(
            vocab_size=50,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=32,
            max_position_embeddings=16,
        ),
        add_pooling_layer=False,
    )
    d = tmp_path / "bert-bin"
    m.config.save_pretrained(d)
    torch.save(m.state_dict(), d / "pytorch_model.bin")
    assert main(["prefetch-qk", str(d), "--out", str(tmp_path / "qk"), "--no-progress"]) == 0
    same_scores(score_model(tmp_path / "qk", progress=False, name="b"), score_model(d, progress=False, name="b"))
    with safe_open(str(tmp_path / "qk" / "model.safetensors"), framework="pt") as st:
        assert len(st.keys()) == 4 and all(k.endswith(("query.weight", "key.weight")) for k in st.keys())


def test_gated_repo_without_token_is_one_line(checkpoint, online, monkeypatch):
    with fakehub.serve({REPO: checkpoint}) as (hub, url):
        online(url)
        hub.status = 401  # every weight-file read refused, as the hub does for a gated model without a token
        with pytest.raises(LoadError) as e:
            open_source(REPO)
    assert "\n" not in str(e.value) and "model-00001-of-00002.safetensors" in str(e.value)
    assert "gated or private" in str(e.value) and "HF_TOKEN" in str(e.value)


# ------------------------------------------------------------------------ servers that misbehave (fakehub)


def test_a_whole_file_answer_to_a_tensor_read_falls_back_to_the_download(checkpoint, online):
    # ranges honoured for the headers (2 shards x length + header), then the whole file for the tensor reads
    ref = score_model(checkpoint, progress=False, name=REPO)
    with fakehub.serve({REPO: checkpoint}) as (hub, url):
        online(url)
        hub.whole_after = 4
        df = score_model(REPO, progress=False)
    same_scores(df, ref)
    downloads = {}
    for f in checkpoint.glob("*.safetensors"):  # a shard read for tensors is downloaded whole, once
        path = f"{REPO}/resolve/{fakehub.COMMIT}/{f.name}"
        downloads[f.name] = sum(1 for m, p, r in hub.requests if p == path and r is None and m == "GET")
        if downloads[f.name]:  # (beside its header's range reads and the part of the refused whole-file answer
            # the server wrote before the client hung up)
            assert f.stat().st_size <= hub.sent[f"{REPO}/{f.name}"] <= 2 * f.stat().st_size + 4096
    assert sorted(downloads.values()) == [0, 1]  # the q/k tensors all lie in the first shard


def test_a_trickling_server_meets_the_deadline_of_the_file(checkpoint, online, monkeypatch):
    import time

    monkeypatch.setenv("ATTENTION_GEOMETRY_HUB_DEADLINE", "1")
    with fakehub.serve({REPO: checkpoint}) as (hub, url):
        online(url)
        hub.trickle = 0.05  # 16 bytes every 50 ms: every read returns in time, the file never arrives
        t0 = time.monotonic()
        with pytest.raises(LoadError) as e:
            open_source(REPO)
        elapsed = time.monotonic() - t0
    msg = str(e.value)
    assert "\n" not in msg and ".safetensors" in msg, msg
    assert "ATTENTION_GEOMETRY_HUB_DEADLINE=1" in msg and "deadline" in msg, msg
    assert elapsed < 5, elapsed


def test_a_bad_deadline_setting_is_one_line(checkpoint, online, monkeypatch):
    monkeypatch.setenv("ATTENTION_GEOMETRY_HUB_DEADLINE", "soon")
    with fakehub.serve({REPO: checkpoint}) as (hub, url):
        online(url)
        with pytest.raises(LoadError, match=r"ATTENTION_GEOMETRY_HUB_DEADLINE='soon'.*seconds"):
            open_source(REPO)


def test_a_416_for_a_valid_span_names_the_answer(checkpoint, online):
    with fakehub.serve({REPO: checkpoint}) as (hub, url):
        online(url)
        hub.refuse_ranges = True  # 416 with the file's true size for every weight-file span
        with pytest.raises(LoadError) as e:
            open_source(REPO)
    msg = str(e.value)
    assert "\n" not in msg and "416" in msg and "bytes */" in msg and "not a safetensors file" not in msg, msg


def test_a_short_but_consistent_partial_answer_is_completed(checkpoint, online):
    # a server (a CDN) that caps each 206 body, stating the shorter span in Content-Range: ask again for the rest
    ref = score_model(checkpoint, progress=False, name=REPO)
    with fakehub.serve({REPO: checkpoint}) as (hub, url):
        online(url)
        hub.short_body = 1000  # the headers too are longer
        df = score_model(REPO, progress=False)
    same_scores(df, ref)
    need, _ = expected_bytes(checkpoint)
    assert sum(v for k, v in hub.sent.items() if k.endswith(".safetensors")) == need


@pytest.mark.parametrize("offset", [5, -5])
def test_a_wrong_content_range_total_names_the_servers_answer(checkpoint, online, offset):
    with fakehub.serve({REPO: checkpoint}) as (hub, url):
        online(url)
        hub.total_offset = offset
        with pytest.raises(LoadError) as e:
            open_source(REPO)
    msg = str(e.value)
    assert "\n" not in msg and "Content-Range" in msg and "server" in msg, msg
