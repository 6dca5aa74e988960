"""Session disks in a backup: each session's image and its snapshots, consistent and sparse.

Why: a session's files live on an ext4 image of its own (``runtime.workspace.disk``); a backup
without them restores sessions that answer 404 for their files.

How an image is copied while the server serves: ``runtime.workspace.image_copy.copy_image``,
the primitive snapshots use too. Under the image's cross-process lock (a mount, an idle
release or a snapshot of that session waits meanwhile), it freezes the session's filesystem
if it is mounted (FIFREEZE: writers inside a call block for the copy's milliseconds, the
journal is flushed, the image is clean) and copies the image sparse (only its data ranges);
an unmounted image is copied as it lies. Each image is consistent on its own, at its own
moment; sessions are not frozen together. Should the backup die in the middle of a copy,
a guard process thaws that session's filesystem (``runtime.freeze_guard``).

Which sessions: those in the backup's copy of the store (taken before the disks), on this
node. A session created after the store copy has no row and its image is left out; one
deleted meanwhile has no image and is listed as skipped (its restored record answers 404 for
files, as before). A session of another cluster node has its disk there: streamed from its
agent when the backup has joined the cluster (``runtime.backup_nodes``), else skipped.

Snapshots (``<session>.snapshots/``: ``<id>.img`` and ``<id>.json``, each complete, written by
rename) are copied beside their session's image, under the same lock, so a restored session
keeps its checkpoints and "undo this turn" still works.

The backup is a directory, so an image stays sparse as it is written (no archive format in
between). Its manifest entry carries a digest of its contents that costs only its data to
compute (``sparse_sha256``): hashing a 1 GiB image byte by byte would read 1 GiB of holes.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from runtime.audit.mirror import fsync_dir
from runtime.errors import NodeUnavailable
from runtime.freeze_guard import FreezeGuard
from runtime.workspace.image_copy import (
    SNAPSHOTS_SUFFIX,
    copy_file_sparse,
    copy_image,
    image_lock,
    image_of,
    snapshots_dir,
)

WORKSPACES = "workspaces"
DIR_MODE = 0o711  # as the server makes them (runtime.workspace.manager)
_CHUNK = 1 << 16
_ZEROS = bytes(_CHUNK)


class DiskCopy(BaseModel):
    """One image in the backup: a session's disk or one of its snapshots."""

    path: str  # relative: workspaces/<tenant>/<session>.img or ….snapshots/<id>.img
    kind: Literal["session", "snapshot"]
    tenant: str
    session: str
    size: int  # apparent size (the session's quota)
    stored: int  # bytes the copy occupies (its data blocks)
    sha256: str  # ``sparse_sha256``
    seconds: float
    node: str = "local"  # the cluster node the session's disk was streamed from


class DiskSkipped(BaseModel):
    tenant: str
    session: str
    reason: Literal["no_image", "other_node", "node_unavailable"]


class DiskReport(BaseModel):
    disks: list[DiskCopy] = []
    side_files: list[str] = []  # snapshot descriptions (.json), relative paths
    skipped: list[DiskSkipped] = []
    seconds: float = 0.0


def session_rows(store_db: Path) -> list[tuple[str, str, str]]:
    """(tenant, session, node) of every session in a (copied) store."""
    if not store_db.is_file():
        return []
    uri = f"{store_db.absolute().as_uri()}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
        node = "node" if "node" in columns else "'local'"
        rows = conn.execute(f"SELECT tenant_id, id, {node} FROM sessions "
                            "ORDER BY tenant_id, created_at").fetchall()
    return [(str(t), str(s), str(n)) for t, s, n in rows]


class FromNodes(Protocol):
    """Session disks of cluster nodes (``runtime.backup_nodes.NodeDisks``)."""

    def fetch(self, node_id: str, tenant: str, session: str, session_dir: Path, *,
              snapshots: bool) -> list[tuple[Literal["session", "snapshot"], Path, int,
                                             dict[str, Any] | None]] | None: ...


class ToNodes(Protocol):
    """Session disks put back on cluster nodes in two phases (``runtime.backup_nodes.NodeDisks``):
    ``stage`` each image (nothing replaced), then ``commit`` all or ``discard`` all."""

    def stage(self, disk: DiskCopy, path: Path, meta: dict[str, Any] | None) -> None: ...

    def commit(self) -> None: ...

    def discard(self) -> None: ...


