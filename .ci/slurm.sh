#!/usr/bin/env bash
# Brings up a real single-node SLURM cluster on this (Debian, root, no systemd) machine, runs the smoke
# config through profiles/slurm, checks its outputs, and stops the daemons by their pids.
# Needs: root, apt (Debian packages slurmctld slurmd slurm-client munge), the project venv (.venv).
# A single-node cluster without accounting (slurmdbd): the profile polls job states with squeue.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${SLURM_SMOKE_RESULTS:-results-slurm}
SCRATCH=$(mktemp -d /tmp/ci-slurm.XXXXXX)
chmod 0755 "$SCRATCH"  # the slurm user must reach its state and log folders
export PATH="$ROOT/.venv/bin:$PATH" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

if [ "$(id -u)" != 0 ]; then echo "error: .ci/slurm.sh needs root (apt-get, munged, slurmd)" >&2; exit 2; fi

echo "== install SLURM and munge"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  slurmctld slurmd slurm-client munge >/dev/null
test -s /etc/munge/munge.key || { echo "error: /etc/munge/munge.key missing after installing munge" >&2; exit 1; }

echo "== configure ($SCRATCH)"
install -d -o slurm -g slurm -m 0755 "$SCRATCH/state" "$SCRATCH/spool" "$SCRATCH/log"
install -d -o munge -g munge -m 0755 "$SCRATCH/munge"
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
install -d /etc/slurm
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=ci
SlurmctldHost=localhost
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$SCRATCH/state
SlurmdSpoolDir=$SCRATCH/spool
SlurmctldPidFile=$SCRATCH/slurmctld.pid
SlurmdPidFile=$SCRATCH/slurmd.pid
SlurmctldLogFile=$SCRATCH/log/slurmctld.log
SlurmdLogFile=$SCRATCH/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=300
MailProg=/bin/true
ReturnToService=2
NodeName=localhost CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF

stop_daemons() {
  # by pid (files written by the daemons themselves), never by name
  for pidfile in "$SCRATCH/slurmd.pid" "$SCRATCH/slurmctld.pid" "$SCRATCH/munge/munged.pid"; do
    if [ -s "$pidfile" ]; then
      pid=$(cat "$pidfile")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  done
}
trap stop_daemons EXIT

echo "== start munged, slurmctld, slurmd"
install -d -o munge -g munge -m 0755 /run/munge
runuser -u munge -- /usr/sbin/munged --pid-file="$SCRATCH/munge/munged.pid"
/usr/sbin/slurmctld
/usr/sbin/slurmd -N localhost
for i in $(seq 60); do
  state=$(timeout 5 sinfo -h -o %t 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 1
done
if [ "$state" != idle ]; then
  echo "error: the SLURM node did not come up (sinfo: '$state'); logs:" >&2
  tail -n 20 "$SCRATCH"/log/*.log >&2 || true
  exit 1
fi
sinfo

echo "== smoke config through profiles/slurm (results in $OUT/)"
rm -rf "$OUT"
start=$(date +%s)
# this cluster's values (profiles/slurm leaves partition and account to the user): its one partition, `debug`
CI_RESOURCES=(--default-resources slurm_partition=debug runtime=30 mem_mb=2000)
snakemake --profile profiles/slurm "${CI_RESOURCES[@]}" --configfile config/smoke.yaml --config "results=$OUT" \
  --slurm-init-seconds-before-status-checks 2 --slurm-logdir "$SCRATCH/jobs"
echo "workflow through SLURM: $(( $(date +%s) - start )) s"

echo "== check outputs"
.venv/bin/python - "$OUT" <<'PY'
import csv, sys
from pathlib import Path
out = Path(sys.argv[1])
need = {
    "tables/pretrained_scores.csv": ["model", "layer", "head", "symmetry", "directionality"],
    "tables/training_scores.csv": ["run", "step", "layer", "symmetry", "directionality"],
    "tables/training_loss.csv": ["run", "step", "train_loss", "eval_loss"],
    "tables/update_scores.csv": ["run", "step", "layer", "kind", "symmetry", "directionality"],
    "tables/claims.csv": [],
}
for rel, cols in need.items():
    with open(out / rel, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows, f"{rel}: no rows"
    missing = [c for c in cols if c not in rows[0]]
    assert not missing, f"{rel}: missing columns {missing}"
    print(f"{rel}: {len(rows)} rows")
figs = sorted(p.name for p in (out / "figures").glob("*.png"))
assert figs, "no figures"
print(f"figures: {len(figs)} PNG")
PY
echo "== a second run through SLURM has nothing to do"
snakemake --profile profiles/slurm "${CI_RESOURCES[@]}" --configfile config/smoke.yaml --config "results=$OUT" -n 2>&1 \
  | tee "$SCRATCH/second.txt" | tail -n 2
grep -q "Nothing to be done" "$SCRATCH/second.txt"
echo "SLURM smoke run OK"
