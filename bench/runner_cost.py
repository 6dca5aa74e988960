"""What the warm runner itself costs inside a sandbox, apart from the engine.

    python -m bench.runner_cost [--runs N] [--runtime runc|runsc] [--image IMG]

Runs this checkout's ``warm_runner.RUNNER`` N times inside one hardened container (the
project's seccomp profile, no-new-privileges, cap-drop ALL, uid 65534, ``--init``) as the pool
would: start it, wait for its ready byte, hand it a ``print(1)`` job frame, read to the
trailer. Prints per runner: CPU (start-up, fork, Landlock, the job, its exit; the children's
rusage, so it hardly depends on the machine's load), ready (start to ready byte) and call
(frame to trailer: what a warm call waits for inside the sandbox) p50 in ms. To compare two
commits, run it with each worktree on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from runtime.sandbox.docker.seccomp import DEFAULT_PROFILE_PATH
from runtime.sandbox.docker.warm_runner import RUNNER, job_frame

HARNESS = """\
import os, resource, statistics, subprocess, sys, time
code, frame = open("/r/runner.py").read(), open("/r/frame", "rb").read()
ready, call = [], []
r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    p = subprocess.Popen(["python3", "-I", "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.read(1) == b"\\0", p.stderr.read()
    t1 = time.perf_counter()
    p.stdin.write(frame)
    p.stdin.close()
    out = b""
    while b"navi-end-" not in out:
        out += os.read(p.stdout.fileno(), 4096)
    t2 = time.perf_counter()
    p.stdout.read()
    p.stderr.read()
    p.wait()
    ready.append((t1 - t0) * 1000)
    call.append((t2 - t1) * 1000)
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
print(round(cpu * 1000 / len(call), 2), round(statistics.median(ready), 2),
      round(statistics.median(call), 2))
"""


def measure(runs: int, runtime: str, image: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="navi-runner-cost-") as tmp:
        root = Path(tmp)
        (root / "runner.py").write_text(RUNNER)
        (root / "frame").write_bytes(job_frame(["python3", "-I", "-c", "print(1)"], "bench0"))
        (root / "harness.py").write_text(HARNESS)
        root.chmod(0o755)
        for path in root.iterdir():
            path.chmod(0o644)
        done = subprocess.run(
            ["docker", "run", "--rm", "--runtime", runtime, "--network", "none", "--init",
             "-u", "65534:65534", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
             "--security-opt", f"seccomp={DEFAULT_PROFILE_PATH}", "-v", f"{root}:/r:ro",
             image, "python3", "-I", "/r/harness.py", str(runs)],
            capture_output=True, text=True, check=True,
        )
    cpu, ready, call = (float(x) for x in done.stdout.split())
    return {"runner_cpu_ms": cpu, "ready_p50_ms": ready, "call_p50_ms": call}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--runtime", default="runc")
    parser.add_argument("--image", default="navi/python:latest")
    args = parser.parse_args()
    print(json.dumps({"runtime": args.runtime, "runs": args.runs,
                      **measure(args.runs, args.runtime, args.image)}))


if __name__ == "__main__":
    main()
