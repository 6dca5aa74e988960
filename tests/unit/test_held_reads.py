"""Held reads: a cut closes the file and gives the lease back once, tells its response,
and forgets it; anonymous link requests and one link's readers are capped (429)."""

from __future__ import annotations

import io

import pytest

from runtime.errors import QuotaExceeded
from runtime.workspace.held_reads import HeldReads


class Reader(io.BytesIO):
    @property
    def size(self) -> int:
        return len(self.getbuffer())


def test_a_cut_closes_the_file_and_the_lease_once_and_ends_the_response() -> None:
    reads = HeldReads()
    released: list[str] = []
    told: list[str] = []
    reader = Reader(b"x" * 100)
    held = reads.hold(("t", "s"), reader, lambda: released.append("lease"))
    held.on_cut(lambda: told.append("cut"))
    assert held.chunk(10) == b"x" * 10 and reads.count("t", "s") == 1
    assert reads.cut("t", "other") == 0
    assert reads.cut("t", "s") == 1
    assert reader.closed and released == ["lease"] and told == ["cut"]
    assert held.chunk(10) == b"" and reads.count() == 0
    held.close()  # the response's own close after the cut: nothing twice
    assert released == ["lease"]
    late: list[str] = []
    held.on_cut(lambda: late.append("cut"))  # a response that registers after the cut
    assert late == ["cut"]


def test_anonymous_link_requests_and_a_links_readers_are_capped() -> None:
    reads = HeldReads(anonymous=3, per_link=2)
    slots = [reads.enter_anonymous() for _ in range(3)]
    with pytest.raises(QuotaExceeded) as caught:
        reads.enter_anonymous()
    assert caught.value.retry_after >= 1
    slots[0]()
    slots[0]()  # idempotent: one slot back, not two
    slots.append(reads.enter_anonymous())
    with pytest.raises(QuotaExceeded):
        reads.enter_anonymous()
    a = [reads.enter_link("sh_a") for _ in range(2)]
    with pytest.raises(QuotaExceeded):
        reads.enter_link("sh_a")
    reads.enter_link("sh_b")  # another link has readers of its own
    a[1]()
    reads.enter_link("sh_a")
