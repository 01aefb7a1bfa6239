#!/usr/bin/env python3
"""Footprint of the `silas` daemon, measured from outside (issue #19 item 4).

Prints the binary's size (as built and stripped), the cold start to the first
`200` from `GET /health` (median of N starts of `silas start` on an
initialised scratch data dir, default configuration, offline model) and the
resident set size once started and left alone for 2 s (`VmRSS`, with the
`smaps_rollup` split into file-backed and anonymous pages).

    python3 benches/footprint.py [--silas target/release/silas] [--runs 5] [--settle 2]

`--settle` is how long each start is left alone before its RSS is read (2 s
for the issue #19 table; 70 s shows the idle steady state, after the
allocator's and the memory index's once-a-minute idle work).

Loopback only; the scratch directory is removed at the end. Python, not the
load tool, so that the timer starts before the daemon's `exec` and polls with
a plain socket (no HTTP client start-up in the figure).
"""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

SETTLE_S = 2.0
START_TIMEOUT_S = 30.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health_ok(port):
    """One `GET /health`; True on a 200."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(
                b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % port
            )
            head = s.recv(64)
            return head.startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def smaps(pid):
    """VmRSS and the smaps_rollup split, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "RssAnon:", "RssFile:", "Threads:")):
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0])
    return out


def env_for(scratch, port):
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": scratch,
        "SILAS__CHANNELS__WEB__PORT": str(port),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--silas", default="target/release/silas")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--settle", type=float, default=SETTLE_S)
    args = ap.parse_args()
    silas = os.path.abspath(args.silas)

    size = os.stat(silas).st_size
    scratch = tempfile.mkdtemp(prefix="silas-footprint-")
    try:
        # A root daemon's sandbox user must traverse the scratch dir.
        os.chmod(scratch, 0o711)
        stripped = os.path.join(scratch, "silas.stripped")
        subprocess.run(["strip", "-o", stripped, silas], check=True)
        print(f"binary: {size / 1e6:.1f} MB ({os.stat(stripped).st_size / 1e6:.1f} MB stripped)")
        os.remove(stripped)

        data = os.path.join(scratch, "data")
        port = free_port()
        env = env_for(scratch, port)
        # First run initialises (store, owner key); not part of the figure.
        subprocess.run(
            [silas, "--data-dir", data, "init"],
            cwd=scratch, env=env, check=True, stdout=subprocess.DEVNULL,
        )
        starts, rss = [], []
        for _ in range(args.runs):
            port = free_port()
            env = env_for(scratch, port)
            log = open(os.path.join(scratch, "daemon.log"), "ab")
            t0 = time.perf_counter()
            p = subprocess.Popen(
                [silas, "--data-dir", data, "start"],
                cwd=scratch, env=env, stdout=subprocess.DEVNULL, stderr=log,
            )
            try:
                while not health_ok(port):
                    if p.poll() is not None:
                        sys.exit(f"silas exited with {p.returncode}; see {scratch}/daemon.log")
                    if time.perf_counter() - t0 > START_TIMEOUT_S:
                        sys.exit("no /health within 30 s")
                    time.sleep(0.0005)
                starts.append((time.perf_counter() - t0) * 1000)
                time.sleep(args.settle)
                rss.append(smaps(p.pid))
            finally:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                log.close()
        print(
            "cold start to /health: median {:.1f} ms (min {:.1f}, max {:.1f}; runs: {})".format(
                statistics.median(starts), min(starts), max(starts),
                ", ".join(f"{s:.1f}" for s in starts),
            )
        )
        med = sorted(rss, key=lambda r: r["VmRSS"])[len(rss) // 2]
        print(
            "idle RSS after {:.0f} s: median {:.1f} MiB (file-backed {:.1f}, anonymous {:.1f}; "
            "threads {}; runs: {})".format(
                args.settle, med["VmRSS"] / 1024, med["RssFile"] / 1024, med["RssAnon"] / 1024,
                med["Threads"], ", ".join(f"{r['VmRSS'] / 1024:.1f}" for r in rss),
            )
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
