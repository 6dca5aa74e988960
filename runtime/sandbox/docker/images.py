"""Build and inspect the sandbox images, offline: no registry image is ever pulled.

For each ``sandbox_images/<name>/`` (see ``image_spec``) the default, offline path is:

    mmdebstrap rootfs (packages.txt)  ->  docker import  navi/base-<name>:<base hash>
    docker build --network none --build-arg BASE=<that>  ->  navi/<name>:latest

With ``base="debian:bookworm-slim"`` (a normal host with a registry) the Dockerfile installs
``packages.txt`` itself. Images carry the labels ``navi.image.name``, ``navi.image.version``,
``navi.image.hash``; an image whose hash label equals the directory's content hash is up to
date and is not rebuilt (unless ``force``).

Public API: ``image_ref``, ``list_images``, ``build_images`` (and ``connect`` for a client).
"""

from __future__ import annotations

import io
import re
import tarfile
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, Literal

import docker
import docker.errors
import requests.exceptions
from pydantic import BaseModel

from runtime import __version__
from runtime.config import PROJECT_ROOT, Settings
from runtime.errors import ConfigError, EngineUnavailable, ImageBuildError
from runtime.logging import get_logger
from runtime.sandbox.docker.errors import map_docker_errors
from runtime.sandbox.docker.image_inputs import download_wheels, make_rootfs
from runtime.sandbox.docker.image_progress import Progress, ProgressSink
from runtime.sandbox.docker.image_spec import (
    IMAGES_DIR,
    ImageSpec,
    base_hash,
    content_hash,
    context_files,
    discover,
)

LABEL_NAME = "navi.image.name"
LABEL_VERSION = "navi.image.version"
LABEL_HASH = "navi.image.hash"
LABEL_BASE = "navi.image.base"
LABEL_BASE_HASH = "navi.base.hash"

BUILD_CACHE_DIR = PROJECT_ROOT / ".build"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

log = get_logger(__name__)


class ImageInfo(BaseModel):
    """One known sandbox image and its state on the engine."""

    name: str
    ref: str
    present: bool
    up_to_date: bool
    expected_hash: str
    image_id: str | None = None
    hash: str | None = None
    version: str | None = None
    base: str | None = None
    size_bytes: int | None = None
    created: str | None = None


class BuildResult(BaseModel):
    """What ``build_images`` did for one image."""

    name: str
    ref: str
    status: Literal["built", "up-to-date"]
    image_id: str
    hash: str
    seconds: float
    steps: dict[str, float] = {}


def image_ref(name: str, settings: Settings | None = None) -> str:
    """The tag a sandbox image is run by, e.g. ``navi/python:latest``."""
    prefix = (settings or Settings()).image_prefix
    return f"{prefix}/{name}:latest"


def connect(timeout: int = 120) -> docker.DockerClient:
    """A client for the local engine; ``EngineUnavailable`` (with a hint) when it is not up."""
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EngineUnavailable(
            f"the Docker engine is unreachable ({exc}); start it (`make setup` starts "
            "dockerd) or point DOCKER_HOST at it"
        ) from exc
    return client


def _inspect(client: docker.DockerClient, ref: str) -> Any | None:
    with map_docker_errors(f"inspect image {ref}", image=ref):
        try:
            return client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None


def list_images(
    client: docker.DockerClient, settings: Settings | None = None, root: Path = IMAGES_DIR
) -> list[ImageInfo]:
    """Every image directory under ``root`` with its engine state (present, up to date, size)."""
    infos = []
    for name, spec in discover(root).items():
        ref = image_ref(name, settings)
        expected = content_hash(spec)
        image = _inspect(client, ref)
        if image is None:
            infos.append(
                ImageInfo(name=name, ref=ref, present=False, up_to_date=False,
                          expected_hash=expected)
            )
            continue
        labels = image.labels or {}
        infos.append(
            ImageInfo(
                name=name,
                ref=ref,
                present=True,
                up_to_date=labels.get(LABEL_HASH) == expected,
                expected_hash=expected,
                image_id=image.id,
                hash=labels.get(LABEL_HASH),
                version=labels.get(LABEL_VERSION),
                base=labels.get(LABEL_BASE),
                size_bytes=image.attrs.get("Size"),
                created=image.attrs.get("Created"),
            )
        )
    return infos


