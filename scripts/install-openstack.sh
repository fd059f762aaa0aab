#!/usr/bin/env bash
# The venv the tests' standalone OpenStack Ironic runs from (dlinfra/testbed/ironic.py): $DLINFRA_OPENSTACK_VENV,
# default .venv-openstack. Apart from the controller's venv: Ironic pins its own oslo.* and SQLAlchemy 2.0.
# Idempotent: a stamp names the pinned versions, so a second run with the same pins does nothing.
set -euo pipefail

IRONIC_VERSION=39.0.0
# ironic 39 breaks under SQLAlchemy 2.1, which plain pip picks; openstack/requirements' upper-constraints
# conflicts with ironic 39 itself, so the one pin that matters is given here.
SQLALCHEMY_VERSION=2.0.52
PYTHON=${PYTHON:-python3}

cd "$(dirname "$0")/.."
VENV=${DLINFRA_OPENSTACK_VENV:-.venv-openstack}
PINS="ironic==${IRONIC_VERSION} SQLAlchemy==${SQLALCHEMY_VERSION}"
STAMP="${VENV}/.dlinfra-installed"

if [[ -f ${STAMP} && "$(cat "${STAMP}")" == "${PINS}" && -x ${VENV}/bin/ironic ]]; then
  exit 0
fi
if [[ ! -x ${VENV}/bin/python ]]; then
  "${PYTHON}" -m venv "${VENV}"
fi
"${VENV}/bin/pip" install -q --upgrade pip
# shellcheck disable=SC2086 # PINS is a list of requirement specifiers
"${VENV}/bin/pip" install -q ${PINS}
echo "${PINS}" > "${STAMP}"
echo "install-openstack: Ironic ${IRONIC_VERSION} in ${VENV}"
