"""`attention-geometry run-notebook`: papermill for the notebook rules, with a readable failure.

The rule make_NAME runs NOTEBOOK with its catalog parameters into an executed copy. When a cell raises, the
command prints one `error:` line naming the notebook, the cell and the exception, then that cell's own
traceback (not papermill's Python stack, not the notebook's JSON), and exits 1; the executed copy, with every
cell's output up to the failure, is kept for reading. The kernel talks to papermill over local IPC sockets
(under the temporary folder), not TCP ports, so no kernel warns about unencrypted TCP in every log.

With --input-sums, a run that succeeds then writes the sha256 of the notebook and of every input it read
(`sha256sum` lines): the committed record of what made its outputs, by content (workflow.records.content_current
reads it, so a fresh clone, whose checkout order leaves some inputs newer than their outputs, re-runs nothing
whose inputs are unchanged).

With --tables-record, each input that the committed tables' record lists must have the sha256 recorded there, or
have been written by its own job (workflow.records.table_edits): the parse's checks are skipped under --forceall,
and a rule filter (--allowed-rules) can keep the tables from being remade, so the job that draws from them checks
them itself.

Before the kernel starts, NOTEBOOK must be a notebook file (a missing file, a folder or another format is one
line), and EXECUTED and the input sums are checked as every output is (files.check_out_location): never the
notebook or one of its inputs, nor a device, FIFO or socket.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile

from attention_geometry.errors import UserError
from attention_geometry.formats.files import check_out_location, check_writable

__all__ = ["run_run_notebook"]


def run_run_notebook(args: argparse.Namespace) -> int:
    try:
        parameters = json.loads(args.parameters)
    except ValueError as exc:
        raise UserError(f"--parameters: not JSON ({exc})") from None
    if not isinstance(parameters, dict):
        raise UserError("--parameters: expected a JSON object of parameter values")
    inputs = parameters.get("inputs") or {}
    if not isinstance(inputs, dict):
        raise UserError("--parameters: `inputs` must be a JSON object of input paths")
    _check_notebook(args.notebook)
    read = [args.notebook, *(p for p in inputs.values() if isinstance(p, str) and p and os.path.lexists(p))]
    for out in (args.executed, args.input_sums):
        if out is not None:
            check_writable(out)
            check_out_location(out, read)
    if args.input_sums is not None and os.path.abspath(args.input_sums) == os.path.abspath(args.executed):
        raise UserError(f"{args.input_sums}: is the executed copy too; give --input-sums another path")
    if getattr(args, "tables_record", None):  # the tables a notebook draws from, checked whatever the command line
        from attention_geometry.workflow.records import table_edit_error

        tables = [p for p in inputs.values() if isinstance(p, str) and p]
        error = table_edit_error(args.tables_record, tables, f"{args.notebook} does not draw from it")
        if error:
            raise UserError(error)
    if args.input_sums is not None:  # checked before the run: the sums are written after it, of files only
        for key, path in inputs.items():
            if isinstance(path, str) and path and not os.path.isfile(path):
                what = "a folder" if os.path.isdir(path) else "missing" if not os.path.lexists(path) else "not a file"
                raise UserError(f"{path}: input {key!r} is {what}; --input-sums records the sha256 of input files")
    import papermill
    from jupyter_client.manager import AsyncKernelManager
    from papermill.exceptions import PapermillExecutionError

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            kwargs.setdefault("transport", "ipc")
            kwargs.setdefault("ip", os.path.join(tempfile.gettempdir(), f"attention-geometry-kernel-{os.getpid()}"))
            super().__init__(**kwargs)

    os.makedirs(os.path.dirname(os.path.abspath(args.executed)), exist_ok=True)  # not a declared output
    try:
        papermill.execute_notebook(
            args.notebook,
            args.executed,
            parameters=parameters,
            progress_bar=False,
            log_output=False,
            kernel_manager_class=IPCKernelManager,
        )
    except PapermillExecutionError as exc:
        print(
            f"error: {args.notebook} failed in cell {exc.exec_count and f'In [{exc.exec_count}]' or exc.cell_index}: "
            f"{exc.ename}: {exc.evalue} (executed copy: {args.executed})",
            file=sys.stderr,
        )
        print(re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(exc.traceback)), file=sys.stderr)  # no terminal colours
        return 1
    if args.input_sums:
        from attention_geometry.workflow.records import write_input_sums

        write_input_sums(args.input_sums, [args.notebook, *inputs.values()])
    return 0


def _check_notebook(path: str) -> None:
    """UserError unless `path` is a readable notebook file (nbformat's JSON, any version it reads)."""
    import nbformat

    if not os.path.isfile(path):
        what = "is a folder" if os.path.isdir(path) else "not found" if not os.path.lexists(path) else "not a file"
        raise UserError(f"{path}: {what}; give a notebook file (.ipynb)")
    try:
        with open(path, encoding="utf-8") as fh:
            nbformat.read(fh, as_version=nbformat.NO_CONVERT)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the notebook ({exc.strerror or exc})") from None
    except Exception as exc:  # nbformat's NotJSONError, a validation or decoding error: not a notebook
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(f"{path}: not a Jupyter notebook ({type(exc).__name__}: {first})") from None
