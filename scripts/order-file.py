#!/usr/bin/env python3
"""Writes link/silas.order, the function order build.rs hands the linker
(issue #19 item 4, footprint; BENCHMARKS.md "Footprint, third pass").

    python3 scripts/order-file.py        # then: cargo build --release

1. Builds the release binaries with their symbols kept (SILAS_KEEP_SYMBOLS=1:
   the same profile, so the same symbol names as the stripped build).
2. Runs the daemon under valgrind's callgrind on loopback: `silas start` on
   an initialised store, an idle spell (dumped), then SIGTERM; and
   `silas-bench` turns (chatbot customers, then the owner's hot scope).
3. Writes the order: what start-up and the idle spell ran, then what only
   turns ran, then what only shutdown ran. The linker places them together at
   the front of .text, so start-up faults in ~3 MB of code instead of most of
   the 15 MB.
4. Callgrind runs the code on a simulated CPU: where a crate picks a routine
   by CPU feature (SHA extensions, AVX-512 hashing) it sees other functions
   than the machine runs. So, with `perf` available, the ordered binary is
   started natively under a page-fault tracepoint, and every function whose
   first instruction fetch faulted outside the ordered block during start-up
   and idle joins the start-up group; repeated until none is left (≤ 4
   rounds, one release link each).

Re-run it after a toolchain or dependency update (symbol names change with
them; a stale file costs memory, not correctness) or when BENCHMARKS.md's
idle RSS figure drifts up. Needs valgrind and python3 (perf for step 4);
takes 20-30 min on the 2-core box. Loopback only.
"""

import bisect
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benches"))
from footprint import env_for, free_port, health_ok  # noqa: E402  (the bench's own helpers)

ORDER = os.path.join(ROOT, "link", "silas.order")
# Past the first minute: the idle-time timers (the trimmer's minute, the
# memory index's idle writer) run in it.
IDLE_S = 65
GRIND = ["valgrind", "--tool=callgrind", "--demangle=no", "--compress-strings=no",
         "--compress-pos=no", "--dump-instr=no"]


def log(msg):
    print(f"order-file: {msg}", flush=True)


def build():
    env = dict(os.environ, SILAS_KEEP_SYMBOLS="1")
    subprocess.run(["cargo", "build", "--release", "--bin", "silas", "--bin", "silas-bench"],
                   cwd=ROOT, env=env, check=True)


