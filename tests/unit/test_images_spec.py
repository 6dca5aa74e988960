"""Image directories: parsing, validation, and the content hash that decides rebuilds."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runtime.errors import ConfigError
from runtime.sandbox.docker.image_inputs import host_mirrors, mmdebstrap_command
from runtime.sandbox.docker.image_progress import Progress
from runtime.sandbox.docker.image_spec import (
    IMAGES_DIR,
    base_hash,
    content_hash,
    context_files,
    discover,
    load_spec,
)
from runtime.sandbox.docker.images import build_images, image_ref


@pytest.fixture
def image_dir(tmp_path: Path) -> Path:
    """A private copy of the real python image directory, safe to modify."""
    target = tmp_path / "images" / "python"
    shutil.copytree(IMAGES_DIR / "python", target)
    return target


def test_hash_is_stable_for_unchanged_content(image_dir: Path) -> None:
    first = content_hash(load_spec(image_dir))
    (image_dir / "Dockerfile").touch()  # mtime only
    assert content_hash(load_spec(image_dir)) == first
    assert len(first) == 64


def test_hash_changes_when_a_file_changes(image_dir: Path) -> None:
    before = content_hash(load_spec(image_dir))
    dockerfile = image_dir / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "\nENV NAVI_TEST=1\n")
    assert content_hash(load_spec(image_dir)) != before


def test_hash_changes_when_a_file_is_added_or_made_executable(image_dir: Path) -> None:
    before = content_hash(load_spec(image_dir))
    extra = image_dir / "helper.sh"
    extra.write_text("echo hi\n")
    added = content_hash(load_spec(image_dir))
    assert added != before
    extra.chmod(0o755)
    assert content_hash(load_spec(image_dir)) != added


def test_hash_changes_with_the_package_list_and_so_does_the_base(image_dir: Path) -> None:
    spec = load_spec(image_dir)
    packages = image_dir / "packages.txt"
    packages.write_text(packages.read_text() + "\nless\n")
    changed = load_spec(image_dir)
    assert "less" in changed.packages
    assert content_hash(changed) != content_hash(spec)
    assert base_hash(changed) != base_hash(spec)


def test_base_hash_ignores_files_other_than_the_package_list(image_dir: Path) -> None:
    spec = load_spec(image_dir)
    (image_dir / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\n")
    assert base_hash(load_spec(image_dir)) == base_hash(spec)


def test_caches_are_not_part_of_the_hash(image_dir: Path) -> None:
    before = content_hash(load_spec(image_dir))
    (image_dir / "__pycache__").mkdir()
    (image_dir / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert content_hash(load_spec(image_dir)) == before


def test_comments_and_order_in_packages_txt_do_not_matter(image_dir: Path) -> None:
    packages = image_dir / "packages.txt"
    packages.write_text("coreutils bash # shells\n\n# python\npython3\n")
    one = load_spec(image_dir)
    packages.write_text("python3\nbash\ncoreutils\ncoreutils\n")
    other = load_spec(image_dir)
    assert one.packages == other.packages == ("bash", "coreutils", "python3")
    assert base_hash(one) == base_hash(other)


@pytest.mark.parametrize("bad", ["--allow-unauthenticated", "Foo", "a;rm", "x$(id)"])
def test_bad_package_names_are_refused(image_dir: Path, bad: str) -> None:
    (image_dir / "packages.txt").write_text(f"python3\n{bad}\n")
    with pytest.raises(ConfigError, match="not a Debian package name"):
        load_spec(image_dir)


@pytest.mark.parametrize(
    "line", ["trimesh", "trimesh>=4", "-e git+https://x/y", "--index-url http://x", "t==1 ; x"]
)
def test_wheels_must_be_pinned_requirements(image_dir: Path, line: str) -> None:
    (image_dir / "wheels.txt").write_text(line + "\n")
    with pytest.raises(ConfigError, match="pinned requirement"):
        load_spec(image_dir)


def test_wheels_txt_is_part_of_the_hash(image_dir: Path) -> None:
    before = content_hash(load_spec(image_dir))
    (image_dir / "wheels.txt").write_text("trimesh==5.2.0\n")
    spec = load_spec(image_dir)
    assert spec.wheels == ("trimesh==5.2.0",)
    assert content_hash(spec) != before


def test_symlinks_in_an_image_directory_are_refused(image_dir: Path) -> None:
    (image_dir / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(ConfigError, match="symlinks"):
        context_files(load_spec(image_dir))


def test_discover_finds_only_directories_with_a_dockerfile(image_dir: Path) -> None:
    root = image_dir.parent
    (root / "notes").mkdir()
    (root / "notes" / "README").write_text("not an image")
    assert list(discover(root)) == ["python"]


def test_the_shipped_images_are_valid() -> None:
    specs = discover()
    assert {"python", "openscad"} <= set(specs)
    assert "python3" in specs["python"].packages
    assert "python3-minimal" not in specs["python"].packages
    for spec in specs.values():
        dockerfile = (spec.path / "Dockerfile").read_text()
        assert "ARG BASE=debian:bookworm-slim" in dockerfile
        assert "FROM ${BASE}" in dockerfile


def test_unknown_image_names_fail_before_touching_the_engine(image_dir: Path) -> None:
    with pytest.raises(ConfigError, match="unknown sandbox image"):
        build_images(["nope"], root=image_dir.parent)


def test_image_ref_uses_the_prefix() -> None:
    from runtime.config import Settings

    assert image_ref("python", Settings()) == "navi/python:latest"
    assert image_ref("openscad", Settings(image_prefix="lab")) == "lab/openscad:latest"


def test_mmdebstrap_command_is_essential_variant_with_the_packages(image_dir: Path) -> None:
    cmd = mmdebstrap_command(load_spec(image_dir), Path("/tmp/x.tar"), ["/etc/m.sources"])
    assert cmd[0] == "mmdebstrap"
    assert "--variant=essential" in cmd
    [include] = [arg for arg in cmd if arg.startswith("--include=")]
    assert {"bash", "coreutils", "python3", "python3-venv", "tzdata", "python3-numpy"} <= set(
        include.removeprefix("--include=").split(","))
    assert '--aptopt=APT::Install-Recommends "false"' in cmd
    assert cmd[-3:] == ["bookworm", "/tmp/x.tar", "/etc/m.sources"]


def test_host_mirrors_take_only_debian_bookworm_entries(tmp_path: Path) -> None:
    deb822 = tmp_path / "debian.sources"
    one_line = tmp_path / "sources.list"
    one_line.write_text(
        "deb http://deb.debian.org/debian bookworm main\n"
        "# deb http://deb.debian.org/debian bookworm-backports main\n"
        "deb [arch=amd64] http://security.debian.org/debian-security bookworm-security main\n"
        "deb https://packages.example.com/apt stable main\n"
        "deb http://deb.debian.org/debian trixie main\n"
    )
    assert host_mirrors(deb822, one_line) == [
        "deb http://deb.debian.org/debian bookworm main",
        "deb [arch=amd64] http://security.debian.org/debian-security bookworm-security main",
    ]
    deb822.write_text("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n")
    assert host_mirrors(deb822, one_line) == [str(deb822)]


def test_progress_reports_steps_and_records_their_time() -> None:
    lines: list[str] = []
    progress = Progress(lines.append)
    with progress.step("python", "rootfs"):
        pass
    with pytest.raises(RuntimeError), progress.step("python", "import"):
        raise RuntimeError("boom")
    assert lines[0] == "[python] rootfs ..."
    assert lines[1].startswith("[python] rootfs: done in ")
    assert lines[-1].startswith("[python] import: failed after ")
    assert set(progress.timings["python"]) == {"rootfs"}


def test_shared_build_steps_are_in_every_context_and_hash(image_dir: Path) -> None:
    shared = image_dir.parent / "_shared"
    shared.mkdir()
    (shared / "install-packages.sh").write_text("echo one\n")
    spec = load_spec(image_dir)
    assert ("_shared/install-packages.sh", shared / "install-packages.sh") in context_files(spec)
    before = content_hash(spec)
    (shared / "install-packages.sh").write_text("echo two\n")
    assert content_hash(load_spec(image_dir)) != before
    assert list(discover(image_dir.parent)) == ["python"]  # _shared is not an image
