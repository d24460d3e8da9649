"""tls_inspect runs squid on privdrop, as the proxy kind does (secperf.mechanisms.squid):
nothing of the run changes hands, root never writes through a link in the mechanism's
folder, and the CA key is root's, 0600, and gone after teardown (issue 41)."""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from secperf.errors import MechanismError, SecperfError
from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.mechanisms.squid import folder as squid_folder
from secperf.mechanisms.tls_inspect import CERTGEN, TlsInspect, TlsInspectSpec, service_name
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.tools import find_program

pytestmark = pytest.mark.netns


@pytest.fixture(autouse=True)
def _squid() -> None:
    try:
        find_program("squid", purpose="the tls_inspect test", package="squid-openssl")
        pwd.getpwnam("proxy")
    except (SecperfError, KeyError) as exc:
        pytest.skip(f"needs squid-openssl and its proxy user: {exc}")
    if not CERTGEN.is_file():
        pytest.skip("needs squid-openssl's security_file_certgen")


@pytest.fixture
def tb(tmp_path: Path) -> Iterator[Testbed]:
    with Testbed.build(Topology.standard(), state_dir=tmp_path / "state") as bed:
        yield bed


def context(tb: Testbed, files: Path) -> MechanismContext:
    return MechanismContext(
        plan=traffic_plan(tb.topology, 4),
        files_dir=files,
        name="tlsi.0",
        table=f"secperf_{tb.prefix}",
        hosts=("dut",),
        hook="forward",
        topology=tb.topology,
    )


def modes(path: Path) -> dict[Path, tuple[int, int, int]]:
    """Owner, group and mode of `path`, of everything in it and of every directory above."""
    inside = [p for p in path.rglob("*") if not p.name.endswith((".stderr", ".log"))]
    return {p: (p.lstat().st_uid, p.lstat().st_gid, p.lstat().st_mode) for p in
            [path, *path.parents, *inside]}  # fmt: skip


def test_nothing_of_the_run_changes_hands_and_squid_writes_its_own_folder(
    tb: Testbed, tmp_path: Path
) -> None:
    private = tmp_path / "private"  # as /root is: no way through for other users
    private.mkdir(mode=0o700)
    ctx = context(tb, private / "run" / "files")
    mech = TlsInspect(TlsInspectSpec(mode="bump"))
    ctx.rendered = mech.render(ctx)
    before = modes(TlsInspect.directory(ctx))
    dut = tb.host("dut")
    mech.apply(dut, ctx)
    try:
        assert mech.daemons()
        # no chown, no o+x on any ancestor, the CA key still root's and 0600
        assert modes(TlsInspect.directory(ctx)) == before
        key = TlsInspect.directory(ctx) / "proxy-ca.key"
        assert key.stat().st_uid == 0 and stat.S_IMODE(key.stat().st_mode) == 0o600
        own = squid_folder(service_name(ctx))
        st = own.stat()
        assert st.st_uid == 0 and st.st_mode & 0o022 == 0, oct(st.st_mode)
        uid = pwd.getpwnam("proxy").pw_uid
        assert (own / "ssl_db").stat().st_uid == uid  # the certificate helpers' database
        assert (own / "hosts").stat().st_uid == 0
    finally:
        mech.release(dut, ctx)
        reset_dut(dut, mech.backends())
    assert not squid_folder(service_name(ctx)).exists()
    assert (TlsInspect.directory(ctx) / "cache.log").stat().st_uid == 0


def test_a_link_planted_in_the_mechanism_s_folder_is_refused_and_its_target_untouched(
    tb: Testbed, tmp_path: Path
) -> None:
    ctx = context(tb, tmp_path / "files")
    mech = TlsInspect(TlsInspectSpec(mode="bump"))
    ctx.rendered = mech.render(ctx)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    d = TlsInspect.directory(ctx)
    os.symlink(victim, d / "squid.stderr")
    os.symlink(victim, d / "planted")
    dut = tb.host("dut")
    try:
        with pytest.raises(MechanismError, match="symbolic link"):
            mech.apply(dut, ctx)
    finally:
        mech.release(dut, ctx)
        reset_dut(dut, mech.backends())
    assert victim.read_text() == "precious\n"
    st = victim.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o644)
    assert not mech.daemons()


def test_the_ca_key_is_gone_after_teardown(tmp_path: Path) -> None:
    with Testbed.build(Topology.standard(), state_dir=tmp_path / "state") as bed:
        ctx = context(bed, tmp_path / "files")
        mech = TlsInspect(TlsInspectSpec(mode="splice"))
        ctx.rendered = mech.render(ctx)
        key = TlsInspect.directory(ctx) / "proxy-ca.key"
        dut = bed.host("dut")
        mech.apply(dut, ctx)
        mech.release(dut, ctx)
        reset_dut(dut, mech.backends())
        assert key.is_file()  # the next apply of the variant signs with it again
    assert not key.exists()
