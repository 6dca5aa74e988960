"""What an egress grant changes in a container's spec: a socket mount and env, never a network."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from runtime.egress import CONTAINER_SOCKET, ENTRY
from runtime.errors import InvalidInput
from runtime.sandbox.docker.spec import ContainerSpec, build_spec
from runtime.sandbox.models import ExecRequest, Mount


@pytest.fixture
def proxy_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "p.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    yield path
    sock.close()


def spec(request: ExecRequest, tmp_path: Path, egress: Path | None) -> ContainerSpec:
    return build_spec(request, image_id="sha256:" + "a" * 64, seccomp_profile="{}",
                      sandbox_uid=65534, instance_id="i", lease_until=1,
                      workspaces_root=tmp_path, egress_socket=egress)


def egress_request(**fields: object) -> ExecRequest:
    return ExecRequest(image="x", argv=["python3", "-c", "1"], exec_id="e1", network="egress",
                       egress_allowlist=["pypi.org"], **fields)  # type: ignore[arg-type]


def test_egress_adds_the_socket_env_and_entry_but_no_network(
    tmp_path: Path, proxy_socket: Path
) -> None:
    s = spec(egress_request(env={"HTTPS_PROXY": "http://evil:1"}), tmp_path, proxy_socket)
    assert s.network_mode == "none" and s.host_config_kwargs()["network_mode"] == "none"
    assert s.create_kwargs({})["network_disabled"] is True
    assert s.argv == (ENTRY, "python3", "-c", "1")
    assert [(m.source, m.target, m.read_only) for m in s.mounts] == [
        (str(proxy_socket), CONTAINER_SOCKET, True)]
    assert s.env["NAVI_EGRESS_SOCKET"] == CONTAINER_SOCKET
    assert s.env["HTTPS_PROXY"] == s.env["http_proxy"] == "http://127.0.0.1:3128"
    assert s.env["NO_PROXY"] == ""


def test_no_grant_no_socket(tmp_path: Path, proxy_socket: Path) -> None:
    plain = ExecRequest(image="x", argv=["true"], exec_id="e1")
    s = spec(plain, tmp_path, None)
    assert s.mounts == () and "NAVI_EGRESS_SOCKET" not in s.env and s.argv == ("true",)
    with pytest.raises(InvalidInput):
        spec(plain, tmp_path, proxy_socket)  # a socket without a grant
    with pytest.raises(InvalidInput):
        spec(egress_request(), tmp_path, None)  # a grant without its proxy


def test_the_socket_must_be_a_socket_and_not_shadowed(tmp_path: Path, proxy_socket: Path) -> None:
    regular = tmp_path / "f"
    regular.write_text("x")
    with pytest.raises(InvalidInput, match="not a socket"):
        spec(egress_request(), tmp_path, regular)
    shadow = egress_request(mounts=[Mount(source=regular, target="/run/navi")])
    with pytest.raises(InvalidInput, match="overlaps"):
        spec(shadow, tmp_path, proxy_socket)


def test_requests_pair_egress_with_an_allowlist() -> None:
    with pytest.raises(ValidationError):
        ExecRequest(image="x", argv=["a"], exec_id="e", network="egress")
    with pytest.raises(ValidationError):
        ExecRequest(image="x", argv=["a"], exec_id="e", egress_allowlist=["pypi.org"])
    with pytest.raises(ValidationError):
        ExecRequest(image="x", argv=["a"], exec_id="e", network="bridge")  # type: ignore[arg-type]
