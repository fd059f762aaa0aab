#!/usr/bin/env bash
# The main job, small: a local benchmark stored in the results store, then the report.
# (Grows with the layers: local testbed, deploy, campaign across bm/ctr/vm.)
set -euo pipefail
cd "$(dirname "$0")/.."
export DLINFRA_DB=${DLINFRA_DB:-demo-results.db}
dlinfra bench mnist-dnn --steps 50 --repeats 3
dlinfra report --campaign latest
