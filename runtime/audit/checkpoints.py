"""When ``AuditLog`` signs a checkpoint, and the copy of the latest one outside the database.

A checkpoint (``runtime.audit.signing``) pins the head every ``every`` records, every
``interval_s`` seconds and at close. The latest is also written to ``audit.checkpoint.json``
(atomically: temp file, fsync, rename, fsync of the folder), so a database cut back to an
earlier state still meets a signature it cannot reach.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from runtime.audit.layout import CHECKPOINT_NAME
from runtime.audit.mirror import fsync_dir
from runtime.audit.records import canonical_json
from runtime.audit.signing import Checkpoint

__all__ = ["CheckpointSchedule", "write_checkpoint_file"]


class CheckpointSchedule:
    """Whether the next checkpoint is due: by count of records or by time since the last."""

    def __init__(self, every: int, interval_s: float) -> None:
        self.every = every
        self.interval_s = interval_s
        self.last_seq = 0
        self.last_time = time.monotonic()

    def due(self, seq: int) -> bool:
        return (seq - self.last_seq >= self.every
                or time.monotonic() - self.last_time >= self.interval_s)

    def done(self, seq: int) -> None:
        self.last_seq, self.last_time = seq, time.monotonic()


def write_checkpoint_file(data_dir: Path, cp: Checkpoint) -> None:
    """Replace ``audit.checkpoint.json`` with ``cp``, durably (blocking)."""
    path = data_dir / CHECKPOINT_NAME
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(canonical_json(cp.model_dump()) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(data_dir)
