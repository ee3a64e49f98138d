#!/usr/bin/env python3
"""Writes a VMAPI-style VM dump for `dapi simulate` (deterministic for a given --seed).

VMs arrive one a minute; each lives an exponential time (mean --lifetime minutes) and is
destroyed then unless that is past the last arrival (it then stays). Sizes, owners and
brands are drawn from fixed mixes. Used by `make bench-simulate`.

    python3 scripts/sim-workload.py --vms 100000 --lifetime 25000 > dump.json
"""
import argparse
import datetime
import json
import random
import sys

SIZES = [(1024, 30), (2048, 25), (4096, 25), (8192, 12), (16384, 6), (32768, 2)]


def iso(minutes):
    t = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(minutes=minutes)
    return t.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vms", type=int, default=100000)
    p.add_argument("--lifetime", type=float, default=25000, help="mean lifetime, minutes")
    p.add_argument("--owners", type=int, default=500)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = random.Random(a.seed)
    sizes = [s for s, _ in SIZES]
    weights = [w for _, w in SIZES]
    out = []
    for i in range(a.vms):
        ram = rng.choices(sizes, weights)[0]
        life = rng.expovariate(1.0 / a.lifetime)
        vm = {
            "uuid": "%08x-0000-4000-8000-%012x" % (0xD0, i),
            "owner_uuid": "%08x-0000-4000-8000-%012x" % (0x0E, rng.randrange(a.owners)),
            "ram": ram,
            "cpu_cap": ram // 1024 * 25 + 25,
            "quota": ram // 1024 * 10 + 10,
            "brand": "joyent" if rng.random() < 0.9 else "lx",
            "create_timestamp": iso(i),
            "destroyed": iso(i + life) if i + life < a.vms else None,
        }
        out.append(vm)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