class Daemon:
    """`silas start` (behind an optional wrapper command) until /health."""

    def __init__(self, work, binary, data, wrapper=()):
        self.port = free_port()
        env = env_for(work, self.port)
        self.log = open(os.path.join(work, "daemon.log"), "ab")
        self.proc = subprocess.Popen([*wrapper, binary, "--data-dir", data, "start"], cwd=work,
                                     env=env, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 120
        while not health_ok(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                sys.exit(f"order-file: the daemon did not come up; see {work}/daemon.log")
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def text_symbols(binary):
    """[(address, size, name)] of the binary's functions, by address."""
    out = subprocess.run(["nm", "-n", "-S", "--defined-only", binary], capture_output=True,
                         text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            syms.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
    return syms


def callgrind_functions(paths, binary):
    """Functions of `binary` in callgrind dumps, in order of appearance."""
    seen = []
    for path in paths:
        ob = None
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("ob="):
                    ob = line[3:].strip()
                elif line.startswith("fn=") and ob == binary:
                    # callgrind marks recursion levels as name'2
                    seen.append(line[3:].strip().split("'")[0])
    return seen


def profile(work):
    """(start-up and idle, turns, shutdown) function lists from callgrind."""
    binary = os.path.join(work, "silas")
    data = os.path.join(work, "data")
    subprocess.run([binary, "--data-dir", data, "init"], cwd=work, check=True,
                   stdout=subprocess.DEVNULL, env={"HOME": work, "PATH": os.environ["PATH"]})
    # The first start after `init` does one-time work (the memory index's
    # first write): outside the profile.
    Daemon(work, binary, data).stop()
    out = os.path.join(work, "start.cg")
    d = Daemon(work, binary, data, [*GRIND, f"--callgrind-out-file={out}"])
    time.sleep(IDLE_S)
    # start.cg.1: start-up and idle; start.cg at exit: shutdown.
    subprocess.run(["callgrind_control", "-d", str(d.proc.pid)], check=True,
                   stdout=subprocess.DEVNULL)
    time.sleep(1)
    d.stop()
    # The load tool ends its daemon with SIGKILL: callgrind dumps every few
    # million blocks and every dump counts.
    wrapper = os.path.join(work, "silas-grind")
    with open(wrapper, "w") as f:
        grind = " ".join(GRIND)
        f.write(f"#!/bin/sh\nexec {grind} --dump-every-bb=2000000 "
                f"--callgrind-out-file={work}/turns.cg {binary} \"$@\"\n")
    os.chmod(wrapper, 0o755)
    bench = os.path.join(work, "silas-bench")
    for mode in (["many-scopes", "--clients", "3", "--turns", "6"],
                 ["hot-scope", "--turns", "12", "--in-flight", "2"]):
        subprocess.run([bench, "--silas", wrapper, "--max-seconds", "300", *mode], check=True,
                       stdout=subprocess.DEVNULL)
    turns = sorted(glob.glob(f"{work}/turns.cg*"), key=lambda p: (len(p), p))
    return (callgrind_functions(sorted(glob.glob(f"{out}.*")), binary),
            callgrind_functions(turns, binary),
            callgrind_functions([out], binary))


def native_faults(work, binary):
    """Functions whose code faulted in natively during start-up and idle."""
    data = os.path.join(work, "data")
    trace = os.path.join(work, "faults.data")
    d = Daemon(work, binary, data, ["perf", "record", "-q", "-k", "CLOCK_MONOTONIC",
                                    "-e", "exceptions:page_fault_user", "-o", trace, "--"])
    time.sleep(IDLE_S)
    idle_end = time.monotonic()
    d.stop()
    mmaps = subprocess.run(["perf", "script", "-i", trace, "--show-mmap-events"],
                           capture_output=True, text=True).stdout
    base = None
    for line in mmaps.splitlines():
        m = re.search(r"\[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+) .*r-xp "
                      + re.escape(binary) + "$", line)
        if m:
            base = int(m.group(1), 16) - int(m.group(3), 16)
    if base is None:
        return set()
    # File offset to address, from the executable segment's header.
    delta = 0
    for line in subprocess.run(["readelf", "-lW", binary], capture_output=True,
                               text=True).stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == "LOAD" and "E" in parts[6:8]:
            delta = int(parts[2], 16) - int(parts[1], 16)
    syms = text_symbols(binary)
    starts = [s[0] for s in syms]
    found = set()
    out = subprocess.run(["perf", "script", "-i", trace, "-F", "time,trace"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.search(r"([0-9.]+):.*address=(0x[0-9a-f]+) ip=\S+ error_code=(0x[0-9a-f]+)",
                      line)
        # Instruction fetches (bit 4) before the idle spell ended.
        if not m or float(m.group(1)) > idle_end or not int(m.group(3), 16) & 0x10:
            continue
        at = int(m.group(2), 16) - base + delta
        i = bisect.bisect_right(starts, at) - 1
        if i >= 0 and syms[i][0] <= at < syms[i][0] + max(syms[i][1], 1):
            found.add(syms[i][2])
    return found


def write(start, turns, shutdown, extra, binary):
    defined = {s[2] for s in text_symbols(binary)}
    order, placed = [], set()
    # `_start` (the C runtime's entry) runs first of all.
    for name in ["_start", *start, *sorted(extra), *turns, *shutdown]:
        if name in defined and name not in placed:
            placed.add(name)
            order.append(name)
    with open(ORDER, "w") as f:
        f.write("# Function order for the linker: written by scripts/order-file.py; "
                "do not edit.\n")
        f.write("\n".join(order) + "\n")
    return len(order)


def main():
    for tool in ("valgrind", "callgrind_control", "nm", "readelf"):
        if not shutil.which(tool):
            sys.exit(f"order-file: {tool} is required")
    work = tempfile.mkdtemp(prefix="silas-order-")
    try:
        # A root daemon's sandbox user must traverse the scratch dir.
        os.chmod(work, 0o711)
        build()
        binary = os.path.join(work, "silas")
        for name in ("silas", "silas-bench"):
            shutil.copy2(os.path.join(ROOT, "target", "release", name), work)
        start, turns, shutdown = profile(work)
        n = write(start, turns, shutdown, set(), binary)
        log(f"{n} functions from callgrind")
        if not shutil.which("perf"):
            log("perf not found: the native pass is skipped (CPU-specific routines stay "
                "unordered)")
            return
        extra = set()
        for round_ in range(1, 5):
            build()
            shutil.copy2(os.path.join(ROOT, "target", "release", "silas"), binary)
            # Faults inside the turn or shutdown groups count too: those
            # functions also run at start-up here, and move to its group.
            new = native_faults(work, binary) - {"_start", *start} - extra
            log(f"native round {round_}: {len(new)} functions faulted outside the order")
            if not new:
                break
            extra |= new
            n = write(start, turns, shutdown, extra, binary)
        log(f"{n} functions ({len(extra)} from the native pass) -> {ORDER}")
    finally:
        subprocess.run(["pkill", "-KILL", "-f", work + "/"], check=False)
        shutil.rmtree(work, ignore_errors=True)
    log("now rebuild: cargo build --release --bin silas --bin silas-bench")


if __name__ == "__main__":
    main()
