#!/usr/bin/env bash
# timed.sh STAGE COMMAND...: run COMMAND as one named stage of `make test` or `make demo`, saying when it starts
# and how long it took, and append "STAGE SECONDS STATUS" to $DLINFRA_STAGES (when set) for the summary that
# `timed.sh --summary` prints. Why: CI's 90-minute limit is spent in stages (install, daemons, OpenStack venvs,
# lint, fast tier, full suite), and a slow stage must be seen in the log, not guessed. Each line also says how much
# disk is free where dlinfra's cache and daemons write (a full disk fails a run midway: it must be seen too).
set -uo pipefail

if [[ ${1:-} == --summary ]]; then
  [[ -n ${DLINFRA_STAGES:-} && -f ${DLINFRA_STAGES} ]] || exit 0
  echo "== stages (seconds):"
  awk '{ printf "==   %-10s %6d s  %s\n", $1, $2, $3; total += $2 } END { printf "==   %-10s %6d s\n", "total", total }' \
    "${DLINFRA_STAGES}"
  exit 0
fi

disk_free() {
  local where=${DLINFRA_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}}
  while [[ ! -e ${where} ]]; do where=$(dirname "${where}"); done
  df -BG --output=avail "${where}" | tail -1 | tr -d ' G'
}

stage=$1
shift
started=$(date +%s)
echo "== stage ${stage}: started $(date -u +%H:%M:%S), $(disk_free) GB free on the disk"
"$@"
status=$?
took=$(($(date +%s) - started))
word=$([[ ${status} -eq 0 ]] && echo ok || echo "FAILED (exit ${status})")
echo "== stage ${stage}: ${word} after ${took} s, $(disk_free) GB free on the disk"
[[ -n ${DLINFRA_STAGES:-} ]] && mkdir -p "$(dirname "${DLINFRA_STAGES}")" && echo "${stage} ${took} ${word// /_}" >>"${DLINFRA_STAGES}"
exit "${status}"
