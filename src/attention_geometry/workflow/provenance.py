"""What ran: installed package versions and the machine, for the reproduction report's provenance table."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from collections.abc import Iterable


def package_versions(names: Iterable[str]) -> dict[str, str]:
    """Installed distribution versions ("not installed" where missing). This project, when it runs from a
    source tree on PYTHONPATH without being installed (the workflow's conda envs), is reported as the version
    of the code that runs, marked "(source tree)"."""
    from attention_geometry import __version__

    out = {}
    for n in names:
        try:
            out[n] = importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            out[n] = f"{__version__} (source tree)" if n == "attention-geometry" else "not installed"
    return out


def machine() -> dict[str, str]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": str(os.cpu_count()),
    }
