"""`navi backup` / `navi restore`: a consistent copy of a data dir's state, taken while it runs.

What a backup holds, laid out as a data dir (so ``navi audit verify --data-dir BACKUP``
works on it as it stands), plus ``backup.json``, the manifest (sizes, SHA-256, what the copy
holds):

- the databases: ``navi.sqlite3`` (tenants, tokens, sessions), ``memory.sqlite3`` and
  ``notes.sqlite3``, each with SQLite's online backup API (one read snapshot; the running
  server's writers are not stopped), never a file copy: a plain copy of a WAL database
  during writes misses what is still in ``-wal`` or catches pages of different commits;
- tenants' agent-written tools (``tools/``, small files each written by rename);
- the audit log, coordinated with its writers (``runtime.audit.backup`` says how and why);
- the session disks (``workspaces/<tenant>/<session>.img``, files, ``/tmp`` and output
  artifacts) and their snapshots, each a consistent sparse copy made while it may be in use
  (``runtime.backup_disks`` says how);
- the secrets: ``keys/`` (the checkpoint signing key) and ``admin-token``, 0600 in a 0700
  directory, as the backup directory itself.

Order: the databases first, then the session disks, the audit log last, so every change the
copied store holds and every file change on a copied disk was made before the audit
snapshot, and its record (written ahead) is in the copy.

Not in it: ``instance_id`` (a restored server keeps the target's or makes its own, so two
servers never claim the same containers); ``audit.instances/`` (lock files); logs; the
embedded model; the disks of sessions on cluster nodes unless the backup joined the cluster
(NAVI_CLUSTER set: ``runtime.backup_nodes`` streams them from the node agents).

``navi restore`` puts a backup back: ``runtime.backup_restore``.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import sqlite3
import stat
import time
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from runtime.audit.backup import (
    AuditCopy,
    backup_audit,
    sqlite_backup,
    write_new_file,
)
from runtime.audit.layout import CHECKPOINT_NAME, DB_NAME, MIRROR_NAME
from runtime.audit.mirror import fsync_dir
from runtime.audit.verify import verify_store
from runtime.backup_disks import (
    DiskReport,
    FromNodes,
    backup_disks,
    session_rows,
)
from runtime.errors import Conflict, InvalidInput

MANIFEST = "backup.json"
STORE_DB = "navi.sqlite3"
DATABASES = (STORE_DB, "memory.sqlite3", "notes.sqlite3")
TOOLS_DIR = "tools"
KEYS_DIR = "keys"
SECRET_FILES = ("admin-token",)
_SIDECARS = ("-wal", "-shm", "-journal")
Method = Literal["sqlite-backup", "audit-db", "mirror-cut", "checkpoint", "copy", "secret"]


class BackupFile(BaseModel):
    path: str  # relative, '/'-separated
    bytes: int
    sha256: str
    mode: int
    method: Method


class Verified(BaseModel):
    ok: bool
    records: int
    first_bad_seq: int | None = None
    reason: str | None = None


class BackupManifest(BaseModel):
    format: Literal["navi-backup-1"] = "navi-backup-1"
    created_at: str
    source: str
    seconds: float  # in all
    verify_seconds: float  # of which: `verify_store` on the copy
    files: list[BackupFile]
    audit: AuditCopy | None
    store: dict[str, int]
    verified: Verified
    disks: DiskReport = DiskReport()  # none in backups made before disks were included

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)


# -- backup ------------------------------------------------------------------------------


def backup_data_dir(data_dir: Path, dest: Path, *, snapshots: bool = True,
                    nodes: FromNodes | None = None) -> BackupManifest:
    """Copy ``data_dir``'s state into the new (or empty) directory ``dest``; see the module doc.

    The copy is made in a hidden sibling directory and renamed to ``dest`` when complete, so
    ``dest`` never holds half a backup.
    """
    started = time.monotonic()
    data_dir, dest = data_dir.absolute(), dest.absolute()
    if not any((data_dir / name).is_file() for name in (STORE_DB, DB_NAME)):
        raise InvalidInput(f"no store or audit log in {data_dir}")
    if dest == data_dir:
        raise InvalidInput("the backup directory must not be the data dir")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise Conflict(f"{dest} exists and is not an empty directory")
    dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    work = dest.parent / f".{dest.name}.partial-{secrets.token_hex(4)}"
    os.mkdir(work, 0o700)
    os.chmod(work, 0o700)  # whatever the umask
    try:
        files: list[BackupFile] = []
        for name in DATABASES:
            if (data_dir / name).is_file():
                sqlite_backup(data_dir / name, work / name)
                files.append(_entry(work, name, "sqlite-backup"))
        files += _copy_tree(data_dir / TOOLS_DIR, work / TOOLS_DIR, work)
        disks = backup_disks(data_dir, work, session_rows(work / STORE_DB),
                             snapshots=snapshots, nodes=nodes)
        files += [_entry(work, rel, "copy") for rel in disks.side_files]
        audit = None
        if (data_dir / DB_NAME).is_file():
            audit = backup_audit(data_dir, work)
            files.append(_entry(work, DB_NAME, "audit-db"))
            files.append(_entry(work, MIRROR_NAME, "mirror-cut"))
            if (work / CHECKPOINT_NAME).exists():
                files.append(_entry(work, CHECKPOINT_NAME, "checkpoint"))
        files += _copy_secrets(data_dir, work)
        verify_started = time.monotonic()
        report = verify_store(work) if audit is not None else None
        manifest = BackupManifest(
            created_at=datetime.now(UTC).isoformat(timespec="seconds"), source=str(data_dir),
            seconds=round(time.monotonic() - started, 3),
            verify_seconds=round(time.monotonic() - verify_started, 3), files=files, audit=audit,
            store=_store_summary(work / STORE_DB), disks=disks,
            verified=Verified(ok=report.ok, records=report.records,
                              first_bad_seq=report.first_bad_seq, reason=report.reason)
            if report is not None else Verified(ok=True, records=0),
        )
        write_new_file(work / MANIFEST, manifest.model_dump_json(indent=1).encode() + b"\n")
        fsync_dir(work)
        if dest.exists():
            dest.rmdir()
        os.rename(work, dest)
        fsync_dir(dest.parent)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return manifest


def _entry(root: Path, rel: str, method: Method) -> BackupFile:
    path = root / rel
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    st = path.stat()
    return BackupFile(path=rel, bytes=st.st_size, sha256=digest.hexdigest(),
                      mode=stat.S_IMODE(st.st_mode), method=method)


def _copy_file(src: Path, dst: Path, mode: int) -> None:
    """Copy a regular file (never through a symlink) to the new file ``dst``, fsync'd."""
    fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd_in, "rb") as fin:
        if not stat.S_ISREG(os.fstat(fin.fileno()).st_mode):
            raise InvalidInput(f"{src} is not a regular file")
        fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        with os.fdopen(fd_out, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
            fout.flush()
            os.fchmod(fout.fileno(), mode)
            os.fsync(fout.fileno())


def _copy_tree(src: Path, dst: Path, root: Path) -> list[BackupFile]:
    """Regular files and directories below ``src`` (symlinks and special files skipped)."""
    if src.is_symlink() or not src.is_dir():
        return []
    files = []
    os.mkdir(dst, 0o700)
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        if entry.is_dir(follow_symlinks=False):
            files += _copy_tree(Path(entry.path), dst / entry.name, root)
        elif entry.is_file(follow_symlinks=False) and not (
                entry.name.startswith(".") and ".tmp-" in entry.name):  # a write in flight
            mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode) & 0o755
            _copy_file(Path(entry.path), dst / entry.name, mode)
            files.append(_entry(root, (dst / entry.name).relative_to(root).as_posix(), "copy"))
    fsync_dir(dst)
    return files


def _copy_secrets(data_dir: Path, work: Path) -> list[BackupFile]:
    files = []
    keys = data_dir / KEYS_DIR
    if keys.is_dir() and not keys.is_symlink():
        os.mkdir(work / KEYS_DIR, 0o700)
        os.chmod(work / KEYS_DIR, 0o700)
        for entry in sorted(os.scandir(keys), key=lambda e: e.name):
            if entry.is_file(follow_symlinks=False):
                _copy_file(Path(entry.path), work / KEYS_DIR / entry.name, 0o600)
                files.append(_entry(work, f"{KEYS_DIR}/{entry.name}", "secret"))
        fsync_dir(work / KEYS_DIR)
    for name in SECRET_FILES:
        if (data_dir / name).is_file() and not (data_dir / name).is_symlink():
            _copy_file(data_dir / name, work / name, 0o600)
            files.append(_entry(work, name, "secret"))
    return files


def _store_summary(path: Path) -> dict[str, int]:
    if not path.is_file():
        return {}
    summary = {}
    with closing(sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)) as conn:
        for table in ("tenants", "tokens", "sessions"):
            try:
                summary[table] = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            except sqlite3.Error:
                continue
    return summary
