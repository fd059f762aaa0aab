#!/usr/bin/env bash
# The main job, small: a local testbed of 3 SSH hosts, the demo campaign on it
# (deploy, mnist-dnn single, ps-async 1 ps x 2 workers, sysbench-cpu), the report.
set -euo pipefail
cd "$(dirname "$0")/.."
export DLINFRA_DB=${DLINFRA_DB:-demo-results.db}
dlinfra testbed up --local --hosts 3
trap 'dlinfra testbed down' EXIT
dlinfra run campaigns/demo.yml
dlinfra report --campaign latest
