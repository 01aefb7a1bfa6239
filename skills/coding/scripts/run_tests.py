#!/usr/bin/env python3
"""Run a project's tests and summarise the result (coding skill).

Usage: run_tests.py --path DIR [--command CMD]

Detects the test runner when no command is given. Prints one summary line,
then at most the last 60 lines of output. Exits with the runner's exit code.
"""
import argparse
import os
import shlex
import subprocess
import sys

DETECTORS = [
    ("Cargo.toml", ["cargo", "test"]),
    ("pytest.ini", ["pytest", "-q"]),
    ("pyproject.toml", ["pytest", "-q"]),
    ("setup.cfg", ["pytest", "-q"]),
    ("package.json", ["npm", "test", "--silent"]),
    ("Makefile", ["make", "test"]),
]


def detect(path):
    for marker, cmd in DETECTORS:
        if os.path.exists(os.path.join(path, marker)):
            return cmd
    if os.path.isdir(os.path.join(path, "tests")):
        return ["pytest", "-q"]
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--path", required=True)
    parser.add_argument("--command", default="")
    args = parser.parse_args()
    if not os.path.isdir(args.path):
        print(f"error: {args.path} is not a directory")
        return 2
    cmd = shlex.split(args.command) if args.command else detect(args.path)
    if not cmd:
        print("error: no test runner detected; pass --command")
        return 2
    try:
        proc = subprocess.run(cmd, cwd=args.path, capture_output=True, text=True)
    except FileNotFoundError:
        print(f"error: {cmd[0]} is not installed in the sandbox")
        return 127
    output = (proc.stdout + proc.stderr).splitlines()
    verdict = "passed" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    print(f"tests {verdict}: {' '.join(cmd)}")
    for line in output[-60:]:
        print(line)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
