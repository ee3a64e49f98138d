"""Issue 15: `dapi allocate` against the original allocator (Node.js), whole process, one run.

    ORIGINAL=DIR python3 scripts/vs-original.py CONFIG BODY[:RUNS]... [-- DAPI_BIN...]

DIR is a checkout of TritonDataCenter/sdc-designation whose `lib/` loads under the local
`node` (its npm dependencies installed: assert-plus, jsprim, vasync, xregexp, and
joyent-schemas from github.com/joyent/schemas with its own). The original is driven by
scripts/original-runner.js: read the files, `JSON.parse`, `Allocator#allocate`, answer on
stdout, as `dapi allocate --config CONFIG BODY` does. The programs are alternated run by run
for each body, so both see the same phase of a noisy host; the medians, minimums and the
ratio are printed, and the chosen server must be the same. DAPI_BIN defaults to
target/release/dapi; more than one (e.g. before and after) are alternated too.

Each program's answer is read from a pipe, all of it at once; its errors go to the terminal.
(With both streams captured, Python polls the two pipes and reads 32 KiB at a time: reading an
8 MB answer that way took longer than dapi took to write it, 8 ms of its 45 at 5,000 servers.)
"""
import json, os, statistics as st, subprocess, sys, time

here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
bins = ["target/release/dapi"]
if "--" in args:
    i = args.index("--")
    args, bins = args[:i], args[i + 1:]
if len(args) < 2 or "ORIGINAL" not in os.environ:
    sys.exit(__doc__)
config, bodies = args[0], args[1:]
runner = os.path.join(here, "original-runner.js")
original = os.path.join(os.environ["ORIGINAL"], "lib", "allocator.js")


def chosen(out):
    server = json.loads(out).get("server")
    return server and server.get("uuid")


def timed(cmd):
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE).stdout
    return (time.perf_counter() - t0) * 1e3, chosen(out)


print(f"{'body':<28} {'program':<28} {'median ms':>10} {'min ms':>8} {'× faster (median)':>18}")
for spec in bodies:
    path, _, runs = spec.partition(":")
    runs = int(runs or 5)
    programs = [("original (node)", ["node", runner, original, config, path])]
    programs += [(b, [b, "allocate", "--config", config, path]) for b in bins]
    times = {name: [] for name, _ in programs}
    answers = set()
    for r in range(runs + 1):  # the first round warms the page cache and is dropped
        for name, cmd in programs:
            ms, uuid = timed(cmd)
            answers.add(uuid)
            if r:
                times[name].append(ms)
    if len(answers) != 1:
        sys.exit(f"{path}: the programs chose different servers: {answers}")
    base = st.median(times[programs[0][0]])
    for name, _ in programs:
        med = st.median(times[name])
        print(f"{os.path.basename(path):<28} {name[-28:]:<28} {med:>10.1f} {min(times[name]):>8.1f} {base / med:>18.1f}")
