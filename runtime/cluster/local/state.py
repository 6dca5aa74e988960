"""The local cluster's state file: what `up` made, so `status` and `down` find all of it.

Written once `up` has made something and rewritten as it goes, so a half-failed `up` (or a
crash) still leaves a record that `down` can clean up from.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

STATE_FILE = "state.json"


class NodeRecord(BaseModel):
    id: str
    netns: str
    veth_host: str
    host_ip: str
    node_ip: str
    run_dir: str
    data_root: str
    socket: str


class ClusterState(BaseModel):
    dir: str
    created_dir: bool
    slot: int
    head_ip: str
    port: int
    token_file: str
    ray_temp: str
    run_root: str
    nodes: list[NodeRecord] = []
    up: bool = False

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{self.port}"


def state_path(directory: Path) -> Path:
    return directory / STATE_FILE


def load(directory: Path) -> ClusterState | None:
    path = state_path(directory)
    if not path.is_file():
        return None
    return ClusterState.model_validate_json(path.read_text())


def save(state: ClusterState) -> None:
    path = state_path(Path(state.dir))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(state.model_dump_json(indent=2))
    os.replace(tmp, path)
