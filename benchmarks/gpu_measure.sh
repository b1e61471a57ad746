#!/usr/bin/env bash
# The prepared GPU measurement of the device path (issue 39; docs/training.md, "The device path (GPU)"). On a CUDA
# machine, from the repository root, one command of about 8 minutes:
#
#     OUT=/some/folder bash benchmarks/gpu_measure.sh      # default OUT: a new folder under /tmp
#
#  1. benchmarks/gpu_measure.py: ms per update, tokens/s and MFU of bert-mini, bert-base and bert-large (encoder,
#     decoder-paper, decoder) and the ViT under config/paper.yaml's recipe, the host path and the device path side
#     by side, then the device path's CUDA graphs and torch.compile, within GPU_MEASURE_BUDGET_S seconds (default
#     210; rows past it are written as skipped) -> $OUT/gpu_measure.json and $OUT/gpu_measure.log;
#  2. benchmarks/gpu_check.sh end to end (training and scoring through the workflow on CUDA) -> $OUT/gpu_check.log;
#  3. $OUT/gpu_measure_run.json: each step's exit status and seconds, the GPU and the versions.
# Commit the JSON files under benchmarks/results/ (named by date and GPU). The project runs from src/ (PYTHONPATH)
# when it is not installed; `attention-geometry` is provided as `python -m attention_geometry` if missing, and
# Snakemake is installed from the wheels in WHEELS (default .whl/, made here by benchmarks/device_wheels.py) if
# missing. PYTHON: the interpreter (default: python, else python3).
# GPU_MEASURE_PARTS (default "measure check"): the steps to run, for a rerun of one that failed within a lease's
# last minutes ("check" alone takes at most 5 minutes); a step left out is recorded with exit status null.
# Without CUDA it prints one line and exits 0; where PYTHON is missing or cannot import torch, one line and exit 2.
set -uo pipefail

PARTS=" ${GPU_MEASURE_PARTS:-measure check} "
[[ -n ${PARTS// /} ]] || { echo "gpu_measure: GPU_MEASURE_PARTS names no step (measure, check)"; exit 2; }
for part in $PARTS; do
    case $part in measure|check) ;; *) echo "gpu_measure: GPU_MEASURE_PARTS: unknown step '$part' (measure, check)"
        exit 2 ;; esac
done
PY=${PYTHON:-$(command -v python || command -v python3)}
[[ -n $PY ]] || { echo "gpu_measure: no python here (PYTHON unset, neither python nor python3 on PATH)"; exit 2; }
# "no CUDA" only where torch imports and says so: a missing interpreter, a torch that does not import or a failing
# import is an error (exit 2, one line), never a machine without a GPU (issue 57.6)
PROBE=$("$PY" -c 'import torch; print("cuda" if torch.cuda.is_available() else "no-cuda")' 2>&1)
PROBE_RC=$?
if (( PROBE_RC != 0 )); then
    echo "gpu_measure: $PY cannot import torch (exit $PROBE_RC: $(printf '%s' "$PROBE" | tail -n 1)):" \
        "install the project's dependencies there, or set PYTHON"
    exit 2
fi
if [[ $(printf '%s' "$PROBE" | tail -n 1) != cuda ]]; then
    echo "gpu_measure: no CUDA device here (torch.cuda.is_available() is not True): nothing run"
    exit 0
fi
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$(mktemp -d /tmp/gpu_measure.XXXXXX)}
mkdir -p "$OUT"
BUDGET=${GPU_MEASURE_BUDGET_S:-210}
export PYTHONPATH="$REPO/src:$REPO/benchmarks${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if ! command -v attention-geometry >/dev/null; then
    SHIM=$(mktemp -d /tmp/gpu_measure_bin.XXXXXX)
    printf '#!/bin/sh\nexec "%s" -m attention_geometry "$@"\n' "$(command -v "$PY")" > "$SHIM/attention-geometry"
    chmod +x "$SHIM/attention-geometry"
    export PATH="$SHIM:$PATH"
fi
echo "gpu_measure: results in $OUT"
# gpu_check.sh runs Snakemake: on a machine without it (and without an index), install it from wheels carried
# along (WHEELS, default .whl/: benchmarks/device_wheels.py), pinned to requirements.lock's version
if [[ $PARTS == *" check "* ]] && ! "$PY" -c 'import snakemake' 2>/dev/null; then
    WHEELS=${WHEELS:-$REPO/.whl}
    SNAKEMAKE=$(grep -i '^snakemake==' "$REPO/requirements.lock")
    if compgen -G "$WHEELS/*.whl" >/dev/null; then
        echo "gpu_measure: installing $SNAKEMAKE from $WHEELS"
        "$PY" -m pip install -q --no-index --find-links "$WHEELS" "$SNAKEMAKE" 2>&1 | tail -n 20
    fi
    "$PY" -c 'import snakemake' 2>/dev/null \
        || echo "gpu_measure: no Snakemake here, so gpu_check.sh will fail: carry wheels made by" \
            "benchmarks/device_wheels.py (WHEELS=$WHEELS)"
fi

T0=$(date +%s)
MEASURE_RC=null
if [[ $PARTS == *" measure "* ]]; then
    timeout $((BUDGET + 60)) "$PY" "$REPO/benchmarks/gpu_measure.py" --device cuda --budget-s "$BUDGET" \
        --json "$OUT/gpu_measure.json" 2>&1 | tee "$OUT/gpu_measure.log"
    MEASURE_RC=${PIPESTATUS[0]}
fi
T1=$(date +%s)
CHECK_RC=null
if [[ $PARTS == *" check "* ]]; then
    timeout 300 bash "$REPO/benchmarks/gpu_check.sh" "$(mktemp -d /tmp/gpu_check.XXXXXX)" 2>&1 \
        | tee "$OUT/gpu_check.log"
    CHECK_RC=${PIPESTATUS[0]}
fi
T2=$(date +%s)

"$PY" - "$OUT/gpu_measure_run.json" "$MEASURE_RC" $((T1 - T0)) "$CHECK_RC" $((T2 - T1)) <<'PYEOF'
import json, platform, subprocess, sys

import torch
import transformers

path, m_rc, m_s, c_rc, c_s = sys.argv[1:]
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
json.dump({"gpu": torch.cuda.get_device_name(), "nvidia_smi": smi, "torch": torch.__version__,
           "cuda": torch.version.cuda, "transformers": transformers.__version__, "python": platform.python_version(),
           "gpu_measure": {"exit_status": json.loads(m_rc), "seconds": int(m_s)},
           "gpu_check": {"exit_status": json.loads(c_rc), "seconds": int(c_s)}}, open(path, "w"), indent=1)
PYEOF
echo "gpu_measure: measurement exit $MEASURE_RC in $((T1 - T0)) s, gpu_check exit $CHECK_RC in $((T2 - T1)) s," \
    "$((T2 - T0)) s in all"
[[ $MEASURE_RC == 0 || $MEASURE_RC == null ]] && [[ $CHECK_RC == 0 || $CHECK_RC == null ]]
