"""Measures the rehearsal link from inside the namespaces: TCP throughput of one stream node 0 ->
node 1 and the one-way latency (half the round trip of 1-byte ping-pongs).
Usage: python3 netns-link.py server ADDR PORT | client ADDR PORT BYTES  (the client prints JSON)"""
import json, socket, sys, time

role, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "server":
    with socket.create_server((addr, port)) as srv:
        srv.settimeout(30)
        conn, _ = srv.accept()
        with conn:
            for _ in range(1000):  # ping-pong
                conn.sendall(conn.recv(1))
            header = b""
            while not header.endswith(b"\n"):
                header += conn.recv(1)
            total = int(header.decode())
            got = 0
            while got < total:
                got += len(conn.recv(1 << 20))
            conn.sendall(b"k")
else:
    total = int(sys.argv[4])
    for attempt in range(50):  # the server may still be starting
        try:
            conn = socket.create_connection((addr, port), timeout=30)
            break
        except OSError:
            time.sleep(0.1)
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        for _ in range(1000):
            conn.sendall(b"x")
            conn.recv(1)
        rtt = (time.perf_counter() - t0) / 1000
        conn.sendall(f"{total}\n".encode())
        chunk = b"\0" * (1 << 20)
        t0 = time.perf_counter()
        for _ in range(total >> 20):
            conn.sendall(chunk)
        conn.recv(1)
        secs = time.perf_counter() - t0
    print(json.dumps({"bytes_per_s": total / secs, "latency_s": rtt / 2}))
