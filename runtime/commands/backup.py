"""`navi backup DIR` and `navi restore DIR`: copy a (running) data dir's state, put it back.

The work is in ``runtime.backup``; this module parses options and prints what was copied.
Exit codes: 0 done (and the copy's audit chain verifies), 1 done but the copy does not
verify, 2 refused or failed (nothing written to DIR, or for restore nothing replaced, on the
data dir or any node), 3 (restore on a cluster) some nodes put their images in place and
one failed to: the message names them; the data dir is unchanged; run it again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from runtime.backup import BackupFile, Verified, backup_data_dir
from runtime.backup_disks import DiskReport
from runtime.backup_restore import RestoreIncomplete, restore_data_dir

if TYPE_CHECKING:
    from runtime.backup_nodes import NodeDisks
from runtime.config import Settings
from runtime.errors import NaviError
from runtime.logging import escape_control

DataDir = Annotated[Path | None, typer.Option("--data-dir", help="Data directory "
                                               "(default: NAVI_DATA_DIR or ./data).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the report as JSON.")]


def _data_dir(value: Path | None) -> Path:
    return value if value is not None else Settings().data_dir


def _cluster(data_dir: Path) -> NodeDisks | None:
    """With NAVI_CLUSTER set: the cluster joined with the data dir's token, so the sessions
    on its nodes have their disks in the backup (streamed from the node agents)."""
    address = Settings().cluster
    if not address:
        return None
    from runtime.backup_nodes import NodeDisks
    from runtime.cluster.link import token_file

    return NodeDisks(address, token_file(data_dir))


T = TypeVar("T")


def _with_nodes(token_dir: Path, verb: str, work: Callable[[NodeDisks | None], T]) -> T:
    """`work` with the cluster's node disks (None without a cluster); errors become exit 2."""
    try:
        nodes = _cluster(token_dir)
        try:
            return work(nodes)
        finally:
            if nodes is not None:
                nodes.close()
    except NaviError as exc:
        raise _fail(exc.message, 3 if isinstance(exc, RestoreIncomplete) else 2) from None
    except OSError as exc:
        raise _fail(f"{verb} failed: {exc}") from None


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {escape_control(message)}", err=True)
    return typer.Exit(code)


def _files(files: list[BackupFile]) -> None:
    width = max((len(f.path) for f in files), default=0)
    for f in files:
        typer.echo(f"  {escape_control(f.path):<{width}}  {f.bytes:>12,} bytes  {f.mode:04o}  "
                   f"{f.method}")


def _disks(report: DiskReport, verb: str, *, timed: bool = True) -> None:
    sessions = [d for d in report.disks if d.kind == "session"]
    snaps = [d for d in report.disks if d.kind == "snapshot"]
    stored = sum(d.stored for d in report.disks)
    size = sum(d.size for d in report.disks)
    typer.echo(f"session disks {verb}: {len(sessions)} sessions, {len(snaps)} snapshots, "
               f"{stored:,} bytes stored (sparse; {size:,} bytes apparent)"
               + (f", {report.seconds:.2f} s" if timed else ""))
    for skip in report.skipped:
        why = "no disk image" if skip.reason == "no_image" else "on another node"
        typer.echo(f"  not copied: session {skip.session} of tenant {skip.tenant} ({why})")


def _verified(verified: Verified, where: Path) -> None:
    if verified.ok:
        typer.echo(f"verified: {verified.records} audit records "
                   f"(navi audit verify --data-dir {escape_control(str(where))})")
    else:
        typer.echo(f"FAILED verification: first bad record {verified.first_bad_seq}: "
                   f"{escape_control(verified.reason or 'unknown')}", err=True)


def backup(
    directory: Annotated[Path, typer.Argument(help="New (or empty) directory for the backup.")],
    data_dir: DataDir = None,
    as_json: AsJson = False,
    snapshots: Annotated[bool, typer.Option(
        "--snapshots/--no-snapshots", help="Copy the sessions' snapshots too.")] = True,
) -> None:
    """Copy a data dir's store, audit log, keys and session disks, consistently, while it
    serves.

    Databases with SQLite's online backup API; each session disk frozen while its image is
    copied (sparse); the audit mirror cut to the copied chain. With NAVI_CLUSTER set, the
    disks of sessions on cluster nodes are streamed from their node agents."""
    source = _data_dir(data_dir)
    manifest = _with_nodes(source, "backup", lambda nodes: backup_data_dir(
        source, directory, snapshots=snapshots, nodes=nodes))
    if as_json:
        typer.echo(manifest.model_dump_json())
    else:
        typer.echo(f"backup of {escape_control(str(source))} "
                   f"into {escape_control(str(directory))}: "
                   f"{len(manifest.files)} files, {manifest.total_bytes:,} bytes, "
                   f"{manifest.seconds:.2f} s (verifying the copy: "
                   f"{manifest.verify_seconds:.2f} s)")
        _files(manifest.files)
        if manifest.audit is not None:
            a = manifest.audit
            cp = "no checkpoint" if a.checkpoint_seq is None else f"checkpoint at seq " \
                f"{a.checkpoint_seq}"
            typer.echo(f"audit: {a.records} records (head seq {a.head_seq}), mirror "
                       f"{a.mirror_lines} lines, {cp}")
        if manifest.store:
            typer.echo("store: " + ", ".join(f"{k} {v}" for k, v in manifest.store.items()))
        _disks(manifest.disks, "copied")
        _verified(manifest.verified, directory)
    if not manifest.verified.ok:
        raise typer.Exit(1)


def restore(
    directory: Annotated[Path, typer.Argument(help="A directory made by `navi backup`.")],
    data_dir: DataDir = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace the state of a stopped data dir (moved aside into "
        "pre-restore-<time>/, not deleted).")] = False,
    as_json: AsJson = False,
) -> None:
    """Put a backup in place into an empty or stopped data dir.

    Refused while a server (or `navi exec`) has the data dir's audit log open. With
    NAVI_CLUSTER set, the disks of sessions on cluster nodes go back to those nodes."""
    target = _data_dir(data_dir)
    report = _with_nodes(directory, "restore", lambda nodes: restore_data_dir(  # the backup's
        directory, target, force=force, nodes=nodes))                          # cluster token
    if as_json:
        typer.echo(report.model_dump_json())
    else:
        total = sum(f.bytes for f in report.files)
        typer.echo(f"restored {escape_control(str(directory))} "
                   f"into {escape_control(report.data_dir)}: "
                   f"{len(report.files)} files, {total:,} bytes, {report.seconds:.2f} s")
        _files(report.files)
        _disks(report.disks, "restored", timed=False)  # (in the files' time above)
        if report.moved_aside:
            typer.echo(f"previous state moved aside into {escape_control(report.moved_aside)}")
        _verified(report.verified, target)
    if not report.verified.ok:
        raise typer.Exit(1)
