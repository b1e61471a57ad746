"""A local stand-in for the Hugging Face hub: a threaded HTTP server over folders of files, answering the calls
huggingface_hub makes to read a model or dataset repository, and counting the body bytes it sends. A repository
is a folder; a dataset repository's key starts with `datasets/` (`datasets/org/name`), as in the hub's URLs.

    /api/{models|datasets}/{repo}/revision/{rev}    model_info / dataset_info: {"id", "sha", "siblings"}
    /api/{models|datasets}/{repo}/tree/{rev}[/{path}]  list_repo_tree (`recursive`): files with size, oid (the git
                                                    blob id) and, for LFS files, lfs {oid: sha256, size}; folders
    HEAD|GET /[datasets/]{repo}/resolve/{rev}/{file}  the file (ETag: the git blob id, or for an LFS file
                                                    X-Linked-Etag: its sha256); GET with `Range: bytes=a-b` -> 206
                                                    (unless ranges=False: 200)

Revisions, URL-quoted as huggingface_hub sends them (`refs%2Fconvert%2Fparquet`): every revision names COMMIT
unless `refs` (revision -> commit) is set; then a revision that is neither a key nor a value of it is a 404
RevisionNotFound. An unknown repository is a 404 RepoNotFound, an unknown file or folder a 404 EntryNotFound.

Misbehaviours of real servers (mirrors, proxies, CDNs), switched on per test on the FakeHub (weight files
only): `whole_after` (ranges honoured that often, then 200 and the whole file), `trickle` (bodies sent 16
bytes at a time with this many seconds between), `short_body` (206 bodies cut to this many bytes, the
Content-Range saying so), `refuse_ranges` (416 for spans inside the file), `total_offset` (added to the
Content-Range total).

Used by tests/test_hub.py and by hand for the README's measurement (python tests/fakehub.py --help).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_CHUNK = 1 << 20
# files the hub stores with LFS (its default .gitattributes), and any file of 10 MB or more
LFS_SUFFIXES = (".parquet", ".safetensors", ".bin", ".arrow", ".gguf", ".h5", ".msgpack", ".pt", ".pth", ".npy", ".zip")
LFS_MIN_SIZE = 10 * 1000 * 1000


def is_lfs(path: Path) -> bool:
    return path.suffix in LFS_SUFFIXES or path.stat().st_size >= LFS_MIN_SIZE


def git_blob_id(path: Path) -> str:
    """The git blob id (sha1 of `blob SIZE\\0` + content): a regular file's oid and ETag on the hub."""
    return _digest(path, "blob")


def file_sha256(path: Path) -> str:
    return _digest(path, "sha256")


@functools.lru_cache(maxsize=4096)
def _cached_digest(path: Path, kind: str, size: int, mtime_ns: int) -> str:
    data = path.read_bytes()
    if kind == "blob":
        return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()
    return hashlib.sha256(data).hexdigest()


def _digest(path: Path, kind: str) -> str:
    """A file's digest, computed once per content (size and mtime): every ranged answer for a 1 GB shard names
    its ETag, and hashing the shard at each one made benchmarks/hub_bytes.py 10x slower."""
    st = path.stat()
    return _cached_digest(path, kind, st.st_size, st.st_mtime_ns)


class FakeHub:
    """repos: repo id -> local folder. `sent[path]` counts the body bytes sent per file path (repo/file)."""

    def __init__(self, repos: dict[str, Path], ranges: bool = True):
        self.repos = {k: Path(v) for k, v in repos.items()}
        self.ranges = ranges
        self.status: int | None = None  # e.g. 401: refuse every weight file (.safetensors), as for a gated repo
        self.drop_after: int | None = None  # the next long enough weight-file body: cut after this many bytes
        self.whole_after: int | None = None  # answer this many weight-file range requests, then 200 (whole file)
        self.trickle: float | None = None  # weight-file bodies: 16 bytes, then this many seconds' pause, ...
        self.short_body: int | None = None  # 206 bodies of at most this many bytes (Content-Range consistent)
        self.refuse_ranges = False  # 416 (with the true size) for every weight-file span
        self.total_offset = 0  # added to the total in Content-Range
        self.ranged = 0  # weight-file range requests seen
        self.sent: Counter[str] = Counter()
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self.lock = threading.Lock()
        self.stopped = False  # set when the server shuts down: a trickling body stops
        self.refs: dict[str, str] | None = None  # revision -> commit; None: every revision is COMMIT

    def commit(self, revision: str) -> str | None:
        """The commit a revision names (None: no such revision)."""
        if self.refs is None:
            return COMMIT
        if revision in self.refs:
            return self.refs[revision]
        return revision if revision in self.refs.values() else None

    def downloads(self) -> list[str]:
        """`repo/file` of every file body asked for so far (each GET of a /resolve/ URL that names a file)."""
        found = [resolve_target(self, p.split("/")) for m, p, r in self.requests if m == "GET" and "/resolve/" in p]
        return [f[2] for f in found if not isinstance(f, str)]

    def answer(self, size: int, weights: bool, range_header: str | None) -> tuple[int, int, int]:
        """(status, first byte, last byte) of the answer to a GET of a file of `size` bytes (a weight file or
        not) with this Range header (None: no range, or a HEAD)."""
        rng = re.fullmatch(r"bytes=(\d+)-(\d*)", range_header or "")
        if rng and weights:
            with self.lock:
                self.ranged += 1
                if self.whole_after is not None and self.ranged > self.whole_after:
                    rng = None
        if not rng or not self.ranges:
            return 200, 0, size - 1
        start = int(rng.group(1))
        end = min(int(rng.group(2)) if rng.group(2) else size - 1, size - 1)
        if start >= size or (weights and self.refuse_ranges):
            return 416, start, end
        if weights and self.short_body:
            end = min(end, start + self.short_body - 1)
        return 206, start, end

    @property
    def total_sent(self) -> int:
        return sum(self.sent.values())

    def files(self, repo: str) -> list[Path]:
        root = self.repos[repo]
        return sorted(p for p in root.rglob("*") if p.is_file())


