# relaunch: the operator surface (contract: DESIGN.md section 7).
# `make demo` and `make test` each run `make setup` first, so either alone works on a fresh machine.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY := .venv/bin/python

.PHONY: help setup up down status demo test test-unit bench bench-load reliability

help:
	@echo "make setup   install OS packages (as root), .venv and every relaunch package"
	@echo "make up      start NATS, Redis, Postgres, a 4-node Slurm cluster and the services (.run/)"
	@echo "make down    stop them"
	@echo "make demo    show relaunch recovering a crashed job (starts the stack if needed)"
	@echo "make test    the whole test suite (starts and stops its own stack under .run/test)"
	@echo "make bench   time recovery (failure line -> running again) against plain Slurm requeue"
	@echo "make bench-load  10,000 jobs' progress at 1 Hz, then 1,000 failures, through detector and decider (JOBS=1000 for a quick run)"
	@echo "make reliability  the fault tests (tests/reliability, on the test stack), then docs/reliability.md from their results"

setup:
	@bash scripts/setup.sh

up: setup
	@bash scripts/stack.sh up

down:
	@if [ -x $(PY) ]; then bash scripts/stack.sh down; else echo "nothing to stop (no .venv)"; fi

status:
	@bash scripts/stack.sh status

demo: setup
	@bash scripts/stack.sh up
	@source .run/env && relaunch demo --script examples/flaky-train.sh

test: setup
	@$(PY) -m pytest

# Results of the previous run are removed first, so the table shows only what this run tried.
reliability: setup
	@rm -rf test-artifacts/reliability
	@$(PY) -m pytest tests/reliability; rc=$$?; $(PY) tests/reliability/faults.py report || rc=1; exit $$rc

test-unit: setup
	@$(PY) -m pytest tests/unit

bench: setup
	@bash scripts/stack.sh up
	@source .run/env && $(PY) bench/recovery_latency.py --jobs 20 --parallel 4 --baseline

# On its own infrastructure (.run/bench-load, ports 15xxx), stopped afterwards: the bench starts its own
# detector and decider (no actuator: the jobs exist only on the bus). Results in bench/results/.
BENCH_LOAD_STACK := RELAUNCH_RUN_DIR=.run/bench-load RELAUNCH_PORT_BASE=15000
JOBS ?= 10000
DURATION ?= 120
bench-load: setup
	@$(BENCH_LOAD_STACK) bash scripts/stack.sh infra-up
	@$(BENCH_LOAD_STACK) $(PY) bench/load.py --run-dir .run/bench-load --jobs $(JOBS) --duration $(DURATION); \
		rc=$$?; $(BENCH_LOAD_STACK) bash scripts/stack.sh down; exit $$rc
