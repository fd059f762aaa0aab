#!/usr/bin/env bash
# Start the daemons the layers need where there is no init system (containers, CI).
# Idempotent: a daemon already answering is left alone. Logs go to /var/log/dlinfra/.
set -euo pipefail

LOGS=/var/log/dlinfra
mkdir -p "${LOGS}"

wait_for() {  # wait_for WHAT SECONDS CMD...
  local what=$1 seconds=$2
  shift 2
  for _ in $(seq "$((seconds * 5))"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  echo "start-daemons: ${what} did not come up; see ${LOGS}" >&2
  return 1
}

if ! docker info >/dev/null 2>&1; then
  echo "start-daemons: starting dockerd"
  nohup dockerd --host unix:///var/run/docker.sock >"${LOGS}/dockerd.log" 2>&1 &
  wait_for dockerd 60 docker info
fi

if ! pgrep -x virtlogd >/dev/null; then
  echo "start-daemons: starting virtlogd"
  virtlogd --daemon
fi
if ! virsh -c qemu:///system version >/dev/null 2>&1; then
  echo "start-daemons: starting libvirtd"
  libvirtd --daemon >"${LOGS}/libvirtd.log" 2>&1
  wait_for libvirtd 60 virsh -c qemu:///system version
fi
echo "start-daemons: dockerd and libvirtd are running"
