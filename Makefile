# dlinfra: `make demo` (set-up + a small campaign on a local testbed + report), `make test`.
# `make openstack`: the venvs the ironic and nova providers' tests start OpenStack services from (.venv-openstack, .venv-nova).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup deps daemons openstack demo test lint bench clean

setup: $(STAMP)

deps:
	scripts/install-deps.sh

$(STAMP): pyproject.toml scripts/install-deps.sh
	scripts/install-deps.sh
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# The OpenStack services the ironic and nova providers are tested on (Ironic; Keystone, Placement, Glance, Neutron,
# Nova), each set in its own venv (stamped by its pinned versions).
openstack:
	scripts/install-openstack.sh

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

test: setup daemons openstack lint
	$(BIN)/pytest

# Every benchmark appends its figures to one file; the last line prints them as one table, goals beside them.
# bench/openstack.py prints the providers' times beside the APIs' own (the issue sets no goal for them).
BENCH_FIGURES := artifacts/bench/figures.jsonl
bench: setup daemons openstack
	rm -f $(BENCH_FIGURES)
	DLINFRA_BENCH_FIGURES=$(BENCH_FIGURES) $(BIN)/python bench/payload_overhead.py || true
	DLINFRA_BENCH_FIGURES=$(BENCH_FIGURES) $(BIN)/python bench/orchestration.py || true
	DLINFRA_BENCH_FIGURES=$(BENCH_FIGURES) $(BIN)/python bench/campaign.py || true
	$(BIN)/python bench/openstack.py || true
	$(BIN)/python bench/figures.py $(BENCH_FIGURES)

clean:
	rm -rf $(VENV) .venv-openstack .venv-nova .pytest_cache .ruff_cache
