"""A local stand-in for the Hugging Face hub: a threaded HTTP server over folders of files, answering the calls
huggingface_hub makes to read a model repository, and counting the body bytes it sends.

    /api/models/{repo}/revision/{rev}      model_info: {"id", "sha", "siblings"}
    /api/models/{repo}/tree/{rev}          list_repo_tree (recursive): files with size and oid
    HEAD|GET /{repo}/resolve/{rev}/{file}  the file; GET with `Range: bytes=a-b` -> 206 (unless ranges=False: 200)

Misbehaviours of real servers (mirrors, proxies, CDNs), switched on per test on the FakeHub (weight files
only): `whole_after` (ranges honoured that often, then 200 and the whole file), `trickle` (bodies sent 16
bytes at a time with this many seconds between), `short_body` (206 bodies cut to this many bytes, the
Content-Range saying so), `refuse_ranges` (416 for spans inside the file), `total_offset` (added to the
Content-Range total).

Used by tests/test_hub.py and by hand for the README's measurement (python tests/fakehub.py --help).
"""

from __future__ import annotations

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
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_CHUNK = 1 << 20


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

        def _missing(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.send_header("X-Error-Code", "EntryNotFound")
            self.end_headers()

        def _repo_path(self, path: str) -> tuple[str, str] | None:
            for repo in hub.repos:
                if path.startswith(repo + "/"):
                    return repo, path[len(repo) + 1 :]
            return None

        def do_HEAD(self):
            self._serve(head=True)

        def do_GET(self):
            self._serve(head=False)

        def _serve(self, head: bool) -> None:
            path = unquote(urlsplit(self.path).path).lstrip("/")
            with hub.lock:
                hub.requests.append((self.command, path, self.headers.get("Range")))
            if path.startswith("api/models/"):
                found = self._repo_path(path[len("api/models/") :])
                if not found:
                    return self._missing()
                repo, rest = found
                names = [p.relative_to(hub.repos[repo]).as_posix() for p in hub.files(repo)]
                if rest.startswith("revision/"):
                    return self._json(
                        {
                            "id": repo,
                            "modelId": repo,
                            "sha": COMMIT,
                            "private": False,
                            "siblings": [{"rfilename": n} for n in names],
                        }
                    )
                if rest.startswith("tree/"):
                    return self._json(
                        [
                            {
                                "type": "file",
                                "path": n,
                                "size": (hub.repos[repo] / n).stat().st_size,
                                "oid": hashlib.sha1(n.encode()).hexdigest(),
                            }
                            for n in names
                        ]
                    )
                return self._missing()
            found = self._repo_path(path)
            m = re.fullmatch(r"resolve/([^/]+)/(.+)", found[1]) if found else None
            file = hub.repos[found[0]] / m.group(2) if m else None
            if file is None or not file.is_file():
                return self._missing()
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
            self.send_header("ETag", f'"{hashlib.sha1(str(file).encode()).hexdigest()}"')
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("Accept-Ranges", "bytes" if hub.ranges else "none")
            if status == 206:
                total = size + (hub.total_offset if weights else 0)
                self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
            self.end_headers()
            if head:
                return
            self._send_file(file, start, end, f"{found[0]}/{m.group(2)}", weights)

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
