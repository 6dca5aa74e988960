"""What one execution's egress did: destinations allowed and refused, with counts.

The proxy fills an ``EgressLedger`` as connections are decided; ``report()`` freezes it into
``EgressReport``, which travels in ``ExecResult.egress`` and is summarised (one line) in the
audit outcome's ``detail``. Distinct destinations are capped, allowed and refused each on its
own, so that a program trying many names cannot grow the record without bound nor push an
allowed destination out of it (``dropped`` counts what was left out).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_DESTINATIONS = 64

Verdict = Literal["allowed", "refused"]


class EgressDestination(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: str = Field(description="as the program asked for it (truncated to 255 characters)")
    port: int
    verdict: Verdict
    reason: str | None = Field(None, description="why it was refused")
    count: int = 1


class EgressReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    allowlist: list[str]
    connections: int = Field(0, description="connections the program opened to the proxy")
    allowed: int = 0
    refused: int = 0
    lookups: int = Field(0, description="DNS lookups the proxy made")
    bytes_out: int = 0
    bytes_in: int = 0
    destinations: list[EgressDestination] = Field(default_factory=list)
    dropped: int = Field(0, description="decisions not listed (over the destinations cap)")

    def summary(self, limit: int = 600) -> str:
        """One line for the audit: the totals as fields, then allowed destinations, then
        refused ones, e.g. ``egress: allowed=2 refused=1 bytes_out=120 bytes_in=3400;
        allowed a:443 x2; refused b:443 x1 (why)``. What does not fit in ``limit`` is
        ``+N more`` at the end: refused names never push an allowed host out."""
        text = (f"egress: allowed={self.allowed} refused={self.refused} "
                f"bytes_out={self.bytes_out} bytes_in={self.bytes_in}")
        room = limit - len(text) - len("; +999999 more")
        listed = sorted(self.destinations, key=lambda d: d.verdict != "allowed")  # stable
        more = self.dropped
        for i, d in enumerate(listed):
            why = f" ({d.reason})" if d.reason else ""
            part = f"; {d.verdict} {d.host}:{d.port} x{d.count}{why}"
            if len(part) > room:
                more += len(listed) - i
                break
            text, room = text + part, room - len(part)
        return text + (f"; +{more} more" if more else "")


class EgressLedger:
    """Mutable counters behind one proxy (single event loop: no locking)."""

    def __init__(self, allowlist: list[str]) -> None:
        self.allowlist = allowlist
        self.connections = 0
        self.lookups = 0
        self.bytes_out = 0
        self.bytes_in = 0
        self.dropped = 0
        self.allowed = 0
        self.refused = 0
        self._counts: dict[tuple[str, int, Verdict, str | None], int] = {}
        self._distinct: dict[Verdict, int] = {"allowed": 0, "refused": 0}

    def record(self, host: str, port: int, verdict: Verdict, reason: str | None = None) -> None:
        key = (host[:255], port, verdict, reason)
        if verdict == "allowed":
            self.allowed += 1
        else:
            self.refused += 1
        if key in self._counts:
            self._counts[key] += 1
        elif self._distinct[verdict] < MAX_DESTINATIONS:  # refused names take no allowed room
            self._counts[key] = 1
            self._distinct[verdict] += 1
        else:
            self.dropped += 1

    def report(self) -> EgressReport:
        dests = [
            EgressDestination(host=h, port=p, verdict=v, reason=r, count=n)
            for (h, p, v, r), n in self._counts.items()
        ]
        dests.sort(key=lambda d: d.verdict != "allowed")  # allowed first, each in first-seen order
        return EgressReport(
            allowlist=list(self.allowlist), connections=self.connections, allowed=self.allowed,
            refused=self.refused, lookups=self.lookups, bytes_out=self.bytes_out,
            bytes_in=self.bytes_in, destinations=dests, dropped=self.dropped,
        )
