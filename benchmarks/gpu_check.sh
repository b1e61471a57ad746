#!/usr/bin/env bash
# The prepared GPU check: training and scoring on CUDA, which no CPU-only test covers. On a CUDA machine, from
# the repository root:
#
#     bash benchmarks/gpu_check.sh [WORKDIR]      # default WORKDIR: a new folder under /tmp
#
#  1. trains bert-mini encoder and decoder, bf16, 3000 steps each, through the workflow's own rules
#     (snakemake --configfile benchmarks/gpu_check.yaml, run in WORKDIR: prepare_corpus, write_run_config,
#     train_model on device cuda);
#  2. prints each run's tokens/s and MFU against the GPU's dense bf16 peak (benchmarks/train_throughput.py
#     --runs: the loop's s/step from train.log, the model FLOPs of its shape);
#  3. scores every snapshot with `attention-geometry score-checkpoints --device cuda` and `--device cpu` and
#     compares the two tables (same rows; symmetry and directionality within 1e-6);
#  4. prints the wall time (target: under 5 minutes).
# Without CUDA it prints one line and exits 0, running nothing. Exit 1: a step or a comparison failed.
set -euo pipefail

PY=${PYTHON:-$(command -v python || command -v python3)}
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check: no CUDA device here (torch.cuda.is_available() is not True): nothing run"
    exit 0
fi

START=$(date +%s)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${1:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
RESULTS="$WORK/results-gpu-check"
RUNS=(bert-mini-wiki_offline-encoder-standard-s0 bert-mini-wiki_offline-decoder-standard-s0)
echo "gpu_check: $("$PY" -c 'import torch; print(torch.cuda.get_device_name(), "torch", torch.__version__)'), work dir $WORK"

targets=()
for run in "${RUNS[@]}"; do targets+=("$RESULTS/runs/$run/train.done"); done
# the workflow from this checkout, its outputs and .snakemake/ in WORKDIR
"$PY" -m snakemake "${targets[@]}" --snakefile "$REPO/Snakefile" --directory "$WORK" --cores 4 --resources gpu=1 \
    --configfile "$REPO/benchmarks/gpu_check.yaml" --config "results=$RESULTS" > "$WORK/snakemake.log" 2>&1 \
    || { tail -n 40 "$WORK/snakemake.log"; echo "gpu_check: the workflow failed (log: $WORK/snakemake.log)"; exit 1; }
TRAINED=$(date +%s)
echo "gpu_check: trained through the workflow in $((TRAINED - START)) s (corpus included)"

run_dirs=()
for run in "${RUNS[@]}"; do run_dirs+=("$RESULTS/runs/$run"); done
"$PY" "$REPO/benchmarks/train_throughput.py" --runs "${run_dirs[@]}"

for run in "${RUNS[@]}"; do
    for dev in cuda cpu; do
        attention-geometry score-checkpoints --no-progress "$RESULTS/runs/$run" --device "$dev" \
            --out "$WORK/scores-$run-$dev.csv"
    done
done
"$PY" - "$WORK" "${RUNS[@]}" <<'PYEOF'
import sys

import pandas as pd

from attention_geometry.formats.columns import TRAINING_COLUMNS

work, runs = sys.argv[1], sys.argv[2:]
keys = [c for c in TRAINING_COLUMNS if c not in ("symmetry", "directionality")]
worst = 0.0
for run in runs:
    gpu, cpu = (pd.read_csv(f"{work}/scores-{run}-{dev}.csv") for dev in ("cuda", "cpu"))
    both = gpu.merge(cpu, on=keys, suffixes=("_gpu", "_cpu"), validate="one_to_one")
    if len(both) != len(gpu) or len(both) != len(cpu):
        sys.exit(f"gpu_check: {run}: GPU and CPU score tables have different rows ({len(gpu)} vs {len(cpu)})")
    diff = max(float((both[f"{c}_gpu"] - both[f"{c}_cpu"]).abs().max()) for c in ("symmetry", "directionality"))
    steps = sorted(int(s) for s in both.step.unique())
    last = both[both.step == steps[-1]]
    print(f"{run}: {len(both)} rows, steps {steps}; final mean symmetry {last.symmetry_gpu.mean():.4f}, "
          f"directionality {last.directionality_gpu.mean():.4f}; max |GPU - CPU| {diff:.2e}")
    worst = max(worst, diff)
if worst > 1e-6:
    sys.exit(f"gpu_check: GPU scores differ from CPU scores by up to {worst:.2e} (> 1e-6)")
print(f"gpu_check: GPU scores equal CPU scores (max difference {worst:.2e})")
PYEOF

END=$(date +%s)
echo "gpu_check: done in $((END - START)) s ($([ $((END - START)) -le 300 ] && echo "within" || echo "OVER") the 5-minute target)"
