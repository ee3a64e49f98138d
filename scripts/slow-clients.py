#!/usr/bin/env python3
"""Can slow and silent clients lock dapi out? Starts `dapi serve` on loopback and measures:

1. with as many clients trickling their bodies (a byte a second) as there are allocation
   permits, how long until a normal POST /allocate is answered 200;
2. with N connections that never finish their headers: whether /ping answers (and how
   fast), how many of them are still open after 25 s, and whether SIGTERM stops dapi.

    python3 scripts/slow-clients.py [--binary target/release/dapi] [--limit 4] [--stalled 2000]

Loopback only; standard library only; bounded in time (about a minute and a half).
"""

import argparse
import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def status_of(request, timeout=40):
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError) as e:
        return type(getattr(e, 'reason', e)).__name__


def ping(addr):
    started = time.time()
    return status_of('http://%s/ping' % addr, timeout=15), round(time.time() - started, 3)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('--binary', default=os.path.join(ROOT, 'target/release/dapi'))
    ap.add_argument('--limit', type=int, default=4)
    ap.add_argument('--stalled', type=int, default=2000)
    args = ap.parse_args()

    env = {k: v for k, v in os.environ.items() if k != 'DAPI_CONFIG'}
    env.update(DAPI_LISTEN='127.0.0.1:0', DAPI_LOG_LEVEL='info',
               DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS=str(args.limit))
    proc = subprocess.Popen([args.binary, 'serve'], env=env, stdout=subprocess.PIPE, text=True)
    result = {'binary': args.binary}
    try:
        addr = json.loads(proc.stdout.readline())['addr']
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
        host, port = addr.rsplit(':', 1)
        port = int(port)
        with open(os.path.join(ROOT, 'examples/allocate.json'), 'rb') as f:
            body = f.read()

        # 1. Trickling bodies.
        stop = threading.Event()

        def trickle():
            try:
                s = socket.create_connection((host, port))
                s.sendall(b'POST /allocate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                          b'Content-Length: 100000\r\n\r\n')
                while not stop.wait(1):
                    s.sendall(b' ')
            except OSError:
                pass

        for _ in range(args.limit):
            threading.Thread(target=trickle, daemon=True).start()
        time.sleep(0.5)
        started, refused, status = time.time(), 0, None
        while time.time() - started < 45:
            status = status_of(urllib.request.Request('http://%s/allocate' % addr, data=body,
                                                      headers={'Content-Type': 'application/json'}))
            if status == 200:
                break
            refused += 1
            time.sleep(0.5)
        result['trickle'] = {'first_200_after_s': round(time.time() - started, 1), 'refused_before': refused,
                             'last_status': status}
        stop.set()
        time.sleep(2)

        # 2. Connections that never finish their headers.
        socks = []
        for _ in range(args.stalled):
            try:
                s = socket.create_connection((host, port), timeout=5)
                s.sendall(b'GET /ping HTTP/1.1\r\nHost: x\r\n')
                socks.append(s)
            except OSError:
                break
        result['stalled_opened'] = len(socks)
        result['ping_with_them'] = ping(addr)
        time.sleep(25)
        still = 0
        for s in socks:
            s.setblocking(False)
            try:
                still += s.recv(1) != b''
            except BlockingIOError:
                still += 1
            except OSError:
                pass
        result['stalled_open_after_25s'] = still
        result['ping_after'] = ping(addr)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
            result['stopped_on_sigterm'] = True
        except subprocess.TimeoutExpired:
            result['stopped_on_sigterm'] = False
            proc.kill()
            proc.wait()
    print(json.dumps(result, indent=1))


if __name__ == '__main__':
    main()
