"""Soak: many calls against one real `navi serve`, sampling what could leak.

A `navi serve` subprocess (own data dir, loopback port) and the fake Ollama (also a
subprocess, `python -m tests.fakes.ollama`: it answers a message holding a ```python block
with a `code_exec` call, then with the tool's output) take a mix of calls from a few
clients across tenants and sessions:

- `exec`: warm `code_exec` in a long-lived session;
- `churn`: a new session, its first (cold: nothing is warm for a new workspace) exec, an
  upload, its download, a delete of the file, a delete of the session;
- `upload`: PUT, GET and DELETE of a 64 KiB file in a long-lived session;
- `turn`: an agent turn with the fake model (one `code_exec` in a container, an answer).

Every `sample_s` the sampler records the supervisor's RSS, open fds and threads, the
containers of its instance, the mounts under its data dir and the data dir's allocated
size (`du -x`: not the session disks' insides) less the sessions' snapshots, which are
sampled apart: agent turns that change files snapshot their session (`turn-<id>`, ≈ 0.7 MiB
for a nearly empty disk), bounded by the turn snapshots a session keeps, not by calls, so
the bound there is on how many any one session holds. After the warm-up (the first
`warmup_fraction` of the run) growth must be flat; `flatness()` states the bounds.
`navi bench soak` and tests/faults/test_soak.py both run it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import typer
import yaml

from runtime.agent.turn_snapshots import KEEP as TURN_SNAPSHOTS_KEPT
from runtime.workspace.mount_table import mounts_under

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
MiB = 1024 * 1024

# Bounds on growth between the first and the last fifth of the samples after warm-up.
BOUNDS = {"rss_mib": 40.0, "fds": 16, "threads": 8, "containers": 12, "mounts": 4}
# The data dir grows by the audit log (two copies: SQLite and the jsonl mirror), the
# conversation rows, the store and the sessions' uploaded files: bounded per call, not flat.
# Taken as the least-squares slope over the samples after warm-up, not from two samples:
# SQLite's files step by ±2 MB between samples, which moved a two-point figure over 16 KiB
# in a fresh-clone run. The short form measured 11.7-14.8 KiB per call (2026-12-03).
DATA_BYTES_PER_CALL = 24 * 1024
# Turn snapshots held by one session at any sample (the newest made before the oldest goes).
SNAPSHOTS_BOUND = TURN_SNAPSHOTS_KEPT + 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Proc:
    """A subprocess we started; stopped by its own pid only."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log_file = log.open("wb")
        self.popen = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE
                                      if "--port" in argv else self.log_file,
                                      stderr=self.log_file)

    def stop(self, timeout: float = 20) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self.log_file.close()


def _proc_status(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "Threads"):
                out[key] = int(value.split()[0])
    return out


def _du(path: Path) -> int:
    res = subprocess.run(["du", "-sx", "-B1", str(path)], capture_output=True, text=True,
                         check=False)
    return int(res.stdout.split()[0]) if res.stdout else 0


def _snapshots(data: Path) -> tuple[int, int]:
    """(allocated bytes of every session snapshot, most snapshots any one session holds)."""
    total, most = 0, 0
    for held in (data / "workspaces").glob("*/*.snapshots"):
        blocks = []
        with contextlib.suppress(FileNotFoundError):  # a session deleted meanwhile
            for image in held.glob("*.img"):
                with contextlib.suppress(FileNotFoundError):
                    blocks.append(image.stat().st_blocks * 512)
        total += sum(blocks)
        most = max(most, len(blocks))
    return total, most


def _containers(instance: str) -> int:
    res = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=navi.instance={instance}"],
                         capture_output=True, text=True, check=False)
    return len(res.stdout.split())


