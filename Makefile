# relaunch: the operator surface (contract: DESIGN.md section 7).
# `make demo` and `make test` each run `make setup` first, so either alone works on a fresh machine.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY := .venv/bin/python

.PHONY: help setup up down status demo test test-unit bench

help:
	@echo "make setup   install OS packages (as root), .venv and every relaunch package"
	@echo "make up      start NATS, Redis, Postgres, a 4-node Slurm cluster and the services (.run/)"
	@echo "make down    stop them"
	@echo "make demo    show relaunch recovering a crashed job (starts the stack if needed)"
	@echo "make test    the whole test suite (starts and stops its own stack under .run/test)"
	@echo "make bench   time recovery (failure line -> running again) against plain Slurm requeue"

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

test-unit: setup
	@$(PY) -m pytest tests/unit

bench: setup
	@bash scripts/stack.sh up
	@source .run/env && $(PY) bench/recovery_latency.py --jobs 20 --parallel 4 --baseline
