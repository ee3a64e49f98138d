#!/bin/sh
# Load test (not part of CI): wrk POSTs a 50-server body to a local `dapi serve` on
# 127.0.0.1 (production chain, info logging to /dev/null) from CONNECTIONS (16)
# connections for DURATION (30s), and prints wrk's latency distribution. `make load`
# runs it; see BENCHMARKS.md.
#
# The body is the benchmark's own (benches/input.rs, written under target/bench/ by
# `cargo bench --bench allocate` with BENCH_WRITE_INPUTS=1). Options (environment):
#   DAPI_LOAD_BODY=file.json       another body, e.g. ../shared/bench/bench-50.json
#   DAPI_LOAD_CONFIG=config.json   its config, e.g. ../shared/bench/bench-config.json
#   DAPI_LOAD_PATH=/allocate?steps=removed
#   CONNECTIONS=16 THREADS=2 DURATION=30s
#
# The service refuses allocations beyond limits.max_concurrent_allocations
# (default: 2 per core) with 503; the load test raises it to CONNECTIONS so that
# every connection is served.
set -eu
cd "$(dirname "$0")/.."

command -v wrk >/dev/null || { echo "load: wrk is not installed (apt-get install -y wrk)"; exit 1; }
cargo build --release -q
if [ -z "${DAPI_LOAD_BODY:-}" ]; then
    # Prints the config's path, then the body's.
    inputs=$(BENCH_WRITE_INPUTS=1 BENCH_SIZES=50 cargo bench -q --bench allocate)
    config=$(echo "$inputs" | sed -n 1p)
    body=$(echo "$inputs" | sed -n 2p)
else
    body=$DAPI_LOAD_BODY
    config=${DAPI_LOAD_CONFIG:-}
fi
path=${DAPI_LOAD_PATH:-/allocate}
connections=${CONNECTIONS:-16}
threads=${THREADS:-2}
duration=${DURATION:-30s}

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The service refuses DAPI_ variables it does not know (a misspelt setting), so this
# script's own options are kept out of its environment.
env -u DAPI_LOAD_BODY -u DAPI_LOAD_CONFIG -u DAPI_LOAD_PATH \
    DAPI_LISTEN=127.0.0.1:$port DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS=$connections \
    target/release/dapi serve ${config:+--config "$config"} >/dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT INT TERM
i=0
until curl -sf "http://127.0.0.1:$port/ping" >/dev/null; do
    i=$((i + 1))
    [ "$i" -lt 100 ] || { echo "load: dapi serve did not start"; exit 1; }
    sleep 0.1
done

echo "load: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load: POST $path with $body ($(wc -c <"$body") bytes), $connections connections, $threads wrk threads, $duration"
DAPI_LOAD_BODY=$body wrk -t"$threads" -c"$connections" -d"$duration" --latency -s scripts/load.lua \
    "http://127.0.0.1:$port$path"
