#!/usr/bin/env bash
# The main job, small: a local testbed of 3 SSH hosts, the demo campaign on it
# (mnist-dnn on bm, ctr and vm; ps-async 1 ps x 2 workers; sysbench-cpu), the report
# in the terminal and as an HTML page. A layer that cannot come up fails its own
# cells only: the others are still measured and reported. The last line always
# says how it went and what to do next.
set -uo pipefail
cd "$(dirname "$0")/.."
export DLINFRA_DB=${DLINFRA_DB:-demo-results.db}
REPORT=${DLINFRA_DEMO_REPORT:-demo-report.html}
started=$(date +%s)
artifacts=$(mktemp -d -t dlinfra-demo-artifacts.XXXXXX)

finish() {  # finish STATUS MESSAGE: the one last line
  echo "demo: $2 ($(($(date +%s) - started)) s)"
  exit "$1"
}

echo "demo: bringing up the local testbed"
if ! dlinfra testbed up --local --hosts 3; then
  dlinfra testbed down >/dev/null 2>&1
  rm -rf "${artifacts}"
  finish 1 "FAILED: the local testbed did not come up; fix what the error above names, then run 'make demo' again"
fi

resume=()
[[ -n ${DLINFRA_DEMO_RESUME:-} ]] && resume=(--resume)  # retry only the cells without a successful attempt
dlinfra run campaigns/demo.yml --artifacts "${artifacts}" "${resume[@]}"
run_status=$?
echo "demo: taking the testbed down"
dlinfra testbed down

if [[ ${run_status} -ne 0 && ${run_status} -ne 1 ]]; then  # 1: some cells failed, the rest is stored
  finish "${run_status}" "FAILED: the campaign stopped (exit ${run_status}); Ansible artifacts are in ${artifacts}; fix what the error above names, then 'make demo' again (stored cells are kept)"
fi
dlinfra report --campaign latest || finish 1 "FAILED: no report: the error above says why (failed or contaminated runs)"
if ! html=$(dlinfra report --campaign latest --format html --out "${REPORT}" 2>&1); then  # its warnings: shown above
  echo "${html}"
  finish 1 "FAILED: the HTML report could not be written to ${REPORT}"
fi
if [[ ${run_status} -eq 1 ]]; then
  finish 1 "some cells FAILED (listed above, and in the report: $(realpath "${REPORT}")); artifacts in ${artifacts}; retry only those with: DLINFRA_DEMO_RESUME=1 make demo"
fi
rm -rf "${artifacts}"
finish 0 "done: report $(realpath "${REPORT}"), results in ${DLINFRA_DB}"
