"""Egress rules: which names pass before DNS, which addresses pass after it (no traffic)."""

from __future__ import annotations

import ipaddress

import pytest

from runtime.egress.rules import EgressRules, address_problem, normalize_host


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.255.0.1", "0.0.0.0", "10.1.2.3", "172.16.0.1", "172.31.255.255",
    "192.168.1.1", "169.254.169.254", "100.64.0.1", "100.127.255.254", "224.0.0.1",
    "239.255.255.250", "255.255.255.255", "240.0.0.1", "192.0.2.1", "198.18.0.1",
    "198.51.100.7", "203.0.113.9", "192.0.0.8",
    "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "fec0::1", "ff02::1", "ff0e::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:8.8.8.8", "::127.0.0.1", "::10.0.0.1",
    "64:ff9b::a00:1", "64:ff9b::7f00:1", "2001::1", "2001:0:4136:e378::1", "2001:db8::1",
    "2002:7f00:1::1", "2002:a00:1::1", "2002:c0a8:101::1", "100::1",
])
def test_non_global_addresses_are_refused(address: str) -> None:
    """Red if any of these (the host, the LAN, the cloud metadata service…) were allowed."""
    assert address_problem(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "151.101.0.223",
                                     "2606:4700::1111", "2a04:4e42::223", "2002:808:808::1"])
def test_global_unicast_addresses_pass(address: str) -> None:
    assert address_problem(ipaddress.ip_address(address)) is None


def test_allow_loopback_lets_only_loopback_through() -> None:
    for text in ("127.0.0.1", "127.0.0.2", "::1"):
        assert address_problem(ipaddress.ip_address(text), allow_loopback=True) is None
    for text in ("10.0.0.1", "::ffff:127.0.0.1", "169.254.169.254", "0.0.0.0"):
        assert address_problem(ipaddress.ip_address(text), allow_loopback=True) is not None


def test_names_match_exactly_case_insensitively() -> None:
    rules = EgressRules(["pypi.org", "Files.PythonHosted.org."])
    assert rules.check_name("pypi.org", 443) is None
    assert rules.check_name("PyPI.ORG.", 80) is None
    assert rules.check_name("files.pythonhosted.org", 443) is None
    for host in ("evil.pypi.org", "pypi.org.evil.com", "pypi.or", "xpypi.org", "pypi.org%00",
                 "pypi.org evil", ""):
        assert rules.check_name(host, 443) is not None, host


def test_wildcards_match_below_the_apex_only() -> None:
    rules = EgressRules(["*.example.org"])
    assert rules.check_name("a.example.org", 443) is None
    assert rules.check_name("a.b.EXAMPLE.org", 443) is None
    assert rules.check_name("example.org", 443) == "host not in the allowlist"
    assert rules.check_name("badexample.org", 443) is not None
    assert rules.check_name("example.org.evil.com", 443) is not None


def test_ip_literals_pass_only_when_listed() -> None:
    rules = EgressRules(["93.184.216.34", "*.34"])
    assert rules.check_name("93.184.216.34", 443) is None
    assert rules.check_name("1.2.3.34", 443) == "IP address not in the allowlist"
    assert rules.check_name("[::1]", 443) == "IP address not in the allowlist"
    assert EgressRules(["localhost"]).check_name("127.0.0.1", 443) is not None


def test_ports_are_checked_before_the_allowlist() -> None:
    rules = EgressRules(["pypi.org"])
    assert rules.check_name("pypi.org", 22) == "port 22 is not allowed"
    assert EgressRules(["pypi.org"], ports=[8443]).check_name("pypi.org", 8443) is None


def test_normalize_host() -> None:
    assert normalize_host("[::FFFF:7f00:1]") == "::ffff:7f00:1"
    assert normalize_host("Example.COM.") == "example.com"
    assert normalize_host("a..b") is None
    assert normalize_host("a/b") is None
    assert normalize_host("x" * 64 + ".org") is None


def test_private_hosts_reach_private_addresses_and_nothing_else() -> None:
    import ipaddress as ipa

    rules = EgressRules(["searxng", "example.org"], private_hosts=["SearXNG."])
    private, ula = ipa.ip_address("172.18.0.5"), ipa.ip_address("fd00::5")
    assert rules.check_address(private, "searxng") is None
    assert rules.check_address(ula, "searxng") is None
    assert rules.check_address(private, "example.org") == "private address"
    assert rules.check_address(private) == "private address"  # no name: no exception
    for never in ("127.0.0.1", "169.254.169.254", "100.64.0.1", "224.0.0.1"):
        assert rules.check_address(ipa.ip_address(never), "searxng") is not None, never
    assert EgressRules(["searxng"]).check_address(private, "searxng") == "private address"


def test_a_cluster_address_is_refused_even_when_everything_else_lets_it_through() -> None:
    """Red if `denied` is not checked: 203.0.113.7 (TEST-NET-3) stands for a cluster node
    with a public address; the name is allowlisted and a private host (so the range check
    passes it), and only the cluster's deny set refuses it, also v4-mapped and 6to4."""
    node = ipaddress.ip_address("203.0.113.7")
    rules = EgressRules(["node.cluster.test"], private_hosts=["node.cluster.test"],
                        denied=lambda: frozenset({node}))
    open_rules = EgressRules(["node.cluster.test"], private_hosts=["node.cluster.test"])
    assert rules.check_name("node.cluster.test", 443) is None
    assert open_rules.check_address(node, "node.cluster.test") is None  # the control
    assert rules.check_address(node, "node.cluster.test") == "cluster address"
    for other in ("::ffff:203.0.113.7", "2002:cb00:7107::1"):
        assert rules.check_address(ipaddress.ip_address(other)) == "cluster address"
    assert rules.check_address(ipaddress.ip_address("203.0.113.8"),
                               "node.cluster.test") is None
