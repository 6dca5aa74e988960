"""`navi bench audit`: what the write-ahead audit costs, on a real file with real fsyncs.

Measures, in a fresh data dir (default: a new temporary dir; pass ``--dir`` to measure the
disk the real data dir lives on):

- append latency (each append = one SQLite transaction with ``synchronous=FULL`` in WAL mode
  plus a fsync'd line in the JSON-lines mirror): p50/p95/mean over sequential appends, and
  appends/s sequentially and with C appenders in flight (they queue on the one writer);
- the Executor's bookkeeping per call with the FakeBackend (quota, decision, intent and
  outcome): what every sandboxed call pays on top of the container;
- verify throughput: records/s for ``verify_store`` over the whole file (chain, checkpoints
  and mirror).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from runtime.audit import AuditEntry, AuditLog, verify_store
from runtime.config import PROJECT_ROOT
from runtime.executor import Executor, Invocation
from runtime.logging import configure_logging
from runtime.policy import Action, PolicyEngine, Subject, parse_policy
from runtime.sandbox.fake import FakeBackend
from runtime.sandbox.models import Limits

RESULTS_DIR = PROJECT_ROOT / "bench" / "results"


def summarize(latencies_s: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in latencies_s)
    q = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 3),
            "p95_ms": round(q[94], 3), "p99_ms": round(q[98], 3),
            "mean_ms": round(statistics.fmean(ms), 3), "max_ms": round(ms[-1], 3)}


def _entry(i: int) -> AuditEntry:
    """An intent-sized record (what the Executor writes before every run)."""
    return AuditEntry(
        kind="intent", tenant="bench", user="tok_bench", session="s_bench",
        exec_id=f"ex_{i:024x}", tool="code_exec", args_sha256="a" * 64, args_size=120,
        decision="allow", rule="profiles.developer.allow[group:exec]",
        reason="'code_exec' is allowed by profile 'developer'", image="navi/python:latest",
        limits=Limits().model_dump(), stdin_sha256="b" * 64, stdin_size=0,
    )


async def _appends(log: AuditLog, n: int, concurrency: int) -> dict[str, Any]:
    latencies = []
    started = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        await log.append(_entry(i))
        latencies.append(time.perf_counter() - t0)
    sequential_s = time.perf_counter() - started

    async def worker(k: int) -> None:
        for i in range(n // concurrency):
            await log.append(_entry(n + k * n + i))

    started = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    concurrent_s = time.perf_counter() - started
    done = (n // concurrency) * concurrency
    return {"latency": summarize(latencies),
            "appends_per_s_sequential": round(n / sequential_s, 1),
            "appends_per_s_concurrent": round(done / concurrent_s, 1),
            "concurrency": concurrency}


async def _executor_overhead(log: AuditLog, calls: int) -> dict[str, Any]:
    engine = PolicyEngine(parse_policy(
        "version: 1\ndefaults: {quotas: {execs_per_minute: 100000}}\n"
        "profiles:\n  developer: {allow: [group:exec]}\ntenants:\n  '*': {profiles: [developer]}\n"
    ))
    ex = Executor(engine=engine, backend=FakeBackend(), audit=log, resolve_image=str)
    subject = Subject(tenant="bench-executor", session="s")
    action = Action(tool="code_exec", args={"language": "python", "code": "print(1)"})
    run = Invocation(argv=["python3", "-c", "print(1)"])
    latencies = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await ex.execute(subject, action, run)
        latencies.append(time.perf_counter() - t0)
    return {"latency": summarize(latencies), "note": "FakeBackend: audit + policy only"}


async def run_bench(records: int, concurrency: int, data_dir: Path | None = None
                    ) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="navi-audit-bench-", dir=data_dir))
    try:
        async with AuditLog(base) as log:
            appends = await _appends(log, records, concurrency)
            executor = await _executor_overhead(log, max(50, records // 10))
        size = sum(p.stat().st_size for p in base.iterdir() if p.is_file())
        t0 = time.perf_counter()
        report = await asyncio.to_thread(verify_store, base)
        verify_s = time.perf_counter() - t0
        if not report.ok:
            raise RuntimeError(f"the benchmark's own log does not verify: {report}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {
        "benchmark": "audit",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {"cpus": os.cpu_count(), "kernel": platform.release(),
                 "python": platform.python_version(), "filesystem_of": str(base.parent)},
        "append": appends,
        "executor_per_call": executor,
        "verify": {"records": report.records, "seconds": round(verify_s, 3),
                   "records_per_s": round(report.records / verify_s, 1),
                   "store_bytes": size},
    }


def cli(
    records: Annotated[int, typer.Option("--records", min=10, help="Sequential appends "
                                         "(and as many concurrent ones).")] = 2000,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Appenders in "
                                             "flight.")] = 8,
    directory: Annotated[Path | None, typer.Option("--dir", help="Where to create the "
                                                   "scratch data dir.")] = None,
) -> None:
    """Audit append latency (fsync) p50/p95, appends/s, Executor bookkeeping, verify speed."""
    configure_logging("console", "warning")
    results = asyncio.run(run_bench(records, concurrency, directory))
    path = write_results(results)
    a, v, e = results["append"], results["verify"], results["executor_per_call"]["latency"]
    typer.echo(f"append      p50 {a['latency']['p50_ms']:.2f} ms  p95 "
               f"{a['latency']['p95_ms']:.2f} ms  {a['appends_per_s_sequential']:.0f}/s "
               f"sequential, {a['appends_per_s_concurrent']:.0f}/s with {concurrency} in flight")
    typer.echo(f"executor    p50 {e['p50_ms']:.2f} ms  p95 {e['p95_ms']:.2f} ms per call "
               "(intent + outcome, FakeBackend)")
    typer.echo(f"verify      {v['records_per_s']:.0f} records/s ({v['records']} records, "
               f"{v['store_bytes']} bytes)")
    typer.echo(f"results: {path}")


def write_results(results: dict[str, Any], out_dir: Path = RESULTS_DIR) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = out_dir / f"audit-{stamp}.json"
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return path
