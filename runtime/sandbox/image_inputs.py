"""Host-side inputs of an offline image build: the Debian rootfs tarball and the Python wheels.

No registry image is ever pulled. ``mmdebstrap`` makes a minimal Debian rootfs with the image's
``packages.txt`` already installed (from the host's Debian apt sources), and ``pip download``
fetches the pinned, pure-Python wheels of ``wheels.txt`` on the host, so that ``docker build``
can run with ``--network none`` and without apt.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from runtime.errors import ConfigError, ImageBuildError
from runtime.sandbox.image_spec import DEBIAN_SUITE, MMDEBSTRAP_OPTIONS, ImageSpec

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


def _is_pure_wheel(path: Path) -> bool:
    return path.name.endswith("-none-any.whl")


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
    impure = [w.name for w in wheels if not _is_pure_wheel(w)]
    if impure:
        raise ConfigError(
            f"image {spec.name!r}: only pure-Python wheels (`*-none-any.whl`) can be copied "
            f"into an image; use the Debian package instead of {', '.join(impure)}"
        )
    return wheels
