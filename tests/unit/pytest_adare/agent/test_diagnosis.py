"""The diagnosis decision on recorded guest facts (no VM needed)."""

from __future__ import annotations

from pytest_adare.agent.diagnosis import (
    AgentFacts,
    decide,
    firewall_blocks,
    listening_addresses,
    unreachable,
)

HEADER = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt"
    "   uid  timeout inode\n"
)
SSH = "   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 1 1 0\n"
AGENT_ALL = (
    "   1: 00000000:494D 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 2 1 0\n"
)
AGENT_LOOP = (
    "   1: 0100007F:494D 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 2 1 0\n"
)
AGENT_ESTABLISHED = (
    "   2: 0F02000A:494D 0202000A:C350 01 00000000:00000000 00:00000000 00000000 0 0 3 1 0\n"
)
TCP6_ANY = (
    "   0: 00000000000000000000000000000000:494D 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000 0 0 4 1 0\n"
)
TCP6_LOOP = (
    "   0: 00000000000000000000000001000000:494D 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000 0 0 4 1 0\n"
)
NFT_DROP = """table inet filter {
\tchain input {
\t\ttype filter hook input priority filter; policy accept;
\t\ttcp dport 18765 drop
\t}
}
"""
NFT_POLICY_DROP = """table inet filter {
\tchain input {
\t\ttype filter hook input priority filter; policy drop;
\t\tct state established,related accept
\t}
}
"""
IPTABLES_REJECT = """*filter
:INPUT ACCEPT [0:0]
-A INPUT -p tcp -m tcp --dport 18765 -j REJECT --reject-with icmp-port-unreachable
COMMIT
"""


def running(**overrides: object) -> AgentFacts:
    facts = AgentFacts(
        agent_pids=[231],
        proc_net_tcp=HEADER + SSH + AGENT_ALL,
        log_path="/adare/run/agent.log",
        connect_errors=["ConnectionClosedError: no close frame received or sent"],
    )
    for key, value in overrides.items():
        setattr(facts, key, value)
    return facts


def test_listening_addresses_reads_ipv4_and_ipv6_listeners_of_the_port_only() -> None:
    text = HEADER + SSH + AGENT_LOOP + AGENT_ESTABLISHED + TCP6_ANY + TCP6_LOOP
    assert listening_addresses(text, 18765) == ["127.0.0.1", "::", "::1"]
    assert listening_addresses(text, 22) == ["0.0.0.0"]
    assert listening_addresses("garbage\n\n", 18765) == []


def test_agent_not_running_names_the_last_log_line() -> None:
    facts = running(
        agent_pids=[],
        log_tail=["INFO serving", "Traceback (most recent call last):", "ImportError: no x", ""],
    )
    assert decide(facts) == (
        "the agent is not running in the guest (it exited); last log line: ImportError: no x"
    )


def test_agent_never_started_says_there_is_no_log() -> None:
    facts = running(agent_pids=[], log_tail=[])
    assert decide(facts) == (
        "the agent is not running in the guest and left no log at /adare/run/agent.log"
    )


def test_loopback_only_listener() -> None:
    facts = running(proc_net_tcp=HEADER + AGENT_LOOP + TCP6_LOOP)
    assert decide(facts).startswith("the agent listens only on 127.0.0.1:18765 inside the guest")


def test_nftables_drop_rule_is_named_with_its_chain() -> None:
    facts = running(nft_ruleset=NFT_DROP)
    assert decide(facts) == (
        "the agent listens on 0.0.0.0:18765 inside the guest but the forwarded connection is "
        "dropped: nftables rule in table inet filter chain input drops it: `tcp dport 18765 drop`"
    )


def test_nftables_input_policy_drop_without_an_accept_for_the_port() -> None:
    assert firewall_blocks(running(nft_ruleset=NFT_POLICY_DROP)) == [
        "nftables chain inet filter input has input policy drop"
    ]


def test_iptables_reject_rule() -> None:
    assert "iptables rule drops it: `-A INPUT -p tcp" in decide(
        running(iptables_rules=IPTABLES_REJECT)
    )


def test_firewalld_active_without_the_port_open() -> None:
    facts = running(firewalld_state="running", firewalld_zone="public", firewalld_ports="")
    assert decide(facts).endswith(
        "dropped: firewalld is active in zone public without 18765/tcp open"
    )
    opened = running(
        firewalld_state="running", firewalld_zone="public", firewalld_ports="18765/tcp"
    )
    assert firewall_blocks(opened) == []
    assert firewall_blocks(running(firewalld_state="not running")) == []


def test_listening_and_no_firewall_reports_the_connect_error() -> None:
    assert decide(running()) == (
        "the agent listens on 0.0.0.0:18765 inside the guest and no firewall rule blocks it, "
        "yet the host could not connect: ConnectionClosedError: no close frame received or sent"
    )


IP_ADDR_NONE = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n"
IP_LINK_DOWN = (
    "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT\n"
    "2: enp0s2: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN mode DEFAULT\n"
)
IP_ADDR_DHCP = IP_ADDR_NONE + (
    "2: enp0s2    inet 10.0.2.15/24 brd 10.0.2.255 scope global dynamic enp0s2\n"
)


def test_a_guest_without_an_address_is_named_with_its_links_and_the_serial_hint() -> None:
    """A disk installed for another NIC name leaves QEMU's NIC down (issue 11)."""
    facts = running(ipv4_addresses=IP_ADDR_NONE, links=IP_LINK_DOWN)
    assert decide(facts) == (
        "the agent listens on 0.0.0.0:18765 but the guest has no IPv4 address outside "
        "loopback (links: enp0s2 DOWN), so QEMU's user network cannot reach it: its network "
        "configuration does not bring up this NIC (it sits in PCI slot 2, enp0s2); "
        "--adare-transport=serial needs no network"
    )


def test_a_guest_with_an_address_reports_it_beside_the_connect_error() -> None:
    facts = running(ipv4_addresses=IP_ADDR_DHCP, links=IP_LINK_DOWN)
    assert decide(facts).endswith(
        "no close frame received or sent (guest addresses: enp0s2 10.0.2.15/24; "
        "--adare-transport=serial needs no network)"
    )


def test_running_but_not_listening_uses_the_serial_health_error() -> None:
    facts = running(
        proc_net_tcp=HEADER + SSH,
        serial_health={"listening": False, "last_error": "bind 0.0.0.0:18765: address in use"},
    )
    assert decide(facts) == (
        "the agent runs but nothing listens on port 18765 in the guest; "
        "last error: bind 0.0.0.0:18765: address in use"
    )


def test_without_qga_the_serial_health_report_decides() -> None:
    facts = AgentFacts(
        qga_error="QGAError: no answer",
        serial_health={"listen": "127.0.0.1:18765", "listening": True, "last_error": None},
    )
    assert decide(facts).startswith("the agent listens only on 127.0.0.1:18765")


def test_neither_side_channel_answers() -> None:
    facts = AgentFacts(qga_error="VMTimeout: QGA", serial_error="TimeoutError")
    assert decide(facts).startswith("the guest answers neither QGA nor the agent's serial link")


def test_unreachable_carries_the_facts_as_details() -> None:
    error = unreachable(running(nft_ruleset=NFT_DROP))
    assert error.details["agent_pids"] == [231]
    assert "dropped" in error.diagnosis
