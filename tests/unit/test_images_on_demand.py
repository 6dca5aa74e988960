"""An image directory with an ON_DEMAND file (the browser image: Chromium is large) is left
out of a build without names (set-up, CI) and built when named."""

from __future__ import annotations

from pathlib import Path

from runtime.sandbox.docker.image_spec import IMAGES_DIR, ON_DEMAND, discover
from runtime.sandbox.docker.images import default_images


def test_the_browser_image_is_built_only_on_demand() -> None:
    specs = discover(IMAGES_DIR)
    assert specs["browser"].on_demand and not specs["python"].on_demand
    assert "browser" not in default_images(specs)
    assert {"python", "tools-runner", "ssh", "openscad"} <= set(default_images(specs))


def test_the_marker_is_a_file_of_the_image_directory(tmp_path: Path) -> None:
    for name in ("big", "small"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\n")
    (tmp_path / "big" / ON_DEMAND).write_text("large\n")
    assert default_images(discover(tmp_path)) == ["small"]