class Soak:
    def __init__(self, calls: int, *, clients: int = 4, tenants: int = 3,
                 sample_s: float = 2.0, workdir: Path | None = None) -> None:
        self.calls = calls
        self.clients = clients
        self.tenants = tenants
        self.sample_s = sample_s
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="navi-soak-"))
        self.data = self.workdir / "data"
        self.samples: list[dict[str, Any]] = []
        self.done: dict[str, int] = {}
        self.errors: list[str] = []
        self._count = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()

    # -- processes ---------------------------------------------------------------------

    def _start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.model = Proc([sys.executable, "-m", "tests.fakes.ollama", "--port", "0"], env,
                          self.workdir / "model.log")
        assert self.model.popen.stdout is not None
        model_url = self.model.popen.stdout.readline().decode().strip()
        self.admin = "navi_admin_" + secrets.token_urlsafe(24)
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = Proc(
            [sys.executable, "-m", "runtime.cli", "serve", "--host", "127.0.0.1",
             "--port", str(port), "--policy", str(self._policy())],
            {**env, "NAVI_ADMIN_TOKEN": self.admin, "NAVI_DATA_DIR": str(self.data),
             "NAVI_LOG_FORMAT": "json", "NAVI_LOG_LEVEL": "warning",
             "NAVI_DISK_OVERCOMMIT": "1000", "NAVI_OLLAMA_HOST": model_url,
             "NAVI_OPENAI_BASE_URL": "", "NAVI_EMBEDDED_MODEL": "off"},
            self.workdir / "server.log")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.server.popen.poll() is not None:
                raise RuntimeError("navi serve exited: see " + str(self.workdir / "server.log"))
            try:
                if httpx.get(f"{self.url}/v1/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError("navi serve did not come up")
        self.instance = (self.data / "instance_id").read_text().strip()

    def _policy(self) -> Path:
        """The default policy with the rate quota out of the way (the soak measures leaks,
        not the 429 path; concurrency stays the default's)."""
        policy = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())
        policy["defaults"]["quotas"]["execs_per_minute"] = 100_000
        path = self.workdir / "soak-policy.yaml"
        path.write_text(yaml.safe_dump(policy))
        return path

    # -- sampling --------------------------------------------------------------------------

    def sample(self) -> dict[str, Any]:
        pid = self.server.popen.pid
        status = _proc_status(pid)
        return {"t": round(time.monotonic() - self.t0, 2), "calls": self._count,
                "rss_mib": round(status["VmRSS"] / 1024, 1), "threads": status["Threads"],
                # where RSS lives: the heaps (anon), mapped files (SQLite), shared memory
                **{f"rss_{kind.lower()}_mib": round(status.get(f"Rss{kind}", 0) / 1024, 1)
                   for kind in ("Anon", "File", "Shmem")},
                "fds": len(os.listdir(f"/proc/{pid}/fd")),
                "containers": _containers(self.instance),
                "mounts": len(mounts_under(self.data)), **self._disk_bytes()}

    def _disk_bytes(self) -> dict[str, int]:
        snapshot_bytes, most = _snapshots(self.data)
        return {"data_bytes": _du(self.data) - snapshot_bytes, "snapshot_bytes": snapshot_bytes,
                "snapshots_per_session": most}

    def _sampler(self) -> None:
        while not self._stop.wait(self.sample_s):
            try:
                self.samples.append(self.sample())
            except (OSError, KeyError, ValueError) as exc:
                self.errors.append(f"sample: {exc}")

    # -- the workload ------------------------------------------------------------------------

    def _tenant(self) -> str:
        with httpx.Client(base_url=self.url, timeout=60,
                          headers={"Authorization": f"Bearer {self.admin}"}) as admin:
            tenant = admin.post("/v1/tenants", json={"name": f"soak{secrets.token_hex(3)}"})
            tenant.raise_for_status()
            token = admin.post(f"/v1/tenants/{tenant.json()['id']}/tokens",
                               json={"role": "user"})
            token.raise_for_status()
            return str(token.json()["token"])

    def _client(self, worker: int, token: str) -> None:
        with httpx.Client(base_url=self.url, timeout=120,
                          headers={"Authorization": f"Bearer {token}"}) as c:
            home = self._ok(c.post("/v1/sessions", json={})).json()["id"]
            chat = self._ok(c.post("/v1/sessions", json={})).json()["id"]
            ops: list[tuple[str, Callable[[], int]]] = [
                ("exec", lambda: self._exec(c, home, f"print({worker})")),
                ("upload", lambda: self._upload(c, home)),
                ("exec", lambda: self._exec(c, home, "import json; print(json.dumps([1]))")),
                ("churn", lambda: self._churn(c)),
                ("exec", lambda: self._exec(c, home, "print(sum(range(10)))")),
                ("turn", lambda: self._turn(c, chat)),
            ]
            i = worker
            while not self._stop.is_set():
                name, op = ops[i % len(ops)]
                i += 1
                try:
                    n = op()
                except (httpx.HTTPError, AssertionError, KeyError, ValueError) as exc:
                    self.errors.append(f"{name}: {exc!r}"[:300])
                    n = 1
                with self._lock:
                    self.done[name] = self.done.get(name, 0) + 1
                    self._count += n
                    if self._count >= self.calls:
                        self._stop.set()

    @staticmethod
    def _ok(resp: httpx.Response) -> httpx.Response:
        assert resp.status_code < 300, f"{resp.request.method} {resp.request.url.path}: " \
                                       f"{resp.status_code} {resp.text[:200]}"
        return resp

    def _exec(self, c: httpx.Client, session: str, code: str) -> int:
        body = self._ok(c.post(f"/v1/sessions/{session}/exec", json={
            "tool": "code_exec", "args": {"language": "python", "code": code}})).json()
        assert body["ok"], body
        return 1

    def _upload(self, c: httpx.Client, session: str) -> int:
        payload = secrets.token_bytes(64 * 1024)
        self._ok(c.put(f"/v1/sessions/{session}/files/up/blob.bin", content=payload))
        assert self._ok(c.get(f"/v1/sessions/{session}/files/up/blob.bin")).content == payload
        self._ok(c.delete(f"/v1/sessions/{session}/files/up/blob.bin"))
        return 3

    def _churn(self, c: httpx.Client) -> int:
        session = self._ok(c.post("/v1/sessions", json={})).json()["id"]
        try:
            self._exec(c, session, "open('out.txt', 'w').write('x' * 1000)")
            self._ok(c.put(f"/v1/sessions/{session}/files/in.txt", content=b"hello"))
            out = self._ok(c.get(f"/v1/sessions/{session}/files/out.txt")).content
            assert out == b"x" * 1000
            self._ok(c.delete(f"/v1/sessions/{session}/files/in.txt"))
        finally:
            self._ok(c.delete(f"/v1/sessions/{session}"))
        return 6

    def _turn(self, c: httpx.Client, session: str) -> int:
        turn = self._ok(c.post(f"/v1/sessions/{session}/messages",
                               json={"content": "```python\nprint(2 ** 10)\n```"}))
        turn_id = turn.json()["turn_id"]
        after = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = self._ok(c.get(f"/v1/sessions/{session}/messages",
                                  params={"after": after})).json()
            after = rows[-1]["id"] if rows else after
            for row in rows:
                meta = row.get("meta", {})
                if row["turn_id"] == turn_id and row["role"] == "assistant" and (
                        "stop_reason" in meta or "error" in meta):
                    assert meta.get("stop_reason") == "stop", row
                    return 1
            time.sleep(0.2)
        raise AssertionError("turn did not end within 60 s")

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        self._start()
        try:
            self.t0 = time.monotonic()
            tokens = [self._tenant() for _ in range(self.tenants)]
            self.samples.append(self.sample())
            sampler = threading.Thread(target=self._sampler, daemon=True)
            sampler.start()
            with ThreadPoolExecutor(self.clients) as pool:
                try:
                    for f in [pool.submit(self._client, w, tokens[w % len(tokens)])
                              for w in range(self.clients)]:
                        f.result()
                except BaseException:  # Ctrl-C: the clients stop, then the server
                    self._stop.set()
                    raise
            self._stop.set()
            sampler.join()
            duration = time.monotonic() - self.t0
            time.sleep(2)  # what the last calls left: warm containers replaced, leases
            self.samples.append(self.sample())
            with httpx.Client(base_url=self.url, timeout=60,
                              headers={"Authorization": f"Bearer {self.admin}"}) as admin:
                verify = admin.get("/v1/audit/verify").json()
        finally:
            self.server.stop()
            self.model.stop()
        result = {"calls": self._count, "ops": self.done, "duration_s": round(duration, 1),
                  "calls_per_s": round(self._count / duration, 1), "clients": self.clients,
                  "tenants": self.tenants, "errors": self.errors[:20],
                  "error_count": len(self.errors), "audit_verify": verify,
                  "mounts_after_stop": len(mounts_under(self.data)),
                  "containers_after_stop": _containers(self.instance),
                  "samples": self.samples}
        result["flatness"] = flatness(self.samples, self._count)
        if self._own_workdir and not result["mounts_after_stop"]:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return result


