# dapi: common tasks. `make run` serves on the built-in config; `make test` runs every test.
CARGO ?= cargo
SHARED ?= ../shared

.PHONY: build run test lint conformance openapi bench load soak docker clean

build:
	$(CARGO) build --release

run:
	$(CARGO) run --release -- serve

test:
	$(CARGO) test --release

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --release --all-targets -- -D warnings
	@command -v cargo-deny >/dev/null || $(CARGO) install --locked cargo-deny
	$(CARGO) deny check licenses bans sources

# The vendored subset, then the full set where $(SHARED) holds it.
conformance: build
	python3 scripts/conformance.py tests/conformance/cases
	@if [ -d "$(SHARED)/conformance/cases" ]; then \
		echo "conformance: the full set in $(SHARED)/conformance/cases"; \
		python3 scripts/conformance.py "$(SHARED)/conformance/cases"; \
	else \
		echo "conformance: no $(SHARED)/conformance/cases: replayed the vendored subset only"; \
	fi

openapi:
	$(CARGO) run --release -q -- openapi > openapi/openapi.json

# Timings per datacenter size (see BENCHMARKS.md) on bodies generated in the repo (and on
# $(SHARED)'s where present). BENCH_SIZES=50,500 narrows it; BENCH_SECONDS sets the time per
# figure; BENCH_INPUTS=repo leaves $(SHARED)'s out.
bench:
	BENCH_SHARED=$(abspath $(SHARED)) $(CARGO) bench --bench allocate

load:
	sh scripts/load.sh

soak: build
	python3 scripts/soak.py --minutes 3

docker:
	docker build -t dapi .

clean:
	$(CARGO) clean
