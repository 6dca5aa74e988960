"""`navi bench`: benchmarks that write JSON to ``bench/results/`` (code lives in ``bench/``)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from bench.audit_bench import cli as audit_bench_cli
from bench.bridges import cli as bridges_cli
from bench.cluster_bench import cli as cluster_bench_cli
from bench.disk_bench import cli as disk_bench_cli
from bench.e2b_bench import cli as e2b_bench_cli
from bench.engine_bench import cli as engine_bench_cli
from bench.fairshare import cli as fairshare_cli
from bench.kernel_bench import cli as kernel_bench_cli
from bench.ports_bench import cli as ports_bench_cli
from bench.processes_bench import cli as processes_bench_cli
from bench.sessions_bench import cli as sessions_bench_cli
from bench.soak import cli as soak_cli
from runtime.config import Settings
from runtime.errors import NaviError
from runtime.logging import configure_logging

app = typer.Typer(help="Benchmarks; results go to bench/results/*.json.", no_args_is_help=True)
app.command("audit")(audit_bench_cli)  # code and docs: bench/audit_bench.py
app.command("disk")(disk_bench_cli)  # code and docs: bench/disk_bench.py
app.command("e2b")(e2b_bench_cli)  # code and docs: bench/e2b_bench.py
app.command("soak")(soak_cli)  # code and docs: bench/soak.py
app.command("fairshare")(fairshare_cli)  # code and docs: bench/fairshare.py
app.command("bridges")(bridges_cli)  # code and docs: bench/bridges.py
app.command("engine")(engine_bench_cli)  # code and docs: bench/engine_bench.py, engine_acct.py
app.command("cluster")(cluster_bench_cli)  # code and docs: bench/cluster_bench.py
app.command("sessions")(sessions_bench_cli)  # code and docs: bench/sessions_bench.py
app.command("kernels")(kernel_bench_cli)  # code and docs: bench/kernel_bench.py
app.command("processes")(processes_bench_cli)  # code and docs: bench/processes_bench.py
app.command("ports")(ports_bench_cli)  # code and docs: bench/ports_bench.py


@app.command("exec")
def exec_bench(
    runs: Annotated[int, typer.Option("--runs", min=4, help="Calls per measurement.")] = 40,
    image: Annotated[
        str | None, typer.Option("--image", help="Image (default <prefix>/python:latest).")
    ] = None,
    api: Annotated[
        bool, typer.Option("--api/--no-api", help="Also time warm calls via `navi serve`.")
    ] = True,
    runtime: Annotated[
        str, typer.Option("--runtime", help="Tier of the runs: runc | gvisor.")
    ] = "runc",
) -> None:
    """Latency of docker run --rm, cold, warm, warm-via-API and time to first command (ttfc:
    a new session's first call); throughput (2, 4 clients); memory per idle warm container.
    JSON + PNG chart in bench/results/."""
    from bench.exec_bench import run_bench, write_results

    settings = Settings()
    configure_logging(settings.log_format, "warning")
    image = image or f"{settings.image_prefix}/python:latest"
    try:
        if runtime not in ("runc", "gvisor"):
            raise typer.BadParameter("--runtime is runc or gvisor")
        results = asyncio.run(run_bench(image, runs, api, runtime))
    except NaviError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from exc
    path = write_results(results)
    for name, lat in results["latency"].items():
        typer.echo(f"{name:14} p50 {lat['p50_ms']:7.1f} ms  p95 {lat['p95_ms']:7.1f} ms")
    if overhead := results.get("api_overhead_p50_ms"):
        typer.echo("API overhead over the bare warm call of the same rounds, p50: "
                   + ", ".join(f"{k} +{v} ms" for k, v in overhead.items()))
    for clients, paths in results["throughput_per_s"].items():
        typer.echo(f"throughput {clients}: " + ", ".join(f"{k} {v}/s" for k, v in paths.items()))
    typer.echo("p50 over docker run, same rounds: " + ", ".join(
        f"{k.removesuffix('_p50_over_docker_run')} {v}" for k, v in results["ratios"].items()))
    typer.echo(f"idle warm container memory (median): {results['idle_warm_memory']['median']}")
    typer.echo(f"results: {path} (+ .png)")
