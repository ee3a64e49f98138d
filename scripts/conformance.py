#!/usr/bin/env python3
"""Replay recorded allocations of the original DAPI through a command and compare.

    scripts/conformance.py [--cmd 'target/release/dapi allocate'] [-j N] CASES...

CASES are case files or directories of them (*.json), each
{"name", "config", "request", "expected": {"server_uuid", "steps"}}. For every
case the command runs as

    CMD --config <tmp>/config.json <tmp>/request.json

and must print {"server": {...} | null, "steps": [...]} (what `dapi allocate`
prints). A case passes when the chosen server (its uuid, and the whole object
as the original returned it: see expected_server), every step's name, its
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


# Fields of the chosen server the allocation computes (checked for type only).
COMPUTED = ('score', 'overprovision_ratios', 'unreserved_cpu', 'unreserved_ram', 'unreserved_disk',
            'disk_zone_quota_bytes', 'disk_kvm_zvol_volsize_bytes')
VLANS_STEP = 'Servers supporting required NIC Tags'


def expected_server(case):
    """The chosen server as the original returned it: the recording's `server` when it has
    one, else the request's server object without `vms`, each sysinfo NIC carrying its
    name as `interface` when the NIC tag filter ran (it wrote the names into the objects)."""
    expected = case['expected']
    if 'server' in expected:
        return expected['server']
    uuid = expected.get('server_uuid')
    sent = next((s for s in case['request'].get('servers', []) if isinstance(s, dict) and s.get('uuid') == uuid), None)
    if sent is None:
        return None
    server = json.loads(json.dumps(sent))
    server.pop('vms', None)
    named = any(st.get('step') == VLANS_STEP and 'skip' not in (st.get('reasons') or {})
                for st in expected.get('steps', []))
    sysinfo = server.get('sysinfo')
    if named and isinstance(sysinfo, dict) and isinstance(sysinfo.get('Network Interfaces'), dict):
        for key in ('Network Interfaces', 'Virtual Network Interfaces'):
            nics = sysinfo.get(key)
            if isinstance(nics, dict):
                for name, nic in nics.items():
                    if isinstance(nic, dict):
                        nic['interface'] = name
    return server


def server_difference(want, have):
    """How the answered server differs from the expected one (computed fields aside)."""
    if want is None or have is None:
        return None if want is have else 'server %r, expected %r' % (have, want)
    if not isinstance(have.get('score'), (int, float)):
        return 'server score %r is not a number' % (have.get('score'),)
    strip = lambda s: json.dumps({k: v for k, v in s.items() if k not in COMPUTED})
    if strip(want) != strip(have):
        key = next((k for k in list(want) + list(have) if k not in COMPUTED and want.get(k) != have.get(k)), '(key order)')
        return 'server [%s] is %s, expected %s' % (key, json.dumps(have.get(key))[:200], json.dumps(want.get(key))[:200])
    return None


def difference(case, answer):
    """The first difference between the recording and the answer, or None."""
    expected = case['expected']
    server = answer.get('server')
    got = server.get('uuid') if isinstance(server, dict) else None
    if got != expected.get('server_uuid'):
        return 'chose %s, expected %s' % (got, expected.get('server_uuid'))
    why = server_difference(expected_server(case), server if isinstance(server, dict) else None)
    if why:
        return why
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
        return name, difference(case, run(args.cmd, case, args.timeout))
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
