"""Reading a hub model's safetensors weights without downloading them: HTTP range requests for the headers
and the requested tensors only, so the bytes fetched scale with the q/k tensors, not the checkpoint.

`hub_safetensors(repo_id, revision, trust_remote_code)` resolves the revision to its commit (one API call
that also lists the repository's files), downloads config.json and the shard index (and `*.py` for remote
code) into the hub cache, and returns that folder with the commit and an `open_file(name) -> HubFile` for
safetensors_io.SafetensorsSource; None where the range path does not apply (offline mode, no safetensors
weights), and loading.open_source downloads the files as before. A `HubFile` asks for each span with a
`Range` header and accepts a 206 answer for that span or the start of it (a server that caps its answers:
the rest is asked for again). A server that answers 200 (the whole file: a mirror or proxy without range
support), for a header or a tensor read alike, is not read from: the file is downloaded into the hub cache
(huggingface_hub.hf_hub_download) and read from there. An answer that contradicts itself (a 416 for a span
inside the size it states, totals that differ between answers) is a LoadError naming the server's answer,
and so is a file that does not parse at the size the server states (safetensors_io names the answer).

Each file has an overall deadline, DEADLINE_ENV seconds (default DEFAULT_DEADLINE): the time spent reading
it (requests, waits between retries, the download) past that is one LoadError line, so a server that trickles
bytes (each read in time, the whole never) does not hold a run forever. Token (`HF_TOKEN`), endpoint
(`HF_ENDPOINT`), offline mode and the HTTP session are huggingface_hub's own (build_hf_headers,
get_session); a span whose connection drops is asked for again from where it stopped (huggingface_hub's
http_stream_backoff cannot resume a body).
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from attention_geometry.weights.base import LoadError, first_line
from attention_geometry.weights.safetensors_io import LocalFile

__all__ = ["HubFile", "hub_safetensors", "hub_deadline", "SMALL_FILES", "DEADLINE_ENV", "DEFAULT_DEADLINE"]

SMALL_FILES = ["config.json", "model.safetensors.index.json"]  # downloaded whole (into the hub cache)
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$|^bytes \*/(\d+)$")
RETRIES = 3  # a span is asked for again (from where it stopped) after a lost connection or a 429/5xx, this often
_RETRY_STATUS = (408, 429, 500, 502, 503, 504)
DEADLINE_ENV = "ATTENTION_GEOMETRY_HUB_DEADLINE"
DEFAULT_DEADLINE = 1800.0  # seconds spent reading one file, at most


def hub_deadline() -> float:
    """The deadline per hub file in seconds: DEADLINE_ENV if set (a number > 0), else DEFAULT_DEADLINE."""
    raw = os.environ.get(DEADLINE_ENV, "").strip()
    if not raw:
        return DEFAULT_DEADLINE
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise LoadError(f"{DEADLINE_ENV}={raw!r}: the deadline per hub file must be a number of seconds > 0")
    return value


# Why not huggingface_hub.HfFileSystem (2.4.0, fsspec) or get_safetensors_metadata: measured against
# tests/fakehub.py with benchmarks/hub_bytes.py, weight-file bytes for "score the hub id", quick-check
# (3.39 MB) / default (1.235 GB) checkpoint: this reader 395,512 / 83,894,656; HfFileSystem's default
# (readahead, 5 MiB blocks) 3,388,152 (the whole checkpoint) / 186,646,576; cache_type="bytes" 3,388,152 / -;
# cache_type="none" 395,512 / 83,894,656 (equal; wall 2.8 s vs 2.5 s); headers through
# get_safetensors_metadata (a fixed 100 kB first read per shard) 695,515 / 84,494,662. Even with
# cache_type="none", 8 of 13 tests in tests/test_hub.py fail: its _fetch_range takes a 200 answer's body as
# the span (50,000 bytes asked at offset 100,000, 392,408 bytes of the file's start returned: wrong weights,
# no error), has no per-file deadline (a trickling server holds the run), takes the size from the tree API
# and so misses a Content-Range that contradicts it, and re-asks a dropped span whole after a 1 s wait
# (http_backoff) instead of resuming it. So the range reader stays; URLs, headers, session, errors, the
# download fallback and the repository listing are huggingface_hub's.
class HubFile:
    """One file of a hub repository at a commit, read span by span with HTTP range requests.

    `size` is known after the first read (from the answer's Content-Range; `size_note` says which answer);
    `bytes_read` counts the body bytes received by range requests; `spent` the seconds spent reading (the
    deadline's clock); `downloaded` is the local copy once the server has answered a range request with
    the whole file."""

    def __init__(self, repo_id: str, filename: str, commit: str, deadline: float | None = None):
        from huggingface_hub import hf_hub_url

        self.repo_id, self.filename, self.commit = repo_id, filename, commit
        self.url = hf_hub_url(repo_id, filename, revision=commit)
        self.where = f"{repo_id}@{commit[:12]}/{filename}"
        self.deadline = hub_deadline() if deadline is None else deadline
        self.spent = 0.0
        self.bytes_read = 0
        self.downloaded: LocalFile | None = None
        self._size: int | None = None
        self._answer = ""  # the answer that stated the size

    @property
    def size(self) -> int:
        if self.downloaded is not None:
            return self.downloaded.size
        if self._size is None:
            raise LoadError(f"{self.where}: the server did not give the file's size (Content-Range)")
        return self._size

    @property
    def size_note(self) -> str:
        """Where the size came from, for the messages of a file that does not parse at that size."""
        if self.downloaded is not None or not self._answer:
            return ""
        return self._answer

    def read_into(self, offset: int, view: memoryview, what: str = "") -> int:
        """Read len(view) bytes at `offset` into `view`; the number read (fewer at the end of the file). A
        connection lost mid-body is resumed where it stopped, a short answer completed by asking again for the
        rest; a failed connection or a 429/5xx answer is retried after 1, 2, 4 s (RETRIES times in all
        without progress). A 200 answer: the file is downloaded and read locally (as from then on)."""
        if self.downloaded is not None:
            return self.downloaded.read_into(offset, view, what)
        start = time.monotonic()
        try:
            return self._read(offset, view, what, start)
        finally:
            self.spent += time.monotonic() - start

    def _left(self, start: float) -> float:
        return self.deadline - self.spent - (time.monotonic() - start)

    def _late(self, start: float, what: str) -> LoadError:
        spent = self.spent + time.monotonic() - start
        return LoadError(
            f"{self.where}: {spent:.1f} s spent reading it{' (' + what + ')' if what else ''} reached the deadline "
            f"per hub file ({DEADLINE_ENV}={self.deadline:g} s): the server is stalled or too slow; try again, "
            f"or set {DEADLINE_ENV} higher"
        )

    def _set_size(self, total: int, answer: str) -> None:
        if self._size is not None and total != self._size:
            raise LoadError(
                f"{self.where}: the server's answers disagree on the file's size: {self._size} bytes "
                f"({self._answer}), then {total} ({answer})"
            )
        self._size, self._answer = total, answer

    def _read(self, offset: int, view: memoryview, what: str, start: float) -> int:
        import httpx2
        from huggingface_hub import constants
        from huggingface_hub.utils import build_hf_headers, get_session

        label = f"{self.where}: cannot read{' ' + what if what else ''}"
        got = failures = 0
        while got < len(view):
            left = self._left(start)
            if left <= 0:
                raise self._late(start, what)
            before = got
            span = (offset + got, offset + len(view) - 1)
            headers = build_hf_headers()
            headers.update({"Range": f"bytes={span[0]}-{span[1]}", "Accept-Encoding": "identity"})
            try:
                with get_session().stream(
                    "GET",
                    self.url,
                    headers=headers,
                    follow_redirects=True,
                    timeout=min(constants.HF_HUB_DOWNLOAD_TIMEOUT, left),
                ) as r:
                    if r.status_code in _RETRY_STATUS and failures < RETRIES:
                        failures += 1
                        time.sleep(max(0.0, min(2 ** (failures - 1), 8, self._left(start))))
                        continue
                    if r.status_code == 200:  # the whole file: not read here, downloaded below
                        whole = True
                    else:
                        whole = False
                        end = self._check_answer(r, span, label)
                        if end is None:  # the span starts at the end of the file
                            return got
                        got = self._body(r, view, got, end - offset + 1, start, what)
            except httpx2.TransportError as exc:  # connection refused, lost or timed out: ask for the rest
                if self._left(start) <= 0:
                    raise self._late(start, what) from None
                failures += got == before
                if failures > RETRIES:
                    raise LoadError(
                        f"{label} ({type(exc).__name__}: {first_line(exc)}; tried {RETRIES + 1} times)"
                    ) from None
                if got == before:
                    time.sleep(max(0.0, min(2 ** (failures - 1), 8, self._left(start))))
                continue
            except (OSError, httpx2.HTTPError) as exc:  # HfHubHTTPError (401/403 gated, 404) is an OSError
                status = getattr(getattr(exc, "response", None), "status_code", None)
                hint = (
                    "; a gated or private model: accept its licence on the hub and set HF_TOKEN"
                    if status in (401, 403)
                    else ""
                )
                raise LoadError(f"{label} ({type(exc).__name__}: {first_line(exc)}{hint})") from None
            if whole:
                return self._download(start, what).read_into(offset + got, view[got:], what) + got
            if self._size is not None and offset + got >= self._size:
                return got  # the end of the file
            if got == before:  # an answer without a byte of the span
                failures += 1
                if failures > RETRIES:
                    raise LoadError(f"{label}: the server's answers bring no bytes (tried {RETRIES + 1} times)")
        return got

    def _check_answer(self, r, span: tuple[int, int], label: str) -> int | None:
        """The last byte of the span a non-200 answer `r` sends (None: the span starts at or past the end of the
        file); a LoadError naming the answer where it is not a 206 for the start of `span`."""
        from huggingface_hub.utils import hf_raise_for_status

        cr = r.headers.get("Content-Range", "").strip()
        answer = f"status {r.status_code}, Content-Range {cr!r}"
        m = _CONTENT_RANGE.match(cr)
        if r.status_code == 416 and m and m.group(4):
            total = int(m.group(4))
            if total <= span[0]:
                self._set_size(total, f"{answer} for bytes {span[0]}-{span[1]}")
                return None
            raise LoadError(
                f"{label}: the server answered bytes {span[0]}-{span[1]} with {answer} (range not satisfiable), "
                f"though that span starts inside the {total} bytes it states: the server's error, not the file's"
            )
        hf_raise_for_status(r)
        if r.status_code != 206 or not m or m.group(4) or int(m.group(1)) != span[0] or int(m.group(2)) > span[1]:
            raise LoadError(f"{label}: the server answered bytes {span[0]}-{span[1]} with {answer}")
        if m.group(3) != "*":
            self._set_size(int(m.group(3)), answer)
            if int(m.group(2)) >= int(m.group(3)):
                raise LoadError(
                    f"{label}: the server answered bytes {span[0]}-{span[1]} with {answer} (past its total)"
                )
        return int(m.group(2))

    def _body(self, r, view: memoryview, got: int, stop: int, start: float, what: str) -> int:
        """Read the answer's body into view[got:stop] as the bytes arrive (checking the deadline after each)."""
        for chunk in r.iter_bytes():
            n = len(chunk)
            if got + n > stop:
                raise LoadError(f"{self.where}: the server sent more than the {stop - got} bytes its answer states")
            view[got : got + n] = chunk
            got += n
            self.bytes_read += n
            if self._left(start) <= 0:
                raise self._late(start, what)
        return got

    def _download(self, start: float, what: str) -> LocalFile:
        """The server ignores range requests: the whole file into the hub cache (within the deadline)."""
        from huggingface_hub import hf_hub_download

        result: dict = {}

        def work():
            try:
                result["path"] = hf_hub_download(self.repo_id, self.filename, revision=self.commit)
            except BaseException as exc:  # noqa: BLE001 - reported below, in the caller's thread
                result["error"] = exc

        thread = threading.Thread(target=work, name=f"download {self.where}", daemon=True)
        thread.start()
        thread.join(max(0.0, self._left(start)))
        if thread.is_alive():  # left running (a daemon thread): the caller gives up on this file
            raise self._late(
                start, f"downloading it whole, the server ignoring range requests{'; ' + what if what else ''}"
            )
        if "error" in result:
            exc = result["error"]
            raise LoadError(
                f"{self.where}: the server ignores HTTP range requests and downloading the file failed "
                f"({type(exc).__name__}: {first_line(exc)})"
            )
        self.downloaded = LocalFile(result["path"])
        self.downloaded.where = self.where
        return self.downloaded


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
