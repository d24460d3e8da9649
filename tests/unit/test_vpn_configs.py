"""VPN tunnels without root: addresses, names, rendered configs, keys, the schema's refusals."""

from __future__ import annotations

import gzip
import ipaddress
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import ValidationError

from secperf.errors import MechanismError
from secperf.mechanisms.registry import MECHANISMS
from secperf.mechanisms.vpn import (
    TUNNEL_NET4,
    TUNNEL_NET6,
    TunnelEnd,
    VpnSpec,
    base,
    cpu_seconds,
    from_spec,
    ipsec,
    make,
    memory,
    openvpn,
    pptp,
    rss_bytes,
    tinc,
    tunnel_addresses,
    tunnel_name,
    vtun,
    wireguard,
)
from secperf.scenario.scenario import Scenario
from secperf.testbed import topology
from secperf.testbed.topology import ACL_RESERVED_NET4, ACL_RESERVED_NET6, TESTBED_NET4


class FakeHost:
    name = "fake"
    cpu_groups: ClassVar[list[dict[str, Any]]] = []


def ends(v6: bool = False, routes_a: tuple[str, ...] = (), routes_b: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    (a4, b4), (a6, b6) = tunnel_addresses(0)
    a = TunnelEnd(FakeHost(), "client", "198.18.1.2", a4, a6 if v6 else None, routes_a)  # type: ignore[arg-type]
    b = TunnelEnd(FakeHost(), "server", "198.18.2.2", b4, b6 if v6 else None, routes_b)  # type: ignore[arg-type]
    return a, b


def needs(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (scripts/setup.sh installs it)")


# -- addresses and names ---------------------------------------------------------------


def test_tunnel_addresses_are_testbed_addresses_clear_of_the_acl_ranges() -> None:
    assert TUNNEL_NET4.subnet_of(TESTBED_NET4) and not TUNNEL_NET4.overlaps(ACL_RESERVED_NET4)
    assert not TUNNEL_NET6.overlaps(ACL_RESERVED_NET6)
    assert ipaddress.IPv6Network("2001:2:0:f0::/64") == TUNNEL_NET6
    assert TUNNEL_NET4.subnet_of(topology.TUNNEL_NET4)
    assert TUNNEL_NET6.subnet_of(topology.TUNNEL_NET6)
    (a4, b4), (a6, b6) = tunnel_addresses(0)
    assert (a4, b4) == ("198.18.240.1/30", "198.18.240.2/30")
    assert (a6, b6) == ("2001:2:0:f0::1/120", "2001:2:0:f0::2/120")
    (c4, _), (c6, _) = tunnel_addresses(1)
    assert c4 == "198.18.240.5/30" and c6 == "2001:2:0:f0::101/120"
    last = tunnel_addresses(base.MAX_TUNNELS - 1)[0][1]
    assert ipaddress.IPv4Interface(last).ip in TUNNEL_NET4
    with pytest.raises(MechanismError):
        tunnel_addresses(base.MAX_TUNNELS)


def test_device_names_carry_the_prefix_and_fit_the_kernel_limit() -> None:
    assert tunnel_name("sp1a2b3", 0) == "sp1a2b3v0"
    longest = tunnel_name("a" * 12, 9)
    assert len(longest) + 1 <= 15  # + the end letter
    with pytest.raises(MechanismError, match="device names"):
        tunnel_name("a" * 12, 10)


def test_ends_are_checked() -> None:
    a, b = ends()
    base.check_ends(a, b)
    with pytest.raises(MechanismError, match="loop"):
        base.check_ends(*ends(routes_a=("198.18.2.0/24",)))
    other = TunnelEnd(FakeHost(), "server", "2001:2:0:2::2", b.inner4)  # type: ignore[arg-type]
    with pytest.raises(MechanismError, match="families"):
        base.check_ends(a, other)
    with pytest.raises(MechanismError, match="named"):
        base.check_ends(a, a)
    with pytest.raises(MechanismError, match="not plain"):
        TunnelEnd(FakeHost(), "Bad Name", "198.18.1.2", a.inner4)  # type: ignore[arg-type]


# -- wireguard ------------------------------------------------------------------------


def test_wireguard_conf_names_the_peer_and_its_networks(tmp_path: Path) -> None:
    needs("wg")
    a, b = ends(v6=True, routes_a=("198.18.99.0/24",))
    vpn = wireguard.Wireguard()
    paths = vpn.render(a, b, tmp_path, "sp1v0")
    assert vpn.devices() == {"client": "sp1v0a", "server": "sp1v0b"}
    conf_a = paths[0].read_text()
    assert "Endpoint = 198.18.2.2:51820" in conf_a
    assert "AllowedIPs = 198.18.240.2/32, 2001:2:0:f0::2/128, 198.18.99.0/24" in conf_a
    assert "198.18.99.0/24" not in paths[1].read_text()  # behind the server, not the client
    assert stat.S_IMODE(paths[0].stat().st_mode) == 0o600  # holds a private key
    # each end's peer key is the other end's public key
    priv_b = paths[1].read_text().split("PrivateKey = ")[1].split()[0]
    pub_b = subprocess.run(
        ["wg", "pubkey"], input=priv_b + "\n", capture_output=True, text=True, check=True
    ).stdout.strip()
    assert f"PublicKey = {pub_b}" in conf_a
    v6 = wireguard.render_conf("k", a, TunnelEnd(FakeHost(), "s", "2001:2:0:2::2", b.inner4), "p")  # type: ignore[arg-type]
    assert "Endpoint = [2001:2:0:2::2]:51820" in v6
    with pytest.raises(MechanismError, match="one cipher"):
        wireguard.Wireguard(cipher="aes-256-gcm")


# -- openvpn ---------------------------------------------------------------------------


def _ovpn_conf(vpn: openvpn.OpenVpn, server: bool, v6: bool = False) -> str:
    a, b = ends(v6=v6)
    files = {k: Path(f"/x/{k}") for k in ("ca", "server_cert", "server_key", "client_cert",
                                          "client_key", "static")}  # fmt: skip
    me, peer = (b, a) if server else (a, b)
    return openvpn.render_conf(vpn, me, peer, "sp1v0b" if server else "sp1v0a", files, server)


def test_openvpn_tls_udp_conf() -> None:
    vpn = openvpn.OpenVpn(cipher="aes-128-gcm", compression="lz4")
    server = _ovpn_conf(vpn, True, v6=True)
    for line in ("dev sp1v0b", "proto udp4", "local 198.18.2.2", "remote 198.18.1.2 1194",
                 "ifconfig 198.18.240.2 198.18.240.1", "tls-server", "dh none",
                 "remote-cert-tls client", "data-ciphers AES-128-GCM", "allow-compression yes",
                 "compress lz4", "disable-dco", "ifconfig-ipv6 2001:2:0:f0::2/120 2001:2:0:f0::1",
                 ):  # fmt: skip
        assert line in server.splitlines(), line
    client = _ovpn_conf(vpn, False)
    assert "tls-client" in client and "remote-cert-tls server" in client
    assert "dh none" not in client


def test_openvpn_tcp_static_and_none() -> None:
    tcp = openvpn.OpenVpn(cipher="none", transport="tcp")
    server, client = _ovpn_conf(tcp, True), _ovpn_conf(tcp, False)
    assert "proto tcp4-server" in server and "remote 198.18.1.2 1194" not in server
    assert "proto tcp4-client" in client and "nobind" in client
    assert "auth none" in server and "data-ciphers none" in server
    assert "compress" not in server  # compression off: no framing at all
    static = openvpn.OpenVpn(cipher="aes-256-cbc", auth="static", compression="lzo")
    conf = _ovpn_conf(static, True)
    assert "secret /x/static 0" in conf and "cipher AES-256-CBC" in conf
    assert "secret /x/static 1" in _ovpn_conf(static, False)
    assert "tls-server" not in conf and "data-ciphers" not in conf
    with pytest.raises(MechanismError, match="no AEAD"):
        openvpn.OpenVpn(cipher="aes-256-gcm", auth="static")


def test_openvpn_blowfish_loads_the_legacy_provider() -> None:
    """BF-CBC (document 003's Blowfish) is in OpenSSL 3's legacy provider only."""
    bf = openvpn.OpenVpn(cipher="bf-cbc")
    conf = _ovpn_conf(bf, True).splitlines()
    for line in ("data-ciphers BF-CBC", "data-ciphers-fallback BF-CBC",
                 "providers legacy default", "auth SHA256"):  # fmt: skip
        assert line in conf, line
    assert "providers legacy default" not in _ovpn_conf(openvpn.OpenVpn(), True)
    static = _ovpn_conf(openvpn.OpenVpn(cipher="bf-cbc", auth="static"), False)
    assert "cipher BF-CBC" in static and "providers legacy default" in static


def test_openvpn_certificates_verify_and_carry_key_usage(tmp_path: Path) -> None:
    needs("openssl")
    files = openvpn.make_tls_files(tmp_path, "sp1v0")
    for role, eku in (("server", "TLS Web Server Authentication"),
                      ("client", "TLS Web Client Authentication")):  # fmt: skip
        crt = str(files[f"{role}_cert"])
        verify = subprocess.run(
            ["openssl", "verify", "-CAfile", str(files["ca"]), crt], capture_output=True, text=True
        )
        assert verify.returncode == 0, verify.stdout + verify.stderr
        text = subprocess.run(
            ["openssl", "x509", "-noout", "-text", "-in", crt], capture_output=True, text=True
        ).stdout
        assert "Digital Signature" in text and eku in text
        assert stat.S_IMODE(files[f"{role}_key"].stat().st_mode) == 0o600


# -- ipsec ------------------------------------------------------------------------------


def test_ipsec_confs() -> None:
    a, b = ends(routes_a=("198.18.99.0/24",), routes_b=("198.18.98.0/24",))
    conf = ipsec.render_swanctl_conf(a, b, "aes128gcm16", "tunnel", True, "c2VjcmV0")
    assert "local_ts = 198.18.240.1/32,198.18.98.0/24" in conf  # behind a: what b routes to it
    assert "remote_ts = 198.18.240.2/32,198.18.99.0/24" in conf
    assert "esp_proposals = aes128gcm16" in conf and "encap = yes" in conf
    assert "secret = 0sc2VjcmV0" in conf
    transport = ipsec.render_swanctl_conf(a, b, "null-sha256", "transport", False, "x")
    assert "local_ts = dynamic" in transport and "encap = no" in transport
    ss = ipsec.render_strongswan_conf(Path("/run/x.vici"), libipsec=True)
    load = next(line for line in ss.splitlines() if "load =" in line).split()
    assert "kdf" in load
    assert load.index("kernel-libipsec") < load.index("kernel-netlink")
    assert "socket = unix:///run/x.vici" in ss
    assert "kernel-libipsec" not in ipsec.render_strongswan_conf(Path("/x"), libipsec=False)
    assert ipsec.ESP_PROPOSALS["none"] == "null-sha256"


def test_kernel_esp_is_read_from_the_kernel_config(tmp_path: Path) -> None:
    cfg = tmp_path / "config.gz"
    cfg.write_bytes(gzip.compress(b"CONFIG_XFRM=y\n# CONFIG_INET_ESP is not set\n"))
    assert ipsec.kernel_has_esp(cfg) is False
    cfg.write_bytes(gzip.compress(b"CONFIG_XFRM=y\nCONFIG_INET_ESP=m\n"))
    assert ipsec.kernel_has_esp(cfg) is True
    assert ipsec.kernel_has_esp(tmp_path / "absent.gz") is None


# -- tinc and vtun -----------------------------------------------------------------------


def test_tinc_dirs_hold_both_nodes_with_the_same_crypto(tmp_path: Path) -> None:
    needs("tincd")
    a, b = ends(routes_a=("198.18.99.0/24",))
    vpn = tinc.Tinc(cipher="aes-128-cbc", digest="sha1", compression="zlib", compression_level=4)
    vpn.render(a, b, tmp_path, "sp1v0")
    da, db = tmp_path / "sp1v0.client.tinc", tmp_path / "sp1v0.server.tinc"
    assert "ConnectTo = server" in (da / "tinc.conf").read_text()
    assert "ConnectTo" not in (db / "tinc.conf").read_text()
    assert "Interface = sp1v0b" in (db / "tinc.conf").read_text()
    for d in (da, db):
        for node in ("client", "server"):
            host = (d / "hosts" / node).read_text()
            assert "Cipher = aes-128-cbc" in host and "Digest = sha1" in host
            assert "Compression = 4" in host and "BEGIN RSA PUBLIC KEY" in host
        assert os.access(d / "tinc-up", os.X_OK)
    assert "Subnet = 198.18.99.0/24" in (da / "hosts" / "server").read_text()
    assert "198.18.99.0/24" not in (da / "hosts" / "client").read_text()
    assert "ip addr add 198.18.240.1/30" in (da / "tinc-up").read_text()
    assert tinc.tinc_level("lzo", None) == 11 and tinc.tinc_level("none", 5) == 0


def test_vtun_confs_and_refusals() -> None:
    a, b = ends()
    vpn = vtun.Vtun(cipher="aes-128-ecb", compression="zlib", transport="tcp")
    server = vtun.render_conf(vpn, b, "sp1v0b", "pw", True)
    assert "bindaddr { addr 198.18.2.2; };" in server
    assert "encrypt aes128ecb;" in server and "compress zlib:9;" in server
    assert "proto tcp;" in server and "device sp1v0b;" in server
    assert "bindaddr" not in vtun.render_conf(vpn, a, "sp1v0a", "pw", False)
    with pytest.raises(MechanismError, match="segfaults"):
        vtun.Vtun(cipher="blowfish")
    with pytest.raises(MechanismError, match="under load"):
        vtun.Vtun(cipher="aes-256-cbc")
    with pytest.raises(MechanismError, match="IPv6"):
        vtun.Vtun().render(*ends(v6=True), Path("/nonexistent"), "sp1v0")
    v6a = TunnelEnd(FakeHost(), "client", "2001:2:0:1::2", a.inner4)  # type: ignore[arg-type]
    v6b = TunnelEnd(FakeHost(), "server", "2001:2:0:2::2", b.inner4)  # type: ignore[arg-type]
    with pytest.raises(MechanismError, match="IPv4 underlay"):
        vtun.Vtun().render(v6a, v6b, Path("/nonexistent"), "sp1v0")


def test_pptp_is_refused_with_the_reason(tmp_path: Path) -> None:
    err = pptp.refuse(tmp_path / "ppp")
    assert "/dev/ppp" in err.message or "ppp is missing" in err.message
    assert "no PPP driver" in err.message
    with pytest.raises(MechanismError, match="pppd"):
        make("pptp")


# -- memory -------------------------------------------------------------------------------


def test_rss_sums_vmrss_of_the_pids(tmp_path: Path) -> None:
    for pid, kb in ((10, 1000), (11, 24)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "status").write_text(f"Name:\tx\nVmRSS:\t    {kb} kB\n")
    assert rss_bytes([10, 11, 99], proc_root=tmp_path) == 1024 * 1024
    assert rss_bytes([99], proc_root=tmp_path) is None
    assert os.getpid() in base.group_pids(os.getpgrp()) or os.getpid() != os.getpgrp()


def test_cpu_seconds_sums_the_schedstat_of_the_pids(tmp_path: Path) -> None:
    """Every thread of each pid (a Go daemon works in many), or the pid's own line."""
    for tid, ns in ((10, 1_000_000_000), (12, 500_000_000)):
        (tmp_path / "10" / "task" / str(tid)).mkdir(parents=True)
        (tmp_path / "10" / "task" / str(tid) / "schedstat").write_text(f"{ns} 123 45\n")
    (tmp_path / "11").mkdir()
    (tmp_path / "11" / "schedstat").write_text("500000000 1 2\n")
    assert cpu_seconds([10, 11, 99], proc_root=tmp_path) == pytest.approx(2.0)
    assert cpu_seconds([99], proc_root=tmp_path) is None
    assert (cpu_seconds([os.getpid()]) or 0) > 0


def test_memory_reads_each_running_ends_daemons() -> None:
    class Running:
        def pids(self) -> dict[str, list[int]]:
            return {"client": [os.getpid()], "server": [2**22 + 7]}  # the second does not exist

    mem = memory(Running())  # type: ignore[arg-type]
    assert set(mem) == {"client"} and mem["client"] > 1_000_000


# -- schema ---------------------------------------------------------------------------------


def _vpn(**m: Any) -> VpnSpec:
    sc = Scenario.model_validate(
        {
            "name": "t",
            "variants": {"v": {"mechanisms": [{"kind": "vpn", **m}]}},
            "workloads": [{"kind": "stream"}],
        }
    )
    mech = sc.variants["v"].mechanisms[0]
    assert isinstance(mech, VpnSpec)
    return mech


def _refused(**m: Any) -> str:
    with pytest.raises(ValidationError) as info:
        _vpn(**m)
    return str(info.value)


def test_schema_defaults_and_params() -> None:
    wg = _vpn(implementation="wireguard")
    assert wg.on == "ends" and wg.effective_cipher == "chacha20-poly1305"
    assert wg.implementation_params() == {"cipher": "chacha20-poly1305"}
    ov = _vpn(implementation="openvpn", compression="lz4", transport="tcp", on="gateways")
    assert ov.on == "gateways" and _vpn(implementation="tinc", on=["gw-a", "gw-b"]).on == [
        "gw-a",
        "gw-b",
    ]
    assert ov.implementation_params() == {
        "cipher": "aes-256-gcm",
        "compression": "lz4",
        "transport": "tcp",
        "auth": None,
        "socket_buffer": None,
        "digest": None,
    }
    assert _vpn(implementation="openvpn", auth="static").effective_cipher == "aes-256-cbc"
    # the MAC alone (no cipher), and both UDP buffers of a daemon, as sizes
    mac = _vpn(implementation="openvpn", cipher="none", digest="sha256", socket_buffer="4MiB")
    assert mac.implementation_params()["digest"] == "sha256"
    assert mac.implementation_params()["socket_buffer"] == 4 * 1024**2
    assert _vpn(implementation="ipsec", mode="transport").implementation_params() == {
        "cipher": "aes-256-gcm",
        "mode": "transport",
    }
    t = _vpn(implementation="tinc", digest="sha1", compression="zlib", compression_level=3)
    assert t.implementation_params()["compression_level"] == 3


def test_schema_refuses_what_cannot_run_with_the_reason() -> None:
    assert "/dev/ppp" in _refused(implementation="pptp")
    assert "no AEAD" in _refused(implementation="openvpn", auth="static", cipher="aes-128-gcm")
    assert "segfaults" in _refused(implementation="vtun", cipher="blowfish")
    assert "under load" in _refused(implementation="vtun", cipher="aes-256-cbc")
    assert "does not apply to wireguard" in _refused(implementation="wireguard", transport="tcp")
    assert "does not apply to openvpn" in _refused(implementation="openvpn", mode="transport")
    assert "no compression 'zlib'" in _refused(implementation="openvpn", compression="zlib")
    assert "no cipher 'des'" in _refused(implementation="ipsec", cipher="des")
    assert "ipsec has no compression" in _refused(implementation="ipsec", compression="lzo")
    assert "compression_level needs" in _refused(implementation="tinc", compression_level=3)
    assert "two ends" in _refused(implementation="tinc", on="dut")
    assert "two ends" in _refused(implementation="tinc", on=["a", "b", "c"])
    assert "placement" in _refused(implementation="tinc", placement="ends")  # no such key
    assert "its own tag" in _refused(implementation="openvpn", digest="sha256")
    assert "does not apply to wireguard" in _refused(implementation="wireguard", socket_buffer=8192)
    assert "at least 4 KiB" in _refused(implementation="tinc", socket_buffer=100)


def test_every_schema_combination_builds_its_implementation() -> None:
    from secperf.mechanisms.vpn.spec import VPN_CIPHERS, VPN_COMPRESSION

    for impl, ciphers in VPN_CIPHERS.items():
        for cipher in ciphers:
            for comp in VPN_COMPRESSION[impl]:
                m = _vpn(implementation=impl, cipher=cipher, compression=comp)
                vpn = from_spec(m)
                assert vpn.kind == impl
                assert vpn.describe()["cipher"] == cipher


def test_a_vpn_variant_becomes_a_tunnel_the_runner_applies_whole() -> None:
    from secperf.mechanisms.vpn import Tunnel

    spec = _vpn(implementation="wireguard")
    mech = MECHANISMS.of(spec).build(spec)
    assert isinstance(mech, Tunnel) and mech.kind == "vpn"
    assert mech.backends() == set()
    with pytest.raises(MechanismError, match="both its ends at once"):
        mech.apply(FakeHost(), None)  # type: ignore[arg-type]


def test_check_refuses_vpn_before_any_testbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """`secperf check` and `run` refuse IPsec transport mode without kernel ESP before
    any testbed is built; a plain vpn variant passes."""
    from secperf.errors import ScenarioError
    from secperf.run.preflight import check_static

    def scenario(**m: Any) -> Scenario:
        return Scenario.model_validate(
            {
                "name": "t",
                "variants": {"v": {"mechanisms": [{"kind": "vpn", **m}]}},
                "workloads": [{"kind": "stream"}],
            }
        )

    check_static(scenario(implementation="wireguard"))
    monkeypatch.setattr(ipsec, "kernel_has_esp", lambda: False)
    with pytest.raises(ScenarioError, match="transport mode needs the kernel's ESP"):
        check_static(scenario(implementation="ipsec", mode="transport"))
