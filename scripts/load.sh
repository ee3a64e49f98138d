#!/bin/sh
# Load test (not part of CI): wrk POSTs the 50-server benchmark body to a local
# `dapi serve` on 127.0.0.1 (production chain, info logging to /dev/null) from
# CONNECTIONS (16) connections for DURATION (30s), and prints wrk's latency
# distribution. `make load` runs it; see BENCHMARKS.md.
#
#   BENCH_SHARED=/path/to/shared  where bench/bench-50.json and bench-config.json are
#   DAPI_LOAD_BODY=file.json      another body (default: bench-50.json)
#   DAPI_LOAD_PATH=/allocate?steps=removed
#   CONNECTIONS=16 THREADS=2 DURATION=30s
#
# The service refuses allocations beyond limits.max_concurrent_allocations
# (default: 2 per core) with 503; the load test raises it to CONNECTIONS so that
# every connection is served.
set -eu
cd "$(dirname "$0")/.."

shared=""
for candidate in "${BENCH_SHARED:-}" ../shared "$(git rev-parse --git-common-dir 2>/dev/null)/../../shared"; do
    if [ -n "$candidate" ] && [ -f "$candidate/bench/bench-config.json" ]; then
        shared=$candidate
        break
    fi
done
if [ -z "$shared" ]; then
    echo "load: skipped: no shared benchmark inputs (set BENCH_SHARED, or put them at ../shared/bench)"
    exit 0
fi
command -v wrk >/dev/null || { echo "load: wrk is not installed (apt-get install -y wrk)"; exit 1; }

body=${DAPI_LOAD_BODY:-$shared/bench/bench-50.json}
path=${DAPI_LOAD_PATH:-/allocate}
connections=${CONNECTIONS:-16}
threads=${THREADS:-2}
duration=${DURATION:-30s}

cargo build --release -q
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
DAPI_LISTEN=127.0.0.1:$port DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS=$connections \
    target/release/dapi serve --config "$shared/bench/bench-config.json" >/dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT INT TERM
i=0
until curl -sf "http://127.0.0.1:$port/ping" >/dev/null; do
    i=$((i + 1))
    [ "$i" -lt 100 ] || { echo "load: dapi serve did not start"; exit 1; }
    sleep 0.1
done

echo "load: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load: POST $path with $(wc -c <"$body") bytes, $connections connections, $threads wrk threads, $duration"
DAPI_LOAD_BODY=$body wrk -t"$threads" -c"$connections" -d"$duration" --latency -s scripts/load.lua \
    "http://127.0.0.1:$port$path"
