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
        allowed_len = sum(len(f"; allowed {d.host}:{d.port} x{d.count}") for d in listed
                          if d.verdict == "allowed")
        if allowed_len > room:  # many hosts under a wildcard: one entry per allowlist entry
            listed = _grouped(self.allowlist, listed)
        more = self.dropped
        for i, d in enumerate(listed):
            why = f" ({d.reason})" if d.reason else ""
            part = f"; {d.verdict} {d.host}:{d.port} x{d.count}{why}"
            if len(part) > room:
                more += len(listed) - i
                break
            text, room = text + part, room - len(part)
        return text + (f"; +{more} more" if more else "")


def _wildcard(allowlist: list[str], host: str) -> str | None:
    """The ``*.suffix`` entry of ``allowlist`` that ``host`` falls under, if any."""
    name = host.lower().rstrip(".")
    for entry in allowlist:
        suffix = entry.lower().rstrip(".")[2:] if entry.startswith("*.") else ""
        if suffix and name.endswith("." + suffix):
            return entry
    return None


def _grouped(allowlist: list[str], listed: list[EgressDestination]) -> list[EgressDestination]:
    """Allowed destinations folded into their wildcard entry (``*.x:443 x57 (12 hosts)``),
    so a program making up names under a wildcard cannot push another allowed host out of
    the line; refused ones as they were."""
    groups: dict[tuple[str, int], list[EgressDestination]] = {}
    for d in listed:
        if d.verdict == "allowed":
            entry = _wildcard(allowlist, d.host) or d.host
            groups.setdefault((entry, d.port), []).append(d)
    folded = [
        ds[0] if len(ds) == 1 else EgressDestination(
            host=entry, port=port, verdict="allowed", count=sum(d.count for d in ds),
            reason=None if len(ds) < 2 else f"{len(ds)} hosts")
        for (entry, port), ds in groups.items()]
    folded.sort(key=lambda d: d.reason is not None)  # exact hosts before wildcard groups
    return folded + [d for d in listed if d.verdict != "allowed"]


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
        elif verdict == "allowed" and (entry := self._entry(host)) is not None:
            folded = (entry, port, verdict, None)  # past the cap: counted under its entry
            self._counts[folded] = self._counts.get(folded, 0) + 1
        else:
            self.dropped += 1

    def _entry(self, host: str) -> str | None:
        """The allowlist entry an allowed host is listed under past the cap: itself when
        named exactly, else its wildcard (so at most one key per allowlist entry)."""
        name = host.lower().rstrip(".")
        for entry in self.allowlist:  # the entry, not the host: its spellings are many
            if name == entry.lower().rstrip("."):
                return entry
        return _wildcard(self.allowlist, host)

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
