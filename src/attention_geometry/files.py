"""Small file helpers shared by the package: content hashes and config files read with one clear error."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from .errors import UserError


def file_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_yaml(path: str | os.PathLike, what: str, error: type[UserError] = UserError) -> Any:
    """The parsed YAML of `path`; a missing file or invalid YAML raises `error` naming the file."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise error(f"{what} not found: {p}")
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise error(f"{p}: not valid YAML ({str(exc).splitlines()[0]})") from None
