"""A process's output log: byte offsets that survive rotation and reopening, at least the
last `keep` bytes kept, answers cut on character boundaries."""

from __future__ import annotations

from pathlib import Path

from runtime.processes.outlog import OutputLog, utf8_cut


def test_offsets_count_every_byte_and_the_tail_is_kept(tmp_path: Path) -> None:
    log = OutputLog(tmp_path / "p.log", keep=1000)
    chunk = bytes(range(256)) * 4  # 1024 bytes
    offsets = [log.append(chunk) for _ in range(10)]
    assert offsets == [i * 1024 for i in range(10)]
    assert log.end == 10 * 1024
    assert 1000 <= log.end - log.first < 2000, "at least `keep`, at most 2 x keep on disk"
    assert (tmp_path / "p.log").stat().st_size == log.end - log.first
    data, after, first = log.read(log.end - 100, 10_000, complete=True)
    assert (data, after, first) == (chunk[-100:], log.end, log.first)


def test_since_before_first_answers_from_first(tmp_path: Path) -> None:
    log = OutputLog(tmp_path / "p.log", keep=10)
    for i in range(10):
        log.append(f"line {i}\n".encode())
    data, after, first = log.read(0, 1000, complete=True)
    assert first > 0 and data.startswith(log.read(first, 1000, complete=True)[0][:5])
    assert after == log.end
    assert log.read(log.end + 50, 10, complete=True) == (b"", log.end, first)


def test_reopened_log_continues_at_its_offsets(tmp_path: Path) -> None:
    log = OutputLog(tmp_path / "p.log", keep=10)
    for _ in range(5):
        log.append(b"0123456789")
    first, end = log.first, log.end
    log.close()
    again = OutputLog(tmp_path / "p.log", keep=10)
    assert (again.first, again.end) == (first, end)
    assert again.append(b"x") == end


def test_a_cut_character_waits_for_its_rest_unless_the_log_is_complete(tmp_path: Path) -> None:
    log = OutputLog(tmp_path / "p.log")
    log.append("añ".encode()[:2])  # 'a' and the first byte of 'ñ'
    assert log.read(0, 100, complete=False) == (b"a", 1, 0)
    assert log.read(0, 100, complete=True) == ("añ".encode()[:2], 2, 0)
    log.append("añ".encode()[2:])
    assert log.read(1, 100, complete=False)[0].decode() == "ñ"


def test_utf8_cut() -> None:
    euro = "€".encode()  # three bytes
    assert utf8_cut(b"abc") == 3
    assert utf8_cut(b"ab" + euro[:1]) == 2
    assert utf8_cut(b"ab" + euro[:2]) == 2
    assert utf8_cut(b"ab" + euro) == 5
    assert utf8_cut(b"\xff\xfe") == 2  # invalid bytes are not held back
