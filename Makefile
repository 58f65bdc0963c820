# relaunch: the operator surface (contract: DESIGN.md section 7).
# `make demo` and `make test` each run `make setup` first, so either alone works on a fresh machine.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY := .venv/bin/python
# The Slurm release of the local stack (docs/slurm-versions.md): 22.05 (the host's packages on
# Debian 12, the default), 24.11 (Debian 13) or 26.05 (Debian sid), run from a release root.
SLURM ?=
# How the actuator reaches Slurm (contract): cli (its commands, the default) or rest (slurmrestd of the
# same release, JWT auth; SLURM=24.11 or 26.05): make up SLURM=24.11 SLURM_API=rest.
SLURM_API ?=
# NATS as one server (the default) or a 3-server cluster with every stream R3: make up NATS_SERVERS=3.
NATS_SERVERS ?=
# Only what was asked for: an empty RELAUNCH_SLURM_API would reach the services as an invalid setting.
STACK := RELAUNCH_SLURM=$(or $(SLURM),host) $(if $(SLURM_API),RELAUNCH_SLURM_API=$(SLURM_API)) \
	$(if $(NATS_SERVERS),RELAUNCH_NATS_SERVERS=$(NATS_SERVERS))
SLURM_RELEASES := 22.05 24.11 26.05

.PHONY: help setup up down status demo demo-compose test test-under-load test-unit test-matrix lint bench bench-load bench-ingest bench-failure bench-restart bench-scan bench-hang reliability fixtures

help:
	@echo "make setup   install OS packages (as root), .venv and every relaunch package (SLURM=24.11|26.05: that release too)"
	@echo "make up      start NATS, Redis, Postgres, a 4-node Slurm cluster and the services (.run/)"
	@echo "make down    stop them"
	@echo "make demo    show relaunch recovering a crashed job (starts the stack if needed)"
	@echo "make demo-compose  the compose demo (deploy/compose) end to end in a private Docker engine (root; cached in /var/cache/relaunch/compose)"
	@echo "make test    the whole test suite, its tiers side by side (TEST_JOBS=N at once), each on its own stack under .run/test*"
	@echo "make test-under-load  the same beside one CPU-bound process per core (LOAD_PROCS=N)"
	@echo "make test-unit  the unit tier alone (no server)"
	@echo "make lint   ruff (pyproject.toml [tool.ruff]) and the import layers (lint-imports); the unit tier runs both too"
	@echo "make test-matrix SLURM=26.05  one release's end-to-end, reliability and security tiers"
	@echo "make bench   time recovery (failure line -> running again) against plain Slurm requeue"
	@echo "make bench-restart  the same on every Slurm release, with the default batch_sched_delay and with 0 (about 25 min)"
	@echo "make bench-load  10,000 jobs' progress at 1 Hz, then 1,000 failures, through detector and decider (JOBS=1000 for a quick run)"
	@echo "make bench-ingest  the detector's CPU per progress message, in process, beside a bare nats-py consumer (BEFORE=<checkout> beside another commit)"
	@echo "make bench-failure  the detector's and the decider's CPU per failure (bench-load's 1,000 failures), in process (BEFORE=<checkout> beside another commit)"
	@echo "make bench-scan  relaunch classify --json against grep -E on a 512 MiB realistic log (LOG= another)"
	@echo "make bench-hang  RUNS (10) real stuck-rank trainings: the stuck rank and its node named within 20 s of the hang? (about 10 min)"
	@echo "make reliability  the fault tests (tests/reliability, on the test stack), then docs/reliability.md from their results"
	@echo "make fixtures  capture what each Slurm release prints (tests/fixtures/slurm) from fresh clusters"
	@echo "SLURM=22.05|24.11|26.05 on setup/up/down/status/demo picks the Slurm release (default: the host's)"
	@echo "SLURM_API=rest on up/demo/bench: the actuator talks to slurmrestd (started too) instead of running Slurm's commands"
	@echo "NATS_SERVERS=3 on up/demo/bench: a 3-server NATS cluster, every stream and bucket with 3 replicas"

setup:
	@RELAUNCH_SLURM=$(SLURM) bash scripts/setup.sh

up: setup
	@$(STACK) bash scripts/stack.sh up

down:
	@if [ -x $(PY) ]; then bash scripts/stack.sh down; else echo "nothing to stop (no .venv)"; fi

status:
	@bash scripts/stack.sh status

demo: setup
	@$(STACK) bash scripts/stack.sh up
	@source "$${RELAUNCH_RUN_DIR:-.run}/env" && relaunch demo --script examples/flaky-train.sh

# deploy/compose's demo, end to end, in a Docker engine of its own with locally built stand-ins for
# the images no registry serves here (scripts/compose-demo.sh; deploy/compose/compose.ci.yaml).
demo-compose: setup
	@bash scripts/compose-demo.sh

# Every tier side by side (TEST_JOBS at once; default from the machine's cores and memory), each on a test stack
# of its own: unit/integration/deploy, the compose demo, the hosts topology, end to end + reliability + security on
# every release of the matrix, the real frameworks. Release roots are built by the tier that needs them.
test:
	@bash scripts/setup.sh
	@$(PY) scripts/test_matrix.py $(SLURM_RELEASES)

# The whole suite beside one CPU-bound process per core (LOAD_PROCS=N to change): a busy CI machine.
test-under-load:
	@bash scripts/under-load.sh $(MAKE) test

# The end-to-end and reliability tiers on one release (e.g. make test-matrix SLURM=26.05).
test-matrix: setup
	@$(PY) scripts/test_matrix.py --only-slurm-tiers $(or $(SLURM),22.05)

