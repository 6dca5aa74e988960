"""Session disks of cluster nodes in a backup: streamed from their agents, as bytes.

Why: on a cluster a session's image and snapshots are on its node's disk, which the
machine running ``navi backup`` does not see. With NAVI_CLUSTER set, the backup joins the
cluster with the data dir's token (``keys/cluster-token``, as ``navi serve`` does) and asks
each session's node agent for its disk by ids (``runtime.cluster.agent.snapshots``): the agent
makes the same consistent sparse copy as a local backup (frozen while mounted) on its own
disk and streams only its data ranges here, written sparse into the backup at the path a
local session's image has (``workspaces/<tenant>/<session>.img``, snapshots beside it).
Nothing the agent sends names a path here: each image's place is computed from the
session's ids; a snapshot's id and description are checked before they are written.

``navi restore`` with NAVI_CLUSTER set sends them back in two phases
(``runtime.backup_restore``): ``stage`` sends each image's data ranges to the agent of the
node the manifest names, which checks it against the manifest's digest and keeps it aside
under this restore's id; ``commit`` then has each node that staged put its images in place
(the session held offline, ``runtime.cluster.agent.restore``), one node after the other,
and ``discard`` has them all drop what they staged.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from runtime.backup_disks import DiskCopy
from runtime.errors import NaviError, NodeUnavailable, SandboxError
from runtime.workspace.image_copy import image_of, snapshots_dir

SNAPSHOT_IMAGE = re.compile(r"sn_[0-9a-f]{16}\.img")
Copied = tuple[Literal["session", "snapshot"], Path, int, dict[str, Any] | None]


class NodeDisks:
    """The cluster's agents, joined for one backup (``close`` leaves the cluster)."""

    def __init__(self, address: str, token: Path) -> None:
        from runtime.cluster import link

        link.connect(address, token)
        self._hops: dict[str, Any] = {}
        self.restore_id = secrets.token_hex(8)  # what this run stages on the nodes
        self._staged_on: list[str] = []  # nodes sent an image, in order

    def _hop(self, node_id: str) -> Any:
        if node_id not in self._hops:
            import ray

            from runtime.cluster.agent.actor import actor_name
            from runtime.cluster.control.hop import Hop
            from runtime.cluster.link import NAMESPACE

            try:
                actor = ray.get_actor(actor_name(node_id), namespace=NAMESPACE)
            except ValueError:  # no such actor: the node (or its agent) is not up
                raise NodeUnavailable(node_id, f"node {node_id} has no agent") from None
            self._hops[node_id] = Hop(node_id, actor, None)
        return self._hops[node_id]

    def fetch(self, node_id: str, tenant: str, session: str, session_dir: Path, *,
              snapshots: bool) -> list[Copied] | None:
        """Write the session's images under ``session_dir``'s place in the backup; what was
        written, or None when its node holds no image of it. ``NodeUnavailable``: its node
        is down; a malformed stream is ``SandboxError`` (the backup fails)."""
        from runtime.cluster.control.snapshots import disk_stream

        try:
            items = disk_stream(self._hop(node_id), tenant, session, snapshots=snapshots)
            return write_images(items, session_dir)
        except ValueError as exc:
            raise SandboxError(f"node {node_id} sent a malformed disk stream: {exc}"
                               ) from None

    def stage(self, disk: DiskCopy, path: Path, meta: dict[str, Any] | None) -> None:
        """`navi restore`'s phase 1: the backup's image at ``path`` sent to its session's
        node and staged there. A node that is down or refuses it raises, naming it."""
        from runtime.cluster.control.snapshots import stage_image
        from runtime.nodes.snapshot_wire import RestoreImage

        snap = meta or {}
        want = RestoreImage(restore=self.restore_id, sha256=disk.sha256, tenant=disk.tenant,
                            session=disk.session, kind=disk.kind, size=path.stat().st_size,
                            snapshot=path.name.removesuffix(".img") if disk.kind == "snapshot"
                            else None, name=snap.get("name"),
                            created_at=float(snap.get("created_at", 0.0)),
                            bytes=int(snap.get("bytes", 0)))
        if disk.node not in self._staged_on:
            self._staged_on.append(disk.node)
        try:
            stage_image(self._hop(disk.node), want, path)
        except NodeUnavailable:  # its message names the node
            raise
        except NaviError as exc:
            raise NaviError(f"node {disk.node} refused {disk.path}: {exc.message}") from None

    def commit(self) -> None:
        """Phase 2: each node that staged puts its images in place, in turn. On the first
        that fails the rest drop theirs: `RestoreIncomplete` says which did what."""
        from runtime.backup_restore import RestoreIncomplete
        from runtime.cluster.control.snapshots import finish_restore

        for n, node in enumerate(self._staged_on):
            try:
                finish_restore(self._hop(node), self.restore_id, commit=True)
            except NaviError as exc:
                rest = self._staged_on[n + 1:]
                self._discard(rest)
                done = ", ".join(self._staged_on[:n]) or "none"
                raise RestoreIncomplete(
                    f"node {node} failed to put its staged images in place ({exc.message}); "
                    f"nodes that did: {done}; nodes that dropped theirs: "
                    f"{', '.join(rest) or 'none'}; the data dir is unchanged. Run the same "
                    "restore again to put every node and the data dir in the backup's state"
                ) from None

    def discard(self) -> None:
        """Every node that was sent an image drops what it staged (a node that is down
        has nothing staged: its agent keeps staged images only while it runs)."""
        self._discard(self._staged_on)

    def _discard(self, nodes: list[str]) -> None:
        from runtime.cluster.control.snapshots import finish_restore

        for node in nodes:
            with contextlib.suppress(NaviError):
                finish_restore(self._hop(node), self.restore_id, commit=False)

    def close(self) -> None:
        from runtime.cluster import link

        link.disconnect()


def write_images(items: Iterator[tuple[str, Any]], session_dir: Path) -> list[Copied] | None:
    """The agent's stream written sparse: each image at the place its kind and checked name
    give it below ``session_dir``'s parent (never a path the stream names)."""
    out: list[Copied] = []
    fd: int | None = None
    try:
        for kind, value in items:
            if kind == "none":
                return None
            if kind == "image":
                if fd is not None:
                    os.close(fd)
                    fd = None
                path = _place(session_dir, value)
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                size = int(value["size"])
                os.ftruncate(fd, size)
                meta = value.get("meta") if value["kind"] == "snapshot" else None
                out.append((value["kind"], path, size, meta))
            elif kind == "data" and fd is not None:
                offset, chunk = value
                if not (isinstance(offset, int) and isinstance(chunk, bytes)) or \
                        offset < 0 or offset + len(chunk) > out[-1][2]:
                    raise ValueError("a node sent data outside its image")
                os.pwrite(fd, chunk, offset)
            else:
                raise ValueError(f"a node sent {kind!r} out of order")
        if fd is not None:
            os.fsync(fd)
    finally:
        if fd is not None:
            os.close(fd)
    return out


def _place(session_dir: Path, header: dict[str, Any]) -> Path:
    if header.get("kind") == "session":
        return image_of(session_dir)
    name = str(header.get("name", "")).rpartition("/")[2]
    meta = header.get("meta")
    if header.get("kind") != "snapshot" or not SNAPSHOT_IMAGE.fullmatch(name) or \
            not isinstance(meta, dict) or f"{meta.get('id')}.img" != name:
        raise ValueError("a node sent an image that is no session disk or snapshot")
    return snapshots_dir(session_dir) / name
