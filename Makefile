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

conformance: build
	python3 $(SHARED)/conformance/check.py --cmd 'target/release/dapi allocate' $(SHARED)/conformance/cases

openapi:
	$(CARGO) run --release -q -- openapi > openapi/openapi.json

# Timings per datacenter size (see BENCHMARKS.md); the 5000/10000-server bodies are generated
# under target/bench/. BENCH_SIZES=50,500 narrows it; BENCH_SECONDS sets the time per figure.
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