# Results of the previous run are removed first, so the table shows only what this run tried.
# On every release of the matrix (or SLURM=<v> alone), each on its own test stack.
reliability:
	@RELAUNCH_SLURM="$(or $(SLURM),$(SLURM_RELEASES))" bash scripts/setup.sh
	@rm -rf test-artifacts/reliability
	@rc=0; for v in $(or $(SLURM),$(SLURM_RELEASES)); do \
	  RELAUNCH_TEST_SLURM=$$v $(PY) -m pytest tests/reliability || rc=1; done; \
	  RELAUNCH_TEST_RUN_DIR=.run/test-hosts RELAUNCH_TEST_PORT_BASE=27000 $(PY) -m pytest tests/hosts || rc=1; \
	  $(PY) tests/reliability/faults.py report || rc=1; exit $$rc

test-unit: setup
	@$(PY) -m pytest tests/unit

lint: setup
	@.venv/bin/ruff check libs services tests scripts bench examples && .venv/bin/lint-imports

bench: setup
	@$(STACK) bash scripts/stack.sh up
	@source "$${RELAUNCH_RUN_DIR:-.run}/env" && $(PY) bench/recovery_latency.py --jobs 20 --parallel 4 --baseline

# Each release on a fresh stack of its own (.run/fixtures-<release>, ports 47xxx), stopped afterwards.
fixtures:
	@RELAUNCH_SLURM="$(SLURM_RELEASES)" bash scripts/setup.sh
	@set -e; for v in $(SLURM_RELEASES); do \
	  run=.run/fixtures-$$v; export RELAUNCH_RUN_DIR=$$run RELAUNCH_PORT_BASE=47000 RELAUNCH_SLURM=$$v; \
	  bash scripts/stack.sh down >/dev/null; rm -rf $$run; bash scripts/stack.sh infra-up; \
	  (source $$run/env && $(PY) scripts/capture_slurm_fixtures.py tests/fixtures/slurm/$$v); rc=$$?; \
	  bash scripts/stack.sh down; [ $$rc = 0 ]; done

# Failure line -> running again on every release of the matrix, with Slurm's default batch_sched_delay and
# with batch_sched_delay=0, each beside a native requeue; one stack per release (.run/bench-restart-<v>,
# ports 16xxx), stopped afterwards. Results in bench/results/restart-matrix.md (about 25 minutes).
bench-restart:
	@RELAUNCH_SLURM="$(SLURM_RELEASES)" bash scripts/setup.sh
	@$(PY) bench/restart_matrix.py --releases "$(or $(SLURM),$(SLURM_RELEASES))"

# `relaunch classify --json` against grep -E -c -f of 30 common failure patterns on a realistic log (written
# once, 512 MiB; LOG= another), median of 5, pure-Python engine once for identical output; no server.
LOG ?= /tmp/train-512.log
bench-scan: setup
	@set -o pipefail; $(PY) bench/scan_speed.py --log $(LOG) --runs 5 | tee bench/results/scan-speed.json

# Issue 37's target on real runs: RUNS torchrun trainings (2 nodes x 1 and x 2 ranks) with one rank stopped in
# a native call, on a stack of its own (.run/bench-hang, ports 18xxx), stopped afterwards; per run the rank and
# node blamed against where the fault struck, seconds after the hang's declaration, the action. Results in
# bench/results/hang-attribution.json; exits 1 when fewer than 9 in 10 are named within 20 s.
RUNS ?= 10
bench-hang: setup
	@$(PY) bench/hang_attribution.py --runs $(RUNS)

# On its own infrastructure (.run/bench-load, ports 15xxx), stopped afterwards: the bench starts its own
# detector and decider (no actuator: the jobs exist only on the bus). Results in bench/results/.
BENCH_LOAD_STACK := RELAUNCH_RUN_DIR=.run/bench-load RELAUNCH_PORT_BASE=15000
JOBS ?= 10000
DURATION ?= 120
bench-load: setup
	@$(BENCH_LOAD_STACK) bash scripts/stack.sh infra-up
	@$(BENCH_LOAD_STACK) $(PY) bench/load.py --run-dir .run/bench-load --jobs $(JOBS) --duration $(DURATION); \
		rc=$$?; $(BENCH_LOAD_STACK) bash scripts/stack.sh down; exit $$rc

# The CPU one failure (an InfiniBand error line, then Slurm's FAILED) costs the detector and the decider,
# stage by stage through their own handlers, in process (bench-load's failure phase without the noise of
# the rest of its load); BEFORE=<checkout> measures another checkout in the same rounds. Results in
# bench/results/failure-cpu.json.
bench-failure: setup
	@$(BENCH_LOAD_STACK) bash scripts/stack.sh infra-up
	@$(BENCH_LOAD_STACK) $(PY) bench/failure_cpu.py --run-dir .run/bench-load --rounds 3 \
		$(if $(BEFORE),--variant before=$(BEFORE)) --json bench/results/failure-cpu.json; \
		rc=$$?; $(BENCH_LOAD_STACK) bash scripts/stack.sh down; exit $$rc

# The detector's progress ingest in process: CPU seconds per message beside the bare nats-py consumer,
# alone on the same infrastructure (less noisy than bench-load's drain); BEFORE=<checkout> measures another
# checkout in the same rounds. Results in bench/results/ingest-cpu.json.
BEFORE ?=
bench-ingest: setup
	@$(BENCH_LOAD_STACK) bash scripts/stack.sh infra-up
	@$(BENCH_LOAD_STACK) $(PY) bench/ingest_cpu.py --run-dir .run/bench-load --rounds 5 \
		$(if $(BEFORE),--variant before=$(BEFORE)) --json bench/results/ingest-cpu.json; \
		rc=$$?; $(BENCH_LOAD_STACK) bash scripts/stack.sh down; exit $$rc
