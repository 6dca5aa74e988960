"""The files of a call made outside a server (`navi exec`): one directory, or none.

The server keeps each session's files under `Workspaces` (its own layout, disks, owners);
`navi exec --workspace DIR` names the directory itself. `WorkspaceDir` gives
`SessionToolCall` that directory for every session it is asked about (the CLI has one), or
no files at all without `--workspace` (the sandbox then gets no workspace mount).
"""

from __future__ import annotations

from pathlib import Path

from runtime.workspace import Workspace
from runtime.workspace.tmpdir import Root


class WorkspaceDir:
    """`SessionFiles` for one host directory (`None`: no files)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def verify(self, tenant_id: str, session_id: str) -> Path | None:
        return self.path

    def open(self, tenant_id: str, session_id: str, *, root: Root = "workspace"
             ) -> Workspace | None:
        if self.path is None or root != "workspace":
            return None  # no persistent /tmp here
        return Workspace.at(self.path)

    def tmp_path(self, tenant_id: str, session_id: str) -> Path | None:
        return None  # `navi exec`: a fresh tmpfs at /tmp for each call
