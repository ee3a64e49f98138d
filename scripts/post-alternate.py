"""Issue 15: POST /allocate alternated between `dapi serve` binaries (before/after) in one run.

python3 scripts/post-alternate.py BODY ROUNDS BIN... (config: $POST_CONFIG, default
../shared/bench/bench-config.json). Per binary: wall per POST (first byte sent to last byte
answered), effective throughput (body bytes / wall), server CPU per POST (/proc/PID/stat, 10 ms
ticks), VmHWM, the peak above the idle RSS (× the body), and VmRSS 5 s after the burst. See BENCHMARKS.md.
The peak of anonymous memory (RssAnon, sampled every ~1 ms during the POSTs) is printed too:
unlike VmHWM it leaves out the binary's own pages, which differ between builds by layout
(POST_SAMPLE=0 leaves the sampling out: it takes some of the host's CPU while it runs;
POST_GAP=0 sends the POSTs back to back, default 0.3 s apart). Where
the service logs them, its phases are printed too: the body in, read, decided, answered; and the
throughput as the service saw it (issue 15's "first byte received to the last byte answered":
its log's `latency_ms`, from the request's head to the answer's last part handed on), which
leaves out this client's own time to send its first byte and to take in the answer.
"""
import http.client, json, os, socket, subprocess, sys, tempfile, threading, time, statistics as st
body_path, rounds, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
path = os.environ.get("POST_PATH", "/allocate")
# Seconds between POSTs; 0 sends each as soon as the last is answered, as a burst of
# provisions does (the CPU per POST then includes some of the last one's freeing).
gap = float(os.environ.get("POST_GAP", "0.3"))
body = open(body_path, 'rb').read()
tick = os.sysconf('SC_CLK_TCK')
def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
servers = []
logs = {}
for b in bins:
    p = port()
    env = dict(os.environ, DAPI_LISTEN=f"127.0.0.1:{p}")
    logs[b] = tempfile.TemporaryFile()
    proc = subprocess.Popen([b, "serve", "--config", os.environ.get("POST_CONFIG", "../shared/bench/bench-config.json")], env=env, stdout=logs[b], stderr=subprocess.DEVNULL)
    servers.append((b, p, proc))
time.sleep(1.5)
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
def hwm(pid, key="VmHWM"):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith(key): return int(l.split()[1]) / 1024
idle = {b: hwm(proc.pid, "VmRSS") for b, _, proc in servers}
idle_anon = {b: hwm(proc.pid, "RssAnon") for b, _, proc in servers}
peak_anon = dict(idle_anon)
watched = [None]
def sample_anon():
    while True:
        w = watched[0]
        if w == "stop":
            return
        if w is not None:
            b, pid = w
            try:
                peak_anon[b] = max(peak_anon[b], hwm(pid, "RssAnon"))
            except (OSError, TypeError):
                pass
        time.sleep(0.001)
sampler = threading.Thread(target=sample_anon, daemon=True)
if os.environ.get("POST_SAMPLE", "1") != "0":
    sampler.start()
conns = {b: http.client.HTTPConnection("127.0.0.1", p) for b, p, _ in servers}
res = {b: ([], []) for b in bins}
for r in range(rounds + 1):
    for b, p, proc in servers:
        c = conns[b]
        watched[0] = (b, proc.pid)
        c0 = cpu(proc.pid); t0 = time.perf_counter()
        c.request("POST", path, body, {"Content-Type": "application/json"})
        resp = c.getresponse(); data = resp.read()
        t1 = time.perf_counter()
        time.sleep(gap)  # let the freeing after the answer finish before reading CPU
        c1 = cpu(proc.pid)
        watched[0] = None
        assert resp.status == 200, (b, resp.status, data[:200])
        if r: res[b][0].append((t1 - t0) * 1e3); res[b][1].append((c1 - c0) * 1e3)
watched[0] = "stop"
time.sleep(5)
for b, p, proc in servers:
    w, c = res[b]
    print(f"{b}: VmRSS 5 s after the burst {hwm(proc.pid, 'VmRSS'):.1f} MiB")
    print(f"{b}: POST wall median {st.median(w):.1f} ms (min {min(w):.1f}, max {max(w):.1f}), {len(body)/st.median(w)/1e6:.2f} GB/s; server CPU median {st.median(c):.0f} ms (mean {st.mean(c):.0f}); VmHWM {hwm(proc.pid):.1f} MiB")
    grew = (hwm(proc.pid) - idle[b]) * 2**20
    print(f"{b}: VmRSS idle before the first POST {idle[b]:.1f} MiB; peak above it {grew/1e6:.1f} MB = {grew/len(body):.2f}x the body")
    grew_anon = (peak_anon[b] - idle_anon[b]) * 2**20
    if sampler.is_alive() or grew_anon:
        print(f"{b}: RssAnon idle {idle_anon[b]:.1f} MiB; sampled peak above it {grew_anon/1e6:.1f} MB = {grew_anon/len(body):.2f}x the body")
    proc.terminate()
    proc.wait()
    # The service's own account of each POST (its log line), the first round left out.
    logs[b].seek(0)
    lines = [json.loads(l) for l in logs[b].read().splitlines() if l.startswith(b"{")]
    lines = [l for l in lines if l.get("msg") == "request" and l.get("path") == path][1:]
    keys = [k for k in ("body_ms", "read_ms", "decided_ms", "latency_ms") if lines and all(k in l for l in lines)]
    if keys:
        print(f"{b}: phases, median ms from the body's first read: " + ", ".join(f"{k[:-3]} {st.median(l[k] for l in lines):.1f}" for k in keys))
    if "latency_ms" in keys:
        served = st.median(l["latency_ms"] for l in lines)
        print(f"{b}: as the service saw it (request head in to the answer's last part handed on): median {served:.1f} ms, {len(body)/served/1e6:.2f} GB/s")
print(open("/proc/loadavg").read().strip())
