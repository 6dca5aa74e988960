"""`navi restore`: a backup (``runtime.backup``) put back into a data dir and, on a cluster,
its node sessions' images back onto their nodes, all or nothing up to the last step.

Restore puts a backup into an empty or stopped data dir: it refuses while any process has
the data dir's audit log open (its instance lock is held) and holds the server's instance
lock itself meanwhile, so ``navi serve`` cannot start half-way. Existing state is replaced
only with ``force``, and is then moved aside into ``pre-restore-<time>/``, never deleted.

Two phases:

1. stage: every file and local image is copied into a hidden directory of the data dir
   (``.restore-<random>/``, laid out as the data dir); with a cluster (``nodes``), every
   node image is sent to the node the manifest names, which checks it against the
   manifest's digest and keeps it aside (``runtime.cluster.agent.restore``). Nothing live
   is replaced. Any failure (a node down, a node refusing an image, a full disk) drops what
   every node staged and the hidden directory: `RestoreFailed`, naming the node, and the
   data dir and every node are as they were.
2. swap: each node puts its staged images in place (renames), one node after the other;
   then the data dir's old state is moved aside and the staged one renamed in. A node that
   fails here (it died, or a session's call held it past the wait) cannot be undone on the
   nodes that already swapped: `RestoreIncomplete` names the nodes that did, the one that
   failed and those that dropped theirs; the data dir is left as it was, and running the
   same restore again puts every node and the data dir in the backup's state.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from runtime.audit.backup import fsync_file
from runtime.audit.instances import live_instances, lock_instance
from runtime.audit.layout import CHECKPOINT_NAME, DB_NAME, MIRROR_NAME
from runtime.audit.mirror import fsync_dir
from runtime.audit.verify import verify_store
from runtime.backup import (
    DATABASES,
    KEYS_DIR,
    MANIFEST,
    SECRET_FILES,
    TOOLS_DIR,
    BackupFile,
    BackupManifest,
    Verified,
    _copy_file,
    _entry,
)
from runtime.backup_disks import (
    WORKSPACES,
    DiskReport,
    ToNodes,
    check_disks,
    disk_targets,
    on_nodes,
    restore_disks,
    stage_on_nodes,
)
from runtime.errors import AuditIntegrityError, Conflict, InvalidInput, NaviError
from runtime.sandbox.instance import INSTANCE_FILE, INSTANCE_ID_RE

_SIDECARS = ("-wal", "-shm", "-journal")
STAGING = ".restore-"


class RestoreFailed(NaviError):
    """Phase 1 failed: nothing was replaced, on any node or in the data dir."""

    code = "restore_failed"


class RestoreIncomplete(NaviError):
    """Phase 2 failed on a node after others had swapped their images in."""

    code = "restore_incomplete"


class RestoreReport(BaseModel):
    data_dir: str
    files: list[BackupFile]
    disks: DiskReport = DiskReport()
    moved_aside: str | None
    seconds: float
    verified: Verified


def read_manifest(backup_dir: Path) -> BackupManifest:
    """The backup's manifest, after checking every file it lists (size and SHA-256)."""
    try:
        manifest = BackupManifest.model_validate_json((backup_dir / MANIFEST).read_bytes())
    except FileNotFoundError:
        raise InvalidInput(f"{backup_dir} is not a backup (no {MANIFEST})") from None
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{backup_dir / MANIFEST} is unreadable: {exc}") from None
    for item in manifest.files:
        rel = Path(item.path)
        if rel.is_absolute() or ".." in rel.parts:
            raise InvalidInput(f"backup lists a path outside itself: {item.path!r}")
        path = backup_dir / rel
        if path.is_symlink() or not path.is_file():
            raise AuditIntegrityError(f"backup file {item.path} is missing")
        if _entry(backup_dir, item.path, item.method).sha256 != item.sha256:
            raise AuditIntegrityError(f"backup file {item.path} differs from the manifest")
    problem = check_disks(backup_dir, manifest.disks.disks)
    if problem is not None:
        raise AuditIntegrityError(problem)
    return manifest


def restore_data_dir(backup_dir: Path, data_dir: Path, *, force: bool = False,
                     nodes: ToNodes | None = None) -> RestoreReport:
    """Put the backup ``backup_dir`` in place in ``data_dir`` (see the module doc)."""
    started = time.monotonic()
    backup_dir, data_dir = backup_dir.absolute(), data_dir.absolute()
    manifest = read_manifest(backup_dir)
    if manifest.audit is not None:
        check = verify_store(backup_dir)
        if not check.ok and not force:
            raise AuditIntegrityError(f"the backup's audit log does not verify: {check.reason}")
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    held = _hold_server_lock(data_dir)
    try:
        ours = _instance_id(data_dir)
        live = [i for i in live_instances(data_dir) if i != ours]
        if live:
            raise Conflict(f"{data_dir} is in use: audit log open by {', '.join(live)} "
                           "(stop the server first)")
        present = [p for p in _targets(data_dir) if p.exists() or p.is_symlink()]
        if present and not force:
            names = ", ".join(p.name for p in present)
            raise Conflict(f"{data_dir} already holds state ({names}); --force moves it "
                           "aside into pre-restore-<time>/")
        staged = _stage(backup_dir, data_dir, manifest, nodes)
        moved = None
        try:
            if nodes is not None:
                nodes.commit()
            if present:
                moved = _move_aside(data_dir, present)
            _swap_in(staged, data_dir)
        finally:
            shutil.rmtree(staged, ignore_errors=True)
        fsync_dir(data_dir)
    finally:
        if held is not None:
            os.close(held)
    report = verify_store(data_dir) if manifest.audit is not None else None
    return RestoreReport(
        data_dir=str(data_dir), files=manifest.files, disks=manifest.disks,
        moved_aside=str(moved) if moved is not None else None,
        seconds=round(time.monotonic() - started, 3),
        verified=Verified(ok=report.ok, records=report.records,
                          first_bad_seq=report.first_bad_seq, reason=report.reason)
        if report is not None else Verified(ok=True, records=0),
    )


