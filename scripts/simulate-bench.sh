#!/usr/bin/env bash
# `make bench-simulate` (bash): dapi simulate on 1,000 generated servers (50 racks of 20) with a
# VMAPI-style dump of about 100,000 events (62,000 creations, the rest destructions;
# scripts/sim-workload.py, seeded), one config; prints wall and CPU time and the figures.
# SIM_VMS changes the number of VMs (events are about 1.63 per VM).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/bench-simulate
mkdir -p "$out"
vms=${SIM_VMS:-62000}
[ -x target/release/dapi ] || cargo build --release
python3 scripts/sim-workload.py --vms "$vms" --lifetime 25000 >"$out/dump-$vms.json"
start=$(date +%s.%N)
/usr/bin/env time -f '%U %S %M' -o "$out/time.txt" \
  target/release/dapi simulate --racks 50 --servers-per-rack 20 --json "$out/dump-$vms.json" >"$out/figures.json"
end=$(date +%s.%N)
read -r user sys rss <"$out/time.txt"
python3 - "$out/figures.json" "$start" "$end" "$user" "$sys" "$rss" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
start, end, user, system, rss = (float(x) for x in sys.argv[2:7])
w, r = doc["workload"], doc["runs"][0]
d = r["decision_us"]
print(f"servers {doc['datacenter']['servers']}, events {w['events']} ({w['creations']} creations, {w['destructions']} destructions)")
print(f"wall {end - start:.1f} s, CPU {user + system:.1f} s (user {user:.1f}), peak RSS {rss / 1024:.0f} MiB")
print(f"placed {r['placed']}, failed {r['failed']}, servers used {r['servers_used']}, RAM mean {r['utilisation']['ram']['mean']}%")
print(f"decision us: mean {d['mean']}, p50 {d['p50']}, p90 {d['p90']}, p99 {d['p99']}; engine total {d['total_ms'] / 1000:.1f} s")
print(f"events per second (wall): {w['events'] / (end - start):.0f}")
PY
