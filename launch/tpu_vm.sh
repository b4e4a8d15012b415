#!/usr/bin/env bash
# A Cloud TPU VM pod slice: installs xlpretrain on every worker (SETUP=1), then starts the same
# training command on all of them; jax.distributed detects the pod by itself.
#   TPU_NAME=my-v5p-64 ZONE=us-east5-a PROJECT=my-project REPO=https://host/you/xlpretrain.git \
#     SETUP=1 launch/tpu_vm.sh --config configs/xlmr.py:large --workdir gs://bucket/runs/large
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require TPU_NAME ZONE PROJECT
checkout="${CHECKOUT:-xlpretrain}"
ssh_all() {
  run gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --project="$PROJECT" \
    --worker=all --command="$1"
}
if [[ "${SETUP:-0}" == 1 ]]; then
  require REPO
  ssh_all "git clone ${REPO} ${checkout} || git -C ${checkout} pull; pip install -e '${checkout}[tpu]'"
fi
ssh_all "cd ${checkout} && $(train_command "$@")"
