"""How the rules' jobs run, as the config sets it, not what they compute: each rule family's threads, memory and
runtime (config `data`, `scoring`, `training`), the SLURM partitions and accounts, how rule train_model starts the
trainer and on which device, the hub offline for every job, and the shell prefix every job's command runs after.
The plan builds it once from the validated config (Plan.jobs), so the rules read no config key for it. The config
records (workflow/records.py) leave all of it out: a result does not depend on the machine that made it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

from attention_geometry.training.launch import TrainLaunch, train_launch, train_mem_mb
from attention_geometry.workflow.runs import Run

__all__ = [
    "JobResources",
    "TrainingJobs",
    "Jobs",
    "jobs",
    "slurm_resources",
    "shell_prefix",
    "rule_python_error",
    "stop",
    "JOB_DISTRIBUTIONS",
    "OFFLINE_ENV",
    "ONLINE_ENV",
]


@dataclass(frozen=True)
class JobResources:
    """A rule family's resources as its config section gives them, handed to Snakemake unchanged: memory per job
    (MB), runtime per job (minutes) and threads (None: the section sets none, as config `data`)."""

    mem_mb: int
    runtime: int
    threads: int | None = None


@dataclass(frozen=True)
class TrainingJobs:
    """Rule train_model's jobs (config `training`): the trainer's `--device`, the job's threads and runtime, its
    memory where the config sets it (None: from each run's model size, run_mem_mb), how the trainer is started
    (training.launch.TrainLaunch: the processes, the retries, the time limit, the resources) and the SLURM
    partition and account."""

    device: str
    threads: int
    runtime: int
    mem_mb: int | None
    launch: TrainLaunch
    slurm: dict[str, str]

    def run_mem_mb(self, run: Run) -> int:
        """The memory (MB) one run's training job asks for: training.mem_mb where the config sets it, else from
        the run's model size, device and processes (training.launch.train_mem_mb)."""
        return train_mem_mb(run.size, run.settings.get("overrides"), self.device, self.launch.processes, self.mem_mb)


@dataclass(frozen=True)
class Jobs:
    """Everything the config sets for how the rules' jobs run."""

    offline: bool  # config offline: the parse sets HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE for every job
    data: JobResources  # rules prepare_corpus and prepare_images
    scoring: JobResources  # the scoring, extraction and null jobs, and the cluster's prefetch jobs
    prefetch_slurm: dict[str, str]  # rule prefetch_qk_on_cluster's partition and account (scoring.prefetch_slurm_*)
    training: TrainingJobs


def jobs(config: Mapping) -> Jobs:
    """The job settings of a validated config (Snakemake's validate has filled in the schema's defaults; only
    training.mem_mb has none)."""
    data, scoring, training = config["data"], config["scoring"], config["training"]
    return Jobs(
        offline=config["offline"],
        data=JobResources(mem_mb=data["mem_mb"], runtime=data["runtime"]),
        scoring=JobResources(mem_mb=scoring["mem_mb"], runtime=scoring["runtime"], threads=scoring["threads"]),
        prefetch_slurm=slurm_resources(scoring, "prefetch_"),  # large prefetches: a partition with the network
        training=TrainingJobs(
            device=training["device"],
            threads=training["threads"],
            runtime=training["runtime"],
            mem_mb=training.get("mem_mb"),
            launch=train_launch(training),  # torchrun / srun for several GPUs or nodes
            slurm=slurm_resources(training),  # e.g. a GPU partition for training only
        ),
    )


def slurm_resources(section: Mapping, prefix: str = "") -> dict[str, str]:
    """The SLURM resources a config section sets for its rules' jobs (`slurm_partition`, `slurm_account`, each
    read as PREFIX + key), only those given: an absent key leaves the profile's default-resources in force."""
    return {k: str(section[prefix + k]) for k in ("slurm_partition", "slurm_account") if section.get(prefix + k)}


OFFLINE_ENV = "HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1"
# what a fetching rule (prefetch_qk, the hub-data fetches) puts before its command: the hub on again
ONLINE_ENV = "env HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0 TRANSFORMERS_OFFLINE=0"


def shell_prefix(repo: str) -> str:
    """What rules/common.smk puts before every rule's shell command (`shell.prefix`): Snakemake's own bash
    prefix (`set -euo pipefail`), then this checkout's src/ on PYTHONPATH, so `python -m attention_geometry`,
    `python -m papermill` and `python -c` run the checkout's package with the `python` of the job's
    environment (the venv of `make setup`, or the rule's env under `--sdm conda`). A conda env built from
    envs/*.yaml does not contain the package (conda runs its pip section from a copy under .snakemake/conda/,
    where no path to the checkout can be written), and Snakemake removes PYTHONPATH from a conda job's
    environment; the prefix runs after the env's activation. Every job runs with the Hugging Face hub and
    datasets offline (OFFLINE_ENV): a compute node may have no internet, and whatever a job reads from the hub
    was fetched before by a local rule, whose own command switches them on again for itself (ONLINE_ENV).
    Braces are doubled: Snakemake formats it."""
    words = (
        f"set -euo pipefail; export PYTHONPATH={shlex.quote(os.path.join(os.path.abspath(repo), 'src'))}; "
        f"export {OFFLINE_ENV}; "
    )
    return words.replace("{", "{{").replace("}", "}}")


# pyproject.toml's [project] dependencies by name (tests/test_workflow_logic.py keeps the two equal): what every job's
# `python -m attention_geometry` imports
JOB_DISTRIBUTIONS = (
    "torch", "transformers", "safetensors", "tokenizers", "numpy", "pandas", "pyarrow", "pyyaml", "tqdm", "filelock",
)  # fmt: skip
# run by that `python`: the names given on its command line that are not installed in it (importlib.metadata
# normalises a distribution's name: pyyaml finds PyYAML)
_MISSING_PROBE = (
    "import sys\n"
    "from importlib.metadata import PackageNotFoundError, distribution\n"
    "def lacks(name):\n"
    "    try:\n"
    "        distribution(name)\n"
    "    except PackageNotFoundError:\n"
    "        return True\n"
    "    return False\n"
    "print(' '.join(n for n in sys.argv[1:] if lacks(n)))\n"
)


def rule_python_error(path: str | None = None) -> str | None:
    """One line when the `python` that the rules' shell commands run (the first on PATH, or on `path`) lacks a
    distribution every job imports (JOB_DISTRIBUTIONS), else None. Snakemake runs from whatever interpreter its
    script names, but the rules run `python` from PATH: `.venv/bin/snakemake` without the venv activated parses the
    workflow, builds the DAG and then fails inside its first job with a traceback (`No module named 'tqdm'` from
    prepare-corpus). rules/common.smk asks this at parse time instead, except under --sdm conda (each rule's own env
    has its python; the prefix runs after its activation)."""
    exe = shutil.which("python", path=path)
    fix = "activate the project's venv (`. .venv/bin/activate`) or run `make run`"
    if exe is None:
        return f"workflow: the rules run `python`, and none is on PATH: {fix}"
    try:
        proc = subprocess.run(
            [exe, "-c", _MISSING_PROBE, *JOB_DISTRIBUTIONS], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"workflow: the rules' `python` ({exe}, the first on PATH) does not run ({exc}): {fix}"
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return f"workflow: the rules' `python` ({exe}, the first on PATH) does not run ({why}): {fix}"
    missing = proc.stdout.split()
    if not missing:
        return None
    return (
        f"workflow: the rules run `python` from PATH, {exe}, which lacks {', '.join(missing)} (Snakemake itself runs "
        f"from {sys.executable}): {fix}"
    )


def stop(message: str) -> NoReturn:
    """A workflow stop at parse time as its one line, the message alone on stderr, and exit status 1. Raising
    Snakemake's WorkflowError would print the line inside a `WorkflowError in file ..., line N:` frame and the
    Snakefile's stack after it (issue 59): Snakemake catches an Exception, not SystemExit."""
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(1)
