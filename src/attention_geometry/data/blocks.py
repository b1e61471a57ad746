"""The middle of prepare-corpus: the cleaned documents cached on disk, their encoding, and the block writer
that lays out the .npy files of the prepared-corpus format (attention_geometry.formats.corpus)."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from attention_geometry.data.corpus_config import CorpusConfig
from attention_geometry.data.sources import clean

__all__ = ["Documents", "encode", "BlockWriter", "DocumentWriter", "writer", "raw_to_npy", "count_blocks"]


class Documents:
    """The cleaned documents of one prepare, in source order, cached in one UTF-8 file with offsets (so the
    hub is read once and the tokenizer can be trained and applied in separate passes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets = np.zeros(1, dtype=np.int64)
        self.sha256 = ""
        self._mm: np.ndarray | None = None

    def collect(self, texts: Iterable[Any], cfg: CorpusConfig) -> None:
        from tqdm.auto import tqdm

        h = hashlib.sha256()
        offsets = [0]
        total = 0
        with open(self.path, "wb") as f, tqdm(desc="reading documents", unit="doc", mininterval=1.0) as bar:
            for text in texts:
                doc = clean(text)
                if not doc:
                    continue
                if cfg.split_characters:  # what the tokenizer, the split and the duplicate check all see
                    doc = " ".join(doc)
                b = doc.encode("utf-8")
                if cfg.max_bytes is not None and total + len(b) > cfg.max_bytes:
                    break
                f.write(b)
                h.update(b + b"\0")
                total += len(b)
                offsets.append(total)
                bar.update(1)
                if cfg.max_documents is not None and len(offsets) - 1 >= cfg.max_documents:
                    break
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.sha256 = h.hexdigest()
        self._mm = np.memmap(self.path, dtype=np.uint8, mode="r") if total else np.zeros(0, np.uint8)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_bytes(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, i: int) -> str:
        a, b = self.offsets[i], self.offsets[i + 1]
        return bytes(self._mm[a:b]).decode("utf-8")

    def close(self) -> None:
        self._mm = None


def encode(tok, docs: Documents, idx: np.ndarray, desc: str, chunk: int = 256) -> Iterator[list[int]]:
    from tqdm.auto import tqdm

    with tqdm(total=len(idx), desc=desc, unit="doc", mininterval=1.0) as bar:
        for start in range(0, len(idx), chunk):
            part = [docs[int(i)] for i in idx[start : start + chunk]]
            for enc in tok.encode_batch(part, add_special_tokens=False):
                yield enc.ids
            bar.update(len(part))


class BlockWriter:
    """Concatenates documents (separated by [SEP]) and writes [CLS] + body + [SEP] blocks as raw rows;
    the last partial block is dropped."""

    def __init__(self, path: Path, block_len: int, cls: int, sep: int, dtype: np.dtype) -> None:
        self.f = open(path, "wb")
        self.block_len, self.body, self.cls, self.sep, self.dtype = block_len, block_len - 2, cls, sep, dtype
        self.buf: list[np.ndarray] = []
        self.n_buf = 0
        self.n_blocks = 0
        self.n_tokens = 0
        self.n_documents = 0

    def add(self, ids: list[int]) -> None:
        if self.n_documents:
            self.buf.append(np.array([self.sep], dtype=self.dtype))
            self.n_buf += 1
        self.buf.append(np.asarray(ids, dtype=self.dtype))
        self.n_buf += len(ids)
        self.n_tokens += len(ids)
        self.n_documents += 1
        if self.n_buf >= self.body * 4096:
            self._flush()

    def _flush(self) -> None:
        stream = np.concatenate(self.buf) if self.buf else np.zeros(0, self.dtype)
        m = len(stream) // self.body
        if m:
            blocks = np.empty((m, self.block_len), dtype=self.dtype)
            blocks[:, 0] = self.cls
            blocks[:, -1] = self.sep
            blocks[:, 1:-1] = stream[: m * self.body].reshape(m, self.body)
            self.f.write(blocks.tobytes())
            self.n_blocks += m
        rest = stream[m * self.body :]
        self.buf, self.n_buf = [rest], len(rest)

    def close(self) -> int:
        self._flush()
        self.f.close()
        return self.n_blocks


class DocumentWriter:
    """One row per document (layout `documents`): [CLS] + its first block_len - 2 ids + [SEP], then [PAD] up
    to block_len, as a BERT tokenizer's `truncation=True, padding='max_length', max_length=block_len` lays it
    out. `n_tokens` counts the ids kept."""

    def __init__(self, path: Path, block_len: int, cls: int, sep: int, pad: int, dtype: np.dtype) -> None:
        self.f = open(path, "wb")
        self.block_len, self.cls, self.sep, self.pad, self.dtype = block_len, cls, sep, pad, dtype
        self.rows: list[np.ndarray] = []
        self.n_blocks = self.n_tokens = self.n_documents = 0

    def add(self, ids: list[int]) -> None:
        body = np.asarray(ids[: self.block_len - 2], dtype=self.dtype)
        row = np.full(self.block_len, self.pad, dtype=self.dtype)
        row[0] = self.cls
        row[1 : 1 + len(body)] = body
        row[1 + len(body)] = self.sep
        self.rows.append(row)
        self.n_tokens += len(body)
        self.n_documents += 1
        if len(self.rows) >= 4096:
            self._flush()

    def _flush(self) -> None:
        if self.rows:
            self.f.write(np.stack(self.rows).tobytes())
            self.n_blocks += len(self.rows)
            self.rows = []

    def close(self) -> int:
        self._flush()
        self.f.close()
        return self.n_blocks


def writer(cfg: CorpusConfig, path: Path, special: dict[str, int], dtype: np.dtype) -> BlockWriter | DocumentWriter:
    """The writer of the corpus's layout (CorpusConfig.layout)."""
    if cfg.layout == "documents":
        return DocumentWriter(path, cfg.block_len, special["cls"], special["sep"], special["pad"], dtype)
    return BlockWriter(path, cfg.block_len, special["cls"], special["sep"], dtype)


def raw_to_npy(raw: Path, npy: Path, n_rows: int, n_cols: int, dtype: np.dtype) -> None:
    """A .npy file (the header np.save writes) followed by the raw rows."""
    with open(npy, "wb") as out:
        np.lib.format.write_array_header_1_0(
            out, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (n_rows, n_cols)}
        )
        with open(raw, "rb") as f:
            shutil.copyfileobj(f, out, 1 << 24)
    raw.unlink()


def count_blocks(tok, docs: Documents, idx: np.ndarray, block_len: int, layout: str = "packed") -> int:
    """The rows documents idx give: packed blocks, or one per document (layout `documents`)."""
    if layout == "documents":
        return len(idx)
    n = sum(len(ids) for ids in encode(tok, docs, idx, "counting held-out")) + max(len(idx) - 1, 0)
    return n // (block_len - 2)
