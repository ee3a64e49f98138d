#!/usr/bin/env python3
"""Do refusals reach Python's urllib? Starts `dapi serve` on loopback with a small
concurrency limit, sends concurrent multi-megabyte POST /allocate bodies with
urllib.request (which writes the whole body before it reads the answer), and counts how
many requests saw a clean answer (200/409, or 503 with Retry-After) and how many saw a
socket error instead.

    python3 scripts/overload-clients.py [--binary target/release/dapi] [--runs 4]
        [--clients 32] [--mb 5] [--limit 4]

Loopback only; standard library only; bounded in time.
"""

import argparse
import collections
import copy
import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def big_body(mb):
    """A valid request of about `mb` megabytes: the example's servers under fresh uuids."""
    with open(os.path.join(ROOT, 'examples/allocate.json')) as f:
        example = json.load(f)
    servers, size, n = [], 0, 0
    while size < mb * 1024 * 1024:
        s = copy.deepcopy(example['servers'][n % len(example['servers'])])
        s['uuid'] = '%08x-0000-4000-8000-%012x' % (n, n)
        s['hostname'] = 'cn%d' % n
        servers.append(s)
        size += len(json.dumps(s))
        n += 1
    example['servers'] = servers
    return json.dumps(example).encode()


def one(url, body, tally, lock):
    req = urllib.request.Request(url + '/allocate', data=body, method='POST',
                                 headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=60) as res:
            res.read()
            kind = 'answered' if res.status in (200, 409) else 'other'
    except urllib.error.HTTPError as e:
        e.read()
        if e.code == 503 and e.headers.get('Retry-After'):
            kind = 'clean503'
        elif e.code == 409:
            kind = 'answered'
        else:
            kind = 'other'
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, 'reason', e)
        kind = 'error: ' + type(reason).__name__
    with lock:
        tally[kind] += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('--binary', default=os.path.join(ROOT, 'target/release/dapi'))
    ap.add_argument('--runs', type=int, default=4)
    ap.add_argument('--clients', type=int, default=32)
    ap.add_argument('--mb', type=float, default=5)
    ap.add_argument('--limit', type=int, default=4)
    args = ap.parse_args()

    env = {k: v for k, v in os.environ.items() if k != 'DAPI_CONFIG'}
    env.update(DAPI_LISTEN='127.0.0.1:0', DAPI_LOG_LEVEL='info',
               DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS=str(args.limit))
    proc = subprocess.Popen([args.binary, 'serve'], env=env, stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        url = 'http://' + first['addr']
        # Keep reading the logs so the service never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
        body = big_body(args.mb)
        tally, lock = collections.Counter(), threading.Lock()
        for _ in range(args.runs):
            threads = [threading.Thread(target=one, args=(url, body, tally, lock)) for _ in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(90)
            time.sleep(1.5)
        print(json.dumps({'binary': args.binary, 'runs': args.runs, 'clients': args.clients, 'mb': args.mb,
                          'limit': args.limit, 'tally': dict(tally)}, indent=1))
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == '__main__':
    main()
