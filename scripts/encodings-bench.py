#!/usr/bin/env python3
"""Cost of content encodings at datacenter scale: POST /allocate over loopback against a
running `dapi serve`, each way of sending and reading, with the server's CPU time per request
(from /proc) and the bytes on the wire. Medians over RUNS requests on one keep-alive
connection.

    python3 scripts/encodings-bench.py BODY.json [PORT] [PID]   (RUNS=7)

BODY.json: e.g. target/bench/repo-v1-5000.json (`BENCH_WRITE_INPUTS=1 BENCH_SIZES=5000
cargo bench --bench allocate` writes it). The client's own decompression is not timed.
"""
import gzip
import http.client
import os
import statistics
import sys
import time


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    body = open(sys.argv[1], "rb").read()
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 8080
    pid = int(sys.argv[3]) if len(sys.argv) > 3 else None
    runs = int(os.environ.get("RUNS", "7"))
    started = time.perf_counter()
    zipped = gzip.compress(body, compresslevel=6)
    gzip_ms = (time.perf_counter() - started) * 1e3
    print(f"body {len(body)} bytes; gzip -6 (client side, C zlib) {len(zipped)} bytes in {gzip_ms:.0f} ms")
    modes = [
        ("plain body, plain answer", body, {}),
        ("plain body, Accept-Encoding: gzip", body, {"Accept-Encoding": "gzip"}),
        ("plain body, Accept-Encoding: zstd", body, {"Accept-Encoding": "zstd"}),
        ("gzip body, plain answer", zipped, {"Content-Encoding": "gzip"}),
        ("gzip body, gzip answer", zipped, {"Content-Encoding": "gzip", "Accept-Encoding": "gzip"}),
    ]
    print("| request | sent bytes | answer bytes | POST ms (median) | server CPU ms per request |")
    print("|:--|--:|--:|--:|--:|")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    for name, data, headers in modes:
        headers = {"Content-Type": "application/json", **headers}
        times, cpus, size = [], [], 0
        for i in range(runs + 1):
            before = cpu_seconds(pid) if pid else 0.0
            t = time.perf_counter()
            conn.request("POST", "/allocate", body=data, headers=headers)
            r = conn.getresponse()
            answer = r.read()
            elapsed = time.perf_counter() - t
            after = cpu_seconds(pid) if pid else 0.0
            assert r.status == 200, (r.status, answer[:200])
            if i:  # the first is a warm-up
                times.append(elapsed * 1e3)
                cpus.append((after - before) * 1e3)
                size = len(answer)
        cpu = f"{statistics.median(cpus):.0f}" if pid else "n/a"
        print(f"| {name} | {len(data)} | {size} | {statistics.median(times):.1f} | {cpu} |")


if __name__ == "__main__":
    main()