def backup_disks(data_dir: Path, work: Path, sessions: list[tuple[str, str, str]], *,
                 snapshots: bool = True, nodes: FromNodes | None = None) -> DiskReport:
    """Copy the images of ``sessions`` (and their snapshots) from ``data_dir`` into ``work``;
    those of other cluster nodes from their agents (``nodes``), else they are skipped."""
    started = time.monotonic()
    report = DiskReport()
    with FreezeGuard() as guard:
        for tenant, session, node in sessions:
            if node != "local" and nodes is not None:
                _from_node(nodes, work, tenant, session, node, report, snapshots=snapshots)
                continue
            _backup_disk(data_dir, work, tenant, session, node, report, guard,
                         snapshots=snapshots)
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _backup_disk(data_dir: Path, work: Path, tenant: str, session: str, node: str,
                 report: DiskReport, guard: FreezeGuard, *, snapshots: bool) -> None:
    if node != "local":
        report.skipped.append(DiskSkipped(tenant=tenant, session=session,
                                          reason="other_node"))
        return
    session_dir = data_dir / WORKSPACES / tenant / session
    image = image_of(session_dir)
    if image.is_symlink() or not image.is_file():
        report.skipped.append(DiskSkipped(tenant=tenant, session=session,
                                          reason="no_image"))
        return
    target_dir = _make_dirs(work, tenant)
    rel = f"{WORKSPACES}/{tenant}/{image.name}"
    began = time.monotonic()
    guard.copying(session_dir)
    try:
        stats = copy_image(session_dir, work / rel)
    except FileNotFoundError:  # deleted while we came to it
        report.skipped.append(DiskSkipped(tenant=tenant, session=session,
                                          reason="no_image"))
        return
    finally:
        guard.copied()
    report.disks.append(_disk(work, rel, "session", tenant, session, stats.size, began))
    if snapshots:
        _copy_snapshots(session_dir, target_dir, work, tenant, session, report)
    fsync_dir(target_dir)


def _from_node(nodes: FromNodes, work: Path, tenant: str, session: str, node: str,
               report: DiskReport, *, snapshots: bool) -> None:
    target_dir = _make_dirs(work, tenant)
    began = time.monotonic()
    try:
        copied = nodes.fetch(node, tenant, session, target_dir / session, snapshots=snapshots)
    except NodeUnavailable:  # a node that is down holds its sessions back, not the backup
        image_of(target_dir / session).unlink(missing_ok=True)  # what came before it went
        shutil.rmtree(snapshots_dir(target_dir / session), ignore_errors=True)
        report.skipped.append(DiskSkipped(tenant=tenant, session=session,
                                          reason="node_unavailable"))
        return
    if copied is None:
        report.skipped.append(DiskSkipped(tenant=tenant, session=session, reason="no_image"))
        return
    for kind, path, size, meta in copied:
        rel = path.relative_to(work).as_posix()
        report.disks.append(_disk(work, rel, kind, tenant, session, size, began, node=node))
        if meta is not None:
            side = path.with_suffix(".json")
            side.write_text(json.dumps(meta), encoding="utf-8")
            os.chmod(side, 0o600)
            report.side_files.append(side.relative_to(work).as_posix())
        began = time.monotonic()
    for folder in {p.parent for _k, p, _s, _m in copied}:
        fsync_dir(folder)


def _make_dirs(work: Path, tenant: str) -> Path:
    for folder in (work / WORKSPACES, work / WORKSPACES / tenant):
        if not folder.is_dir():
            os.mkdir(folder, 0o700)
    return work / WORKSPACES / tenant


def _copy_snapshots(session_dir: Path, target_dir: Path, work: Path, tenant: str,
                    session: str, report: DiskReport) -> None:
    """The session's snapshot files, under the image lock (no snapshot is being made or
    deleted meanwhile); an image only with its description, and the other way round."""
    folder = snapshots_dir(session_dir)
    if folder.is_symlink() or not folder.is_dir():
        return
    with image_lock(session_dir):
        names = {e.name for e in os.scandir(folder) if e.is_file(follow_symlinks=False)}
        ids = sorted(n.removesuffix(".img") for n in names
                     if n.endswith(".img") and n.removesuffix(".img") + ".json" in names)
        if not ids:
            return
        os.mkdir(target_dir / folder.name, 0o700)
        for sid in ids:
            rel = f"{WORKSPACES}/{tenant}/{folder.name}/{sid}"
            began = time.monotonic()
            stats = copy_file_sparse(folder / f"{sid}.img", work / f"{rel}.img")
            report.disks.append(_disk(work, f"{rel}.img", "snapshot", tenant, session,
                                      stats.size, began))
            copy_file_sparse(folder / f"{sid}.json", work / f"{rel}.json")
            report.side_files.append(f"{rel}.json")
        fsync_dir(target_dir / folder.name)


