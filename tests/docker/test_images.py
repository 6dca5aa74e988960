"""The built sandbox images against a real engine: what they promise, and no-op rebuilds."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from runtime.config import Settings
from runtime.errors import ImageBuildError
from runtime.sandbox.docker.image_spec import IMAGES_DIR, content_hash, load_spec
from runtime.sandbox.docker.images import (
    LABEL_HASH,
    LABEL_NAME,
    build_images,
    image_ref,
    list_images,
)

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    engine = docker.from_env(timeout=120)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def python_image(client: docker.DockerClient) -> str:
    """``navi/python:latest``, built (offline) if it is not there or not up to date."""
    build_images(["python"], client=client)
    return image_ref("python")


def _run(client: docker.DockerClient, image: str, cmd: list[str], **kw: object) -> str:
    """One throwaway container without network; returns stdout (stderr kept apart)."""
    container = client.containers.run(
        image, cmd, network_mode="none", detach=True,
        labels={"navi.test": "images"}, **kw,  # type: ignore[arg-type]
    )
    try:
        status = container.wait(timeout=60)
        out = container.logs(stdout=True, stderr=False).decode()
        err = container.logs(stdout=False, stderr=True).decode()
        assert status["StatusCode"] == 0, f"{cmd} exited {status}: {err}"
        return out
    finally:
        container.remove(force=True)


def test_python_runs_as_nobody_by_default(client: docker.DockerClient, python_image: str) -> None:
    out = _run(client, python_image, ["sh", "-c", "id -u; id -g; echo $HOME; pwd; echo $LANG"])
    assert out.split() == ["65534", "65534", "/tmp", "/workspace", "C.UTF-8"]


def test_python_has_the_full_standard_library(
    client: docker.DockerClient, python_image: str
) -> None:
    code = (
        "import sqlite3, venv, ssl, ctypes, zoneinfo, ensurepip\n"
        "sqlite3.connect(':memory:').execute('select 1')\n"
        "print(zoneinfo.ZoneInfo('Europe/Berlin'), ssl.OPENSSL_VERSION.split()[0])\n"
    )
    assert _run(client, python_image, ["python3", "-c", code]).split() == [
        "Europe/Berlin",
        "OpenSSL",
    ]


def test_python_has_no_setuid_or_setgid_files(
    client: docker.DockerClient, python_image: str
) -> None:
    # As root, so that no directory is hidden from the search.
    out = _run(client, python_image, ["find", "/", "-xdev", "-perm", "/6000"], user="0")
    assert out.strip() == ""


def test_second_build_is_a_no_op(client: docker.DockerClient, python_image: str) -> None:
    before = client.images.get(python_image).id
    lines: list[str] = []
    [result] = build_images(["python"], client=client, progress=lines.append)
    assert result.status == "up-to-date"
    assert result.image_id == before == client.images.get(python_image).id
    assert not any("build" in line for line in lines), lines
    labels = client.images.get(python_image).labels
    assert labels[LABEL_NAME] == "python"
    assert labels[LABEL_HASH] == content_hash(load_spec(IMAGES_DIR / "python"))


def test_list_images_reports_the_python_image(
    client: docker.DockerClient, python_image: str
) -> None:
    infos = {info.name: info for info in list_images(client)}
    python = infos["python"]
    assert python.present and python.up_to_date
    assert python.image_id == client.images.get(python_image).id
    assert python.size_bytes and python.size_bytes > 10_000_000


@pytest.fixture
def scratch(tmp_path: Path, client: docker.DockerClient) -> Iterator[tuple[Path, Settings]]:
    """A private image directory built under a unique prefix, removed afterwards."""
    prefix = f"navi-test-{uuid.uuid4().hex[:10]}"
    image_dir = tmp_path / "images" / "tiny"
    image_dir.mkdir(parents=True)
    (image_dir / "packages.txt").write_text("python3\n")
    (image_dir / "Dockerfile").write_text(
        "ARG BASE=debian:bookworm-slim\nFROM ${BASE}\nCOPY msg.txt /msg.txt\n"
    )
    (image_dir / "msg.txt").write_text("one\n")
    yield image_dir, Settings(image_prefix=prefix)
    for repo in (f"{prefix}/tiny", f"{prefix}/base-tiny"):  # the image first, then its base
        for image in client.images.list(name=repo):
            for tag in image.tags:
                if tag.startswith(f"{prefix}/"):
                    client.images.remove(tag, force=True)


def test_a_changed_file_rebuilds_and_an_unchanged_one_does_not(
    client: docker.DockerClient, python_image: str, scratch: tuple[Path, Settings]
) -> None:
    image_dir, settings = scratch
    root = image_dir.parent

    def build() -> tuple[str, str]:
        [res] = build_images(["tiny"], client=client, settings=settings, base=python_image,
                             root=root)
        return res.status, res.image_id

    status, first = build()
    assert status == "built"
    assert build() == ("up-to-date", first)
    (image_dir / "msg.txt").write_text("two\n")
    status, second = build()
    assert status == "built" and second != first
    assert _run(client, second, ["cat", "/msg.txt"]) == "two\n"
    [res] = build_images(["tiny"], client=client, settings=settings, base=python_image,
                         root=root, force=True)
    assert res.status == "built"


def test_a_failing_dockerfile_is_a_clear_build_error(
    client: docker.DockerClient, python_image: str, scratch: tuple[Path, Settings]
) -> None:
    image_dir, settings = scratch
    (image_dir / "Dockerfile").write_text(
        'ARG BASE\nFROM ${BASE}\nRUN m=navi; echo "$m-marker-output"; exit 3\n'
    )
    with pytest.raises(ImageBuildError, match="non-zero code: 3") as info:
        build_images(["tiny"], client=client, settings=settings, base=python_image,
                     root=image_dir.parent)
    assert "navi-marker-output" in info.value.message


def test_the_offline_build_has_no_network(
    client: docker.DockerClient, python_image: str, scratch: tuple[Path, Settings]
) -> None:
    """``base=None`` builds with ``--network none``: only loopback exists inside RUN."""
    image_dir, settings = scratch
    shutil.rmtree(image_dir)
    image_dir.mkdir()
    # The python image's package list: its imported base is reused (tagged), not rebuilt.
    shutil.copy(IMAGES_DIR / "python" / "packages.txt", image_dir / "packages.txt")
    (image_dir / "Dockerfile").write_text(
        "ARG BASE\nFROM ${BASE}\n"
        "RUN python3 -c \"import socket; n=socket.if_nameindex(); print(n); "
        "assert [x for _, x in n] == ['lo'], n\"\n"
    )
    [res] = build_images(["tiny"], client=client, settings=settings, root=image_dir.parent)
    assert res.status == "built"
    # Its base is an imported rootfs (one layer), never another image built on one.
    [base] = client.images.list(name=f"{settings.image_prefix}/base-tiny")
    assert len(base.attrs["RootFS"]["Layers"]) == 1
    assert LABEL_NAME not in (base.labels or {})
