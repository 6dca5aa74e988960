"""What crosses the hop to a node agent: requests as JSON, validated by pydantic on the node.

Why: a node shares no file system with its control plane. A request names the session and
what to mount, never a path of either machine: `SESSION_WORKSPACE` and `SESSION_TMP` are
names (`RemoteNode.verify`/`tmp_path` return them), which the agent resolves to its own
directories; a user tool's code is named by its SHA-256 (`ObjectMount`) and kept in the
node's own tool-object directory (`runtime.cluster.agent.objects`). The agent trusts no
pickle: each method takes the JSON of one of these models (`parsed`: `InvalidInput`
otherwise), so a request naming any other path (`/etc`, another session's directory) is
refused before anything is mounted. Results name paths relative to the session
(`ExecResult.artifacts`: `artifacts/<exec_id>.stdout`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from runtime.errors import InvalidInput
from runtime.sandbox.models import SAFE_ID_PATTERN, ExecRequest
from runtime.store.ids import check_session_id, check_tenant_id
from runtime.workspace.disk import TenantBytes
from runtime.workspace.search import SearchLimits

SESSION_WORKSPACE = Path("/navi-session/workspace")  # a name: the node resolves it
SESSION_TMP = Path("/navi-session/tmp")
SHA256 = r"^[0-9a-f]{64}$"
MAX_OBJECT_BYTES = 1024 * 1024  # a user tool is <= 64 KiB; room to spare, no more
MAX_BYTES = 2**62  # a byte count no machine reaches
CHUNK = 1024 * 1024  # the most bytes an upload sends a message (each one a Ray task there)
M = TypeVar("M", bound=BaseModel)
FILE_OPTIONS = frozenset({"overwrite", "glob", "ignore_case", "max_results", "limits", "depth",
                          "max_entries"})


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64",
                              val_json_bytes="base64")


class Where(_Wire):
    """One session's files on the node: its workspace or its /tmp."""

    tenant: str = Field(max_length=128)
    session: str = Field(max_length=128)
    root: Literal["workspace", "tmp"] = "workspace"

    @model_validator(mode="after")
    def _ids(self) -> Where:
        check_tenant_id(self.tenant)
        check_session_id(self.session)
        return self


class HeldBytes(_Wire):
    """A tenant's bytes on a machine as its disk quota counts them
    (`runtime.workspace.disk.TenantBytes`): the answer of `tenant_bytes`, and in a
    `CreateDisk` what it holds on the cluster's other machines."""

    in_use: int = Field(0, ge=0, le=MAX_BYTES)
    at_rest: int = Field(0, ge=0, le=MAX_BYTES)

    @classmethod
    def of(cls, held: TenantBytes) -> HeldBytes:
        return cls(in_use=held.in_use, at_rest=held.at_rest)

    def bytes(self) -> TenantBytes:
        return TenantBytes(self.in_use, self.at_rest)


class TenantOf(_Wire):
    """A tenant by id (what it holds on the node)."""

    tenant: str = Field(max_length=128)

    @model_validator(mode="after")
    def _id(self) -> TenantOf:
        check_tenant_id(self.tenant)
        return self


class CreateDisk(Where):
    uid: int | None = Field(None, ge=1, le=2**31 - 1)
    disk_bytes: int | None = Field(None, ge=1)
    tenant_disk_bytes: int | None = Field(None, ge=1)
    elsewhere: HeldBytes = HeldBytes()  # counted in the tenant's quota beside the node's


class FileOp(Where):
    """One file operation on a freshly opened workspace (the searches included)."""

    op: Literal["stat", "list", "usage_bytes", "mkdir", "delete", "move", "grep", "glob",
                "tree"]
    args: list[str] = Field(default_factory=list, max_length=2)
    kwargs: dict[str, bool | int | str | SearchLimits | None] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_options(self) -> FileOp:
        unknown = set(self.kwargs) - FILE_OPTIONS
        if unknown:
            raise ValueError(f"no file operation option {sorted(unknown)[0]!r}")
        return self


class ReadOp(Where):
    path: str = Field(max_length=4096)
    max_bytes: int | None = Field(None, ge=0)


class WriteOpen(Where):
    path: str = Field(max_length=4096)
    expected_size: int | None = Field(None, ge=0)
    max_bytes: int | None = Field(None, ge=0)


class ObjectMount(_Wire):
    """A file the call mounts read-only at `target`, named by its content's SHA-256; its
    bytes come along (`data`) only when the node may not have it yet."""

    sha256: str = Field(pattern=SHA256)
    target: str = Field(max_length=4096)
    data: bytes | None = Field(None, max_length=MAX_OBJECT_BYTES)


class RunOnNode(_Wire):
    """One call. `request` names no path of either machine: its workspace and tmp are the
    session's names or None, its `mounts` empty (files travel as `objects`)."""

    request: ExecRequest
    stdin: bytes = b""  # the request's stdin (base64 here: JSON has no bytes)
    objects: list[ObjectMount] = Field(default_factory=list, max_length=16)
    gated: bool = False

    @classmethod
    def of(cls, request: ExecRequest, objects: list[ObjectMount], gated: bool) -> RunOnNode:
        return cls(request=request.model_copy(update={"mounts": [], "stdin": b""}),
                   stdin=request.stdin, objects=objects, gated=gated)

    def call(self) -> ExecRequest:
        """The request as the node runs it (its paths still names: the agent resolves)."""
        return self.request.model_copy(update={"stdin": self.stdin})

    @model_validator(mode="after")
    def _names_only(self) -> RunOnNode:
        request = self.request
        if request.workspace not in (None, SESSION_WORKSPACE):
            raise ValueError("a call may mount only its own session's files (workspace)")
        if request.tmp not in (None, SESSION_TMP):
            raise ValueError("a call may mount only its own session's files (tmp)")
        if request.stdin:
            raise ValueError("the call's stdin travels beside its request")
        if request.mounts:
            raise ValueError("a call names the files it mounts by content hash, not by path")
        return self


class SessionRef(_Wire):
    """A session by id (its state, its containers)."""

    tenant: str | None = Field(None, max_length=128)
    session: str = Field(pattern=SAFE_ID_PATTERN)


def parsed(model: type[M], payload: object) -> M:
    """The request, validated; anything else (not JSON bytes, other fields, a path) is
    `InvalidInput` naming what is wrong (never the payload)."""
    if not isinstance(payload, bytes | bytearray | str):
        raise InvalidInput(f"a node request is JSON, not {type(payload).__name__}")
    try:
        return model.model_validate_json(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise InvalidInput(f"refused node request: {where}: {first.get('msg', 'invalid')}"
                           ) from None