def _stage(backup_dir: Path, data_dir: Path, manifest: BackupManifest,
           nodes: ToNodes | None) -> Path:
    """Phase 1: the data dir's new state in a hidden directory of it, every node image
    staged on its node; on any failure nothing of either is left."""
    disks, side_files = manifest.disks.disks, manifest.disks.side_files
    remote, local, local_sides = on_nodes(disks, side_files)
    if nodes is None:  # no cluster joined: node sessions' images go into the data dir
        remote, local, local_sides = [], disks, side_files
    staged = data_dir / f"{STAGING}{secrets.token_hex(4)}"
    os.mkdir(staged, 0o700)
    try:
        side = set(side_files)
        for item in manifest.files:
            if item.path not in side:
                _place(backup_dir, staged, item)
        restore_disks(backup_dir, staged, local, local_sides)
        fsync_dir(staged)
        if nodes is not None:
            try:
                stage_on_nodes(backup_dir, remote, nodes)
            except NaviError as exc:
                raise RestoreFailed(f"{exc.message}; nothing was restored: every node dropped "
                                    f"what it had staged and {data_dir} is as it was") from None
    except BaseException:
        if nodes is not None:
            nodes.discard()
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return staged


def _swap_in(staged: Path, data_dir: Path) -> None:
    """Phase 2 for the data dir: the staged state renamed into place (its old state was
    moved aside, so nothing is in the way)."""
    for entry in sorted(os.scandir(staged), key=lambda e: e.name):
        os.rename(entry.path, data_dir / entry.name)
    fsync_dir(data_dir)


def _instance_id(data_dir: Path) -> str | None:
    try:
        value = (data_dir / INSTANCE_FILE).read_text()[:128].strip()
    except OSError:
        return None
    return value if INSTANCE_ID_RE.fullmatch(value) else None


def _hold_server_lock(data_dir: Path) -> int | None:
    """Hold the audit lock of the data dir's server instance while restoring, so `navi
    serve` cannot open the log half-way; Conflict if that server has it open."""
    instance = _instance_id(data_dir)
    if instance is None:
        return None
    fd = lock_instance(data_dir, instance)
    if fd is None:
        raise Conflict(f"{data_dir} is in use: its server ({instance}) has the audit log open "
                       "(stop it first)")
    return fd


def _targets(data_dir: Path) -> list[Path]:
    """What a restore replaces: everything a backup may hold, whether this one does or not
    (a stale checkpoint file would not verify), and the databases' sidecars (a stale
    ``-wal`` next to a restored database would be replayed into it)."""
    paths = []
    for top in (*DATABASES, DB_NAME, MIRROR_NAME, CHECKPOINT_NAME, TOOLS_DIR, KEYS_DIR,
                *SECRET_FILES):
        paths.append(data_dir / top)
        if top.endswith(".sqlite3"):
            paths += [data_dir / (top + suffix) for suffix in _SIDECARS]
    return paths + disk_targets(data_dir)


def _move_aside(data_dir: Path, paths: list[Path]) -> Path:
    aside = data_dir / f"pre-restore-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"
    aside = aside.with_name(f"{aside.name}-{secrets.token_hex(2)}") if aside.exists() else aside
    os.mkdir(aside, 0o700)
    for path in paths:
        os.rename(path, aside / path.name)
    fsync_dir(aside)
    fsync_dir(data_dir)
    return aside


def _place(backup_dir: Path, data_dir: Path, item: BackupFile) -> None:
    rel = Path(item.path)
    if rel.parts[0] not in (*DATABASES, DB_NAME, MIRROR_NAME, CHECKPOINT_NAME, TOOLS_DIR,
                            KEYS_DIR, *SECRET_FILES, WORKSPACES):
        raise InvalidInput(f"backup lists a file a data dir does not hold: {item.path!r}")
    target = data_dir / rel
    for parent in reversed(rel.parents[:-1]):  # directories between data_dir and the file
        folder = data_dir / parent
        if not folder.is_dir():
            os.mkdir(folder, 0o700)
            os.chmod(folder, 0o700)
    tmp = target.with_name(f".{target.name}.restore-{secrets.token_hex(4)}")
    mode = 0o600 if item.method == "secret" else item.mode & 0o755
    _copy_file(backup_dir / rel, tmp, mode)
    os.replace(tmp, target)
    fsync_file(target)
    fsync_dir(target.parent)
