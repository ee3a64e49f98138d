#!/usr/bin/env python3
"""Replay recorded cases over HTTP, whatever their configs: one `dapi serve`, reloaded with
each distinct config of the cases in turn (POST /admin/reload), and the shared checker
(check.py --url --only-config) run on the cases of that config.

    scripts/conformance-http.py --check ../shared/conformance/check.py \\
        [--plugins-dir DIR] [--bin target/release/dapi] CASES_DIR

--plugins-dir sets DAPI_PLUGINS_DIR for the service (custom plugins). The last line is
"N passed, M failed" over all cases; the exit status is 1 when any case failed or was not
replayed. Standard library only.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def wait_up(url, server, seconds=20):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if server.poll() is not None:
            raise SystemExit('dapi serve exited with status %d' % server.returncode)
        try:
            urllib.request.urlopen(url + '/ping', timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit('dapi serve did not answer /ping within %d s' % seconds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--check', required=True, help="the shared check.py")
    ap.add_argument('--bin', default='target/release/dapi')
    ap.add_argument('--plugins-dir')
    ap.add_argument('cases')
    args = ap.parse_args()

    groups = {}
    for name in sorted(os.listdir(args.cases)):
        if name.endswith('.json'):
            with open(os.path.join(args.cases, name)) as f:
                config = json.load(f)['config']
            # Key order matters (filter_owner_server: the last owner in key order wins), so
            # configs that differ only in it are separate groups.
            groups.setdefault(json.dumps(config), []).append(name)
    total = sum(len(v) for v in groups.values())
    if total == 0:
        raise SystemExit('no cases in %s' % args.cases)

    tmp = tempfile.mkdtemp(prefix='dapi-conformance-http-')
    config_file = os.path.join(tmp, 'config.json')
    first = json.loads(next(iter(groups)))
    with open(config_file, 'w') as f:
        json.dump(first, f)
    port = free_port()
    url = 'http://127.0.0.1:%d' % port
    env = dict(os.environ, DAPI_LISTEN='127.0.0.1:%d' % port, DAPI_LOG_LEVEL='warn')
    env.pop('DAPI_CONFIG', None)
    if args.plugins_dir:
        env['DAPI_PLUGINS_DIR'] = os.path.abspath(args.plugins_dir)
    server = subprocess.Popen([args.bin, 'serve', '--config', config_file], env=env,
                              stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    passed = failed = 0
    try:
        wait_up(url, server)
        for key, names in groups.items():
            with open(config_file, 'w') as f:
                json.dump(json.loads(key), f)
            req = urllib.request.Request(url + '/admin/reload', method='POST', data=b'')
            with urllib.request.urlopen(req, timeout=30) as r:
                if r.status != 200:
                    raise SystemExit('reload refused: %s' % r.read())
            # The checker compares configs as dicts (key order aside): it is given only this
            # group's cases.
            group_dir = tempfile.mkdtemp(prefix='cases-', dir=tmp)
            for name in names:
                os.symlink(os.path.abspath(os.path.join(args.cases, name)), os.path.join(group_dir, name))
            done = subprocess.run([sys.executable, args.check, '--strict', '--url', url,
                                   '--only-config', config_file, group_dir],
                                  capture_output=True, text=True, timeout=600)
            last = (done.stdout.strip().splitlines() or [''])[-1]
            m = re.match(r'(\d+) passed, (\d+) failed', last)
            if not m:
                print(done.stdout + done.stderr)
                raise SystemExit('check.py said: %r' % last)
            p, fl = int(m.group(1)), int(m.group(2))
            if fl or p != len(names):
                print(done.stdout)
            passed += p
            failed += fl + max(0, len(names) - p - fl)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    print('%d configs' % len(groups))
    print('%d passed, %d failed' % (passed, failed))
    sys.exit(0 if failed == 0 and passed == total else 1)


if __name__ == '__main__':
    main()
