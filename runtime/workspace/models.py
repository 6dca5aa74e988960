"""What the workspace module hands out (listings, stats) and the limits it enforces."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MiB = 1024 * 1024
GiB = 1024 * MiB


class FileEntry(BaseModel):
    """One regular file of a listing: the API's ``{path, size, mtime}``."""

    model_config = ConfigDict(frozen=True)

    path: str = Field(description="workspace-relative, '/'-separated")
    size: int = Field(ge=0, description="bytes")
    mtime: float = Field(description="Unix time, seconds")


class FileStat(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    kind: Literal["file", "dir"]
    size: int = Field(ge=0)
    mtime: float


class WorkspaceLimits(BaseModel):
    """Defaults: upload 100 MiB, session disk 1 GiB (docs/sandbox.md, "Default limits")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_file_bytes: int = Field(default=100 * MiB, ge=0,
                                description="largest single write (upload)")
    max_disk_bytes: int = Field(default=1 * GiB, ge=0,
                                description="all regular files of the session")
    max_read_bytes: int = Field(default=100 * MiB, ge=0,
                                description="largest read_bytes() into memory")
    max_list_entries: int = Field(default=10_000, ge=1,
                                  description="list() stops after this many files")
    max_scan_entries: int = Field(default=200_000, ge=1,
                                  description="usage_bytes() gives up (refuses writes) beyond")
