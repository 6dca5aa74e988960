"""A process's output log keeps which stream wrote which bytes, so what is replayed from it
(E2B's commands, Navi's follow) keeps stderr apart from stdout: across pieces, a rotation
and a reopen (a restarted supervisor)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.processes import outlog
from runtime.processes.outlog import OutputLog


def _streams(log: OutputLog, since: int = 0) -> list[tuple[str, bytes]]:
    return [(s, d) for _, d, s in log.pieces(since, 1 << 20, complete=True)]


def test_replay_keeps_the_streams_apart(tmp_path: Path) -> None:
    log = OutputLog(tmp_path / "p.log")
    log.append(b"out1 ")
    log.append(b"err1 ", "stderr")
    log.append(b"err2 ", "stderr")
    log.append(b"out2")
    assert _streams(log) == [("stdout", b"out1 "), ("stderr", b"err1 err2 "),
                             ("stdout", b"out2")]
    assert _streams(log, since=7) == [("stderr", b"r1 err2 "), ("stdout", b"out2")]
    offsets = [o for o, _, _ in log.pieces(0, 1 << 20, complete=True)]
    assert offsets == [0, 5, 15]


def test_streams_survive_rotation_and_reopen(tmp_path: Path) -> None:
    log = OutputLog(tmp_path / "p.log", keep=8)
    log.append(b"aaaa")
    log.append(b"EEEEEEEE", "stderr")  # 12 bytes
    log.append(b"bbbbbb")  # 18 >= 16: rotated, the last 8 kept ("EEbbbbbb")
    assert log.first == 10
    assert _streams(log) == [("stderr", b"EE"), ("stdout", b"bbbbbb")]
    log.close()
    again = OutputLog(tmp_path / "p.log", keep=8)
    assert _streams(again) == [("stderr", b"EE"), ("stdout", b"bbbbbb")]


def test_switches_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outlog, "MAX_SWITCHES", 8)
    log = OutputLog(tmp_path / "p.log")
    for n in range(20):
        log.append(b"x", "stderr" if n % 2 else "stdout")
    assert len(log.switches) <= 8
    assert _streams(log)[-1] == ("stderr", b"x")
    assert len(OutputLog(tmp_path / "p.log").switches) <= 8
