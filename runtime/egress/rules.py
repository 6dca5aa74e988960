"""Which destinations one execution's egress may reach: names first, addresses after DNS.

Two checks, in this order, so that a name the policy did not grant never causes a lookup:

1. ``EgressRules.check_name(host, port)`` before any DNS: the port must be one of the
   configured ports (80 and 443 by default) and the host must be on the execution's allowlist.
   Names match exactly, case-insensitively, a trailing dot ignored. An entry ``*.example.org``
   matches any name *below* ``example.org`` (``a.example.org``, ``a.b.example.org``) but not
   ``example.org`` itself (list both for both). An IP literal (``93.184.216.34``, ``[2001:db8::1]``)
   is refused unless that literal is itself listed; it is never matched by a wildcard.
2. ``EgressRules.check_address(ip)`` on every address the proxy would connect to (an IP
   literal, or what the name resolved to): only globally routable unicast addresses pass.
   Refused: loopback, RFC 1918, CGNAT (100.64/10), link-local, multicast, broadcast,
   unspecified, reserved/documentation/benchmark ranges, unique-local and site-local v6, and
   v6 addresses that embed a v4 one (v4-mapped ``::ffff:a.b.c.d``, v4-compatible, NAT64
   ``64:ff9b::/96``, Teredo; 6to4 ``2002::/16`` only if its embedded v4 address is global).
   ``allow_loopback`` (tests only) lets 127.0.0.0/8 and ::1 through, nothing else.
   ``private_hosts`` (the operator's services beside Navi, e.g. a SearXNG on the same Docker
   network) lets those exact names reach RFC 1918 / unique-local addresses, nothing else
   (never loopback, link-local - the cloud metadata address - or multicast).
   ``denied`` (a cluster: its own machines' addresses, ``runtime.nodes.cluster_addresses``) is
   refused first, whatever the policy and ``private_hosts`` say: a cluster whose nodes have
   public addresses is not kept out by the range checks above.

The proxy connects to the very address it checked, so DNS rebinding between check and
connect is impossible.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
DeniedAddresses = Callable[[], frozenset[IPAddress]]
"""The addresses no sandbox may reach (read at each check: the set may change)."""

_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"^({_LABEL}\.)*{_LABEL}$")
_TEREDO = ipaddress.IPv6Network("2001::/32")
# not globally reachable per IANA's registries, but not marked so by Python 3.11's ipaddress
_EXTRA: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = (
    ipaddress.IPv4Network("192.0.0.0/24"), ipaddress.IPv6Network("64:ff9b::/96"),
    ipaddress.IPv6Network("64:ff9b:1::/48"),
)


def parse_ip(host: str) -> IPAddress | None:
    """The address when ``host`` is an IP literal (v6 with or without brackets), else None."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def normalize_host(host: str) -> str | None:
    """Lower-case name without a trailing dot, or the canonical text of an IP literal;
    None for anything that is neither (percent-escapes, spaces, empty labels…)."""
    ip = parse_ip(host)
    if ip is not None:
        return str(ip)
    name = host.lower().removesuffix(".")
    if not name or len(name) > 253 or not _NAME.fullmatch(name):
        return None
    return name


def address_problem(ip: IPAddress, *, allow_loopback: bool = False) -> str | None:
    """Why ``ip`` must not be reached, or None when it is a global unicast address."""
    if allow_loopback and ip.is_loopback:
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return "v4-mapped IPv6 address"
        if ip in _TEREDO:
            return "Teredo address"
        if ip.sixtofour is not None:
            inner = address_problem(ip.sixtofour)
            return f"6to4 address embedding a non-global one ({inner})" if inner else None
        if ip.is_site_local:
            return "site-local address"
    for flag, why in (
        ("is_unspecified", "unspecified address"),
        ("is_loopback", "loopback address"),
        ("is_link_local", "link-local address"),
        ("is_multicast", "multicast address"),
        ("is_private", "private address"),
        ("is_reserved", "reserved address"),
    ):
        if getattr(ip, flag):
            return why
    if any(ip in net for net in _EXTRA if net.version == ip.version):
        return "special-purpose address"
    if not ip.is_global:  # CGNAT 100.64/10 and what else IANA marks not globally reachable
        return "address not globally reachable"
    return None


class EgressRules:
    """One execution's allowlist and the proxy-wide port and loopback settings."""

    def __init__(
        self, allowlist: Iterable[str], *, ports: Iterable[int] = (80, 443),
        allow_loopback: bool = False, private_hosts: Iterable[str] = (),
        denied: DeniedAddresses | None = None,
    ) -> None:
        self.denied = denied
        self.private_hosts = frozenset(
            h for h in (normalize_host(p) for p in private_hosts) if h is not None)
        self.exact: set[str] = set()
        self.suffixes: set[str] = set()
        for entry in allowlist:
            if entry.startswith("*."):
                suffix = normalize_host(entry[2:])
                if suffix is not None and parse_ip(suffix) is None:
                    self.suffixes.add(suffix)
            elif (host := normalize_host(entry)) is not None:
                self.exact.add(host)
        self.ports = frozenset(ports)
        self.allow_loopback = allow_loopback

    def check_name(self, host: str, port: int) -> str | None:
        """Why ``host:port`` is refused before any lookup, or None (then resolve it)."""
        name = normalize_host(host)
        if name is None:
            return "not a host name"
        if port not in self.ports:
            return f"port {port} is not allowed"
        if name in self.exact:
            return None
        if parse_ip(name) is not None:
            return "IP address not in the allowlist"
        if any(name.endswith("." + suffix) for suffix in self.suffixes):
            return None
        return "host not in the allowlist"

    def check_address(self, ip: IPAddress, host: str | None = None) -> str | None:
        if self.denied is not None:
            inner = ip.ipv4_mapped or ip.sixtofour if isinstance(ip, ipaddress.IPv6Address) \
                else None
            if not self.denied().isdisjoint({ip, inner}):
                return "cluster address"
        problem = address_problem(ip, allow_loopback=self.allow_loopback)
        if problem == "private address" and host is not None \
                and normalize_host(host) in self.private_hosts and not ip.is_loopback \
                and not ip.is_link_local:
            return None  # an operator's own service, named in NAVI_EGRESS_PRIVATE_HOSTS
        return problem
