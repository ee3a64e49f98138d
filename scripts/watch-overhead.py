# Latency of POST /allocate with recording and the shadow config off, recording on, and both
# on, side by side in one run: one keep-alive connection, 1500 requests (the first 300 not
# counted), three rounds. Not in CI. Usage (from the repository, after a release build):
#   python3 scripts/watch-overhead.py BODY.json [CONFIG.json]
# The shadow config flips the RAM weight (so it diverges); records go to a temporary directory.
import http.client, json, os, subprocess, sys, time, socket, shutil, statistics
BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'target', 'release', 'dapi')
body = open(sys.argv[1], 'rb').read()
cfg = sys.argv[2] if len(sys.argv) > 2 else None
import tempfile
work = tempfile.mkdtemp(prefix='dapi-watch-')
shadow = os.path.join(work, 'shadow.json')
open(shadow, 'w').write('{"defaults": {"weight_unreserved_ram": -2}}')
records = os.path.join(work, 'records')
def port():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); p = s.getsockname()[1]; s.close(); return p
modes = {'off': {}, 'record': {'DAPI_RECORD__DIR': records},
         'record+shadow': {'DAPI_RECORD__DIR': records, 'DAPI_SHADOW_CONFIG': shadow}}
res = {}
for rnd in range(3):
  for name, env in modes.items():
    shutil.rmtree(records, ignore_errors=True)
    p = port()
    e = {k: v for k, v in os.environ.items() if not k.startswith('DAPI_')}
    e.update(env); e['DAPI_LISTEN'] = f'127.0.0.1:{p}'; e['DAPI_LOG_LEVEL'] = 'error'
    args = [BIN, 'serve'] + (['--config', cfg] if cfg else [])
    proc = subprocess.Popen(args, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    c = http.client.HTTPConnection('127.0.0.1', p)
    lat = []
    for i in range(1500):
        t = time.perf_counter()
        c.request('POST', '/allocate', body, {'Content-Type': 'application/json'})
        r = c.getresponse(); r.read()
        lat.append(time.perf_counter() - t)
    lat = sorted(lat[300:])
    res.setdefault(name, []).append((statistics.median(lat) * 1000, lat[int(len(lat) * 0.99)] * 1000))
    proc.terminate(); proc.wait()
for name, runs in res.items():
    print(f"{name:15} " + "  ".join(f"p50 {a:.3f} ms p99 {b:.3f} ms" for a, b in runs))
shutil.rmtree(work, ignore_errors=True)
