"""Reading a hub model's safetensors weights without downloading them: HTTP range requests for the headers
and the requested tensors only, so the bytes fetched scale with the q/k tensors, not the checkpoint.

`hub_safetensors(repo_id, revision, trust_remote_code)` resolves the revision to its commit (one API call
that also lists the repository's files), downloads config.json and the shard index (and `*.py` for remote
code) into the hub cache, and returns that folder with the commit and an `open_file(name) -> HubFile` for
safetensors_io.SafetensorsSource; None where the range path does not apply (offline mode, no safetensors
weights), and loading.open_source downloads the files as before. A `HubFile` asks for each span with a
`Range` header and accepts only a 206 answer for exactly that span; a server that answers 200 (the whole
file: a mirror or proxy without range support) raises `RangesUnsupported` before any body is read, and
loading.open_source falls back to the download. Token (`HF_TOKEN`), endpoint (`HF_ENDPOINT`), offline mode
and the HTTP session are huggingface_hub's own (build_hf_headers, get_session); a span whose connection
drops is asked for again from where it stopped (huggingface_hub's http_stream_backoff cannot resume a body).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from attention_geometry.weights.base import LoadError, first_line

__all__ = ["HubFile", "RangesUnsupported", "hub_safetensors", "SMALL_FILES"]

SMALL_FILES = ["config.json", "model.safetensors.index.json"]  # downloaded whole (into the hub cache)
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$|^bytes \*/(\d+)$")
_CHUNK = 1 << 20
RETRIES = 3  # a span is asked for again (from where it stopped) after a lost connection or a 429/5xx, this often
_RETRY_STATUS = (408, 429, 500, 502, 503, 504)


class RangesUnsupported(LoadError):
    """The server answered a range request with the whole file (status 200): read by downloading instead."""


class HubFile:
    """One file of a hub repository at a commit, read span by span with HTTP range requests.

    `size` is known after the first read (from the answer's Content-Range); `bytes_read` counts the body bytes
    received."""

    def __init__(self, repo_id: str, filename: str, commit: str):
        from huggingface_hub import hf_hub_url

        self.url = hf_hub_url(repo_id, filename, revision=commit)
        self.where = f"{repo_id}@{commit[:12]}/{filename}"
        self._size: int | None = None
        self.bytes_read = 0

    @property
    def size(self) -> int:
        if self._size is None:
            raise LoadError(f"{self.where}: the server did not give the file's size (Content-Range)")
        return self._size

    def read_into(self, offset: int, view: memoryview, what: str = "") -> int:
        """Read len(view) bytes at `offset` into `view`; the number read (fewer at the end of the file). A
        connection lost mid-body is resumed where it stopped; a failed connection or a 429/5xx answer is retried
        after 1, 2, 4 s (RETRIES times in all)."""
        import time

        import httpx2
        from huggingface_hub import constants
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        label = f"{self.where}: cannot read{' ' + what if what else ''}"
        got = 0
        for attempt in range(RETRIES + 1):
            if got == len(view):
                break
            before = got
            headers = build_hf_headers()
            headers.update({"Range": f"bytes={offset + got}-{offset + len(view) - 1}", "Accept-Encoding": "identity"})
            try:
                with get_session().stream(
                    "GET", self.url, headers=headers, follow_redirects=True, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT
                ) as r:
                    if r.status_code in _RETRY_STATUS and attempt < RETRIES:
                        time.sleep(min(2**attempt, 8))
                        continue
                    if r.status_code == 200:
                        raise RangesUnsupported(f"{self.where}: the server ignores HTTP range requests")
                    m = _CONTENT_RANGE.match(r.headers.get("Content-Range", "").strip())
                    if r.status_code == 416 and m and m.group(4):  # the span starts at or beyond the end
                        self._size = int(m.group(4))
                        return got
                    hf_raise_for_status(r)
                    if r.status_code != 206 or not m or m.group(4) or int(m.group(1)) != offset + got:
                        raise LoadError(
                            f"{label} (status {r.status_code}, Content-Range "
                            f"{r.headers.get('Content-Range')!r} for bytes {offset + got}..)"
                        )
                    if m.group(3) != "*":
                        self._size = int(m.group(3))
                    for chunk in r.iter_bytes(_CHUNK):
                        n = len(chunk)
                        if got + n > len(view):
                            raise LoadError(f"{label} (the server sent more than the {len(view)} bytes asked for)")
                        view[got : got + n] = chunk
                        got += n
                        self.bytes_read += n
                break
            except httpx2.TransportError as exc:  # connection refused, lost or timed out: ask for the rest
                if attempt == RETRIES:
                    raise LoadError(
                        f"{label} ({type(exc).__name__}: {first_line(exc)}; tried {RETRIES + 1} times)"
                    ) from None
                if got == before:
                    time.sleep(min(2**attempt, 8))
            except (OSError, httpx2.HTTPError) as exc:  # HfHubHTTPError (401/403 gated, 404) is an OSError
                status = getattr(getattr(exc, "response", None), "status_code", None)
                hint = (
                    "; a gated or private model: accept its licence on the hub and set HF_TOKEN"
                    if status in (401, 403)
                    else ""
                )
                raise LoadError(f"{label} ({type(exc).__name__}: {first_line(exc)}{hint})") from None
        return got


def hub_safetensors(
    repo_id: str, revision: str, trust_remote_code: bool
) -> tuple[Path, str, Callable[[str], HubFile]] | None:
    """(local folder with config.json and the index, the commit, open_file) of a hub model whose weights are
    safetensors; None in offline mode or when the repository has no safetensors weights."""
    from huggingface_hub import HfApi, constants, snapshot_download

    if constants.is_offline_mode():
        return None
    info = HfApi().model_info(repo_id, revision=revision)
    files = {s.rfilename for s in info.siblings or ()}
    if not {"model.safetensors", "model.safetensors.index.json"} & files or not info.sha:
        return None
    commit = info.sha
    local = snapshot_download(
        repo_id, revision=commit, allow_patterns=SMALL_FILES + (["*.py"] if trust_remote_code else [])
    )
    return Path(local), commit, lambda name: HubFile(repo_id, name, commit)
