# The two commands a new user needs: `make run` and `make test`.
# Both install what is missing first (scripts/setup.sh): `make run` what
# scenarios/quick.toml needs, `make test` (and lint, unit, netns, bench) everything.

VENV := .venv/bin
SCENARIO ?= scenarios/quick.toml
CARGO := cargo
ENGINE_MANIFEST := engine/Cargo.toml

.PHONY: setup setup-all run test lint unit netns engine-test bench clean

setup:
	@bash scripts/setup.sh

setup-all:
	@bash scripts/setup.sh --all

run: setup
	$(VENV)/secperf run $(SCENARIO)

# Test files run in parallel, each whole on one worker (its module's bed is built once);
# a test marked `serial` (it measures a rate or a timing, or sets a machine-wide value)
# runs while no other does (tests/conftest.py). TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 3
PYTEST := $(VENV)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test: setup-all lint engine-test
	$(PYTEST) tests

unit: setup-all
	$(PYTEST) tests/unit

netns: setup-all
	$(PYTEST) tests/netns

engine-test:
	$(CARGO) test --release --quiet --manifest-path $(ENGINE_MANIFEST)

lint: setup-all
	$(VENV)/ruff format --check secperf tests bench
	$(VENV)/ruff check secperf tests bench
	$(VENV)/mypy secperf
	$(VENV)/lint-imports --no-cache
	$(CARGO) fmt --manifest-path $(ENGINE_MANIFEST) --all -- --check
	$(CARGO) clippy --release --quiet --manifest-path $(ENGINE_MANIFEST) --all-targets -- -D warnings
	$(CARGO) test --release --quiet --manifest-path $(ENGINE_MANIFEST) -p secperf-engine --test layers

bench: setup-all
	$(VENV)/python bench/testbed_build.py
	$(VENV)/python bench/engine_vs_peers.py
	$(VENV)/python bench/timestamp_overhead.py
	$(VENV)/python bench/flood_vs_peers.py
	$(VENV)/python bench/latency_load_vs_trafgen.py --out bench/runs/latency_load_vs_trafgen-latest.json
	$(VENV)/python bench/ips_nfq_vs_fwsnort.py --out bench/runs/ips_nfq_vs_fwsnort-latest.json
	$(VENV)/python bench/http_ftp_vs_peers.py
	$(VENV)/python bench/vpn_vs_iperf3.py
	$(VENV)/python bench/placement.py

clean:
	$(VENV)/secperf clean
