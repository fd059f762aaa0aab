#!/usr/bin/env bash
# Install the Debian packages dlinfra needs, on a fresh Debian 12 machine, as root.
#   install-deps.sh        what dlinfra and `make demo` use (a controller, a local testbed, every layer)
#   install-deps.sh test   that, and what only the tests use (`make test`)
# Idempotent: packages already installed are skipped, so a second run touches nothing.
set -euo pipefail

PACKAGES=(
  # testbed hosts and the bm layer
  openssh-server openssh-client iproute2 iptables util-linux sysbench
  # containers (ctr, ctr-vm); crun and runsc (gVisor): the other OCI runtimes of layer_options.ctr.runtime
  docker.io runc crun runsc
  # VMs (vm); libvirt-python builds from source against libvirt-dev
  libvirt-daemon-system qemu-system-x86 qemu-utils libvirt-dev pkg-config e2fsprogs dnsmasq-base
  # base images without a registry
  debootstrap
  # the payload's dependencies archive, built on the controller and unpacked on hosts (dlinfra/images/deps_archive.py)
  zstd
  # the controller's Python environment
  python3 python3-venv python3-dev gcc make
)

TEST_PACKAGES=(
  # the podman provider's tests (the demo's containers run on docker)
  podman
  # the domain XML's schema checks (virt-xml-validate)
  libxml2-utils
  # the store's PostgreSQL tests
  postgresql
  # the nova provider's tests: Neutron's database (dlinfra/testbed/openstack.py)
  mariadb-server
  # the real-machine stage (`make test-real`): Open vSwitch under Nova's guests and Zun's containers, RabbitMQ for
  # Neutron's agent and Zun, genisoimage for Nova's config drives and the Redfish node's boot ISO (with ISOLINUX's
  # boot sector and loader module), lspci for zun-compute's inventory
  openvswitch-switch rabbitmq-server genisoimage isolinux syslinux-common pciutils
  # the report's headless render test
  chromium
)

case ${1:-} in
  "") ;;
  test) PACKAGES+=("${TEST_PACKAGES[@]}") ;;
  *)
    echo "install-deps: unknown set '$1' (none, or 'test')" >&2
    exit 2
    ;;
esac

if [[ ${EUID} -ne 0 ]]; then
  echo "install-deps: run as root (apt-get needs it)" >&2
  exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("${pkg}")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} Debian packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
echo "install-deps: done"
