"""Whether a host a call names up front (a URL's host) is inside the decision's egress grant.

The egress proxy's own name rule (`runtime.egress.EgressRules.check_name`), so a host the
proxy would refuse is refused by the policy engine, before anything starts. Ports are the
proxy's business (`NAVI_EGRESS_PORTS`), not the grant's.
"""

from __future__ import annotations

from collections.abc import Iterable

from runtime.egress.rules import EgressRules, parse_ip

ANY_PORT = 443  # the grant is about names; the port check is the proxy's


def host_refusal(host: str, allowlist: list[str]) -> str | None:
    """Why `host` is outside `allowlist`, or None when it is inside."""
    if not allowlist:
        return ("the policy grants this tool no egress (no hosts are allowed); an admin can "
                "allow hosts under the profile's tools.<tool>.egress")
    why = EgressRules(allowlist, ports=(ANY_PORT,)).check_name(host, ANY_PORT)
    if why is None:
        return None
    shown = f"[{host}]" if parse_ip(host) is not None and ":" in host else host
    return f"{shown} is not in the egress allowlist ({', '.join(allowlist)}): {why}"


def first_refusal(hosts: Iterable[str], allowlist: list[str]) -> str | None:
    return next((why for host in hosts if (why := host_refusal(host, allowlist))), None)
