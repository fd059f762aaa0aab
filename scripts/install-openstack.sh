#!/usr/bin/env bash
# The venvs the tests' OpenStack services run from, apart from the controller's venv (each service pins its own
# oslo.* and SQLAlchemy 2.0):
# - $DLINFRA_OPENSTACK_VENV (default .venv-openstack): a standalone Ironic (dlinfra/testbed/ironic.py);
# - $DLINFRA_NOVA_VENV (default .venv-nova): Keystone, Placement, Glance, Neutron and Nova
#   (dlinfra/testbed/openstack.py), installed with -c scripts/openstack-constraints.txt.
# - $DLINFRA_ZUN_VENV (default .venv-zun): Zun and kuryr-libnetwork (dlinfra/testbed/zun.py), with the same
#   constraints; the real-machine stage's one stack runs them (make test-real).
# Apart, because the constraints file that the Nova stack needs conflicts with ironic 39 itself, and the Nova venv
# stays as its own pins made it.
# Idempotent: a stamp in each venv names its pinned versions, so a second run with the same pins does nothing.
# Shared by every checkout: unless the variables above name a venv, each venv is made once in dlinfra's cache,
# keyed by its pins ($DLINFRA_CACHE, else $XDG_CACHE_HOME/dlinfra, else ~/.cache/dlinfra: dlinfra.cache), and
# the checkout's .venv-openstack and .venv-nova are links to it: a fresh clone installs nothing.
set -euo pipefail

IRONIC_VERSION=39.0.0
# ironic 39 breaks under SQLAlchemy 2.1, which plain pip picks; openstack/requirements' upper-constraints
# conflicts with ironic 39 itself, so the one pin that matters is given here.
SQLALCHEMY_VERSION=2.0.52
PYTHON=${PYTHON:-python3}

cd "$(dirname "$0")/.."

# install VENV STAMP PIP-ARGS...: pip install PIP-ARGS into VENV, unless its stamp file already holds STAMP.
install() {
  local venv=$1 want=$2
  shift 2
  local stamp="${venv}/.dlinfra-installed"
  if [[ -f ${stamp} && "$(cat "${stamp}")" == "${want}" ]]; then
    return 0
  fi
  if [[ ! -x ${venv}/bin/python ]]; then
    "${PYTHON}" -m venv "${venv}"
  fi
  "${venv}/bin/pip" install -q --upgrade pip
  "${venv}/bin/pip" install -q "$@"
  echo "${want}" > "${stamp}"
  echo "install-openstack: ${want} in ${venv}"
}

CACHE=${DLINFRA_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/dlinfra}

# cached LINK STAMP PIP-ARGS...: the venv for STAMP in the cache (one installer at a time), linked from LINK.
cached() {
  local link=$1 want=$2
  shift 2
  local venv
  venv="${CACHE}/openstack-venv/$(printf '%s' "${want}" | sha256sum | cut -c1-16)"
  mkdir -p "$(dirname "${venv}")"
  (
    flock 9
    install "${venv}" "${want}" "$@"
  ) 9>"${venv}.lock"
  if [[ -d ${link} && ! -L ${link} ]]; then
    rm -rf "${link}"  # a venv of the checkout's own, from before the cache
  fi
  ln -sfn "${venv}" "${link}"
}

# place VAR DEFAULT STAMP PIP-ARGS...: into $VAR when it is set, else into the cache, linked from DEFAULT.
place() {
  local var=$1 default=$2
  shift 2
  if [[ -n ${!var:-} ]]; then
    install "${!var}" "$@"
  else
    cached "${default}" "$@"
  fi
}

# sushy-tools' Redfish emulator (with libvirt-python, its libvirt driver) stands in front of libvirt guests as
# their BMC, as in OpenStack's own Ironic CI: tests/redfish_support.py. Ironic's redfish driver uses sushy, which
# ironic already pulls in.
IRONIC_PINS=("ironic==${IRONIC_VERSION}" "SQLAlchemy==${SQLALCHEMY_VERSION}" sushy-tools==2.2.0 libvirt-python==12.8.0)
place DLINFRA_OPENSTACK_VENV .venv-openstack "${IRONIC_PINS[*]}" "${IRONIC_PINS[@]}"

# nova 34 needs keystoneauth1 and oslo.versionedobjects newer than the constraints file had: those two lines
# are dropped from the copy in scripts/ (its header says so). pyroute2: neutron's migrations import it.
NOVA_PINS=(nova==34.0.0 openstack-placement==16.0.0 glance==33.0.0 keystone==30.0.0 neutron==29.0.0 gunicorn PyMySQL
  pyroute2)
CONSTRAINTS_HASH=$(sha256sum scripts/openstack-constraints.txt | cut -c1-16)
place DLINFRA_NOVA_VENV .venv-nova "${NOVA_PINS[*]} constraints:${CONSTRAINTS_HASH}" \
  -c scripts/openstack-constraints.txt "${NOVA_PINS[@]}"

# Zun and kuryr-libnetwork (dlinfra/testbed/zun.py): the real-machine stage's stack (tests/nova_support.py) is the
# real-guest Nova stack with Zun on it, one stack for the Nova and the Zun cases.
ZUN_PINS=(zun==18.0.0 kuryr-libnetwork==18.0.0 PyMySQL)
place DLINFRA_ZUN_VENV .venv-zun "${ZUN_PINS[*]} constraints:${CONSTRAINTS_HASH}" \
  -c scripts/openstack-constraints.txt "${ZUN_PINS[@]}"
