"""A node's snapshots and disk backups, seen from the control plane: over the hop, by ids.

`RemoteSnapshots` offers the methods of `runtime.workspace.snapshot_store.SnapshotStore`
(what `runtime.sessions.snapshots` calls for a session of this machine), each one actor
call whose request is the JSON of `runtime.nodes.snapshot_wire.SnapshotOp`: the session and
the snapshot named, the node resolving them (`runtime.cluster.agent.snapshots`). A snapshot
copy can take seconds on a loaded node: the hop waits `SNAPSHOT_TIMEOUT_S`.
`disk_stream` reads a session's disk images from its agent for `navi backup`; for `navi
restore`, `stage_image` sends one back to be staged there and `finish_restore` puts all a
restore staged in place, or drops them (`runtime.cluster.agent.restore`).
Blocking: call from a worker thread.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray

from runtime.backup_disks import data_ranges
from runtime.cluster.control.hop import Hop, wire
from runtime.nodes.snapshot_wire import DiskBackup, RestoreFinish, RestoreImage, SnapshotOp
from runtime.nodes.wire import CHUNK
from runtime.workspace.snapshots import Snapshot

STREAM_AHEAD = 8  # backup chunks (1 MiB each) the agent may run ahead of the writer


class RemoteSnapshots:
    """`SnapshotsOfNode` of one node agent."""

    def __init__(self, hop: Hop) -> None:
        self._hop = hop

    def _op(self, op: str, tenant_id: str, session_id: str, **fields: Any) -> Any:
        return self._hop.call("snapshots", wire(SnapshotOp(
            tenant=tenant_id, session=session_id, op=op, **fields)))

    def list(self, tenant_id: str, session_id: str) -> list[Snapshot]:
        return list(self._op("list", tenant_id, session_id))

    def get(self, tenant_id: str, session_id: str, snapshot_id: str) -> Snapshot:
        found: Snapshot = self._op("get", tenant_id, session_id, snapshot=snapshot_id)
        return found

    def create(self, tenant_id: str, session_id: str, name: str | None, *, limit: int,
               snapshot_id: str) -> Snapshot:
        made: Snapshot = self._op("create", tenant_id, session_id, name=name, limit=limit,
                                  snapshot=snapshot_id)
        return made

    def delete(self, tenant_id: str, session_id: str, snapshot_id: str) -> None:
        self._op("delete", tenant_id, session_id, snapshot=snapshot_id)

    def busy(self, tenant_id: str, session_id: str) -> bool:
        return bool(self._op("busy", tenant_id, session_id))

    def restore(self, tenant_id: str, session_id: str, snapshot_id: str, *,
                limit: int) -> None:
        self._op("restore", tenant_id, session_id, snapshot=snapshot_id, limit=limit)

    def copy_into(self, tenant_id: str, source_id: str, snapshot_id: str | None,
                  target_id: str) -> None:
        self._op("fork", tenant_id, source_id, snapshot=snapshot_id, target=target_id)


def disk_stream(hop: Hop, tenant_id: str, session_id: str, *, snapshots: bool = True
                ) -> Iterator[tuple[str, Any]]:
    """The agent's `NodeSnapshots.stream` items, in order (an agent's error raised)."""
    stream: Any = hop.actor.backup_disk.options(
        num_returns="streaming", _generator_backpressure_num_objects=STREAM_AHEAD,
    ).remote(wire(DiskBackup(tenant=tenant_id, session=session_id, snapshots=snapshots)))
    done = False
    try:
        for ref in stream:
            yield hop.get(ref)  # a `Failed` raised as the error it was
        done = True
    finally:
        if not done:
            with contextlib.suppress(Exception):
                ray.cancel(stream)


def stage_image(hop: Hop, want: RestoreImage, path: Path) -> None:
    """Send a backup's image (its data ranges, `STREAM_AHEAD` chunks in flight) to the
    node's `restore_*` methods: staged there once its digest checks, dropped on any error;
    nothing is replaced until `finish_restore`."""
    handle = hop.call("restore_open", wire(want))
    flying: deque[Any] = deque()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            for start, end in data_ranges(fd, want.size):
                for offset in range(start, end, CHUNK):
                    data = os.pread(fd, min(CHUNK, end - offset), offset)
                    flying.append(hop.actor.restore_write.remote(handle, offset, data))
                    while len(flying) > STREAM_AHEAD:
                        hop.get(flying.popleft())
        finally:
            os.close(fd)
        while flying:
            hop.get(flying.popleft())
    except BaseException:
        with contextlib.suppress(Exception):
            hop.call("restore_end", handle, False)
        raise
    hop.call("restore_end", handle, True)


def finish_restore(hop: Hop, restore_id: str, *, commit: bool) -> int:
    """The node's images staged under ``restore_id`` put in place (or dropped); how many."""
    return int(hop.call("restore_finish", wire(RestoreFinish(restore=restore_id,
                                                             commit=commit))))
