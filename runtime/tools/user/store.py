"""Where user tools live on the host, and how they are written, listed and removed safely.

Two sources, never mixed up:
- shipped tools: the repository's `tools/` directory, switched by `tools/enabled.json`
  (`{"tool_name": true|false}`; a tool not listed is off). Read-only for tenants.
- tenant tools: `<data_dir>/tools/<tenant_id>/<name>.py`, written only by `write_tool`,
  switched by that directory's own `enabled.json`, with `hashes.json` recording the SHA-256
  of what `write_tool` stored. A file whose content no longer matches its recorded hash (it
  was changed behind the runtime's back) does not load.

Files are only ever *read* here (never imported). Every open is relative to the directory's
fd with `O_NOFOLLOW`, must be a regular file, and is size-capped. Writes go to a temporary
file, are fsynced and renamed into place. Each file loads on its own: a broken file becomes
an entry in `ToolCatalog.errors` and does not hide the others. What a sandbox mounts is a
copy made per admitted call (`runtime.tools.user.objects`), removed once nothing refers to it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runtime.config import PROJECT_ROOT
from runtime.errors import Forbidden, InvalidInput, NotFound
from runtime.policy.model import BUILTIN_TOOLS
from runtime.tools.user.descriptor import (
    MAX_TOOL_BYTES,
    ToolLoadError,
    UserToolDescriptor,
    check_tool_name,
    content_hash,
    parse_descriptor,
)
from runtime.tools.user.objects import DiskAdmit, TenantDisk, ToolObjects, admit_alone, objects_root

DEFAULT_SHIPPED_DIR = PROJECT_ROOT / "tools"
ENABLED_FILE = "enabled.json"
HASHES_FILE = "hashes.json"
MAX_TOOLS_PER_DIR = 200
MAX_INDEX_BYTES = 1024 * 1024
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class LoadedUserTool(BaseModel):
    """A user tool that parsed cleanly: its descriptor and the file it was read from."""

    model_config = ConfigDict(frozen=True)

    descriptor: UserToolDescriptor
    path: Path
    origin: Literal["shipped", "tenant"]
    enabled: bool


class ToolCatalog(BaseModel):
    """One tenant's view of user tools at one moment (what `reload_tools` produces)."""

    tools: dict[str, LoadedUserTool] = Field(default_factory=dict)
    errors: dict[str, str] = Field(default_factory=dict)
    loaded_at: float = Field(default_factory=time.time)

    def enabled(self) -> list[LoadedUserTool]:
        return [t for t in self.tools.values() if t.enabled]


def check_tenant(tenant: str) -> str:
    if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
        raise InvalidInput("invalid tenant id")
    return tenant


def _open_dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)


def _read_at(dir_fd: int, filename: str, cap: int) -> bytes:
    """Read a regular file (no symlink, no fifo) relative to `dir_fd`, at most `cap` bytes."""
    fd = os.open(filename, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ToolLoadError("not a regular file")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(cap + 1)
    if len(data) > cap:
        raise ToolLoadError(f"file is larger than {cap} bytes")
    return data


def _read_json_map(dir_fd: int, filename: str) -> dict[str, Any]:
    try:
        data = _read_at(dir_fd, filename, MAX_INDEX_BYTES)
    except FileNotFoundError:
        return {}
    except (OSError, ToolLoadError):
        return {}
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _write_at(dir_fd: int, filename: str, data: bytes, mode: int = 0o644) -> None:
    """Atomic replace of `filename` inside `dir_fd`: temp file, fsync, rename, fsync dir."""
    tmp = f".{filename}.tmp-{secrets.token_hex(6)}"
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dir_fd
    )
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, filename, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    os.fsync(dir_fd)


