"""Issue 15: the floor of a 50 MB POST on this machine: loopback TCP of the body into memory
touched before (first byte to last), and one memchr pass over it.

python3 scripts/body-floor.py BODY. See BENCHMARKS.md.
"""
import sys
import socket, threading, time, statistics as st
data = open(sys.argv[1],'rb').read(); n = len(data)
srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1); port = srv.getsockname()[1]
buf = bytearray(n)  # touched once: the copy measured is the kernel's, not page faults
times = []
def serve():
    c, _ = srv.accept()
    for _ in range(12):
        mv = memoryview(buf); got = 0
        t0 = None
        while got < n:
            k = c.recv_into(mv[got:], n - got)
            if t0 is None: t0 = time.perf_counter()
            got += k
        t1 = time.perf_counter()
        c.sendall(b'x')
        times.append((t1 - t0) * 1e3)
t = threading.Thread(target=serve); t.start()
cl = socket.create_connection(('127.0.0.1', port))
for _ in range(12):
    cl.sendall(data); cl.recv(1)
t.join()
ms = st.median(times[2:])
print(f"loopback: {n:,} bytes first byte to last, median {ms:.1f} ms ({n/ms/1e6:.2f} GB/s), min {min(times):.1f} ms")
t0 = time.perf_counter()
for _ in range(10): buf.find(b'\\')
print(f"one scan of the body (find of an absent byte, memchr): {(time.perf_counter()-t0)/10*1e3:.1f} ms")