def flatness(samples: list[dict[str, Any]], calls: int,
             warmup_fraction: float = 0.2) -> dict[str, Any]:
    """Growth between the first and last fifth of the post-warm-up samples (medians), each
    against its bound; `ok` when all hold."""
    after = [s for s in samples if s["calls"] >= calls * warmup_fraction]
    if len(after) < 5:
        return {"ok": False, "why": f"only {len(after)} samples after warm-up"}
    k = max(1, len(after) // 5)
    first, last = after[:k], after[-k:]
    out: dict[str, Any] = {"samples": len(after), "bounds": BOUNDS,
                           "data_bytes_per_call_bound": DATA_BYTES_PER_CALL}
    ok = True
    for key, bound in BOUNDS.items():
        growth = statistics.median(s[key] for s in last) - statistics.median(
            s[key] for s in first)
        out[key] = {"start": statistics.median(s[key] for s in first),
                    "end": statistics.median(s[key] for s in last),
                    "growth": round(growth, 1), "max": max(s[key] for s in after)}
        ok = ok and growth <= bound
    per_call = statistics.linear_regression(
        [s["calls"] for s in after], [s["data_bytes"] for s in after]).slope
    out["data_bytes_per_call"] = round(per_call)
    most = max(s.get("snapshots_per_session", 0) for s in samples)
    # a turn makes its snapshot before it deletes the oldest: one more for that moment
    out["snapshots_per_session"] = {"max": most, "bound": SNAPSHOTS_BOUND}
    out["ok"] = ok and per_call <= DATA_BYTES_PER_CALL and most <= SNAPSHOTS_BOUND
    return out


def write_results(result: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / time.strftime("soak-%Y%m%dT%H%M%SZ.json", time.gmtime())
    path.write_text(json.dumps(result, indent=1) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return path
    samples = result["samples"]
    keys = ("rss_mib", "fds", "threads", "containers", "mounts", "data_bytes")
    fig, axes = plt.subplots(len(keys), 1, figsize=(8, 12), sharex=True)
    for ax, key in zip(axes, keys, strict=True):
        scale = MiB if key == "data_bytes" else 1
        ax.plot([s["calls"] for s in samples], [s[key] / scale for s in samples])
        ax.set_ylabel("data MiB" if key == "data_bytes" else key)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("calls")
    fig.suptitle(f"navi soak: {result['calls']} calls in {result['duration_s']} s")
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"), dpi=80)
    plt.close(fig)
    return path


def cli(
    calls: int = typer.Option(1000, "--calls", min=50, help="API calls in all (an upload "
                              "counts 3: put, get, delete)."),
    clients: int = typer.Option(4, "--clients", min=1, help="Concurrent clients."),
    tenants: int = typer.Option(3, "--tenants", min=1, help="Tenants the clients spread over."),
    sample_s: float = typer.Option(2.0, "--sample-s", min=0.2, help="Seconds between samples."),
) -> None:
    """Many calls against a real `navi serve` (fake model); RSS, fds, threads, containers,
    mounts and data-dir size must stay flat after warm-up. JSON + PNG in bench/results/."""
    result = Soak(calls, clients=clients, tenants=tenants, sample_s=sample_s).run()
    path = write_results(result)
    flat = result["flatness"]
    typer.echo(f"{result['calls']} calls in {result['duration_s']} s "
               f"({result['calls_per_s']}/s), errors {result['error_count']}, "
               f"audit ok {result['audit_verify'].get('ok')}")
    for key in BOUNDS:
        if key in flat:
            typer.echo(f"{key:11} {flat[key]['start']} -> {flat[key]['end']} "
                       f"(growth {flat[key]['growth']}, bound {BOUNDS[key]})")
    typer.echo(f"data dir   {flat.get('data_bytes_per_call')} B per call "
               f"(bound {DATA_BYTES_PER_CALL})")
    if "snapshots_per_session" in flat:
        typer.echo(f"snapshots  at most {flat['snapshots_per_session']['max']} per session "
                   f"(bound {SNAPSHOTS_BOUND}), "
                   f"{result['samples'][-1].get('snapshot_bytes', 0)} B at the end")
    typer.echo(f"flat: {flat['ok']}; results: {path} (+ .png)")
    if not flat["ok"] or result["error_count"] or not result["audit_verify"].get("ok"):
        raise typer.Exit(1)