def _disk(work: Path, rel: str, kind: Literal["session", "snapshot"], tenant: str,
          session: str, size: int, began: float, *, node: str = "local") -> DiskCopy:
    copied = work / rel
    os.chmod(copied, 0o600)
    return DiskCopy(path=rel, kind=kind, tenant=tenant, session=session, size=size,
                    stored=copied.stat().st_blocks * 512, sha256=sparse_sha256(copied),
                    seconds=round(time.monotonic() - began, 3), node=node)


# -- digests -----------------------------------------------------------------------------


def data_ranges(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """The (start, end) ranges of ``fd`` that hold data (SEEK_DATA/SEEK_HOLE)."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing but a hole after pos
                return
            raise
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        yield start, end
        pos = end


def sparse_sha256(path: Path) -> str:
    """SHA-256 of the file's size and of each aligned 64 KiB chunk that is not all zeros,
    with its offset: equal contents give equal digests however the holes lie (a copy may
    store zeros the original stored, or the other way round), and only data is read."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        digest.update(size.to_bytes(8, "big"))
        done = 0  # chunks below this offset are hashed
        for start, end in data_ranges(fd, size):
            offset = max(start - start % _CHUNK, done)
            while offset < end:
                chunk = os.pread(fd, _CHUNK, offset)
                if chunk != _ZEROS[:len(chunk)]:
                    digest.update(offset.to_bytes(8, "big"))
                    digest.update(chunk)
                offset += _CHUNK
            done = offset
    finally:
        os.close(fd)
    return digest.hexdigest()


# -- restore -----------------------------------------------------------------------------


def check_disks(backup_dir: Path, disks: list[DiskCopy]) -> str | None:
    """What is wrong with the backup's images (missing, outside it, changed), or None."""
    for disk in disks:
        rel = Path(disk.path)
        if rel.is_absolute() or ".." in rel.parts or rel.parts[0] != WORKSPACES:
            return f"backup lists an image outside its workspaces: {disk.path!r}"
        path = backup_dir / rel
        if path.is_symlink() or not path.is_file():
            return f"backup image {disk.path} is missing"
        if path.stat().st_size != disk.size or sparse_sha256(path) != disk.sha256:
            return f"backup image {disk.path} differs from the manifest"
    return None


def on_nodes(disks: list[DiskCopy], side_files: list[str]
             ) -> tuple[list[DiskCopy], list[DiskCopy], list[str]]:
    """The images of cluster nodes' sessions, and the local images and side files left."""
    remote = [d for d in disks if d.node != "local"]
    gone = {d.path.removesuffix(".img") + ".json" for d in remote}
    return remote, [d for d in disks if d.node == "local"], \
        [f for f in side_files if f not in gone]


def stage_on_nodes(backup_dir: Path, remote: list[DiskCopy], nodes: ToNodes) -> None:
    """Phase 1 on the nodes: each image sent to its node and staged there (with its
    snapshot's description); nothing of theirs is replaced yet."""
    for disk in remote:
        side = disk.path.removesuffix(".img") + ".json"
        meta = json.loads((backup_dir / side).read_text(encoding="utf-8")) \
            if disk.kind == "snapshot" else None
        nodes.stage(disk, backup_dir / disk.path, meta)


def restore_disks(backup_dir: Path, data_dir: Path, disks: list[DiskCopy],
                  side_files: list[str]) -> None:
    """Put the images (sparse) and snapshot descriptions in place under ``data_dir``, with
    each session's mount point, as the server lays them out; the server mounts a session's
    image on its first use."""
    for rel in [d.path for d in disks] + side_files:
        target = data_dir / rel
        for folder in reversed(target.relative_to(data_dir).parents[:-1]):
            path = data_dir / folder
            if not path.is_dir():
                mode = 0o700 if path.name.endswith(SNAPSHOTS_SUFFIX) else DIR_MODE
                os.mkdir(path, mode)
                os.chmod(path, mode)  # whatever the umask
        copy_file_sparse(backup_dir / rel, target)  # made 0600, via a part file
    for disk in disks:
        if disk.kind == "session":
            mount_point = (data_dir / disk.path).with_suffix("")
            if not mount_point.is_dir():
                os.mkdir(mount_point, DIR_MODE)
                os.chmod(mount_point, DIR_MODE)
    for folder in {(data_dir / rel).parent for rel in [d.path for d in disks] + side_files}:
        fsync_dir(folder)


def disk_targets(data_dir: Path) -> list[Path]:
    """What a restore replaces: the session disks."""
    return [data_dir / WORKSPACES]
