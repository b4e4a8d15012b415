#!/usr/bin/env bash
# GKE through xpk (TPU slices): one workload, the same command on every host; jax.distributed
# detects the slice. The image must hold this repository installed with .[tpu]:
#   CLUSTER=my-cluster WORKLOAD=xlmr-large TPU_TYPE=v5p-64 IMAGE=gcr.io/p/xlpretrain:latest \
#     PROJECT=my-project ZONE=us-east5-a launch/gke_xpk.sh --config configs/xlmr.py:large \
#     --workdir gs://bucket/runs/large
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require CLUSTER WORKLOAD TPU_TYPE IMAGE PROJECT ZONE
run xpk workload create --cluster="$CLUSTER" --workload="$WORKLOAD" --tpu-type="$TPU_TYPE" \
  --num-slices="${NUM_SLICES:-1}" --docker-image="$IMAGE" --project="$PROJECT" --zone="$ZONE" \
  --command="$(train_command "$@")"
