"""Snapshot, fork and backup requests to a node agent: JSON, validated by pydantic there.

As for files and calls (`runtime.nodes.wire`), a request names the session and the snapshot
by id, never a path: the agent resolves them under its own data dir. A snapshot id that is
not ``sn_`` and 16 hex digits is refused before anything is opened; a fork's target is
another session of the same tenant on the same node (made there before the copy).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, model_validator

from runtime.nodes.wire import SHA256, Where, _Wire
from runtime.store.ids import check_session_id

SNAPSHOT = r"^sn_[0-9a-f]{16}$"
RESTORE_ID = r"^[0-9a-f]{16}$"  # one `navi restore` run: what it staged on a node


class SnapshotOp(Where):
    """One snapshot operation on one session of the node."""

    op: Literal["list", "get", "create", "delete", "busy", "restore", "fork"]
    snapshot: str | None = Field(None, pattern=SNAPSHOT)
    name: str | None = Field(None, max_length=200)
    limit: int | None = Field(None, ge=0)  # the tenant's disk quota, bytes (create, restore)
    target: str | None = Field(None, max_length=128)  # fork: the new session

    @model_validator(mode="after")
    def _complete(self) -> SnapshotOp:
        if self.op in ("get", "delete", "restore", "create") and self.snapshot is None:
            raise ValueError(f"{self.op} names a snapshot")
        if self.op in ("create", "restore") and self.limit is None:
            raise ValueError(f"{self.op} carries the tenant's disk limit")
        if self.op == "fork":
            if self.target is None or self.target == self.session:
                raise ValueError("a fork names its new session")
            check_session_id(self.target)
        return self


class DiskBackup(Where):
    """Stream a session's disk image (and its snapshots) for `navi backup`."""

    snapshots: bool = True


class RestoreImage(Where):
    """`navi restore`: one image of a backup sent to the node holding the session (its
    disk, or one of its snapshots with its description); the bytes follow by handle. The
    node stages it under ``restore`` once its contents match ``sha256`` (the manifest's
    ``sparse_sha256``); nothing is replaced before `RestoreFinish` commits the restore."""

    restore: str = Field(pattern=RESTORE_ID)
    sha256: str = Field(pattern=SHA256)
    kind: Literal["session", "snapshot"]
    size: int = Field(ge=0, le=1 << 44)
    snapshot: str | None = Field(None, pattern=SNAPSHOT)
    name: str | None = Field(None, max_length=200)
    created_at: float = 0.0
    bytes: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _named(self) -> RestoreImage:
        if (self.kind == "snapshot") != (self.snapshot is not None):
            raise ValueError("a snapshot's image names its snapshot, a disk's none")
        return self


class RestoreFinish(_Wire):
    """`navi restore`'s second phase on one node: put every image it staged under
    ``restore`` in place (``commit``), or drop them all."""

    restore: str = Field(pattern=RESTORE_ID)
    commit: StrictBool
