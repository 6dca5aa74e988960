"""`navi audit verify` and `navi audit export`: check and ship the audit chain, read-only.

`verify` exits 0 when the chain, the signed checkpoints and the mirror agree, 1 naming the
first bad record otherwise, 2 when the store cannot be read. `export --format jsonl`
writes the canonical records (one JSON object per line) to stdout or `--output`.
`--since` takes a seq (records after it) or an ISO-8601 time (records at or after it).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from runtime.audit.layout import DB_NAME, MIRROR_NAME
from runtime.audit.verify import export_jsonl, verify_store
from runtime.config import Settings
from runtime.errors import NaviError
from runtime.logging import escape_control

app = typer.Typer(help="Verify and export the audit log.", no_args_is_help=True)

DataDir = Annotated[Path | None, typer.Option("--data-dir", help="Data directory "
                                               "(default: NAVI_DATA_DIR or ./data).")]


def _data_dir(value: Path | None) -> Path:
    """The data directory; one without any audit log is an error (exit 2), so a mistyped
    `--data-dir` is never reported as a verified, empty chain."""
    directory = value if value is not None else Settings().data_dir
    if not (directory / DB_NAME).is_file() and not (directory / MIRROR_NAME).is_file():
        typer.echo(f"error: no audit log in {escape_control(str(directory))} "
                   "(set --data-dir or NAVI_DATA_DIR)", err=True)
        raise typer.Exit(2)
    return directory


@app.command("verify")
def verify(
    data_dir: DataDir = None,
    public_key: Annotated[Path | None, typer.Option(
        "--public-key", help="Checkpoint public key kept elsewhere (default: the one in "
        "DATA_DIR/keys).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the full report as JSON.")] = False,
) -> None:
    """Recompute the hash chain, checkpoint signatures and mirror; non-zero when tampered."""
    directory = _data_dir(data_dir)
    try:
        report = verify_store(directory, public_key)
    except NaviError as exc:
        typer.echo(f"error: {escape_control(exc.message)}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(report.model_dump_json())
    elif report.ok:
        typer.echo(f"ok: {report.records} records verified (head seq {report.head_seq}, "
                   f"{report.checkpoints} signed checkpoints, mirror {report.mirror_records} "
                   f"lines)")
    else:
        where = (f"first bad record: seq {report.first_bad_seq}"
                 if report.first_bad_seq is not None else "audit store damaged")
        typer.echo(f"FAILED: {where}: {escape_control(report.reason or 'unknown')}", err=True)
    if not report.ok:
        raise typer.Exit(1)


def parse_since(value: str | None) -> tuple[int | None, str | None]:
    if value is None:
        return None, None
    if value.isascii() and value.isdigit():
        if len(value) > 18:  # beyond any seq (SQLite integers are 64-bit)
            raise typer.BadParameter("seq out of range", param_hint="--since")
        return int(value), None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter("a seq number or an ISO-8601 time",
                                 param_hint="--since") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return None, moment.astimezone(UTC).isoformat(timespec="microseconds")


@app.command("export")
def export(
    data_dir: DataDir = None,
    fmt: Annotated[str, typer.Option("--format", help="Output format: jsonl.")] = "jsonl",
    since: Annotated[str | None, typer.Option("--since", help="Seq (exclusive) or ISO-8601 "
                                              "time (inclusive).")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File (default: "
                                                "stdout).")] = None,
) -> None:
    """Write the audit records as JSON lines (canonical, control characters escaped)."""
    if fmt != "jsonl":
        raise typer.BadParameter("only jsonl is supported", param_hint="--format")
    since_seq, since_ts = parse_since(since)
    directory = _data_dir(data_dir)
    try:
        if output is None:
            count = export_jsonl(directory, sys.stdout, since_seq=since_seq, since_ts=since_ts)
        else:
            with output.open("w", encoding="ascii") as fh:
                count = export_jsonl(directory, fh, since_seq=since_seq, since_ts=since_ts)
    except NaviError as exc:
        typer.echo(f"error: {escape_control(exc.message)}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.echo(f"error: cannot write {output}: {exc.strerror}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"exported {count} records", err=True)
