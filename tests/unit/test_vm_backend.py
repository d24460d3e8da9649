"""The VM backend's pure parts: image recipe hashing, module tables, the cpio writer,
qemu's command line, argv and file mapping into the guest, guest CPU, the schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from secperf.scenario.loader import parse_scenario
from secperf.scenario.scenario import Scenario
from secperf.testbed.hosts import vmagent, vmimage
from secperf.testbed.hosts.vmconfig import (
    VmSettings,
    carried_files,
    data_mac,
    guest_argv,
    guest_cpu_delta,
    parse_proc_stat,
    qemu_argv,
)
from secperf.testbed.hosts.vmimage import Image, Recipe


def _recipe(**changes: object) -> Recipe:
    base: dict[str, object] = {
        "packages": {"nftables": "1.0.6-2", "linux-image-6.1.0-56-cloud-amd64": "6.1.192-2"},
        "kernel_package": "linux-image-6.1.0-56-cloud-amd64",
        "nfq_sha256": "ab" * 32,
    }
    base.update(changes)
    return Recipe(**base)  # type: ignore[arg-type]


def test_recipe_digest_is_stable_and_covers_every_input() -> None:
    a = _recipe()
    assert a.digest() == _recipe().digest()
    assert len(a.digest()) == 16
    newer = _recipe(packages={**a.packages, "nftables": "1.0.6-3"})
    other_daemon = _recipe(nfq_sha256="cd" * 32)
    other_kernel = _recipe(kernel_package="linux-image-6.1.0-57-cloud-amd64")
    digests = {a.digest(), newer.digest(), other_daemon.digest(), other_kernel.digest()}
    assert len(digests) == 4
    # the order packages are listed in does not matter
    flipped = _recipe(packages=dict(reversed(list(a.packages.items()))))
    assert flipped.digest() == a.digest()


def test_recipe_digest_covers_the_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _recipe().digest()
    monkeypatch.setattr(vmimage, "AGENT", vmimage.AGENT + "# changed\n")
    # the agent's text is in the image: a changed agent is a new image
    assert _recipe().files()["etc/secperf/agent"].endswith("# changed\n")
    assert _recipe().digest() != before


def test_kernel_package_and_versions_from_apt_cache_text() -> None:
    text = (
        "Package: linux-image-cloud-amd64\nVersion: 6.1.192-2\n"
        "Depends: linux-image-6.1.0-56-cloud-amd64 (= 6.1.192-2)\n\n"
        "Package: nftables\nVersion: 1.0.6-2+deb12u2\nDescription: x\n more\n"
    )
    shown = vmimage.parse_apt_show(text)
    assert shown["nftables"]["Version"] == "1.0.6-2+deb12u2"
    depends = shown["linux-image-cloud-amd64"]["Depends"]
    assert vmimage.kernel_from_depends(depends) == "linux-image-6.1.0-56-cloud-amd64"
    with pytest.raises(Exception, match="names no kernel"):
        vmimage.kernel_from_depends("libc6")


def test_alias_globs_become_anchored_awk_regexes() -> None:
    assert vmimage.glob_to_ere("nft_expr_ct") == "^nft_expr_ct$"
    assert vmimage.glob_to_ere("pci:v00001AF4d*sv*") == "^pci:v00001AF4d.*sv.*$"
    assert vmimage.glob_to_ere("ipt_[A-Z]?") == "^ipt_[A-Z].$"
    assert vmimage.glob_to_ere("a.b+c") == "^a\\.b\\+c$"


def _ko(path: Path, depends: str, aliases: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    info = b"\x00".join(
        [b"license=GPL", f"depends={depends}".encode(), *(f"alias={a}".encode() for a in aliases)]
    )
    path.write_bytes(b"\x7fELF junk\x00" + info + b"\x00")


def test_module_tables_keep_the_closure_in_load_order(tmp_path: Path) -> None:
    k = tmp_path / "kernel"
    _ko(k / "net/netfilter/nft_ct.ko", "nf_tables,nf_conntrack", ["nft-expr-ct"])
    _ko(k / "net/netfilter/nf_tables.ko", "nfnetlink", ["nfnetlink-subsys-10"])
    _ko(k / "net/netfilter/nf_conntrack.ko", "libcrc32c", [])
    _ko(k / "net/netfilter/nfnetlink.ko", "", [])
    _ko(k / "lib/libcrc32c.ko", "", [])
    _ko(k / "drivers/net/virtio_net.ko", "net_failover", ["virtio:d00000001v*"])
    _ko(k / "drivers/net/net_failover.ko", "", [])
    _ko(k / "drivers/net/unused.ko", "", [])
    _ko(k / "net/netfilter/ipvs/ip_vs.ko", "", [])
    kept, order, aliases = vmimage.module_tables(tmp_path, ["net/netfilter"], ["virtio_net"])
    names = sorted(p.stem for p in kept)
    assert names == [
        "libcrc32c",
        "net_failover",
        "nf_conntrack",
        "nf_tables",
        "nfnetlink",
        "nft_ct",
        "virtio_net",
    ]  # the closure; not unused.ko, not IPVS
    ct = [Path(f).stem for f in order["nft_ct"]]
    assert ct[-1] == "nft_ct"
    assert ct.index("nfnetlink") < ct.index("nf_tables")
    assert ct.index("libcrc32c") < ct.index("nf_conntrack")
    assert ("^nft_expr_ct$", "nft_ct") in aliases
    assert ("^virtio:d00000001v.*$", "virtio_net") in aliases


def _read_cpio(path: Path) -> dict[str, tuple[int, bytes]]:
    data = path.read_bytes()
    out: dict[str, tuple[int, bytes]] = {}
    i = 0
    while True:
        assert data[i : i + 6] == b"070701"
        fields = [int(data[i + 6 + 8 * n : i + 14 + 8 * n], 16) for n in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name = data[i + 110 : i + 110 + namesize - 1].decode()
        i += 110 + namesize
        i += -i % 4
        body = data[i : i + size]
        i += size + (-size % 4)
        if name == "TRAILER!!!":
            return out
        out[name] = (mode, body)


def test_cpio_is_newc_and_the_same_tree_gives_the_same_bytes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/x").write_text("hello")
    (root / "init").symlink_to("/usr/bin/busybox")
    a, b = tmp_path / "a.cpio", tmp_path / "b.cpio"
    vmimage.write_cpio(root, a)
    (root / "etc/x").touch()  # a new mtime changes nothing
    vmimage.write_cpio(root, b)
    assert a.read_bytes() == b.read_bytes()
    files = _read_cpio(a)
    assert files["etc/x"][1] == b"hello"
    assert files["init"][1] == b"/usr/bin/busybox"
    assert files["init"][0] & 0o170000 == 0o120000  # a symlink


def _image(tmp_path: Path) -> Image:
    return Image(
        path=tmp_path,
        digest="0" * 16,
        kernel=tmp_path / "vmlinuz",
        initrd=tmp_path / "initrd.cpio",
        manifest={},
    )


def test_qemu_argv_for_tcg_and_kvm(tmp_path: Path) -> None:
    taps = [("sp1-Vm", "52:54:00:5e:c0:ff"), ("sp1-V0", data_mac(0)), ("sp1-V1", data_mac(1))]
    settings = VmSettings(cpus=2, memory_mb=512)
    argv = qemu_argv(
        image=_image(tmp_path),
        accel="tcg",
        settings=settings,
        serial_log=tmp_path / "s.log",
        taps=taps,
        name="secperf-sp1-dut",
    )
    joined = " ".join(argv)
    assert argv[0] == "qemu-system-x86_64"
    assert "-accel tcg,thread=multi" in joined and "-cpu" not in argv
    assert "-smp 2 -m 512" in joined
    assert "-nodefaults" in argv and f"file:{tmp_path / 's.log'}" in argv
    assert joined.count("virtio-net-pci") == 3
    assert "tap,id=n1,ifname=sp1-V0,script=no,downscript=no" in argv
    assert f"virtio-net-pci,netdev=n2,mac={data_mac(1)}" in argv
    kvm = qemu_argv(
        image=_image(tmp_path),
        accel="kvm",
        settings=VmSettings(),
        serial_log=tmp_path / "s.log",
        taps=taps[:1],
        name="x",
    )
    assert kvm[kvm.index("-accel") + 1] == "kvm" and "host" in kvm
    assert kvm[kvm.index("-m") + 1] == "256" and kvm[kvm.index("-smp") + 1] == "1"


def test_guest_argv_names_programs_by_their_path_in_the_image() -> None:
    programs = {"ip": "/usr/bin/ip", "nft": "/usr/sbin/nft"}
    assert guest_argv(["ip", "-j", "link"], programs) == ["/usr/bin/ip", "-j", "link"]
    assert guest_argv(["/usr/sbin/nft", "-f", "x"], programs)[0] == "/usr/sbin/nft"
    nfq = guest_argv(["/work/engine/target/release/secperf-nfq", "--queue", "0"], programs)
    assert nfq[0] == vmimage.NFQ_GUEST_PATH
    assert guest_argv(["sysctl", "-n", "x"], programs) == ["sysctl", "-n", "x"]  # busybox
    assert guest_argv(["/opt/tool/bin/thing"], programs) == ["thing"]


def test_files_carried_in_and_out(tmp_path: Path) -> None:
    rules = tmp_path / "r.nft"
    rules.write_text("table inet t {}\n")
    log = tmp_path / "out.jsonl"
    argv = ["nft", "-f", str(rules), "--log", str(log), "/etc/hosts", "/nowhere/x"]
    carry_in, carry_out = carried_files(argv)
    assert carry_in == [str(rules)]
    assert carry_out == [str(log)]


def test_script_for_runs_in_place_with_stdin_as_a_here_document() -> None:
    assert vmagent.script_for(["nft", "list", "ruleset"]) == "exec nft list ruleset\n"
    script = vmagent.script_for(["iptables-restore"], "*filter\nCOMMIT")
    first, *body = script.splitlines()
    mark = first.split("<<'")[1].rstrip("'")
    assert first.startswith("exec iptables-restore <<'SECPERF_")
    assert body == ["*filter", "COMMIT", mark]
    assert vmagent.script_for(["echo", "a b"]) == "exec echo 'a b'\n"
    assert vmagent.request_line("run", 12, 31) == b"run 12 31\n"


def test_guest_cpu_from_proc_stat() -> None:
    before = parse_proc_stat("cpu  10 0 20 1000 0 0 5 0 0 0\ncpu0 10 0 20 1000 0 0 5 0 0 0\n")
    after = parse_proc_stat("cpu  30 0 60 1100 0 0 45 0 0 0\n")
    d = guest_cpu_delta(before, after)
    # 20 user + 40 system + 40 softirq busy of 200 ticks
    assert d["busy_fraction"] == pytest.approx(100 / 200)
    assert d["softirq_fraction"] == pytest.approx(40 / 200)
    assert guest_cpu_delta(after, after)["busy_fraction"] is None  # nothing counted


SCENARIO = """
name = "vmtest"
[testbed]
baseline = "direct"
[testbed.vm]
accel = "tcg"
cpus = 2
memory_mb = 512
boot_timeout = "90s"
[variants.ns]
mechanisms = [{ kind = "appliance" }]
[variants.vm]
backend = "vm"
mechanisms = [{ kind = "appliance" }]
[[workloads]]
kind = "rr"
protocol = "tcp"
"""


def load_scenario_text(text: str) -> Scenario:
    return parse_scenario(text, Path("vmtest.toml"))


def test_schema_vm_settings_and_variant_backend() -> None:
    sc = load_scenario_text(SCENARIO)
    assert sc.testbed.vm.accel == "tcg" and sc.testbed.vm.cpus == 2
    assert sc.testbed.vm.memory_mb == 512 and sc.testbed.vm.boot_timeout == 90.0
    assert sc.variants["ns"].backend == "namespace"
    assert sc.variants["vm"].backend == "vm"
    defaults = load_scenario_text(
        SCENARIO.replace('accel = "tcg"\ncpus = 2\nmemory_mb = 512\n', "")
    )
    assert (defaults.testbed.vm.accel, defaults.testbed.vm.cpus) == ("auto", 1)
    assert defaults.testbed.vm.memory_mb == 256
    with pytest.raises(Exception, match="accel"):
        load_scenario_text(SCENARIO.replace('accel = "tcg"', 'accel = "hyperv"'))
    with pytest.raises(Exception, match="backend"):
        load_scenario_text(SCENARIO.replace('backend = "vm"', 'backend = "ssh"'))


def test_prepare_variants_carries_the_backend(tmp_path: Path) -> None:
    from secperf.mechanisms.base import traffic_plan
    from secperf.plan import prepare_variants, vm_settings
    from secperf.testbed.topology import Topology

    sc = load_scenario_text(SCENARIO)
    topo = Topology.standard(direct=True)
    variants = prepare_variants(sc, traffic_plan(topo, 4), tmp_path, "t", topo)
    assert {v.name: v.backend for v in variants} == {
        "baseline": "namespace",
        "ns": "namespace",
        "vm": "vm",
    }
    assert vm_settings(sc) == VmSettings(accel="tcg", cpus=2, memory_mb=512, boot_timeout=90.0)
