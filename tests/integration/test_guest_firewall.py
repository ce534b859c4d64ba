"""adare_guest/firewall.py against real nftables and iptables, each in a fresh network
namespace (``unshare --net``: the host's own firewall is never touched).

In the namespace a ruleset that drops new inbound connections is loaded, two listeners
are opened on loopback (loopback traffic passes the input hook), and the script opens
one of the two ports. The test then checks the agent's port accepts connections and
the other port is still dropped, so the script opened exactly one port.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from adare_guest import firewall

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for unshare --net"),
    pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)"),
]

PORT = 18765
OTHER = 18766

_DRIVER = textwrap.dedent(
    """
    import json, socket, subprocess, sys

    setup, script, port, other = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    listeners = []
    for p in (port, other):
        s = socket.socket()
        s.bind(("127.0.0.1", p))
        s.listen(4)
        listeners.append(s)

    def reachable(p):
        c = socket.socket()
        c.settimeout(1.0)
        try:
            c.connect(("127.0.0.1", p))
            return True
        except OSError:
            return False
        finally:
            c.close()

    subprocess.run(["sh", "-euc", setup], check=True)
    before = {"port": reachable(port), "other": reachable(other)}
    done = subprocess.run([sys.executable, script, str(port)], capture_output=True, text=True)
    after = {"port": reachable(port), "other": reachable(other)}
    print(json.dumps({"before": before, "after": after, "rc": done.returncode,
                      "report": done.stdout, "stderr": done.stderr}))
    """
)

NFT_DROP = """nft -f - <<'EOF'
table inet filter {
  chain input {
    type filter hook input priority filter; policy drop;
    ct state established,related accept
    tcp dport 22 accept
  }
}
EOF"""

IPTABLES_DROP = (
    "iptables -P INPUT DROP; "
    "iptables -A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT; "
    "iptables -A INPUT -p tcp --dport 22 -j ACCEPT"
)


def _in_netns(setup: str, tmp_path: Path, path_dirs: tuple[Path, ...] = ()) -> dict[str, object]:
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([*map(str, path_dirs), "/usr/sbin:/usr/bin:/sbin:/bin"])
    done = subprocess.run(
        ["unshare", "--net", sys.executable, str(driver), setup, firewall.__file__,
         str(PORT), str(OTHER)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    assert result["rc"] == 0, result["stderr"]
    return result


def _actions(result: dict[str, object]) -> list[str]:
    report = json.loads(str(result["report"]))
    assert report["port"] == PORT
    return list(report["actions"])


@pytest.mark.skipif(shutil.which("nft") is None, reason="needs nft (nftables)")
def test_nftables_drop_policy_gets_one_port_opened(tmp_path: Path) -> None:
    result = _in_netns(NFT_DROP, tmp_path)
    assert result["before"] == {"port": False, "other": False}
    assert result["after"] == {"port": True, "other": False}
    assert _actions(result) == [f"nftables: inet filter input accepts {PORT}/tcp"]


@pytest.mark.parametrize("backend", ["nft", "legacy"])
def test_iptables_drop_policy_gets_one_port_opened(tmp_path: Path, backend: str) -> None:
    """``iptables`` of either backend, chosen like update-alternatives would."""
    if shutil.which(f"iptables-{backend}") is None:
        pytest.skip(f"needs iptables-{backend}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("iptables", "ip6tables"):
        (bin_dir / tool).symlink_to(shutil.which(f"{tool}-{backend}") or "/usr/sbin/false")
    result = _in_netns(IPTABLES_DROP, tmp_path, (bin_dir,))
    assert result["before"] == {"port": False, "other": False}
    assert result["after"] == {"port": True, "other": False}
    # iptables-nft's table is left to iptables: one rule, not a second one through nft.
    assert _actions(result) == [f"iptables: INPUT accepts {PORT}/tcp"]


def test_no_firewall_changes_nothing(tmp_path: Path) -> None:
    result = _in_netns("true", tmp_path)
    assert result["before"] == {"port": True, "other": True}
    assert result["after"] == {"port": True, "other": True}
    assert _actions(result) == []


def test_input_chains_reads_nft_listing() -> None:
    listing = textwrap.dedent(
        """
        table inet filter {
        \tchain input {
        \t\ttype filter hook input priority filter; policy drop;
        \t}
        \tchain forward {
        \t\ttype filter hook forward priority filter; policy drop;
        \t}
        \tchain helper {
        \t}
        }
        table ip nat {
        \tchain prerouting {
        \t\ttype nat hook prerouting priority dstnat; policy accept;
        \t}
        \tchain input {
        \t\ttype nat hook input priority 100; policy accept;
        \t}
        }
        table ip6 extra {
        \tchain in2 {
        \t\ttype filter hook input priority -5; policy accept;
        \t}
        }
        """
    )
    assert firewall.input_chains(listing) == [("inet", "filter", "input"), ("ip6", "extra", "in2")]


def test_iptables_needs_rule_only_when_input_filters() -> None:
    assert not firewall.iptables_needs_rule("-P INPUT ACCEPT\n")
    assert firewall.iptables_needs_rule("-P INPUT DROP\n")
    assert firewall.iptables_needs_rule("-P INPUT ACCEPT\n-A INPUT -j ufw-before-input\n")


def test_bad_port_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert firewall.main(["0"]) == 2
    assert firewall.main(["http"]) == 2
    assert firewall.main([]) == 2
    assert "usage" in capsys.readouterr().err
