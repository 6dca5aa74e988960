"""The warm runner's trailer is spotted and stripped, and the job's output streams at once."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.sandbox.docker.capture import StreamCapture
from runtime.sandbox.docker.warm_stream import TrailerCapture, Trailers

NONCE = "0123456789abcdef0123456789abcdef"


def _capture(tmp: Path, trailers: Trailers, name: str = "stdout") -> TrailerCapture:
    inner = StreamCapture(name=name, cap=1 << 20, artifact_path=tmp / name,  # type: ignore[arg-type]
                          artifact_max=1 << 20)
    return TrailerCapture(inner, trailers)


def _trailer(code: int) -> bytes:
    return b"\x00navi-end-" + NONCE.encode() + b":" + str(code).encode() + b"\n"


def test_a_short_line_streams_at_once(tmp_path: Path) -> None:
    capture = _capture(tmp_path, Trailers(NONCE, lambda: None))
    assert capture.feed(b"step 1\n") == b"step 1\n"
    assert capture.feed(b"x") == b"x"


def test_only_a_possible_trailer_start_is_held(tmp_path: Path) -> None:
    capture = _capture(tmp_path, Trailers(NONCE, lambda: None))
    assert capture.feed(b"data\x00navi-e") == b"data"
    assert capture.feed(b"nd-WRONG") == b"\x00navi-end-WRONG"
    assert capture.feed(b"tail\x00") == b"tail"
    assert capture.flush() == b"\x00"


def test_trailer_ends_both_streams(tmp_path: Path) -> None:
    ended: list[bool] = []
    trailers = Trailers(NONCE, lambda: ended.append(True))
    out, err = _capture(tmp_path, trailers), _capture(tmp_path, trailers, "stderr")
    assert out.feed(b"result\n" + _trailer(3)[:20]) == b"result\n"
    assert out.feed(_trailer(3)[20:]) == b""
    assert not ended
    assert err.feed(_trailer(3)) == b""
    assert ended and trailers.code == 3
    assert out.feed(b"late") == b""


@settings(max_examples=300, deadline=None)
@given(job=st.lists(st.sampled_from([b"a", b"\n", b"\x00", b"\x00navi-end-", b"\x00navi-end-x:1\n",
                                     NONCE.encode(), b"\x00navi-end-" + NONCE.encode()[:8]]),
                    max_size=12).map(b"".join),
       code=st.integers(-64, 255), cuts=st.lists(st.integers(0, 200), max_size=8))
def test_any_split_keeps_the_job_bytes_and_code(
    tmp_path_factory: object, job: bytes, code: int, cuts: list[int]
) -> None:
    tmp = tmp_path_factory.mktemp("w")  # type: ignore[attr-defined]
    trailers = Trailers(NONCE, lambda: None)
    capture = _capture(tmp, trailers)
    stream = job + _trailer(code)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    live = b"".join(capture.feed(stream[a:b]) for a, b in zip(points, points[1:], strict=False))
    live += capture.flush()
    assert live == job and capture.inner.result() == job
    assert trailers.codes["stdout"] == code
