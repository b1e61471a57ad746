"""How rule train_model starts the trainer: one process, one DDP process per GPU under torchrun, or one torchrun
per node under srun (the `training` section's gpus, nodes, threads); and, where the config asks for requeues,
the trainer's `--time-limit` (from the job's runtime) and the rule's `retries` (training/budget.py).
Torch-free: rules/common.smk calls it at parse time; the tests check the commands (tests/test_workflow_logic.py,
tests/test_training_stop.py) and run the rule with two CPU processes (tests/test_workflow.py)."""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "TORCHRUN_PORT",
    "TrainLaunch",
    "time_limit",
    "train_launch",
    "train_mem_mb",
    "run_disk_bytes",
    "check_cpu_memory",
    "check_disk",
]

TORCHRUN_PORT = 29500  # the rendezvous port on a multi-node job's first node
MARGIN_MINUTES = 15  # the most a training job's runtime keeps back from the trainer's --time-limit
# A training job's host memory without a configured training.mem_mb (a SLURM request, not a science parameter):
# the interpreter, torch, the CUDA context's host side and the corpus map, then per process 32 bytes per parameter
# (fp32 weights, gradients and Adam's two moments, and the CPU copy of all of them a state write makes), and on a CPU
# device the activations of one micro-batch; times a margin.
BASE_MEM_MB = 3000
BYTES_PER_PARAM = 32
MEM_MARGIN = 1.25
VOCAB_BOUND = 32768  # a text run's vocabulary before its corpus is prepared (the tokenizer's size comes from it)


def time_limit(runtime: int, requeues: int) -> int | None:
    """The trainer's `--time-limit` in minutes for a job of `runtime` minutes: None (no limit) without requeues,
    since a run stopped early would then wait for someone to start it again; else the runtime less 10 % of it,
    at least 1 and at most MARGIN_MINUTES minutes (job start-up, environment, imports, the exit), never below
    1. The trainer keeps its own reserve for the last update and the state save (budget.out_of_time)."""
    if requeues < 1:
        return None
    margin = min(MARGIN_MINUTES, max(1, math.ceil(runtime / 10)))
    return max(1, runtime - margin)


@dataclass(frozen=True)
class TrainLaunch:
    """How rule train_model starts `python -m attention_geometry train` for a `training` config section."""

    prefix: str  # put before `python -m attention_geometry train ...` ("" = one plain process)
    processes: int  # trainer processes per node: training.gpus, at least 1
    threads: int  # `--threads` of each process: training.threads shared among a node's processes
    resources: dict  # the rule's `gpu` resource, and on several nodes the SLURM executor's task layout
    time_limit: int | None = None  # the trainer's --time-limit in minutes (time_limit); None: no limit
    retries: int | None = None  # the rule's `retries` (training.requeues); None: Snakemake's --retries


