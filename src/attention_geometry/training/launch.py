"""How rule train_model starts the trainer: one process, one DDP process per GPU under torchrun, or one torchrun
per node under srun (the `training` section's gpus, nodes, threads). Torch-free: rules/common.smk calls it at
parse time; the tests check the commands (tests/test_workflow_logic.py) and run the rule with two CPU
processes (tests/test_workflow.py)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["TORCHRUN_PORT", "TrainLaunch", "train_launch"]

TORCHRUN_PORT = 29500  # the rendezvous port on a multi-node job's first node


@dataclass(frozen=True)
class TrainLaunch:
    """How rule train_model starts `python -m attention_geometry train` for a `training` config section."""

    prefix: str  # put before `python -m attention_geometry train ...` ("" = one plain process)
    processes: int  # trainer processes per node: training.gpus, at least 1
    threads: int  # `--threads` of each process: training.threads shared among a node's processes
    resources: dict  # the rule's `gpu` resource, and on several nodes the SLURM executor's task layout


def train_launch(section: Mapping) -> TrainLaunch:
    """One process for `gpus` <= 1 on one node; `torchrun --standalone` with one process per GPU for `gpus`
    > 1 (DDP: the trainer picks nccl on CUDA, gloo on CPU); on `nodes` > 1 (SLURM) `srun` starts one torchrun
    per node, which meet at a c10d rendezvous on the step's first node (`--no-python`: torchrun runs the
    command that follows the prefix, not a Python file)."""
    gpus, nodes, threads = int(section.get("gpus", 0)), int(section.get("nodes", 1)), int(section.get("threads", 1))
    procs = max(gpus, 1)
    per_process = max(1, threads // procs)
    resources: dict = {"gpu": gpus}
    if nodes == 1 and procs == 1:
        return TrainLaunch("", 1, per_process, resources)
    if nodes == 1:
        return TrainLaunch(
            f"torchrun --standalone --nnodes 1 --nproc-per-node {procs} --no-python", procs, per_process, resources
        )
    # snakemake-executor-plugin-slurm: `nodes` and `tasks` go to sbatch; the job step runs an `mpi` job's
    # command as it is (any other under `srun -n1`, which would leave every node but one idle) and strips the
    # allocation's SLURM_* variables but SLURM_JOB_ID (the ones below are those srun sets in each task).
    # GPUs per node, not `gpu` (sbatch --gpus is a job total, which SLURM may place unevenly).
    resources = {"nodes": nodes, "mpi": "srun", "tasks": nodes}
    if gpus:
        resources["slurm_extra"] = f"--gpus-per-node={gpus}"
    script = (
        f"exec torchrun --nnodes {nodes} --nproc-per-node {procs} --rdzv-backend c10d"
        f' --rdzv-id "$SLURM_JOB_ID" --rdzv-endpoint "$(scontrol show hostnames "$SLURM_STEP_NODELIST"'
        f' | head -n 1):{TORCHRUN_PORT}" --no-python "$@"'
    )
    gpu_opt = f" --gpus-per-node {gpus}" if gpus else ""
    prefix = (
        f"srun --nodes {nodes} --ntasks {nodes} --ntasks-per-node 1 --cpus-per-task {threads}{gpu_opt}"
        f" sh -c {shlex.quote(script)} torchrun"
    )
    return TrainLaunch(prefix, procs, per_process, resources)
