# The README's commands. `make demo` runs the service on the local stack with a demo
# workload; `make test` runs every test tier against real Kafka and PostgreSQL.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export PYTHONDONTWRITEBYTECODE := 1
# The local stack's ports (stack/stack.sh reads the same variables) and the URLs built from them.
export KAFKA_PORT ?= 19092
export PG_PORT ?= 55432
export KAFKA_BOOTSTRAP ?= 127.0.0.1:$(KAFKA_PORT)
export DATABASE_URL ?= postgresql://reminders@127.0.0.1:$(PG_PORT)/reminders

.PHONY: help install stack-up stack-down stack-status migrate topics worker demo lint typecheck \
        helm chart lock test test-unit test-integration test-e2e test-faults \
        test-state-machines test-state-machines-long bench bench-console schema contracts clean

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# Exact versions with hashes from requirements-dev.lock (pip-compile; requirements.lock is the
# runtime part, used by the Dockerfile), then the project itself without resolving anything.
$(VENV)/.installed: pyproject.toml requirements-dev.lock
	@$(PYTHON) -c 'import sys; assert (3, 11) <= sys.version_info[:2] <= (3, 13), "Python 3.11-3.13 is required, found " + sys.version'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes -r requirements-dev.lock
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	@touch $@

install: $(VENV)/.installed ## create .venv with the service and dev tools (from the lock)

lock: ## regenerate requirements.lock and requirements-dev.lock after a change to pyproject.toml
	$(PY) -m pip install -q pip-tools==7.6.2
	$(PY) -m piptools compile -q --generate-hashes --allow-unsafe --strip-extras --no-emit-find-links --all-build-deps -o requirements.lock pyproject.toml
	$(PY) -m piptools compile -q --generate-hashes --allow-unsafe --strip-extras --no-emit-find-links --all-build-deps --extra dev -c requirements.lock -o requirements-dev.lock pyproject.toml

stack-up: ## start local Kafka (KRaft) + PostgreSQL under .dev/ (idempotent)
	@stack/stack.sh up

stack-down: ## stop the local stack, leaving no process behind
	@stack/stack.sh down

stack-status:
	@stack/stack.sh status

migrate: install stack-up ## apply database migrations
	$(PY) -m streams migrate

topics: install stack-up ## create missing contract topics and DLQs
	$(PY) -m streams topics

worker: migrate topics ## run one worker in the foreground (web on WEB_PORT, default 6066)
	$(PY) -m streams worker

demo: migrate topics ## run a worker with a demo calendar workload and show what happened
	@bash stack/demo.sh

lint: install ## ruff lint + format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install ## mypy (strict on streams/ and db/)
	$(VENV)/bin/mypy streams db

test: install stack-up lint typecheck ## all tests: unit, integration (real PG + Kafka), e2e (worker processes), the fault matrix
	$(VENV)/bin/pytest tests

test-unit: install ## fast tests of pure logic, no services
	$(VENV)/bin/pytest tests/unit

test-integration: install stack-up
	$(VENV)/bin/pytest tests/integration

test-e2e: install stack-up
	$(VENV)/bin/pytest tests/e2e

STATE_MACHINE_EXAMPLES_LONG ?= 500
test-state-machines: install stack-up ## the slices' state machines (tests/integration/state_machines/), CI's number of examples
	$(VENV)/bin/pytest tests/integration/state_machines -p no:randomly

test-state-machines-long: install stack-up ## the same, nightly-style: STATE_MACHINE_EXAMPLES_LONG examples per test (default 500)
	STATE_MACHINE_EXAMPLES=$(STATE_MACHINE_EXAMPLES_LONG) $(VENV)/bin/pytest tests/integration/state_machines -p no:randomly

test-faults: install stack-up ## only the fault matrix (its own Kafka + durable PostgreSQL; about 6 minutes)
	$(VENV)/bin/pytest tests/e2e -m faults -s

# Benchmarks run on a durable PostgreSQL (fsync and synchronous_commit on, as production);
# BENCH_PG=fast keeps the dev stack's mode for comparison. An explicit STACK_PG_DURABLE makes
# stack/stack.sh restart a running PostgreSQL in that mode; the bench reads the mode back
# from the server (SHOW fsync / synchronous_commit) and refuses a server in the other one.
BENCH_PG ?= durable
ifneq ($(filter-out durable fast,$(BENCH_PG)),)
$(error BENCH_PG must be durable or fast, not '$(BENCH_PG)')
endif

bench: install ## benchmarks: one summary table, bench/results/latest.json (BENCH_ARGS="ingest --compare old.json", BENCH_PG=durable|fast)
	STACK_PG_DURABLE=$(if $(filter fast,$(BENCH_PG)),0,1) stack/stack.sh up
	$(PY) -m streams migrate
	BENCH_PG=$(BENCH_PG) $(PY) -m bench $(BENCH_ARGS)

CONSOLE_ROWS ?= 10000000
bench-console: install stack-up ## the console's page times on a CONSOLE_ROWS-row reminders table (default 10M; fill: minutes), with the plans
	$(PY) -m bench.console_pages $(CONSOLE_ROWS)

helm: ## the pinned helm, built with `go install` into .dev/helm/ (idempotent)
	@$(PYTHON) -m devkit.helm

chart: install helm ## helm lint + template of deploy/helm/, every object validated against the Kubernetes schemas
	$(VENV)/bin/pytest tests/unit/test_helm_chart.py

schema: install stack-up ## regenerate db/schema.snapshot from a fresh migrate
	$(PY) -m db.migrate --write-snapshot

contracts: install ## regenerate docs/contracts/*.schema.json
	$(PY) -m streams.contracts

clean: stack-down
	rm -rf .dev
