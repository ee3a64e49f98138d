#!/usr/bin/env python3
"""Soak test: run `dapi serve` on loopback and hit it, for a bounded time, with a mix of
valid, invalid, malformed and oversized requests at (and past) its concurrency limit.

    python3 scripts/soak.py [--minutes 3] [--limit 4] [--binary target/release/dapi]

Passes when no answer was a 5xx other than 503, no connection was dropped without an
answer, the process is still up at the end, and its RSS came back near where it started.
Loopback only; standard library only.
"""

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def rss_kib(pid, field='VmRSS'):
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    return 0


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def request_kinds(example, big):
    valid = json.dumps(example).encode()
    bad_vm = dict(example, vm=dict(example['vm'], ram='lots'))
    kinds = [
        ('valid', '/allocate', valid, 'application/json'),
        ('valid-big', '/allocate', big, 'application/json'),
        ('capacity', '/capacity', json.dumps({'servers': example['servers']}).encode(), 'application/json'),
        ('invalid', '/allocate', json.dumps(bad_vm).encode(), 'application/json'),
        ('malformed', '/allocate', b'{"servers": [', 'application/json'),
        ('wrong-type', '/allocate', valid, 'text/plain'),
        ('oversized', '/allocate', b'[' + b'0,' * (5 * 1024 * 1024) + b'0]', 'application/json'),
    ]
    return kinds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('--minutes', type=float, default=3.0)
    ap.add_argument('--limit', type=int, default=4, help='max concurrent allocations of the service')
    ap.add_argument('--clients', type=int, default=0, help='concurrent clients (default: 2 x limit)')
    ap.add_argument('--binary', default=os.path.join(ROOT, 'target/release/dapi'))
    args = ap.parse_args()
    clients = args.clients or 2 * args.limit

    with open(os.path.join(ROOT, 'examples/allocate.json')) as f:
        example = json.load(f)
    bench = os.path.join(ROOT, '..', 'shared', 'bench', 'bench-50.json')
    big = open(bench, 'rb').read() if os.path.exists(bench) else json.dumps(example).encode()
    kinds = request_kinds(example, big)

    port = free_port()
    env = dict(os.environ, DAPI_LISTEN='127.0.0.1:%d' % port, DAPI_LOG_LEVEL='error',
               DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS=str(args.limit),
               DAPI_LIMITS__MAX_BODY_BYTES=str(4 * 1024 * 1024))
    env.pop('DAPI_CONFIG', None)
    server = subprocess.Popen([args.binary, 'serve'], env=env, stdout=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(('127.0.0.1', port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        # Warm up, then take the baseline.
        for _ in range(20):
            one(port, kinds[0])
        time.sleep(0.5)
        rss_start = rss_kib(server.pid)

        counts = {}
        lock = threading.Lock()
        deadline = time.time() + args.minutes * 60

        def worker(seed):
            rnd = random.Random(seed)
            while time.time() < deadline:
                kind = rnd.choice(kinds)
                outcome = one(port, kind)
                with lock:
                    counts[(kind[0], outcome)] = counts.get((kind[0], outcome), 0) + 1

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Let idle blocking threads retire (10 s) and the periodic trim run.
        time.sleep(15)
        alive = server.poll() is None
        rss_end = rss_kib(server.pid) if alive else 0
        peak = rss_kib(server.pid, 'VmHWM') if alive else 0
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)

    total = sum(counts.values())
    bad = {k: v for k, v in counts.items() if (isinstance(k[1], int) and k[1] >= 500 and k[1] != 503) or k[1] == 'dropped'}
    print('requests: %d in %.1f min with %d clients (limit %d)' % (total, args.minutes, clients, args.limit))
    for (kind, outcome), n in sorted(counts.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        print('  %-10s %-8s %d' % (kind, outcome, n))
    print('process up at the end: %s' % alive)
    print('RSS: start %d KiB, end %d KiB, peak %d KiB' % (rss_start, rss_end, peak))
    ok = alive and not bad and rss_end <= max(rss_start * 1.5, rss_start + 16 * 1024)
    print('5xx other than 503, or dropped: %d' % sum(bad.values()))
    print('soak %s' % ('passed' if ok else 'FAILED'))
    return 0 if ok else 1


def one(port, kind):
    """Sends one request; returns the status, or 'dropped' when no answer came."""
    _, path, body, ctype = kind
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
    try:
        conn.putrequest('POST', path)
        conn.putheader('Content-Type', ctype)
        conn.putheader('Content-Length', str(len(body)))
        conn.endheaders()
        try:
            conn.send(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer (413) before the whole body is sent
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (http.client.HTTPException, OSError):
        return 'dropped'
    finally:
        conn.close()


if __name__ == '__main__':
    sys.exit(main())
