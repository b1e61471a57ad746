"""workflow.provenance.quiet_missing_metadata: Snakemake's per-file "Missing metadata" warnings of a clone's
report are dropped and counted (the workflow-level check is in tests/test_report.py)."""

from __future__ import annotations

import logging

from attention_geometry.workflow.provenance import quiet_missing_metadata


def test_missing_metadata_warnings_are_counted_not_printed(caplog):
    flt = quiet_missing_metadata()
    log = logging.getLogger("snakemake.logging")
    try:
        with caplog.at_level(logging.WARNING, logger="snakemake.logging"):
            for i in range(3):
                log.warning("Missing metadata for file results/tables/t%d.csv. Maybe metadata was deleted.", i)
            log.warning("another warning")
        assert flt.count == 3
        assert [r.getMessage() for r in caplog.records] == ["another warning"]
    finally:
        log.removeFilter(flt)
        flt.count = 0  # nothing to say at the test process's exit