def train_launch(section: Mapping) -> TrainLaunch:
    """One process for `gpus` <= 1 on one node; `torchrun --standalone` with one process per GPU for `gpus`
    > 1 (DDP: the trainer picks nccl on CUDA, gloo on CPU); on `nodes` > 1 (SLURM) `srun` starts one torchrun
    per node, which meet at a c10d rendezvous on the step's first node (`--no-python`: torchrun runs the
    command that follows the prefix, not a Python file)."""
    gpus, nodes, threads = int(section.get("gpus", 0)), int(section.get("nodes", 1)), int(section.get("threads", 1))
    # requeues: the trainer stops before the job's runtime and the rule's retries resume it; none: no limit,
    # and the rule leaves its retries to Snakemake's --retries (a profile's), not 0
    requeues = int(section.get("requeues", 0))
    budget = {
        "time_limit": time_limit(int(section["runtime"]), requeues) if requeues else None,
        "retries": requeues or None,
    }
    procs = max(gpus, 1)
    per_process = max(1, threads // procs)
    resources: dict = {"gpu": gpus}
    if nodes == 1 and procs == 1:
        return TrainLaunch("", 1, per_process, resources, **budget)
    if nodes == 1:
        return TrainLaunch(
            f"torchrun --standalone --nnodes 1 --nproc-per-node {procs} --no-python",
            procs,
            per_process,
            resources,
            **budget,
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
    return TrainLaunch(prefix, procs, per_process, resources, **budget)


def train_mem_mb(
    size: str, overrides: Mapping | None, device: str, processes: int = 1, mem_mb: int | None = None
) -> int:
    """The memory (MB) a training job of this model asks for: `mem_mb` (config training.mem_mb) where it is set,
    else from the model's size (BASE_MEM_MB plus, per process, BYTES_PER_PARAM per parameter and, on a CPU device,
    one micro-batch's activations; times MEM_MARGIN): bert-mini ~4 GB, bert-base ~8 GB, bert-large ~17 GB."""
    if mem_mb:
        return int(mem_mb)
    from attention_geometry.training.hyper import resolve_hyper

    h = resolve_hyper(size, dict(overrides or {}))
    vocab = h.vocab_size or VOCAB_BOUND
    params = h.num_layers * (4 * h.hidden_size**2 + 2 * h.hidden_size * h.intermediate_size)
    params += (vocab + h.max_position_embeddings) * h.hidden_size
    per_process = BYTES_PER_PARAM * params
    if device == "cpu":
        seq = h.seq_len or h.max_position_embeddings
        micro = max(1, h.per_device_batch_size or h.batch_size // max(1, h.grad_accum * processes))
        per_token_layer = 18 * h.hidden_size + 2 * h.intermediate_size + 3 * h.num_heads * seq
        per_process += 4 * micro * seq * h.num_layers * per_token_layer
    total = BASE_MEM_MB + max(1, processes) * per_process / 2**20
    return int(math.ceil(MEM_MARGIN * total / 100) * 100)


def cpu_batch_bytes(h, micro: int) -> int:
    """What one micro-batch of `micro` sequences costs in memory on a CPU, from the resolved Hyper `h` (vocab_size
    and seq_len filled in): the activations kept for backward (as train_mem_mb counts them) plus the output layer's
    logits, their softmax and gradient in fp32 at every position (an upper bound: an encoder scores only its masked
    positions)."""
    seq = h.seq_len or h.max_position_embeddings
    per_token_layer = 18 * h.hidden_size + 2 * h.intermediate_size + 3 * h.num_heads * seq
    activations = 4 * micro * seq * h.num_layers * per_token_layer
    logits = 3 * 4 * micro * seq * int(h.vocab_size or VOCAB_BOUND)
    return int(activations + logits)

    return None


def run_disk_bytes(h, vocab_size: int, n_snapshots: int, run_yaml_bytes: int) -> int:
    """About the disk a run still needs: `n_snapshots` weight snapshots (fp32 weights, with a copy of run.yaml, the
    tokenizer and the model card each) and two training states (weights and AdamW's two moments; the previous
    state is kept until the new one is complete). Parameters counted from the shape: embeddings (vocabulary and
    positions), per layer the four attention maps and the two MLP maps, the masked-LM head's transform."""
    d, inter = int(h.hidden_size), int(h.intermediate_size)
    positions = int(h.max_position_embeddings or 0)
    params = (int(vocab_size) + positions + 2) * d + int(h.num_layers) * (4 * d * d + 2 * d * inter) + d * d
    snapshot = 4 * params + int(run_yaml_bytes) + 200_000  # tokenizer, card, config
    state = 3 * 4 * params
    return int(n_snapshots) * snapshot + 2 * state


def check_cpu_memory(h, micro: int) -> None:
    """One UserError, before anything is written, when one micro-batch cannot fit in the memory available (a batch
    of 100,000 sequences used to be killed by the kernel halfway into writing its run folder)."""
    from attention_geometry.errors import UserError
    from attention_geometry.formats.files import mem_available_bytes

    need, avail = cpu_batch_bytes(h, micro), mem_available_bytes()
    if avail is not None and need > avail:
        raise UserError(
            f"overrides.batch_size: one micro-batch of {micro} sequences x {h.seq_len} tokens needs about "
            f"{need / 2**30:.1f} GiB here, {avail / 2**30:.1f} GiB are available: lower batch_size or raise grad_accum"
        )


def check_disk(resolved, out) -> None:
    """One UserError, before anything is written, when the snapshots and states a run (`resolved`: a ResolvedRun)
    still plans cannot fit on the disk that holds OUT (issue 59.8: max_steps 9999999 with snapshot_every 1 passed
    every check and filled the disk, a 104 MB run.yaml copied into every snapshot)."""
    import shutil
    from pathlib import Path

    from attention_geometry.errors import UserError
    from attention_geometry.formats.rundir import snapshot_name
    from attention_geometry.training.hyper import IMAGE_OBJECTIVES

    out = Path(out)
    steps = resolved.snapshot_steps
    folder = out / "checkpoints"
    have = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    todo = len(steps) if not have else sum(1 for s in steps if snapshot_name(s) not in have)
    settings = resolved.settings  # run.yaml's size, about: its step lists as numbers of 8 characters
    run_yaml = 2_000 + 8 * sum(len(v) for v in settings.values() if isinstance(v, (list, tuple)))
    vocab = int(resolved.hyper.vocab_size or 0) if resolved.objective not in IMAGE_OBJECTIVES else 0
    need = run_disk_bytes(resolved.hyper, vocab, todo, run_yaml)
    where = out if out.exists() else next(p for p in out.absolute().parents if p.exists())
    free = shutil.disk_usage(where).free
    if need > free:
        raise UserError(
            f"{out}: the run plans {todo:,} more snapshot(s) (snapshot_steps / snapshot_every) of about "
            f"{need / max(todo, 1) / 2**20:,.1f} MiB each with its state: about {need / 2**30:,.1f} GiB, more than "
            f"the {free / 2**30:,.1f} GiB free there; snapshot less often, or free space"
        )
