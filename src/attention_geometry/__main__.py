"""`python -m attention_geometry COMMAND ...`: the `attention-geometry` CLI without its console script (the
workflow's rules run it so, with the checkout's src/ on PYTHONPATH: workflow.jobs.shell_prefix)."""

import sys

from attention_geometry.cli import main

sys.exit(main())
