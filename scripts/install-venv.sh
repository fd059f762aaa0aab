#!/usr/bin/env bash
# The controller's venv: install-venv.sh VENV EXTRAS (EXTRAS: controller, or controller,dev for the tests).
# Its dependencies are installed once per set of pins into dlinfra's cache ($DLINFRA_CACHE, else
# $XDG_CACHE_HOME/dlinfra, else ~/.cache/dlinfra: dlinfra.cache), keyed by the interpreter, EXTRAS and
# pyproject.toml's dependency lists; a checkout's VENV is a hard-linked copy of it (seconds; a full copy where the
# cache is on another filesystem) with the checkout's own dlinfra installed editable on top. Why: a fresh clone
# spent over a minute of `make test` installing the same wheels (TensorFlow alone is over a gigabyte unpacked).
# Nothing writes into the shared files: Python replaces a stale .pyc by a new file, pip removes and adds files.
# Idempotent: a VENV already copied from the same cache entry is kept; only dlinfra is reinstalled.
set -euo pipefail

VENV=${1:?usage: install-venv.sh VENV EXTRAS}
EXTRAS=${2:?usage: install-venv.sh VENV EXTRAS}
PYTHON=${PYTHON:-python3}
cd "$(dirname "$0")/.."

PINS=$("${PYTHON}" - "${EXTRAS}" <<'EOF'
import json, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(json.dumps([sys.version, sys.argv[1], project.get("dependencies", []), project.get("optional-dependencies", {})],
                 sort_keys=True))
EOF
)
CACHE=${DLINFRA_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/dlinfra}
KEY=$(printf '%s' "${PINS}" | sha256sum | cut -c1-16)
CACHED="${CACHE}/venv/${KEY}"
mkdir -p "${CACHE}/venv"

# The dependencies, built where they stay (the scripts' shebangs name this path), one builder at a time.
(
  flock 9
  if [[ ! -f ${CACHED}/.dlinfra-complete ]]; then
    rm -rf "${CACHED}"
    "${PYTHON}" -m venv "${CACHED}"
    "${CACHED}/bin/pip" install -q --upgrade pip
    "${CACHED}/bin/pip" install -q -e ".[${EXTRAS}]"
    "${CACHED}/bin/pip" uninstall -q -y dlinfra  # each checkout installs its own
    echo "${PINS}" > "${CACHED}/.dlinfra-complete"
    echo "install-venv: the ${EXTRAS} dependencies built into the cache (${KEY})"
  fi
) 9>"${CACHED}.lock"

if [[ ! -f ${VENV}/.dlinfra-venv || "$(cat "${VENV}/.dlinfra-venv")" != "${KEY}" ]]; then
  rm -rf "${VENV}"
  cp -al "${CACHED}" "${VENV}" 2>/dev/null || { rm -rf "${VENV}"; cp -a "${CACHED}" "${VENV}"; }
  rm -f "${VENV}/.dlinfra-complete"
  ABS=$(cd "${VENV}" && pwd)
  # Scripts and activate files name the venv's path: rewritten in the copy (sed -i writes a new file, not the link).
  grep -rlIZ --fixed-strings "${CACHED}" "${VENV}/bin" | xargs -0 -r sed -i "s|${CACHED}|${ABS}|g"
  echo "${KEY}" > "${VENV}/.dlinfra-venv"
  echo "install-venv: ${VENV} from the cache (${EXTRAS}, ${KEY})"
fi
"${VENV}/bin/pip" install -q --no-deps -e .
touch "${CACHED}"
# All but the four newest entries go (about 3 GB each); a checkout copied from one keeps its files (its own links).
find "${CACHE}/venv" -mindepth 1 -maxdepth 1 -type d -printf '%T@ %p\n' | sort -rn | tail -n +5 | cut -d' ' -f2- |
  while read -r old; do rm -rf "${old}" "${old}.lock"; done
