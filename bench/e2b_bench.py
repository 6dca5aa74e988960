"""``navi bench e2b``: time to first command through the E2B SDK, against Navi's own API and
a hardened ``docker run`` in the same run.

Starts a real ``navi serve`` on 127.0.0.1 with its own data dir (default policy), makes a
tenant and a user token, and points the real ``e2b`` SDK at it with the three variables.
Each round, interleaved so drift on a shared machine hits all alike:

- ``e2b_create_to_first_command``: ``Sandbox.create()`` then ``commands.run("echo hi")``
  returned (a session made through /e2b, its access tokens, a Navi process: a fresh hardened
  container of its own, its output streamed back over Connect), then ``kill()`` (not timed);
- ``api_create_to_first_call``: ``POST /v1/sessions`` then ``POST .../exec`` (``terminal``,
  ``echo hi``) answered, then ``DELETE`` (not timed);
- ``docker_run``: ``docker run --rm`` with the flags Navi's ContainerSpec sets
  (``bench/exec_bench.py``'s ``naive_argv``), printing 1.

Then a ``code-interpreter-v1`` sandbox: ``run_code("x+1")`` after a first ``run_code`` has
started its kernel (``run_code_warm``), and that first one (``run_code_first``). Results go
to ``bench/results/e2b-<UTC time>.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from bench import served as served_api
from bench.exec_bench import naive_argv
from bench.kernel_bench import _summary
from runtime.config import PROJECT_ROOT, Settings
from runtime.sandbox.docker.images import image_ref

RESULTS = PROJECT_ROOT / "bench" / "results"
READY_S = 120.0


def _until_up(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"navi serve exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"{url}/v1/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError("navi serve did not come up")


def _rounds(url: str, key: str, runs: int, workspace: Path) -> dict[str, list[float]]:
    from e2b import Sandbox

    auth = {"Authorization": f"Bearer {key}"}
    naive = naive_argv(image_ref("python", Settings()), workspace, "navi-bench-e2b")
    times: dict[str, list[float]] = {"e2b": [], "api": [], "docker": []}
    with httpx.Client(base_url=url, headers=auth, timeout=120) as api:
        for _ in range(runs):
            began = time.perf_counter()
            sbx = Sandbox.create()
            out = sbx.commands.run("echo hi").stdout
            times["e2b"].append(time.perf_counter() - began)
            sbx.kill()
            if out != "hi\n":
                raise RuntimeError(f"unexpected output through E2B: {out!r}")
            began = time.perf_counter()
            session = api.post("/v1/sessions", json={}).json()["id"]
            result = api.post(f"/v1/sessions/{session}/exec", json={
                "tool": "terminal", "args": {"command": "echo hi"}}).json()
            times["api"].append(time.perf_counter() - began)
            api.delete(f"/v1/sessions/{session}")
            if result.get("stdout") != "hi\n":
                raise RuntimeError(f"unexpected exec answer: {result}")
            began = time.perf_counter()
            done = subprocess.run(naive, capture_output=True, check=False)
            times["docker"].append(time.perf_counter() - began)
            if done.stdout != b"1\n":
                raise RuntimeError(f"docker run failed: {done.stderr.decode(errors='replace')}")
    return times


def _run_code(runs: int) -> dict[str, list[float]]:
    from e2b_code_interpreter import Sandbox as CodeSandbox

    times: dict[str, list[float]] = {"first": [], "warm": []}
    sbx = CodeSandbox.create()
    try:
        began = time.perf_counter()
        sbx.run_code("x = 1")
        times["first"].append(time.perf_counter() - began)
        for _ in range(runs):
            began = time.perf_counter()
            if sbx.run_code("x+1").text != "2":
                raise RuntimeError("run_code answered something else than 2")
            times["warm"].append(time.perf_counter() - began)
    finally:
        sbx.kill()
    return times


def run(runs: int) -> dict[str, Any]:
    served = served_api.start("e2b", env={"NAVI_EMBEDDED_MODEL": "off"})
    url, token, tmp = served.url, served.admin_token, served.tmp
    report: dict[str, Any] = {"runs": runs, "load_before": os.getloadavg()}
    saved = {k: os.environ.get(k) for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY")}
    try:
        _until_up(url, served.process, served.log_path)
        admin = {"Authorization": f"Bearer {token}"}
        tenant = httpx.post(f"{url}/v1/tenants", json={"name": "bench"}, headers=admin).json()
        key = httpx.post(f"{url}/v1/tenants/{tenant['id']}/tokens", json={"role": "user"},
                         headers=admin).json()["token"]
        os.environ.update({"E2B_API_URL": f"{url}/e2b", "E2B_SANDBOX_URL": f"{url}/e2b",
                           "E2B_API_KEY": key})
        workspace = tmp / "naive"
        workspace.mkdir()
        os.chmod(workspace, 0o777)
        times = _rounds(url, key, runs, workspace)
        report["e2b_create_to_first_command"] = _summary(times["e2b"])
        report["api_create_to_first_call"] = _summary(times["api"])
        report["docker_run"] = _summary(times["docker"])
        code = _run_code(runs)
        report["run_code_first"] = _summary(code["first"])
        report["run_code_warm"] = _summary(code["warm"])
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        served.stop()
    report["load_after"] = os.getloadavg()
    return report


def cli(runs: Annotated[int, typer.Option(help="rounds of each")] = 10) -> None:
    """E2B SDK create -> first command p50/p95, beside Navi's API and docker run."""
    report = run(runs)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"e2b-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    typer.echo(json.dumps(report, indent=2))
    typer.echo(f"written to {out}")