def _tree(root: Path, names: list[str], sub: str, recursive: bool) -> list[dict]:
    """list_repo_tree's entries under folder `sub` ("" for the root): folders, then files."""
    under = [n for n in names if not sub or n.startswith(sub + "/")]
    folders = sorted({"/".join(n.split("/")[:k]) for n in under for k in range(1, n.count("/") + 1)})
    folders = [d for d in folders if not sub or d.startswith(sub + "/")]
    depth = sub.count("/") + 1 if sub else 0
    entries = [
        {"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "path": d}
        for d in folders
        if recursive or d.count("/") == depth
    ]
    for n in under:
        if recursive or n.count("/") == depth:
            f = root / n
            entry = {"type": "file", "oid": git_blob_id(f), "size": f.stat().st_size, "path": n}
            if is_lfs(f):
                entry["lfs"] = {"oid": file_sha256(f), "size": f.stat().st_size, "pointerSize": 134}
            entries.append(entry)
    return entries


def api_answer(hub: FakeHub, raw: list[str], query: dict[str, str]) -> tuple[int, object]:
    """(200, the JSON) or (404, the X-Error-Code) of /api/{models|datasets}/{org}/{name}/{revision|tree}/{rev}
    [/{path}], each part one URL segment (`raw`, unquoted)."""
    kind, repo_parts, rest = raw[1], raw[2:4], raw[4:]
    repo = "/".join(repo_parts) if kind == "models" else "datasets/" + "/".join(repo_parts)
    if kind not in ("models", "datasets") or repo not in hub.repos or len(rest) < 2:
        return 404, "RepoNotFound"
    what, rev, sub = rest[0], rest[1], "/".join(rest[2:])
    commit = hub.commit(rev)
    if commit is None:
        return 404, "RevisionNotFound"
    root = hub.repos[repo]
    names = [p.relative_to(root).as_posix() for p in hub.files(repo)]
    repo_id = "/".join(repo_parts)
    if what == "revision":
        info = {"id": repo_id, "modelId": repo_id, "sha": commit, "private": False}
        return 200, {**info, "siblings": [{"rfilename": n} for n in names]}
    if what != "tree" or (sub and not (root / sub).is_dir()):
        return 404, "EntryNotFound"
    return 200, _tree(root, names, sub, query.get("recursive", "").lower() == "true")


def resolve_target(hub: FakeHub, raw: list[str]) -> tuple[Path, str, str] | str:
    """(the file, its commit, `repo/file`) of /[datasets/]{org}/{name}/resolve/{rev}/{file} (`raw`: the URL's
    segments, unquoted; the revision is one segment), or the X-Error-Code of the 404."""
    path = "/".join(raw)
    repo = next((r for r in hub.repos if path.startswith(r + "/")), None)
    if repo is None:
        return "RepoNotFound"
    skip = repo.count("/") + 1
    if raw[skip : skip + 1] != ["resolve"] or len(raw) < skip + 3:
        return "EntryNotFound"
    commit, name = hub.commit(raw[skip + 1]), "/".join(raw[skip + 2 :])
    if commit is None:
        return "RevisionNotFound"
    file = hub.repos[repo] / name
    return (file, commit, f"{repo}/{name}") if file.is_file() else "EntryNotFound"


def _handler(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _json(self, obj) -> None:
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _missing(self, code: str = "EntryNotFound") -> None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.send_header("X-Error-Code", code)
            self.end_headers()

        def do_HEAD(self):
            self._serve(head=True)

        def do_GET(self):
            self._serve(head=False)

        def _api(self, raw: list[str]) -> None:
            status, answer = api_answer(hub, raw, dict(parse_qsl(urlsplit(self.path).query)))
            return self._json(answer) if status == 200 else self._missing(answer)

        def _serve(self, head: bool) -> None:
            raw = [unquote(x) for x in urlsplit(self.path).path.lstrip("/").split("/")]
            path = "/".join(raw)
            with hub.lock:
                hub.requests.append((self.command, path, self.headers.get("Range")))
            if raw[0] == "api":
                return self._api(raw)
            found = resolve_target(hub, raw)
            if isinstance(found, str):
                return self._missing(found)
            file, commit, key = found
            if hub.status and file.suffix == ".safetensors":
                body = b'{"error": "Access to model is restricted."}'
                self.send_response(hub.status)
                self.send_header("X-Error-Code", "GatedRepo")
                self.send_header("X-Error-Message", "Access to model is restricted.")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body if not head else b"")
                return
            size = file.stat().st_size
            weights = file.suffix == ".safetensors"
            status, start, end = hub.answer(size, weights, None if head else self.headers.get("Range"))
            if status == 416:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(status)
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("ETag", f'"{git_blob_id(file)}"')
            if is_lfs(file):
                self.send_header("X-Linked-Etag", f'"{file_sha256(file)}"')
                self.send_header("X-Linked-Size", str(size))
            self.send_header("X-Repo-Commit", commit)
            self.send_header("Accept-Ranges", "bytes" if hub.ranges else "none")
            if status == 206:
                total = size + (hub.total_offset if weights else 0)
                self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
            self.end_headers()
            if head:
                return
            self._send_file(file, start, end, key, weights)

        def _send_file(self, file: Path, start: int, end: int, key: str, weights: bool) -> None:
            """Bytes start..end of `file` as the body (cut short or trickled as the hub's switches say)."""
            try:
                with open(file, "rb") as f:
                    f.seek(start)
                    left = end - start + 1
                    with hub.lock:
                        cut = hub.drop_after if weights and (hub.drop_after or left) < left else None
                        if cut is not None:
                            hub.drop_after = None
                    if cut is not None:  # send part of the body, then hang up
                        left = cut
                        self.close_connection = True
                    pause = hub.trickle if weights else None
                    while left > 0 and not hub.stopped:
                        chunk = f.read(min(16 if pause else _CHUNK, left))
                        self.wfile.write(chunk)
                        left -= len(chunk)
                        with hub.lock:
                            hub.sent[key] += len(chunk)
                        if pause:
                            self.wfile.flush()
                            time.sleep(pause)
            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading (a 200 it refused)
                self.close_connection = True

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a client that hung up (a refused 200): not an error
        pass


@contextmanager
def serve(repos: dict[str, Path], ranges: bool = True) -> Iterator[tuple[FakeHub, str]]:
    """(the hub, its endpoint URL) while the server runs on a free local port."""
    hub = FakeHub(repos, ranges)
    server = _Server(("127.0.0.1", 0), _handler(hub))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        hub.stopped = True
        server.shutdown()
        server.server_close()


def tiny_llama(d: Path) -> Path:
    """A random Llama checkpoint (bf16, grouped-query attention, 3 layers) in two safetensors shards with an
    index, written with the safetensors library; the embeddings and MLPs make q/k a small part of it, as in a
    real model."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=2000,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=False,
    )
    cfg.save_pretrained(d)
    g = torch.Generator().manual_seed(0)
    sd = {"model.embed_tokens.weight": (2000, 64), "lm_head.weight": (2000, 64), "model.norm.weight": (64,)}
    for i in range(3):
        p = f"model.layers.{i}."
        sd.update(
            {
                p + "self_attn.q_proj.weight": (64, 64),
                p + "self_attn.k_proj.weight": (32, 64),
                p + "self_attn.v_proj.weight": (32, 64),
                p + "self_attn.o_proj.weight": (64, 64),
                p + "mlp.up_proj.weight": (256, 64),
                p + "mlp.down_proj.weight": (64, 256),
            }
        )
    sd = {k: torch.randn(*s, generator=g).to(torch.bfloat16) for k, s in sd.items()}
    keys = sorted(sd)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for f, ks in shards.items():
        save_file({k: sd[k] for k in ks}, d / f)
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {k: f for f, ks in shards.items() for k in ks}})
    )
    return d


if __name__ == "__main__":  # serve folders by hand: python tests/fakehub.py org/name=/path/to/folder ...
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repos", nargs="+", metavar="REPO=FOLDER")
    ap.add_argument("--no-ranges", action="store_true", help="answer every GET with the whole file (200)")
    a = ap.parse_args()
    with serve(dict(r.split("=", 1) for r in a.repos), ranges=not a.no_ranges) as (hub, url):
        print(f"HF_ENDPOINT={url}", flush=True)
        try:
            while True:
                time.sleep(5)
        except KeyboardInterrupt:
            print(json.dumps(dict(hub.sent)))


def point_hub(monkeypatch, cache: Path):
    """huggingface_hub online, with an empty cache at `cache` and no token, in this process (its constants are
    read at import, so they are set here rather than through HF_ENDPOINT / HF_HUB_OFFLINE); returns
    point(url), which aims it at a stand-in's endpoint."""
    from huggingface_hub import constants

    def point(url: str) -> None:
        monkeypatch.setattr(constants, "ENDPOINT", url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return point
