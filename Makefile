# dapi: common tasks; `make help` lists them. Every target runs on a fresh clone alone;
# ../shared (SHARED=dir), when present, adds data: the full set of recorded allocations for
# `conformance` and the earlier benchmark inputs for `bench`.
CARGO ?= cargo
SHARED ?= ../shared

.PHONY: help build run test lint conformance openapi bench bench-original bench-inventory bench-recurring bench-custom bench-owner-filter bench-simulate report-check load soak fuzz docker clean
.DEFAULT_GOAL := help

help: ## list the targets
	@echo "make targets (SHARED=$(SHARED) is optional extra data):"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## release build: target/release/dapi
	$(CARGO) build --release

run: ## serve on 127.0.0.1:8080 with the built-in config
	$(CARGO) run --release -- serve

test: ## every test: unit, CLI, HTTP, process, conformance subset, properties, inventory
	$(CARGO) test --release
	@if command -v initdb >/dev/null 2>&1 || [ -x "$$(pg_config --bindir 2>/dev/null)/initdb" ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "test: inventory mode's tests ran on a throwaway PostgreSQL (tests/inventory.rs)"; \
	else \
		echo "test: SKIPPED inventory mode's tests: PostgreSQL is not installed (apt-get install -y postgresql)"; \
	fi

lint: ## rustfmt, clippy, cargo-deny (installed first if missing)
	$(CARGO) fmt --check
	$(CARGO) clippy --release --all-targets -- -D warnings
	@command -v cargo-deny >/dev/null || { \
		echo "lint: cargo-deny is not installed: installing it now with '$(CARGO) install --locked cargo-deny' (once; a few minutes)"; \
		$(CARGO) install --locked --quiet cargo-deny; }
	$(CARGO) deny --log-level error check licenses bans sources

conformance: build ## replay recorded allocations through the CLI (vendored; also ../shared's)
	python3 scripts/conformance.py tests/conformance/cases
	@if [ -d "$(SHARED)/conformance/cases" ]; then \
		echo "conformance: the full set in $(SHARED)/conformance/cases"; \
		python3 scripts/conformance.py "$(SHARED)/conformance/cases"; \
	else \
		echo "conformance: no $(SHARED)/conformance/cases: replayed the vendored subset only"; \
	fi
	@if [ -d "$(SHARED)/conformance/custom/cases" ]; then \
		echo "conformance: custom plugins ($(SHARED)/conformance/custom), CLI then HTTP"; \
		DAPI_PLUGINS_DIR="$(SHARED)/conformance/custom/plugins" python3 "$(SHARED)/conformance/check.py" --strict \
			--cmd 'target/release/dapi allocate' "$(SHARED)/conformance/custom/cases"; \
		python3 scripts/conformance-http.py --check "$(SHARED)/conformance/check.py" \
			--plugins-dir "$(SHARED)/conformance/custom/plugins" "$(SHARED)/conformance/custom/cases"; \
	fi

openapi: ## regenerate openapi/openapi.json
	$(CARGO) run --release -q -- openapi > openapi/openapi.json

# BENCH_SIZES=50,500 narrows the sizes; BENCH_SECONDS sets the time per figure;
# BENCH_INPUTS=repo leaves $(SHARED)'s inputs out (see benches/allocate.rs).
bench: ## timings per datacenter size (50 to 10,000 servers; BENCH_SIZES=50,500)
	BENCH_SHARED=$(abspath $(SHARED)) $(CARGO) bench --bench allocate

bench-original: build ## against the original allocator (ORIGINAL=sdc-designation checkout; ORIGINAL_BODIES=file[:runs] ...)
	@test -n "$(ORIGINAL)" || { echo "bench-original: set ORIGINAL to a checkout of sdc-designation with its npm dependencies (scripts/vs-original.py)"; exit 1; }
	ORIGINAL=$(ORIGINAL) python3 scripts/vs-original.py $(SHARED)/bench/bench-config.json $(or $(ORIGINAL_BODIES),$(SHARED)/bench/bench-50.json:20 $(SHARED)/bench/bench-500.json:10)

bench-inventory: ## inventory mode: start-up, allocations/s and p99 with claims (needs PostgreSQL)
	$(CARGO) test --release --test inventory_bench -- --ignored --nocapture

bench-recurring: ## inventory mode's engine alone: owners in turn at 5,000 servers (RECURRING_BENCH_*)
	$(CARGO) test --release --test recurring_bench -- --ignored --nocapture

bench-custom: ## what custom plugins (plugins_dir) add, at 500 and 5,000 servers
	$(CARGO) bench --bench custom

bench-owner-filter: ## what filter_owner_server snippets add, at 500 and 5,000 servers
	$(CARGO) bench --bench owner_filter

bench-simulate: build ## dapi simulate: ~100,000 events on 1,000 generated servers, timed
	bash scripts/simulate-bench.sh

report-check: build ## dapi simulate --report in headless Chromium: no console errors, a screenshot
	bash scripts/report-check.sh

load: ## wrk against dapi serve: 50 servers, 16 connections, 30 s (needs wrk)
	sh scripts/load.sh

soak: build ## bounded soak test over loopback (3 minutes)
	python3 scripts/soak.py --minutes 3

fuzz: ## every fuzz target for FUZZ_SECONDS each (default 180; installs cargo-fuzz)
	sh scripts/fuzz.sh $(or $(FUZZ_SECONDS),180)

docker: ## container image running dapi serve on port 8080
	docker build -t dapi .

clean: ## remove target/
	$(CARGO) clean
