#!/usr/bin/env python3
"""Inventory mode at scale (issue 14): a generated datacenter of N servers x 30 VMs loaded
with `dapi inventory load`, a replica started on it, allocations timed one after the other,
beside the stateless `dapi allocate` of the same datacenter. Figures are printed, for
BENCHMARKS.md; nothing is asserted.

    python3 scripts/inventory-scale.py [--servers 100000] [--allocations 20]
        [--url postgresql://postgres@127.0.0.1:5432]

The datacenter is the benchmark's (benches/input.rs, written by `cargo bench --bench allocate`
with BENCH_WRITE_INPUTS=1 under target/bench/). A database `dapi_scale` is created on the
PostgreSQL at --url (trust auth, as the test clusters and a developer's local server have)
and dropped afterwards. Needs target/release/dapi (`make build`), psql, and memory: at
100,000 servers the dump is 1.2 GB.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAPI = os.path.join(ROOT, "target", "release", "dapi")


def inputs(servers):
    """The generated request bodies for `servers` and for 50 servers (for the VM)."""
    paths = [os.path.join(ROOT, "target", "bench", f"repo-v1-{n}.json") for n in (servers, 50)]
    if not all(os.path.exists(p) for p in paths):
        env = dict(os.environ, BENCH_WRITE_INPUTS="1", BENCH_SIZES=f"50,{servers}", BENCH_INPUTS="repo")
        subprocess.run(["cargo", "bench", "--bench", "allocate"], cwd=ROOT, env=env, check=True)
    return paths


def psql(url, sql):
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", f"{url}/postgres", "-c", sql], check=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_mib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) // 1024
    return 0


def run(command, env=None):
    """Runs `command` to its end: seconds, exit code, its own peak RSS in MiB."""
    t = time.monotonic()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return time.monotonic() - t, child.returncode, usage.ru_maxrss // 1024


def post(port, path, body):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", type=int, default=100_000)
    p.add_argument("--allocations", type=int, default=20)
    p.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432")
    args = p.parse_args()
    if not os.path.exists(DAPI):
        sys.exit(f"{DAPI} is missing: run `make build` first")
    dump, small = inputs(args.servers)
    size_mb = os.path.getsize(dump) / 1e6
    with open(small) as f:
        request = json.load(f)
    vm_only = {k: request[k] for k in ("vm", "image", "package") if k in request}
    print(f"datacenter: {args.servers} servers, dump {size_mb:.0f} MB ({dump})")

    db_url = f"{args.url}/dapi_scale"
    psql(args.url, "DROP DATABASE IF EXISTS dapi_scale")
    psql(args.url, "CREATE DATABASE dapi_scale")
    serve = None
    try:
        load_s, code, load_rss = run([DAPI, "inventory", "load", dump, "--url", db_url])
        if code != 0:
            sys.exit(f"dapi inventory load exited with {code}")
        print(f"dapi inventory load: {load_s:.1f} s, peak RSS {load_rss} MiB")

        port = free_port()
        env = dict(os.environ, DAPI_LISTEN=f"127.0.0.1:{port}", DAPI_INVENTORY__URL=db_url, DAPI_LOG_LEVEL="warn")
        t = time.monotonic()
        serve = subprocess.Popen([DAPI, "serve"], env=env, stdout=subprocess.DEVNULL)
        while True:
            if serve.poll() is not None:
                sys.exit(f"dapi serve exited with {serve.returncode} while loading the inventory")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        start_s = time.monotonic() - t
        print(
            f"replica start-up: {start_s:.1f} s to answer /ping; RSS {status_mib(serve.pid, 'VmRSS:')} MiB "
            f"(peak {status_mib(serve.pid, 'VmHWM:')} MiB)"
        )

        times, statuses, answer_bytes = [], {}, 0
        for i in range(args.allocations):
            body = dict(vm_only)
            vm_uuid = f"5ca1e000-0000-4000-8000-{i:012d}"
            # `vm_uuid` is what inventory mode claims for (before `uuid`): each allocation a new VM
            body["vm"] = dict(body["vm"], vm_uuid=vm_uuid, uuid=vm_uuid)
            t = time.monotonic()
            status, answer = post(port, "/allocate?steps=counts", json.dumps(body).encode())
            times.append(time.monotonic() - t)
            statuses[status] = statuses.get(status, 0) + 1
            answer_bytes += len(answer)
        times.sort()
        print(
            f"inventory POST /allocate?steps=counts, one at a time: {statuses}; "
            f"median {times[len(times) // 2] * 1e3:.0f} ms, max {times[-1] * 1e3:.0f} ms; "
            f"answers {answer_bytes // max(1, len(times))} B; RSS after {status_mib(serve.pid, 'VmRSS:')} MiB"
        )
        serve.terminate()
        serve.wait()
        serve = None

        env = dict(
            os.environ,
            DAPI_LIMITS__MAX_SERVERS=str(max(20_000, args.servers)),
            DAPI_LIMITS__MAX_BODY_BYTES=str(4 * 1024**3),
        )
        stateless_s, code, peak = run([DAPI, "allocate", "--steps", "counts", dump], env)
        print(f"stateless dapi allocate --steps counts, whole process: {stateless_s:.1f} s (exit {code}), peak RSS {peak} MiB")
    finally:
        if serve is not None:
            serve.kill()
            serve.wait()
        psql(args.url, "DROP DATABASE IF EXISTS dapi_scale")


if __name__ == "__main__":
    main()
