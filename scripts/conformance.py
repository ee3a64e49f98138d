#!/usr/bin/env python3
"""Replay recorded allocations of the original DAPI through a command and compare.

    scripts/conformance.py [--cmd 'target/release/dapi allocate'] [-j N] CASES...

CASES are case files or directories of them (*.json), each
{"name", "config", "request", "expected": {"server_uuid", "steps"}}. For every
case the command runs as

    CMD --config <tmp>/config.json <tmp>/request.json

and must print {"server": {...} | null, "steps": [...]} (what `dapi allocate`
prints). A case passes when the chosen server, every step's name, its
"remaining" list and its "reasons" (absent == {}) all equal the recording.
The last line is "N passed, M failed"; the exit status is 1 when a case failed
or none was found. Standard library only.
"""

import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
import tempfile


def case_files(paths):
    files = []
    for path in paths:
        if os.path.isdir(path):
            files += sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith('.json'))
        else:
            files.append(path)
    return files


def run(cmd, case, timeout):
    """The command's answer to the case, parsed."""
    with tempfile.TemporaryDirectory(prefix='dapi-conformance-') as tmp:
        config, request = os.path.join(tmp, 'config.json'), os.path.join(tmp, 'request.json')
        with open(config, 'w') as f:
            json.dump(case['config'], f)
        with open(request, 'w') as f:
            json.dump(case['request'], f)
        argv = shlex.split(cmd) + ['--config', config, request]
        done = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise ValueError('exit status %d: %s' % (done.returncode, done.stderr.decode(errors='replace').strip()[-300:]))
    return json.loads(done.stdout)


def difference(expected, answer):
    """The first difference between the recording and the answer, or None."""
    server = answer.get('server')
    got = server.get('uuid') if isinstance(server, dict) else None
    if got != expected.get('server_uuid'):
        return 'chose %s, expected %s' % (got, expected.get('server_uuid'))
    want, have = expected.get('steps', []), answer.get('steps', [])
    for i, (w, h) in enumerate(zip(want, have)):
        if w.get('step') != h.get('step'):
            return 'step %d: %r, expected %r' % (i, h.get('step'), w.get('step'))
        if w.get('remaining') != h.get('remaining'):
            return 'step %d %r: remaining differs' % (i, w.get('step'))
        wr, hr = w.get('reasons') or {}, h.get('reasons') or {}
        if wr != hr:
            key = next(k for k in sorted(set(wr) | set(hr)) if wr.get(k) != hr.get(k))
            return 'step %d %r: reason [%s] is %r, expected %r' % (i, w.get('step'), key, hr.get(key), wr.get(key))
    if len(want) != len(have):
        return '%d steps, expected %d' % (len(have), len(want))
    return None


def check(args, path):
    name = os.path.basename(path)
    try:
        with open(path) as f:
            case = json.load(f)
        name = case.get('name') or name
        return name, difference(case['expected'], run(args.cmd, case, args.timeout))
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
        return name, 'error: %s' % e


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('cases', nargs='+', help='case files or directories')
    ap.add_argument('--cmd', default='target/release/dapi allocate', help='the command to check')
    ap.add_argument('-j', '--jobs', type=int, default=os.cpu_count() or 1, help='cases run at once')
    ap.add_argument('--timeout', type=float, default=30.0, help='seconds per case')
    args = ap.parse_args()
    files = case_files(args.cases)
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda p: check(args, p), files))
    failed = [(name, why) for name, why in results if why]
    for name, why in failed:
        print('FAIL %s: %s' % (name, why))
    print('%d passed, %d failed' % (len(results) - len(failed), len(failed)))
    return 1 if failed or not results else 0


if __name__ == '__main__':
    sys.exit(main())