class UserToolStore:
    """Reads shipped and per-tenant user tools; writes and deletes tenant tools atomically.

    Methods do blocking file I/O and are meant to be called through `asyncio.to_thread`.
    """

    def __init__(
        self,
        data_dir: Path,
        shipped_dir: Path | None = DEFAULT_SHIPPED_DIR,
        *,
        reserved: frozenset[str] = BUILTIN_TOOLS,
        disk: TenantDisk | None = None,
    ) -> None:
        self.root = Path(data_dir).resolve() / "tools"
        self.shipped_dir = Path(shipped_dir).resolve() if shipped_dir is not None else None
        self.reserved = frozenset(reserved)
        self._lock = threading.Lock()
        self.objects = ToolObjects(objects_root(data_dir))
        self.disk = disk  # keeps the tenant disk quota the copies count in

    # ---- locations -------------------------------------------------------------------

    def tenant_dir(self, tenant: str, *, create: bool = False) -> Path:
        path = self.root / check_tenant(tenant)
        if create:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            path.mkdir(mode=0o700, exist_ok=True)
            if path.is_symlink() or not path.is_dir():
                raise InvalidInput("tenant tool directory is not a directory")
        return path

    # ---- reading ---------------------------------------------------------------------

    def scan(self, tenant: str) -> ToolCatalog:
        """Load every shipped and tenant tool; broken files are reported, never raised."""
        catalog = ToolCatalog()
        if self.shipped_dir is not None:
            self._scan_dir(self.shipped_dir, "shipped", catalog, check_hashes=False)
        tenant_path = self.tenant_dir(tenant)
        if tenant_path.is_dir():
            self._scan_dir(tenant_path, "tenant", catalog, check_hashes=True)
        return catalog

    def _scan_dir(
        self,
        directory: Path,
        origin: Literal["shipped", "tenant"],
        catalog: ToolCatalog,
        *,
        check_hashes: bool,
    ) -> None:
        try:
            dir_fd = _open_dir(directory)
        except OSError:
            return
        try:
            enabled = _read_json_map(dir_fd, ENABLED_FILE)
            hashes = _read_json_map(dir_fd, HASHES_FILE) if check_hashes else {}
            names = sorted(
                n for n in os.listdir(dir_fd) if n.endswith(".py") and not n.startswith(("_", "."))
            )
            for filename in names[:MAX_TOOLS_PER_DIR]:
                stem = filename[:-3]
                key = stem if stem not in catalog.tools else f"{origin}:{stem}"
                try:
                    loaded = self._load_one(
                        dir_fd, directory, filename, origin, enabled, hashes, catalog
                    )
                except ToolLoadError as exc:
                    catalog.errors[key] = exc.message
                except OSError as exc:
                    catalog.errors[key] = f"cannot read file: {exc.strerror or exc}"
                else:
                    catalog.tools[loaded.descriptor.name] = loaded
            for filename in names[MAX_TOOLS_PER_DIR:]:
                catalog.errors[filename[:-3]] = f"more than {MAX_TOOLS_PER_DIR} tools: ignored"
        finally:
            os.close(dir_fd)

    def _load_one(
        self,
        dir_fd: int,
        directory: Path,
        filename: str,
        origin: Literal["shipped", "tenant"],
        enabled: dict[str, Any],
        hashes: dict[str, Any],
        catalog: ToolCatalog,
    ) -> LoadedUserTool:
        stem = filename[:-3]
        source = _read_at(dir_fd, filename, MAX_TOOL_BYTES)
        descriptor = parse_descriptor(source)
        if descriptor.name != stem:
            raise ToolLoadError(
                f"file {filename} declares name {descriptor.name!r}; it must be {stem!r}"
            )
        if descriptor.name in self.reserved:
            raise ToolLoadError(f"{descriptor.name!r} is the name of a built-in tool; "
                                "`navi tools migrate` (or a server start) renames it")
        if descriptor.name in catalog.tools:
            raise ToolLoadError(f"name {descriptor.name!r} is already used by a shipped tool")
        recorded = hashes.get(stem)
        if isinstance(recorded, dict) and recorded.get("sha256") != descriptor.sha256:
            raise ToolLoadError(
                "file content does not match the hash recorded by write_tool "
                "(changed outside the runtime); write it again with write_tool"
            )
        return LoadedUserTool(
            descriptor=descriptor,
            path=directory / filename,
            origin=origin,
            enabled=enabled.get(stem) is True,
        )

    def load(self, tenant: str, name: str) -> LoadedUserTool:
        """Load one tool fresh from disk (tenant's first, then shipped); `ToolLoadError`/
        `NotFound` say why not. Used by `test_tool`, which may run a tool before a reload."""
        check_tool_name(name)
        sources: list[tuple[Path, Literal["shipped", "tenant"], bool]] = [
            (self.tenant_dir(tenant), "tenant", True)
        ]
        if self.shipped_dir is not None:
            sources.append((self.shipped_dir, "shipped", False))
        for directory, origin, check_hashes in sources:
            try:
                dir_fd = _open_dir(directory)
            except OSError:
                continue
            try:
                enabled = _read_json_map(dir_fd, ENABLED_FILE)
                hashes = _read_json_map(dir_fd, HASHES_FILE) if check_hashes else {}
                try:
                    return self._load_one(
                        dir_fd, directory, f"{name}.py", origin, enabled, hashes, ToolCatalog()
                    )
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise ToolLoadError(f"cannot read file: {exc.strerror or exc}") from None
            finally:
                os.close(dir_fd)
        raise NotFound(f"no user tool {name!r}")

    def read_verified(self, tool: LoadedUserTool) -> bytes:
        """The file's bytes, provided they still hash to what was loaded (else `ToolLoadError`)."""
        dir_fd = _open_dir(tool.path.parent)
        try:
            source = _read_at(dir_fd, tool.path.name, MAX_TOOL_BYTES)
        finally:
            os.close(dir_fd)
        if content_hash(source) != tool.descriptor.sha256:
            raise ToolLoadError(
                f"tool {tool.descriptor.name!r} changed since it was loaded; run reload_tools"
            )
        return source

    def acquire(self, tenant: str, source: bytes, admit: DiskAdmit) -> Path:
        """An immutable copy of a tool's verified bytes (``read_verified``), named by their
        SHA-256, in the calling tenant's copies: what a sandbox mounts, so what runs is
        exactly the content the intent's ``tool_hash`` names (the tool's own path may be
        replaced at any moment by ``write_tool``). Called once the call is admitted;
        ``admit`` refuses a copy past the tenant's disk quota. Pair with ``release``."""
        return self.objects.acquire(check_tenant(tenant), source, admit)

    def admit_copy(self, tenant: str, size: int, also: int, *, limit: int
                   ) -> AbstractContextManager[None]:
        """Refuse (``DiskQuotaExceeded``) a copy past the tenant's ``limit`` bytes."""
        admit = self.disk.admitting if self.disk is not None else admit_alone
        return admit(tenant, size, also, limit)

    def release(self, tenant: str, copy: Path) -> None:
        self.objects.release(check_tenant(tenant), copy)

    def current_hashes(self, tenant: str) -> set[str]:
        """The SHA-256s a copy of the tenant's may still be wanted for: the versions of its
        own and the shipped tools that load now (a replaced or deleted version cannot run:
        ``read_verified`` refuses it)."""
        return {t.descriptor.sha256 for t in self.scan(tenant).tools.values()}

    def collect(self, tenant: str) -> int:
        """Remove the tenant's copies no current version and no running call refers to."""
        return self.objects.collect(check_tenant(tenant), self.current_hashes(tenant))

    def collect_all(self) -> int:
        """`collect` for every tenant with copies (at start-up: nothing is running)."""
        return sum(self.collect(t) for t in self.objects.tenants() if _TENANT.fullmatch(t))

    # ---- writing ---------------------------------------------------------------------

    def write(self, tenant: str, name: str, code: str) -> UserToolDescriptor:
        """Validate and store `<name>.py` for `tenant`, enabled, with its hash recorded."""
        check_tool_name(name)
        raw = code.encode("utf-8")
        descriptor = parse_descriptor(raw)
        if descriptor.name != name:
            raise ToolLoadError(
                f"the code declares name = {descriptor.name!r} but the tool is {name!r}"
            )
        if name in self.reserved:
            raise ToolLoadError(f"{name!r} is the name of a built-in tool; pick another name")
        if self._is_shipped(name):
            raise ToolLoadError(f"{name!r} is the name of a shipped tool; pick another name")
        directory = self.tenant_dir(tenant, create=True)
        with self._lock:
            dir_fd = _open_dir(directory)
            try:
                existing = [n for n in os.listdir(dir_fd) if n.endswith(".py")]
                if f"{name}.py" not in existing and len(existing) >= MAX_TOOLS_PER_DIR:
                    raise InvalidInput(f"at most {MAX_TOOLS_PER_DIR} tools per tenant")
                _write_at(dir_fd, f"{name}.py", raw)
                hashes = _read_json_map(dir_fd, HASHES_FILE)
                hashes[name] = {
                    "sha256": descriptor.sha256,
                    "size": descriptor.size,
                    "written_at": time.time(),
                }
                _write_at(dir_fd, HASHES_FILE, _dump(hashes), 0o600)
                enabled = _read_json_map(dir_fd, ENABLED_FILE)
                enabled[name] = True
                _write_at(dir_fd, ENABLED_FILE, _dump(enabled), 0o600)
            finally:
                os.close(dir_fd)
        self.collect(tenant)  # the version it replaced, unless a call still runs it
        return descriptor

    def delete(self, tenant: str, name: str) -> None:
        check_tool_name(name)
        directory = self.tenant_dir(tenant)
        with self._lock:
            try:
                dir_fd = _open_dir(directory)
            except OSError:
                dir_fd = -1
            try:
                removed = False
                if dir_fd >= 0:
                    try:
                        os.unlink(f"{name}.py", dir_fd=dir_fd)
                        removed = True
                    except FileNotFoundError:
                        pass
                if not removed:
                    if self._is_shipped(name):
                        raise Forbidden(f"{name!r} is a shipped tool and cannot be deleted")
                    raise NotFound(f"no user tool {name!r}")
                for index in (HASHES_FILE, ENABLED_FILE):
                    entries = _read_json_map(dir_fd, index)
                    if entries.pop(name, None) is not None:
                        _write_at(dir_fd, index, _dump(entries), 0o600)
                os.fsync(dir_fd)
            finally:
                if dir_fd >= 0:
                    os.close(dir_fd)
        self.collect(tenant)

    def _is_shipped(self, name: str) -> bool:
        return self.shipped_dir is not None and (self.shipped_dir / f"{name}.py").is_file()


def _dump(value: dict[str, Any]) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")
