# dlinfra: `make demo` (set-up + a small campaign on a local testbed + report), `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup deps daemons demo test lint bench clean

setup: $(STAMP)

deps:
	scripts/install-deps.sh

$(STAMP): pyproject.toml scripts/install-deps.sh
	scripts/install-deps.sh
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# dockerd, virtlogd and libvirtd answering on this machine: the roles docker_host and libvirt_host
# (started in the background where there is no systemd), as dlinfra itself prepares any host.
daemons: setup
	$(BIN)/ansible-playbook -i inventory/controller.yml playbooks/prepare.yml

demo: setup daemons
	scripts/demo.sh

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/ansible-lint -q playbooks roles

test: setup daemons lint
	$(BIN)/pytest

bench: setup daemons
	$(BIN)/python bench/payload_overhead.py
	$(BIN)/python bench/orchestration.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
