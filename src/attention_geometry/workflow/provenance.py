"""What ran: installed package versions and the machine, for the reproduction report's provenance table; and
what a clone cannot know about its committed results (Snakemake's missing job records, said in one line)."""

from __future__ import annotations

import importlib.metadata
import logging
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


class _MissingMetadata(logging.Filter):
    """Drops Snakemake's per-file "Missing metadata for file ..." warnings (`snakemake --report` in a clone:
    the committed results were made elsewhere, so this clone's .snakemake/ holds no record of their jobs) and
    counts them, so that one line can say what they meant."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.getMessage()).startswith("Missing metadata for file"):
            self.count += 1
            return False
        return True


def quiet_missing_metadata(stream=None) -> _MissingMetadata:
    """Install the filter on Snakemake's logger and, at exit, print one line instead of the dropped warnings
    (none when nothing was dropped). Returns the filter (its `count`)."""
    import atexit
    import sys

    flt = _MissingMetadata()
    logging.getLogger("snakemake.logging").addFilter(flt)

    def _say() -> None:
        if flt.count:
            print(
                f"{flt.count} result file(s) have no Snakemake metadata here (they were made in another checkout and "
                "committed, or their records in .snakemake/ were removed): the report lists them without run "
                "times, which is harmless",
                file=stream or sys.stderr,
            )

    atexit.register(_say)
    return flt
