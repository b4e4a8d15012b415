#!/usr/bin/env bash
# SLURM, GPU nodes. One process per node owning all its GPUs (default), or one per GPU:
#   sbatch --nodes=2 --gpus-per-node=8 launch/slurm.sh --config configs/xlmr.py:base --workdir DIR
#   PROCESS_PER=gpu sbatch --nodes=2 --gpus-per-node=8 --ntasks-per-node=8 launch/slurm.sh ...
# jax.distributed finds the coordinator, process count and id from SLURM's variables.
#SBATCH --job-name=xlpretrain
#SBATCH --exclusive
#SBATCH --output=%x-%j.out
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require SLURM_JOB_NUM_NODES
process_per="${PROCESS_PER:-node}"
case "$process_per" in
  node) tasks_per_node=1 ;;
  gpu) tasks_per_node="${SLURM_GPUS_ON_NODE:?PROCESS_PER=gpu needs SLURM_GPUS_ON_NODE}" ;;
  *) echo "error: PROCESS_PER must be node or gpu, got ${process_per}" >&2; exit 2 ;;
esac
gpu_binding=()
if [[ "$process_per" == gpu ]]; then
  gpu_binding=(--gpus-per-task=1)
fi
run srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node="$tasks_per_node" "${gpu_binding[@]}" \
  python -m xlpretrain.train --distributed "$@"