def _remove_quietly(client: docker.DockerClient, ref: str) -> None:
    """Drop a superseded image or tag; one still used by a container simply stays."""
    try:
        client.images.remove(ref, noprune=False)
    except docker.errors.DockerException as exc:
        log.debug("image_remove_skipped", ref=ref, reason=str(exc)[:200])


def _is_imported_base(image: Any) -> bool:
    layers = image.attrs.get("RootFS", {}).get("Layers") or []
    return len(layers) == 1 and LABEL_NAME not in (image.labels or {})


def _offline_base(
    client: docker.DockerClient, spec: ImageSpec, prefix: str, cache_dir: Path,
    progress: Progress, force: bool,
) -> str:
    """The imported mmdebstrap rootfs for ``spec``; reused while the package list is the same."""
    bhash = base_hash(spec)
    repo = f"{prefix}/base-{spec.name}"
    ref = f"{repo}:{bhash[:16]}"
    if not force:
        if _inspect(client, ref) is not None:
            progress.note(spec.name, f"base {ref} is up to date")
            return ref
        with map_docker_errors("list images"):
            labelled = client.images.list(filters={"label": f"{LABEL_BASE_HASH}={bhash}"})
        # Images built FROM a base inherit its label: only a one-layer import is a base.
        twins = [img for img in labelled if _is_imported_base(img)]
        if twins:
            with map_docker_errors("tag image"):
                twins[0].tag(repo, bhash[:16])
            progress.note(spec.name, f"base {ref}: same packages as {twins[0].tags}, reused")
            return ref
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="navi-rootfs-", dir=cache_dir) as tmp:
        tarball = Path(tmp) / f"{spec.name}.tar"
        with progress.step(spec.name, "rootfs (mmdebstrap)"):
            make_rootfs(spec, tarball)
        size_mb = tarball.stat().st_size / 1e6
        with progress.step(spec.name, f"docker import ({size_mb:.0f} MB)"):
            with map_docker_errors(f"import the rootfs as {ref}", image=ref):
                client.api.import_image_from_file(
                    str(tarball),
                    repository=repo,
                    tag=bhash[:16],
                    changes=[f"ENV {_PATH_ENV}", f"LABEL {LABEL_BASE_HASH}={bhash}"],
                )
    with map_docker_errors("list images"):
        stale = [t for img in client.images.list(name=repo) for t in img.tags if t != ref]
    for tag in stale:
        _remove_quietly(client, tag)
    return ref


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes | None, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.mode, info.mtime, info.uid, info.gid = mode, 0, 0, 0
    if data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        return
    info.size = len(data)
    tar.addfile(info, fileobj=io.BytesIO(data))


def _build_context(spec: ImageSpec, wheels: list[Path], out: IO[bytes]) -> None:
    """The image directory plus ``wheels/`` (always present, maybe empty), as a tar stream."""
    with tarfile.open(fileobj=out, mode="w") as tar:
        for rel, path in context_files(spec):
            mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            _add_bytes(tar, rel, path.read_bytes(), mode)
        _add_bytes(tar, "wheels", None, 0o755)
        for wheel in wheels:
            _add_bytes(tar, f"wheels/{wheel.name}", wheel.read_bytes(), 0o644)
    out.seek(0)


def _docker_build(
    client: docker.DockerClient, spec: ImageSpec, context: IO[bytes], *, ref: str,
    base_ref: str, offline: bool, labels: dict[str, str], progress: Progress, force: bool,
) -> str:
    """Run ``docker build`` and return the new image id; the output tail on failure."""
    lines: list[str] = []
    image_id = ""
    with progress.step(spec.name, "docker build") as elapsed:
        with map_docker_errors(f"build {ref}", image=base_ref):
            stream = client.api.build(
                fileobj=context, custom_context=True, tag=ref, rm=True, forcerm=True,
                pull=False, nocache=force, decode=True, buildargs={"BASE": base_ref},
                labels=labels, network_mode="none" if offline else None,
            )
            error = ""
            for chunk in stream:  # read to the end even after an error: closes the socket
                if "error" in chunk:
                    error = error or str(chunk["error"]).strip()
                if "aux" in chunk and "ID" in chunk["aux"]:
                    image_id = chunk["aux"]["ID"]
                text = _ANSI.sub("", str(chunk.get("stream", "")))
                for line in text.splitlines():
                    if line.strip():
                        lines.append(line)
                    if line.startswith("Step "):
                        progress.note(spec.name, f"  +{elapsed():.0f} s {line[:110]}")
            if error:
                tail = "\n".join(lines[-15:])
                raise ImageBuildError(
                    f"docker build of {ref} failed: {error}\n{tail}", image=spec.name
                )
    if not image_id:
        image = _inspect(client, ref)
        if image is None:
            raise ImageBuildError(f"docker build of {ref} produced no image", image=spec.name)
        image_id = image.id
    return image_id


