"""Loading a user's rule file: nft itself in a throwaway namespace, every rule paired
with the line it was written on; iptables-save line by line; the prefixes it names."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from secperf.errors import MechanismError
from secperf.rulesets.flows import derive
from secperf.rulesets.load import load
from secperf.rulesets.model import Chain, Named, Rule, RuleRef, RuleSet
from secperf.rulesets.prefixes import named_prefixes, outside_all, pick_address

DATA = Path(__file__).parent.parent / "data" / "rulesets"
ROUTER = DATA / "router.nft"
needs_nft = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("unshare") is None,
    reason="loading an nft file needs root, nft and unshare",
)


def _written_on(path: Path, line: int | None) -> str:
    """What line `line` of `path` says (a rule as written, on one line)."""
    assert line is not None
    return path.read_text().splitlines()[line - 1].strip()


@needs_nft
def test_router_loads_with_chains_hooks_policies_and_verdicts() -> None:
    rs = load(ROUTER, "nft")
    shape = {(c.family, c.table, c.name): (c.hook, c.type, c.policy, c.line) for c in rs.chains}
    assert shape == {
        ("inet", "filter", "ssh_in"): (None, None, None, 17),
        ("inet", "filter", "input"): ("input", "filter", "drop", 22),
        ("inet", "filter", "forward"): ("forward", "filter", "drop", 31),
        ("ip", "nat", "prerouting"): ("prerouting", "nat", "accept", 45),
        ("ip", "nat", "postrouting"): ("postrouting", "nat", "accept", 50),
    }
    verdicts = {r.ref.line: (r.verdict, r.target) for r in rs.rules()}
    assert verdicts[26] == ("jump", "ssh_in")
    assert verdicts[38] == ("reject", None)
    assert verdicts[19] == ("drop", None)
    assert verdicts[47] == ("dnat", "10.1.5.200")
    assert verdicts[52] == ("masquerade", None)
    assert [r.verdict for r in rs.chain("inet", "filter", "input").rules] == [  # type: ignore[union-attr]
        "accept",
        "accept",
        "jump",
        "accept",
        "accept",
    ]
    assert rs.files == (ROUTER.absolute(),)
    assert rs.set_lines[("inet", "filter", "admins")] == f"{ROUTER.absolute()}:11"
    assert rs.warnings == []


@needs_nft
def test_every_rule_of_the_router_has_its_true_line_and_text() -> None:
    rs = load(ROUTER, "nft")
    rules = rs.rules()
    assert len(rules) == 17
    for r in rules:
        assert _written_on(ROUTER, r.ref.line) == r.text, r
        assert r.ref.handle is not None
        assert r.ref.where() == f"{ROUTER.absolute()}:{r.ref.line}"
    assert rs.by_handle("ip", "nat", rules[-1].ref.handle or 0) == rules[-1]


@needs_nft
def test_a_syntax_error_is_nfts_own_message_at_its_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.nft"
    bad.write_text("table inet t {\n\tchain c {\n\t\ttcp dport 22 acept\n\t}\n}\n")
    with pytest.raises(MechanismError) as err:
        load(bad, "nft")
    assert err.value.where == f"{bad}:3"
    assert "syntax error" in err.value.message
    assert "acept" in err.value.message  # nft's own quote of the line


@needs_nft
def test_an_error_in_an_included_file_is_located_there(tmp_path: Path) -> None:
    (tmp_path / "part.nft").write_text("add rule inet t c tcp dport 22 acept\n")
    top = tmp_path / "top.nft"
    top.write_text('table inet t {\n\tchain c {\n\t}\n}\ninclude "part.nft"\n')
    with pytest.raises(MechanismError) as err:
        load(top, "nft")
    assert err.value.where == f"{tmp_path / 'part.nft'}:1"


@needs_nft
def test_includes_resolve_relative_to_the_file_and_an_empty_glob_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nft 1.0.6 alone looks for a bare include name in /etc only; the loader adds the
    # file's directory, so the result must not depend on where it is run from.
    monkeypatch.chdir(tmp_path)
    top = DATA / "include" / "main.nft"
    rs = load(top, "nft")
    inc = (DATA / "include").absolute()
    assert rs.files == (inc / "main.nft", inc / "services.nft", inc / "extra.nft")
    assert len(rs.warnings) == 1
    assert f"{inc / 'main.nft'}:10" in rs.warnings[0]
    assert "local.d/*.nft" in rs.warnings[0]
    placed = [(r.ref.file.name, r.ref.line, r.text) for r in rs.rules()]
    assert placed == [
        ("extra.nft", 2, 'iifname "lo" accept'),  # `insert rule` puts it first
        ("main.nft", 8, "ct state established,related accept"),
        ("services.nft", 2, "tcp dport 22 accept"),
        ("services.nft", 3, "tcp dport { 80, 443 } accept"),
        ("main.nft", 11, 'iifname "eth0" icmp type echo-request accept'),
        ("extra.nft", 1, "udp dport 123 accept"),
        ("extra.nft", 1, "counter drop"),
    ]


@needs_nft
def test_a_missing_plain_include_is_nfts_error(tmp_path: Path) -> None:
    top = tmp_path / "top.nft"
    top.write_text('table inet t {\n}\ninclude "nowhere.nft"\n')
    with pytest.raises(MechanismError) as err:
        load(top, "nft")
    assert err.value.where == f"{top}:3"
    assert "File not found" in err.value.message


@needs_nft
def test_rules_placed_by_position_lose_their_lines_with_a_warning(tmp_path: Path) -> None:
    f = tmp_path / "cmd.nft"
    f.write_text(
        "add table inet t\n"
        "add chain inet t c { type filter hook input priority 0; policy accept; }\n"
        "add rule inet t c tcp dport 22 accept\n"
        "add rule inet t c tcp dport { 80,\n\t443 } accept\n"
        "add chain inet t d\n"
        "add rule inet t d udp dport 53 accept\n"
        "add rule inet t c tcp dport 8080 accept\n"
        "insert rule inet t d position 0 udp dport 54 accept\n"
    )
    rs = load(f, "nft")
    c = rs.chain("inet", "t", "c")
    d = rs.chain("inet", "t", "d")
    assert c is not None and d is not None
    assert [(r.ref.line, r.text) for r in c.rules] == [
        (3, "tcp dport 22 accept"),
        (4, "tcp dport { 80, 443 } accept"),
        (8, "tcp dport 8080 accept"),
    ]
    assert c.line == 2
    assert [r.ref.line for r in d.rules] == [None, None]
    # the text is then nft's own listing of the rule
    assert sorted(r.text for r in d.rules) == ["udp dport 53 accept", "udp dport 54 accept"]
    assert any("inet t d" in w for w in rs.warnings)


def test_the_router_as_iptables_save_parses_with_its_lines() -> None:
    path = DATA / "router.iptables"
    rs = load(path, "iptables")
    fwd = rs.chain("ip", "filter", "FORWARD")
    assert fwd is not None
    assert (fwd.hook, fwd.type, fwd.policy, fwd.priority) == ("forward", "filter", "drop", 0)
    pre = rs.chain("ip", "nat", "PREROUTING")
    assert pre is not None and (pre.hook, pre.type, pre.priority) == ("prerouting", "nat", -100)
    ssh = rs.chain("ip", "filter", "ssh_in")
    assert ssh is not None and ssh.hook is None and ssh.policy is None
    for r in rs.rules():
        assert _written_on(path, r.ref.line) == r.text
    by_line = {r.ref.line: r for r in rs.rules()}
    assert (by_line[8].verdict, by_line[8].target) == ("dnat", "10.1.5.200")
    assert (by_line[18].verdict, by_line[18].target) == ("jump", "ssh_in")
    assert by_line[20].verdict == "accept"
    assert by_line[26].verdict == "reject"
    assert by_line[9].verdict == "masquerade"
    assert by_line[23].expr[:2] == ("-s", "10.1.66.0/24")


def test_ip6tables_save_is_family_ip6_and_a_bad_line_is_named(tmp_path: Path) -> None:
    f = tmp_path / "v6.rules"
    f.write_text(
        "*filter\n:INPUT DROP [0:0]\n:LOG_DROP - [0:0]\n"
        "-A INPUT -s 2001:db8::/32 -p tcp --dport 22 -j ACCEPT\n"
        '-A INPUT -m comment --comment "log it" -j LOG --log-prefix "x "\n'
        "-A INPUT -j LOG_DROP\nCOMMIT\n"
    )
    rs = load(f, "iptables")
    assert {c.family for c in rs.chains} == {"ip6"}
    assert [r.verdict for r in rs.rules()] == ["accept", "continue", "jump"]
    f.write_text("*filter\n:INPUT DROP [0:0]\n-A OUTPUT -j ACCEPT\nCOMMIT\n")
    with pytest.raises(MechanismError) as err:
        load(f, "iptables")
    assert err.value.where == f"{f.absolute()}:3"


@needs_nft
def test_named_prefixes_of_the_router_with_their_lines() -> None:
    rs = load(ROUTER, "nft")
    found = {(n.network, n.where.rsplit(":", 1)[1]) for n in named_prefixes(rs)}
    for network, line in [
        ("10.1.0.0/16", 36),
        ("10.1.0.0/16", 52),
        ("10.1.5.200/32", 39),
        ("10.1.5.200/32", 47),
        ("10.1.66.0/24", 35),
        ("10.1.9.0/24", 11),
        ("192.168.77.5/32", 11),
        ("203.0.113.10/32", 47),
    ]:
        assert (network, str(line)) in found
    whats = {(n.network, n.what) for n in named_prefixes(rs)}
    assert ("10.1.5.200/32", "nat target") in whats


def test_named_prefixes_of_iptables_and_an_ipset_is_refused(tmp_path: Path) -> None:
    rs = load(DATA / "router.iptables", "iptables")
    found = {(n.network, n.where.rsplit(":", 1)[1]) for n in named_prefixes(rs)}
    assert {("10.1.66.0/24", "23"), ("10.1.5.200/32", "8"), ("192.168.77.5/32", "30")} <= found
    f = tmp_path / "ipset.rules"
    f.write_text(
        "*filter\n:INPUT DROP [0:0]\n"
        "-A INPUT -m iprange --src-range 10.2.0.1-10.2.0.9 -j ACCEPT\n"
        "-A INPUT -m set --match-set admins src -j ACCEPT\nCOMMIT\n"
    )
    with pytest.raises(MechanismError) as err:
        named_prefixes(load(f, "iptables"))
    assert err.value.where == f"{f.absolute()}:4"
    assert "ipset" in err.value.message


def test_a_set_reference_that_names_no_set_is_refused_with_its_line() -> None:
    ref = RuleRef(file=Path("x.nft"), line=7, family="inet", table="t", chain="c", index=0)
    match = {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}}}
    match["match"]["right"] = "@nope"  # type: ignore[assignment]
    rule = Rule(ref=ref, verdict="accept", target=None, expr=(match, {"accept": None}), text="")
    chain = Chain("inet", "t", "c", "input", "filter", 0, "accept", (rule,))
    rs = RuleSet(source=Path("x.nft"), format="nft", chains=(chain,), raw=[])
    with pytest.raises(MechanismError) as err:
        named_prefixes(rs)
    assert err.value.where == "x.nft:7"


def test_pick_address_avoids_narrower_named_prefixes() -> None:
    named = [
        Named("10.1.0.0/16", "a:1"),
        Named("10.1.0.0/24", "a:2"),
        Named("10.1.1.1/32", "a:3", "address"),
    ]
    addr = pick_address("10.1.0.0/16", named)
    assert addr.startswith("10.1.") and not addr.startswith("10.1.0.") and addr != "10.1.1.1"
    assert pick_address("10.1.0.0/24", named).startswith("10.1.0.")
    assert pick_address("10.1.1.1/32", named) == "10.1.1.1"
    assert pick_address("10.1.1.0/24", named, avoid=["10.1.1.0/25"]).startswith("10.1.1.1")
    # outside: not in any named prefix but the /0, and not a documentation range that is named
    out = outside_all([*named, Named("0.0.0.0/0", "a:4"), Named("198.51.100.0/24", "a:5")], "ip")
    assert out.startswith("203.0.113.")
    assert ":" in outside_all(named, "ip6")


@needs_nft
def test_nft_alone_does_not_look_for_a_bare_include_beside_the_file(tmp_path: Path) -> None:
    # Why the loader passes -I: nft 1.0.6 searches a bare name in /etc only (and ./x
    # relative to its working directory), not beside the including file.
    (tmp_path / "part.nft").write_text("add table inet t\n")
    top = tmp_path / "top.nft"
    top.write_text('include "part.nft"\n')
    alone = subprocess.run(
        ["unshare", "-n", "nft", "-f", str(top)], capture_output=True, text=True, cwd="/"
    )
    assert alone.returncode != 0 and "File not found: part.nft" in alone.stderr
    rs = load(top, "nft")
    assert rs.files == (top, tmp_path / "part.nft")


@needs_nft
def test_named_prefixes_reads_every_construct_that_names_addresses() -> None:
    path = DATA / "constructs.nft"
    rs = load(path, "nft")
    for r in rs.rules():
        assert r.text.startswith(_written_on(path, r.ref.line).rstrip("\\").strip()), r
    assert rs.rules()[2].text == "ip saddr $NETS udp dport 123 accept"  # `\\` joins lines
    found = {(n.network, n.what, int(n.where.rsplit(":", 1)[1])) for n in named_prefixes(rs)}
    assert {
        ("10.30.0.1/32", "address", 9),  # a verdict map's keys, at the map's line
        ("10.40.0.1/32", "address", 13),  # the address part of a concatenated set
        ("2001:db8:10::/48", "prefix", 17),
        ("10.70.0.1/32", "address", 36),  # a map's values of address type
        ("10.50.0.1/32", "range end", 25),
        ("10.50.0.9/32", "range end", 25),
        ("10.20.0.0/16", "prefix", 26),  # a define over two lines, on the rule's line
        ("172.16.0.0/12", "prefix", 26),
        ("10.60.0.0/24", "prefix", 30),
        ("10.61.0.1/32", "address", 30),
        ("10.71.0.1/32", "nat target", 43),
        ("198.51.100.1/32", "range end", 49),
        ("198.51.100.9/32", "range end", 49),
    } <= found
    notes: list[str] = []
    flows = derive(rs, ["lan0", "wan0"], notes)
    by = {(f.rule.line if f.rule else None, f.expect): f for f in flows}
    assert by[(25, "accept")].src == "10.50.0.1" and by[(25, "accept")].dport == 1000
    assert by[(28, "accept")].src == "10.40.0.1" and by[(28, "accept")].dport == 22
    assert ":" in by[(29, "accept")].src
    assert by[(43, "accept")].served_by == "10.71.0.1" and by[(43, "accept")].served_port == 443
    assert by[(43, "accept")].dport == 8443
    assert any(":31: no flow" in n and "mark" in n for n in notes)
    assert any(":44: no flow" in n for n in notes)  # a DNAT through a map


def test_an_address_compared_with_another_field_is_refused() -> None:
    ref = RuleRef(file=Path("x.nft"), line=9, family="ip", table="t", chain="c", index=0)
    left = {"payload": {"protocol": "ip", "field": "saddr"}}
    right = {"payload": {"protocol": "ip", "field": "daddr"}}
    rule = Rule(
        ref=ref,
        verdict="drop",
        target=None,
        expr=({"match": {"op": "==", "left": left, "right": right}}, {"drop": None}),
        text="ip saddr ip daddr drop",
    )
    chain = Chain("ip", "t", "c", "forward", "filter", 0, "accept", (rule,))
    rs = RuleSet(source=Path("x.nft"), format="nft", chains=(chain,), raw=[])
    with pytest.raises(MechanismError) as err:
        named_prefixes(rs)
    assert err.value.where == "x.nft:9"


@needs_nft
def test_a_rule_naming_an_interface_by_index_loads_once_it_is_given(tmp_path: Path) -> None:
    f = tmp_path / "iif.nft"
    f.write_text(
        "table inet t {\n\tchain c {\n\t\ttype filter hook input priority 0;\n"
        '\t\tiif "lan0" accept\n\t}\n}\n'
    )
    with pytest.raises(MechanismError) as err:
        load(f, "nft")
    assert err.value.where == f"{f}:4" and "interfaces" in (err.value.fix or "")
    rs = load(f, "nft", interfaces=["lo", "lan0"])
    assert rs.rules()[0].text == 'iif "lan0" accept'
    with pytest.raises(MechanismError, match="cannot create"):
        load(f, "nft", interfaces=["a/b"])
