"""What a sandbox image is made of, read from ``sandbox_images/<name>/``, and its content hash.

An image directory holds a ``Dockerfile`` (``ARG BASE`` / ``FROM ${BASE}``), ``packages.txt``
(Debian packages, one or more per line, ``#`` comments), optionally ``wheels.txt`` (pinned PyPI
requirements, downloaded on the host and copied into the build context as ``wheels/``) and the
files the Dockerfile copies. Everything here is pure: no engine, no network, so the hash that
decides "rebuild or not" is cheap to compute and easy to test.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from runtime.config import PROJECT_ROOT
from runtime.errors import ConfigError

IMAGES_DIR = PROJECT_ROOT / "sandbox_images"
"""Where the image directories live; every sub-directory with a ``Dockerfile`` is an image."""

SHARED_DIR = "_shared"
"""Beside the images: build steps every Dockerfile uses (install packages, finish)."""

BUILD_RECIPE_VERSION = "1"
"""Bump when the build procedure changes in a way the files do not show (forces rebuilds)."""

DEBIAN_SUITE = "bookworm"

MMDEBSTRAP_OPTIONS: tuple[str, ...] = (
    "--variant=essential",
    # only what is asked for and what it depends on: Recommends pulled gcc, g++, boost-dev,
    # sympy and more into the data sandbox (1.23 GB); less in the image, less to attack
    "--aptopt=APT::Install-Recommends \"false\"",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    # Debian's scipy depends on pythran, a compiler, which brings boost's headers (138 MB):
    # nothing in a sandbox compiles against them
    "--dpkgopt=path-exclude=/usr/include/boost/*",
)
"""Part of the recipe: a change here changes every hash, so images rebuild by themselves."""

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_DEB_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(:[a-z0-9]+)?$")
_WHEEL_REQ = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+(\s+--hash=sha256:[0-9a-f]{64})*$"
)
_SKIPPED_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
ON_DEMAND = "ON_DEMAND"
"""An image directory holding this file (its text says why) is large or rarely needed: a
build of "all images" (set-up, CI) skips it; naming it, or its tests, builds it."""


class ImageSpec(BaseModel):
    """One image directory, parsed and validated."""

    model_config = ConfigDict(frozen=True)

    name: str
    path: Path
    packages: tuple[str, ...]
    wheels: tuple[str, ...]
    on_demand: bool = False  # ON_DEMAND file: built only when named (`navi images build X`)


def _strip_comments(text: str) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in text.splitlines()]


def read_packages(path: Path) -> tuple[str, ...]:
    """Debian package names from ``packages.txt``: validated, de-duplicated, sorted."""
    if not path.is_file():
        return ()
    names: set[str] = set()
    for lineno, line in enumerate(_strip_comments(path.read_text(encoding="utf-8")), 1):
        for word in line.split():
            if not _DEB_PACKAGE.fullmatch(word):
                raise ConfigError(f"{path}:{lineno}: {word!r} is not a Debian package name")
            names.add(word)
    return tuple(sorted(names))


def read_wheels(path: Path) -> tuple[str, ...]:
    """Requirement lines from ``wheels.txt``: each pinned ``name==version`` (hashes optional)."""
    if not path.is_file():
        return ()
    reqs: list[str] = []
    for lineno, line in enumerate(_strip_comments(path.read_text(encoding="utf-8")), 1):
        if not line:
            continue
        if not _WHEEL_REQ.match(line):
            raise ConfigError(
                f"{path}:{lineno}: {line!r} must be a pinned requirement `name==version` "
                "(optionally followed by `--hash=sha256:...`)"
            )
        reqs.append(" ".join(line.split()))
    return tuple(reqs)


def load_spec(path: Path) -> ImageSpec:
    """Parse one image directory; ``ConfigError`` when it is not a valid image directory."""
    name = path.name
    if not _NAME.fullmatch(name):
        raise ConfigError(f"sandbox image directory name {name!r} is not a valid image name")
    if not (path / "Dockerfile").is_file():
        raise ConfigError(f"{path} has no Dockerfile")
    return ImageSpec(
        name=name,
        path=path,
        packages=read_packages(path / "packages.txt"),
        wheels=read_wheels(path / "wheels.txt"),
        on_demand=(path / ON_DEMAND).is_file(),
    )


def discover(root: Path = IMAGES_DIR) -> dict[str, ImageSpec]:
    """Every ``root/<name>/`` with a Dockerfile, by name, in name order."""
    if not root.is_dir():
        raise ConfigError(f"sandbox image directory {root} does not exist")
    specs = [load_spec(d) for d in sorted(root.iterdir()) if (d / "Dockerfile").is_file()]
    return {spec.name: spec for spec in specs}


def _files_below(top: Path, prefix: str) -> list[tuple[str, Path]]:
    files: list[tuple[str, Path]] = []
    for path in top.rglob("*"):
        rel = path.relative_to(top)
        if _SKIPPED_PARTS.intersection(rel.parts) or path.suffix == ".pyc":
            continue
        if path.is_symlink():
            raise ConfigError(f"{path}: symlinks are not allowed in a sandbox image directory")
        if path.is_file():
            files.append((prefix + rel.as_posix(), path))
    return files


def context_files(spec: ImageSpec) -> list[tuple[str, Path]]:
    """The build context as (relative posix path, path), sorted; no symlinks: the image
    directory's files plus the build steps all images share, under ``_shared/``."""
    files = _files_below(spec.path, "")
    shared = spec.path.parent / SHARED_DIR
    if shared.is_dir():
        files += _files_below(shared, f"{SHARED_DIR}/")
    return sorted(files)


def _recipe() -> bytes:
    return "\n".join(
        [f"navi-image-recipe {BUILD_RECIPE_VERSION}", DEBIAN_SUITE, *MMDEBSTRAP_OPTIONS]
    ).encode()


def base_hash(spec: ImageSpec) -> str:
    """Identity of the offline base (rootfs): recipe + package list. Shared by equal images."""
    digest = hashlib.sha256(_recipe())
    digest.update(b"\0packages\0" + "\n".join(spec.packages).encode())
    return digest.hexdigest()


def content_hash(spec: ImageSpec) -> str:
    """SHA-256 over the base (recipe + packages), wheels and every file (name, x-bit, bytes)."""
    digest = hashlib.sha256(base_hash(spec).encode())
    digest.update(b"\0wheels\0" + "\n".join(spec.wheels).encode())
    for rel, path in context_files(spec):
        data = path.read_bytes()
        executable = "x" if path.stat().st_mode & 0o111 else "-"
        digest.update(f"\0file\0{rel}\0{executable}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()
