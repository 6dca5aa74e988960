"""Host-side inputs of an offline image build: the Debian rootfs tarball and the Python wheels.

No registry image is ever pulled. ``mmdebstrap`` makes a minimal Debian rootfs with the image's
``packages.txt`` already installed (from the host's Debian apt sources), and ``pip download``
fetches the pinned wheels of ``wheels.txt`` on the host (pure-Python, or built for the image's
CPython and this machine's architecture), so that ``docker build``
can run with ``--network none`` and without apt.
"""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from runtime.errors import ConfigError, ImageBuildError
from runtime.sandbox.docker.image_spec import DEBIAN_SUITE, MMDEBSTRAP_OPTIONS, ImageSpec

IMAGE_PYTHON_VERSION = "3.11"
"""The python3 of Debian bookworm: wheels are chosen for it, not for the host's Python."""

HOST_DEB822_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
HOST_SOURCES_LIST = Path("/etc/apt/sources.list")


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def host_mirrors(
    deb822: Path = HOST_DEB822_SOURCES, one_line: Path = HOST_SOURCES_LIST
) -> list[str]:
    """The host's Debian sources for the image's suite, as mmdebstrap MIRROR arguments.

    Only Debian's own entries for ``bookworm`` are used (third-party repositories need keys
    and are not what the images are made of). None found: mmdebstrap's default mirrors.
    """
    if deb822.is_file() and DEBIAN_SUITE in deb822.read_text(encoding="utf-8", errors="replace"):
        return [str(deb822)]
    if not one_line.is_file():
        return []
    mirrors = []
    for raw in one_line.read_text(encoding="utf-8", errors="replace").splitlines():
        words = raw.split("#", 1)[0].split()
        if len(words) >= 3 and words[0] == "deb" and "debian" in raw:
            suite = next((w for w in words[1:] if not w.startswith("[") and "://" not in w), "")
            if suite.startswith(DEBIAN_SUITE):
                mirrors.append(" ".join(words))
    return mirrors


def mmdebstrap_command(spec: ImageSpec, target: Path, mirrors: list[str]) -> list[str]:
    cmd = ["mmdebstrap", *MMDEBSTRAP_OPTIONS]
    if spec.packages:
        cmd.append("--include=" + ",".join(spec.packages))
    return [*cmd, DEBIAN_SUITE, str(target), *mirrors]


def make_rootfs(spec: ImageSpec, target: Path) -> None:
    """Write the image's Debian rootfs as an uncompressed tarball at ``target``."""
    if shutil.which("mmdebstrap") is None:
        raise ImageBuildError(
            "mmdebstrap is not installed: `apt-get install mmdebstrap` (or run `make test`, "
            "which installs it), or build on a registry base with "
            "`navi images build --base debian:bookworm-slim`"
        )
    log = target.with_suffix(".log")
    with log.open("wb") as out:
        proc = subprocess.run(
            mmdebstrap_command(spec, target, host_mirrors()),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if proc.returncode != 0:
        raise ImageBuildError(
            f"mmdebstrap failed for image {spec.name!r} (exit {proc.returncode}); "
            f"last lines:\n{_tail(log)}",
            image=spec.name,
        )


IMAGE_ABI_TAGS = ("cp311-cp311", "cp311-abi3", "cp37-abi3", "cp38-abi3", "cp39-abi3",
                  "cp310-abi3")
"""Compiled wheels the image's CPython 3.11 loads (its own ABI, or the stable ABI up to 3.11)."""


def _platforms() -> list[str]:
    """pip's `--platform` values for Debian bookworm (glibc 2.36) on this machine's arch."""
    arch = platform.machine()
    return [f"manylinux{tag}_{arch}" for tag in ("2014", "_2_17", "_2_28")]


def _fits_image(path: Path) -> bool:
    """A pure-Python wheel, or one built for the image's CPython on this architecture."""
    name = path.name
    if name.endswith("-none-any.whl"):
        return True
    arch = platform.machine()
    return any(f"-{abi}-" in name for abi in IMAGE_ABI_TAGS) and "manylinux" in name \
        and name.endswith(f"_{arch}.whl")


def download_wheels(spec: ImageSpec, cache_dir: Path) -> list[Path]:
    """The image's wheels, downloaded once per ``wheels.txt`` content into ``cache_dir``."""
    if not spec.wheels:
        return []
    key = hashlib.sha256("\n".join(spec.wheels).encode()).hexdigest()[:16]
    dest = cache_dir / "wheels" / f"{spec.name}-{key}"
    done = dest / ".complete"
    if not done.is_file():
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        requirements = dest / "requirements.txt"
        requirements.write_text("\n".join(spec.wheels) + "\n", encoding="utf-8")
        proc = subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                "--only-binary=:all:", "--no-deps", "--python-version", IMAGE_PYTHON_VERSION,
                "--implementation", "cp",
                *[arg for plat in _platforms() for arg in ("--platform", plat)],
                "--dest", str(dest), "-r", str(requirements),
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise ImageBuildError(
                f"pip could not download the wheels of image {spec.name!r}: "
                f"{(proc.stderr or proc.stdout).strip()[-1500:]}",
                image=spec.name,
            )
        done.write_text(key, encoding="utf-8")
    wheels = sorted(dest.glob("*.whl"))
    unfit = [w.name for w in wheels if not _fits_image(w)]
    if unfit:
        raise ConfigError(
            f"image {spec.name!r}: only pure-Python wheels or CPython 3.11 manylinux wheels "
            f"for {platform.machine()} can be copied into an image; not {', '.join(unfit)}"
        )
    return wheels
