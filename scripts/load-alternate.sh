#!/bin/sh
# Builds alternated under make load's traffic (issue 15): for each round, each binary in
# turn serves wrk (2 threads, 16 connections, DURATION, default 8s) POSTing DAPI_LOAD_BODY
# with DAPI_LOAD_CONFIG; prints requests/s, p99 and the service's CPU per request (from
# /proc/PID/stat). The host's speed drifts within minutes, so builds are compared only
# within one run. See BENCHMARKS.md.
#
#   DAPI_LOAD_BODY=../shared/bench/bench-50.json DAPI_LOAD_CONFIG=../shared/bench/bench-config.json \
#       sh scripts/load-alternate.sh ROUNDS BIN...
set -eu
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "load-alternate: wrk is not installed (apt-get install -y wrk)"; exit 1; }
[ $# -ge 2 ] || { echo "usage: load-alternate.sh ROUNDS BIN..."; exit 2; }
: "${DAPI_LOAD_BODY:?set DAPI_LOAD_BODY to a request body}" "${DAPI_LOAD_CONFIG:?set DAPI_LOAD_CONFIG to its config}"
rounds=$1
shift
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for _ in $(seq "$rounds"); do
    for bin in "$@"; do
        port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        # The service refuses DAPI_ variables it does not know: the script's own stay out.
        env -u DAPI_LOAD_BODY -u DAPI_LOAD_CONFIG DAPI_LISTEN=127.0.0.1:$port \
            DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS=16 "$bin" serve --config "$DAPI_LOAD_CONFIG" >/dev/null 2>&1 &
        pid=$!
        for _ in $(seq 50); do
            curl -sf "http://127.0.0.1:$port/ping" >/dev/null 2>&1 && break
            sleep 0.1
        done
        before=$(cpu $pid)
        out=$(wrk -t2 -c16 -d"${DURATION:-8s}" --latency -s scripts/load.lua "http://127.0.0.1:$port/allocate")
        after=$(cpu $pid)
        kill $pid
        wait $pid 2>/dev/null || true
        echo "$out" | awk -v bin="$bin" -v ticks=$((after - before)) -v tick="$tick" '
            /Requests\/sec/ { rps = $2 }
            $1 == "99%" { p99 = $2 }
            /requests in/ { n = $1 }
            END { printf "%s: %s requests/s, p99 %s, service CPU per request %.3f ms\n", bin, rps, p99, ticks / tick * 1000 / n }'
    done
done
