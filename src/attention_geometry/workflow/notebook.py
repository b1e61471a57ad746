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
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile

from attention_geometry.errors import UserError

__all__ = ["add_arguments_run_notebook", "run_run_notebook"]


def add_arguments_run_notebook(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("notebook", metavar="NOTEBOOK", help="the notebook to run (notebooks/NAME.ipynb)")
    parser.add_argument("executed", metavar="EXECUTED", help="where the executed copy goes")
    parser.add_argument(
        "--parameters", required=True, metavar="JSON", help="the parameters cell's values, as a JSON object"
    )
    parser.add_argument(
        "--input-sums",
        metavar="FILE",
        help="after a successful run, write the sha256 of the notebook and of each input (the parameters' "
        "`inputs`) here, as `sha256sum` lines",
    )


def run_run_notebook(args: argparse.Namespace) -> int:
    try:
        parameters = json.loads(args.parameters)
    except ValueError as exc:
        raise UserError(f"--parameters: not JSON ({exc})") from None
    if not isinstance(parameters, dict):
        raise UserError("--parameters: expected a JSON object of parameter values")
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

        write_input_sums(args.input_sums, [args.notebook, *(parameters.get("inputs") or {}).values()])
    return 0
