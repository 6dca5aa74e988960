"""Fair share: how much a tenant flooding at its maximum slows another tenant's `print(1)`.

A real `navi serve` (own data dir, loopback port, the default policy with `queue_depth`
set and the rate quota out of the way) and two tenants. Tenant B times `print(1)`
(`code_exec`, one session, an interactive caller's pace) on the idle server; then tenant A
sends `max_concurrent + queue_depth + extra` CPU-burning calls at once (its maximum runs,
its queue fills, the rest get 429 with `Retry-After`) and B times the same calls again
while A burns. The ratio of the medians is the figure the fair-share goal bounds (≤ 3). `--compare`
runs it twice more: with `NAVI_TENANT_CGROUPS=false` (every container a sibling of every
other), and with neither the cgroups nor the limit (A's whole flood runs at once).
`navi bench fairshare` runs it; tests/tenancy/test_fair_share.py asserts the same bound.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import typer
import yaml

from bench.soak import ROOT, Proc, _free_port

RESULTS = Path(__file__).resolve().parent / "results"
PRINT = {"tool": "code_exec", "args": {"language": "python", "code": "print(1)"}}
PACE_S = 0.3  # between B's calls: the warm pool gets the next container ready


def burn_code(seconds: float) -> str:
    return (f"import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n"
            "    pass\nprint('done')")


class FairShare:
    def __init__(self, *, calls: int = 10, burn_s: float = 15.0, max_concurrent: int = 4,
                 queue_depth: int = 4, extra: int = 4, tenant_cgroups: bool = True) -> None:
        self.calls = calls
        self.burn_s = burn_s
        self.max_concurrent = max_concurrent
        self.queue_depth = queue_depth
        self.extra = extra
        self.tenant_cgroups = tenant_cgroups
        self.workdir = Path(tempfile.mkdtemp(prefix="navi-fairshare-"))

    def _policy(self) -> Path:
        policy = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())
        quotas = policy["defaults"]["quotas"]
        quotas.update(max_concurrent=self.max_concurrent, queue_depth=self.queue_depth,
                      execs_per_minute=100_000)
        path = self.workdir / "policy.yaml"
        path.write_text(yaml.safe_dump(policy))
        return path

    def _start(self) -> None:
        self.admin = "navi_admin_" + secrets.token_urlsafe(24)
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = Proc(
            [sys.executable, "-m", "runtime.cli", "serve", "--host", "127.0.0.1",
             "--port", str(port), "--policy", str(self._policy())],
            {**os.environ, "PYTHONPATH": str(ROOT), "NAVI_ADMIN_TOKEN": self.admin,
             "NAVI_DATA_DIR": str(self.workdir / "data"), "NAVI_LOG_FORMAT": "json",
             "NAVI_LOG_LEVEL": os.environ.get("NAVI_LOG_LEVEL", "warning"),
             "NAVI_DISK_OVERCOMMIT": "1000",
             "NAVI_EMBEDDED_MODEL": "off", "NAVI_OLLAMA_HOST": "", "NAVI_OPENAI_BASE_URL": "",
             "NAVI_TENANT_CGROUPS": "true" if self.tenant_cgroups else "false"},
            self.workdir / "server.log")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.server.popen.poll() is not None:
                raise RuntimeError(f"navi serve exited: see {self.workdir / 'server.log'}")
            try:
                if httpx.get(f"{self.url}/v1/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError("navi serve did not come up")

    def _token(self, name: str) -> str:
        with httpx.Client(base_url=self.url, timeout=60,
                          headers={"Authorization": f"Bearer {self.admin}"}) as admin:
            tenant = admin.post("/v1/tenants", json={"name": name})
            tenant.raise_for_status()
            token = admin.post(f"/v1/tenants/{tenant.json()['id']}/tokens",
                               json={"role": "user"})
            token.raise_for_status()
            return str(token.json()["token"])

    def _client(self, token: str, timeout: float = 60) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout,
                            headers={"Authorization": f"Bearer {token}"})

    def _prints(self, client: httpx.Client, session: str, n: int) -> list[float]:
        took = []
        for _ in range(n):
            started = time.monotonic()
            resp = client.post(f"/v1/sessions/{session}/exec", json=PRINT)
            took.append(time.monotonic() - started)
            if resp.status_code != 200 or resp.json().get("stdout") != "1\n":
                raise RuntimeError(f"print(1): {resp.status_code} {resp.text[:300]}")
            time.sleep(PACE_S)
        return took

    def run(self) -> dict[str, Any]:
        self._start()
        try:
            a_token, b_token = self._token("flooder"), self._token("bystander")
            with self._client(a_token) as a, self._client(b_token) as b:
                a_session = a.post("/v1/sessions", json={}).json()["id"]
                b_session = b.post("/v1/sessions", json={}).json()["id"]
                self._prints(b, b_session, 3)  # warm-up: the session's first call is cold
                idle = self._prints(b, b_session, self.calls)
                statuses: list[tuple[int, str | None]] = []
                lock = threading.Lock()
                body = {"tool": "code_exec", "args": {"language": "python",
                                                      "code": burn_code(self.burn_s)}}

                def burn() -> None:
                    with self._client(a_token, timeout=4 * self.burn_s + 60) as mine:
                        resp = mine.post(f"/v1/sessions/{a_session}/exec", json=body)
                    with lock:
                        statuses.append((resp.status_code, resp.headers.get("retry-after")))

                flood = [threading.Thread(target=burn) for _ in
                         range(self.max_concurrent + self.queue_depth + self.extra)]
                load_before = os.getloadavg()[0]
                for thread in flood:
                    thread.start()
                time.sleep(3)  # A's maximum is burning, its queue full, the rest refused
                busy = self._prints(b, b_session, self.calls)
                load_during = os.getloadavg()[0]
                for thread in flood:
                    thread.join()
        finally:
            self.server.stop()
            shutil.rmtree(self.workdir, ignore_errors=True)
        p50_idle, p50_busy = statistics.median(idle), statistics.median(busy)
        codes = [code for code, _ in statuses]
        return {
            "tenant_cgroups": self.tenant_cgroups, "calls": self.calls,
            "burn_s": self.burn_s, "max_concurrent": self.max_concurrent,
            "queue_depth": self.queue_depth, "flood": len(flood),
            "idle_p50_ms": round(p50_idle * 1000, 1),
            "flooded_p50_ms": round(p50_busy * 1000, 1),
            "ratio": round(p50_busy / p50_idle, 2),
            "a_ran": codes.count(200), "a_refused_429": codes.count(429),
            "a_other": [c for c in codes if c not in (200, 429)],
            "retry_after": sorted({after for code, after in statuses if code == 429
                                   if after is not None}),
            "loadavg_before": round(load_before, 2), "loadavg_during": round(load_during, 2),
            "idle_ms": [round(t * 1000, 1) for t in idle],
            "flooded_ms": [round(t * 1000, 1) for t in busy],
        }


def engine_cgroups() -> str:
    res = subprocess.run(["docker", "info", "--format",
                          "{{.CgroupDriver}} cgroup v{{.CgroupVersion}}, {{.NCPU}} CPUs"],
                         capture_output=True, text=True, check=False)
    return res.stdout.strip()


def write_results(result: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / time.strftime("fairshare-%Y%m%dT%H%M%SZ.json", time.gmtime())
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def cli(
    calls: int = typer.Option(10, "--calls", min=3, help="B's timed print(1) calls, each phase."),
    burn_s: float = typer.Option(15.0, "--burn-s", min=5, help="Seconds each A call burns."),
    compare: bool = typer.Option(False, "--compare", help="Also run without the tenant "
                                 "cgroups (NAVI_TENANT_CGROUPS=false), and without them and "
                                 "the concurrency limit."),
) -> None:
    """A tenant flooding at its maximum vs another tenant's print(1): the ratio of its p50
    to the idle server's (goal: ≤ 3). JSON in bench/results/fairshare-<UTC>.json."""
    runs = [FairShare(calls=calls, burn_s=burn_s).run()]
    if compare:
        runs.append(FairShare(calls=calls, burn_s=burn_s, tenant_cgroups=False).run())
        runs.append(FairShare(calls=calls, burn_s=burn_s, tenant_cgroups=False,
                              max_concurrent=12, queue_depth=0, extra=0).run())
    result = {"engine": engine_cgroups(), "bound": 3.0, "runs": runs}
    path = write_results(result)
    typer.echo(f"engine: {result['engine']}")
    for run in runs:
        typer.echo(f"tenant cgroups {'on ' if run['tenant_cgroups'] else 'off'}, "
                   f"A's max_concurrent {run['max_concurrent']:2}: B's print(1) "
                   f"p50 idle {run['idle_p50_ms']} ms, A flooding {run['flooded_p50_ms']} ms, "
                   f"ratio {run['ratio']} (A: {run['a_ran']} ran, {run['a_refused_429']} "
                   f"got 429, Retry-After {run['retry_after']}; load {run['loadavg_during']})")
    typer.echo(f"results: {path}")
    if runs[0]["ratio"] > result["bound"]:
        raise typer.Exit(1)
