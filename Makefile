# The two commands a new user needs: `make run` and `make test`.
# Both install what is missing first (scripts/setup.sh): `make run` what
# scenarios/quick.toml needs, `make test` (and lint, unit, netns, bench) everything.

VENV := .venv/bin
SCENARIO ?= scenarios/quick.toml
CARGO := cargo
ENGINE_MANIFEST := engine/Cargo.toml

.PHONY: setup setup-all run test lint unit netns engine-test bench docs clean

setup:
	@bash scripts/setup.sh

setup-all:
	@bash scripts/setup.sh --all

run: setup
	$(VENV)/secperf run $(SCENARIO)

# Tests run in two passes: first every test not marked `serial`, in parallel workers,
# each file whole on one worker (its module's bed is built once); then the `serial`
# ones (they measure a rate or a timing, or set a machine-wide value) in one process,
# while nothing else runs. Both passes always run; the target fails if either failed
# (pytest's 5, "no test selected", is not a failure). TEST_WORKERS=0: no workers.
TEST_WORKERS ?= 3
PYTEST := $(VENV)/python -m pytest -q
pytest-two-passes = $(PYTEST) -n $(TEST_WORKERS) --dist loadfile -m "not serial" $(1); \
	parallel=$$?; $(PYTEST) -m serial $(1); serial=$$?; \
	[ $$parallel -eq 0 -o $$parallel -eq 5 ] && [ $$serial -eq 0 -o $$serial -eq 5 ]

test: setup-all lint engine-test
	@$(call pytest-two-passes,tests)

unit: setup-all
	@$(call pytest-two-passes,tests/unit)

netns: setup-all
	@$(call pytest-two-passes,tests/netns)

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

# every generated page of docs/ (secperf/docgen; tests/unit/test_generated_docs.py fails
# when one is stale): scenarios.md, scenario-format.md's reference,
# data-format.md's tables from the record models, ...
docs: setup
	$(VENV)/python -m secperf.docgen

clean:
	$(VENV)/secperf clean