def _build_one(
    client: docker.DockerClient, spec: ImageSpec, *, settings: Settings, base: str | None,
    force: bool, progress: Progress, cache_dir: Path,
) -> BuildResult:
    started = time.monotonic()
    ref = image_ref(spec.name, settings)
    chash = content_hash(spec)
    current = _inspect(client, ref)
    if current is not None and not force and (current.labels or {}).get(LABEL_HASH) == chash:
        return BuildResult(name=spec.name, ref=ref, status="up-to-date", image_id=current.id,
                           hash=chash, seconds=round(time.monotonic() - started, 2))
    progress.note(spec.name, f"building {ref} ({'forced' if force else 'hash ' + chash[:12]})")
    wheels: list[Path] = []
    if spec.wheels:
        with progress.step(spec.name, "wheels (pip download)"):
            wheels = download_wheels(spec, cache_dir)
    if base is None:
        base_ref = _offline_base(client, spec, settings.image_prefix, cache_dir, progress, force)
    else:
        base_ref = base
    labels = {
        LABEL_NAME: spec.name,
        LABEL_VERSION: __version__,
        LABEL_HASH: chash,
        LABEL_BASE: "offline" if base is None else base,
    }
    with tempfile.TemporaryFile() as context:
        _build_context(spec, wheels, context)
        image_id = _docker_build(
            client, spec, context, ref=ref, base_ref=base_ref, offline=base is None,
            labels=labels, progress=progress, force=force,
        )
    if current is not None and current.id != image_id:
        _remove_quietly(client, current.id)
    seconds = round(time.monotonic() - started, 2)
    progress.note(spec.name, f"built {ref} ({image_id[:19]}) in {seconds:.1f} s")
    return BuildResult(name=spec.name, ref=ref, status="built", image_id=image_id, hash=chash,
                       seconds=seconds, steps=progress.timings.get(spec.name, {}))


def default_images(specs: dict[str, ImageSpec]) -> list[str]:
    """What a build without names builds: every image but the on-demand ones."""
    return [name for name, spec in specs.items() if not spec.on_demand]


def build_images(
    names: Iterable[str] | None = None,
    *,
    settings: Settings | None = None,
    client: docker.DockerClient | None = None,
    base: str | None = None,
    force: bool = False,
    progress: ProgressSink | None = None,
    root: Path = IMAGES_DIR,
    cache_dir: Path = BUILD_CACHE_DIR,
) -> list[BuildResult]:
    """Build the named images (default: all of ``root`` but the on-demand ones, which are
    built only when named) that are not up to date.

    ``base=None`` is the offline path (mmdebstrap + import); a registry reference such as
    ``debian:bookworm-slim`` builds on that instead. Raises ``ConfigError`` for unknown
    names or bad image directories, ``EngineUnavailable``, ``ImageBuildError``.
    """
    settings = settings or Settings()
    specs = discover(root)
    wanted = list(dict.fromkeys(names)) if names else default_images(specs)
    unknown = [n for n in wanted if n not in specs]
    if unknown:
        raise ConfigError(
            f"unknown sandbox image(s) {', '.join(unknown)}; known: {', '.join(specs)}"
        )
    own_client = client is None
    engine = client or connect()
    tracker = Progress(progress)
    try:
        return [
            _build_one(engine, specs[n], settings=settings, base=base, force=force,
                       progress=tracker, cache_dir=cache_dir)
            for n in wanted
        ]
    finally:
        if own_client:
            engine.close()
