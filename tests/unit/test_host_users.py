"""A tenant's sandbox uid is never a host account's, also when the supervisor runs in a
container (docker-compose) and the host's passwd is a mounted file (`NAVI_HOST_PASSWD`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from runtime.commands.doctor_host import engine_socket_mounted, host_checks
from runtime.config import Settings
from runtime.errors import ConfigError
from runtime.hostusers import checked_against, host_has_uid, passwd_uids
from runtime.store.store import Store

HOST_PASSWD = """root:x:0:0:root:/root:/bin/bash
# a comment
alice:x:200000:200000:Alice:/home/alice:/bin/bash
bob:x:200001:200001::/home/bob:/bin/sh
broken line
carol:x:notanumber:1::/:/bin/sh
dave:x:200003:200003::/home/dave:/bin/sh
"""


@pytest.fixture
def host_passwd(tmp_path: Path) -> Path:
    path = tmp_path / "host-passwd"
    path.write_text(HOST_PASSWD)
    return path


def test_passwd_file_uids(host_passwd: Path) -> None:
    assert passwd_uids(host_passwd) == {0, 200000, 200001, 200003}
    assert host_has_uid(200001, host_passwd) and not host_has_uid(200002, host_passwd)
    assert not host_has_uid(200001)  # not in this (the container's) passwd
    assert str(host_passwd) in checked_against(host_passwd)
    assert "pwd" in checked_against(None)


def test_an_unreadable_host_passwd_fails_closed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="NAVI_HOST_PASSWD"):
        host_has_uid(200000, tmp_path / "missing")


async def test_tenant_uids_skip_the_host_passwd_accounts(tmp_path: Path,
                                                         host_passwd: Path) -> None:
    store = await Store.open(tmp_path / "navi.sqlite3")
    try:
        uids = []
        for name in ("t1", "t2", "t3"):
            tenant = await store.create_tenant(name)
            uids.append(await store.tenant_sandbox_uid(tenant.id, 200000, host_passwd))
        assert uids == [200002, 200004, 200005]
    finally:
        await store.close()


def test_doctor_names_the_file_it_checked(tmp_path: Path, host_passwd: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 0:21 / / rw,relatime - overlay overlay rw\n"
        "31 22 0:5 /run/docker.sock /var/run/docker.sock rw,nosuid - tmpfs tmpfs rw\n")
    assert engine_socket_mounted(mountinfo)
    mountinfo.write_text("22 1 0:21 / / rw,relatime - overlay overlay rw\n")
    assert not engine_socket_mounted(mountinfo)
    off = {"data_dir": tmp_path, "embedded_model": "off"}
    [uids, _] = host_checks(Settings(**off), in_container=True)  # compose without the file
    assert not uids.ok and "NAVI_HOST_PASSWD" in uids.detail
    [uids, _] = host_checks(Settings(**off, host_passwd=host_passwd), in_container=True)
    assert uids.ok and f"checked against {host_passwd}" in uids.detail
    [uids, _] = host_checks(Settings(**off), in_container=False)  # the engine is ours
    assert uids.ok and "pwd" in uids.detail
    with pytest.raises(ValidationError, match="NAVI_HOST_PASSWD"):
        Settings(data_dir=tmp_path, host_passwd=tmp_path / "missing")  # refused at start
