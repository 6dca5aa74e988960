"""`navi serve` killed with SIGKILL while processes run: the next server adopts each one
whose container still runs (listed, its output going on into the same log), ends the
others `interrupted`, and leaves no process container without a live record."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import docker
import pytest

from tests.docker.test_processes_api import (
    containers_of,
    ended,
    info,
    output,
    session_of,
    start,
    wait_for,
)
from tests.e2e.conftest import start_server, stop_server

pytestmark = pytest.mark.docker


def test_kill_9_then_adopt_or_end_and_no_container_outlives_its_record(
        tmp_path: Path, docker_api: docker.APIClient) -> None:
    first = start_server(tmp_path, ready_s=120)
    try:
        _, token = first.tenant_with_user()
        with first.client(token) as client:
            session = session_of(client)
            ticker = start(client, session, "i=0; while true; do echo tick $i; i=$((i+1)); "
                           "sleep 0.2; done", name="ticker")["id"]
            quitter = start(client, session, "sleep 2; exit 3")["id"]
            removed = start(client, session, "sleep 600")["id"]
            wait_for(lambda: "tick 3" in output(client, session, ticker)["output"])
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(timeout=10)
    finally:
        stop_server(first)
    # while no server runs: the ticker goes on, one exits, one loses its container
    [running] = containers_of(docker_api, ticker)
    assert running["State"] == "running", "a server's death must not stop its processes"
    for container in containers_of(docker_api, removed):
        docker_api.remove_container(container["Id"], force=True)
    time.sleep(3)
    second = start_server(tmp_path, ready_s=120)
    try:
        with second.client(token) as client:
            adopted = info(client, session, ticker)
            assert adopted["state"] == "running", adopted
            before = output(client, session, ticker)
            wait_for(lambda: output(client, session, ticker)["next"] > before["next"] + 20,
                     what="the adopted process's output to go on in its log")
            assert before["output"].startswith("tick 0\n")
            for pid in (quitter, removed):
                gone = info(client, session, pid)
                assert (gone["state"], gone["reason"]) == ("exited", "interrupted"), gone
            assert info(client, session, quitter)["exit_code"] == 3
            assert not containers_of(docker_api, quitter)
            assert client.delete(f"/v1/sessions/{session}/processes/{ticker}"
                                 ).status_code == 204
            assert ended(client, session, ticker)["reason"] == "stopped"
            assert not containers_of(docker_api, ticker)
    finally:
        stop_server(second)


def test_a_clean_stop_ends_them_interrupted_unless_kept_for_the_next_start(
        tmp_path: Path, docker_api: docker.APIClient) -> None:
    keep = {"NAVI_PROCESS_KEEP_ON_SHUTDOWN": "1"}
    first = start_server(tmp_path, extra_env=keep, ready_s=120)
    try:
        _, token = first.tenant_with_user()
        with first.client(token) as client:
            session = session_of(client)
            pid = start(client, session, "while true; do echo alive; sleep 0.2; done")["id"]
            wait_for(lambda: "alive" in output(client, session, pid)["output"])
    finally:
        stop_server(first)  # SIGTERM: kept running for the next start
    [kept] = containers_of(docker_api, pid)
    assert kept["State"] == "running"
    second = start_server(tmp_path, ready_s=120)  # adopts it; its own stop ends it
    try:
        with second.client(token) as client:
            assert info(client, session, pid)["state"] == "running"
    finally:
        stop_server(second)
    assert not containers_of(docker_api, pid)
    third = start_server(tmp_path, ready_s=120)
    try:
        with third.client(token) as client:
            done = info(client, session, pid)
            assert (done["state"], done["reason"]) == ("exited", "interrupted")
    finally:
        stop_server(third)
