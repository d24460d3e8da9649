"""squid drops to the `proxy` user: what it may write lives in a folder of its own,
and nothing else changes hands (issue 22, finding 7). The run directory and its
parents keep their owners and modes, root never opens a file the proxy user could
have replaced with a link, and squid's files come back to the run directory when it
stops."""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest

from secperf.errors import MechanismError, SecperfError
from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.mechanisms.proxy import Proxy, ProxySpec
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.tools import find_program

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def tb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    try:
        find_program("squid", purpose="the proxy test", package="squid")
        pwd.getpwnam("proxy")
    except (SecperfError, KeyError) as exc:
        pytest.skip(f"needs squid and its proxy user: {exc}")
    with Testbed.build(Topology.standard(), state_dir=tmp_path_factory.mktemp("state")) as bed:
        yield bed


def context(tb: Testbed, files: Path) -> MechanismContext:
    return MechanismContext(
        plan=traffic_plan(tb.topology, 4),
        files_dir=files,
        name="proxy.0",
        table=f"secperf_{tb.prefix}",
        topology=tb.topology,
    )


def modes(path: Path) -> dict[Path, tuple[int, int, int]]:
    """Owner, group and mode of `path` and of every directory above it."""
    return {p: (p.stat().st_uid, p.stat().st_gid, p.stat().st_mode) for p in [path, *path.parents]}


def test_squid_writes_only_its_own_folder_and_nothing_changes_hands(
    tb: Testbed, tmp_path: Path
) -> None:
    private = tmp_path / "private"  # as /root is: no way through for other users
    private.mkdir(mode=0o700)
    ctx = context(tb, private / "run" / "files")
    proxy = Proxy(ProxySpec(dns_lookups=False))
    ctx.rendered = proxy.render(ctx)
    before = modes(Proxy.directory(ctx))
    dut = tb.host("dut")
    proxy.apply(dut, ctx)
    try:
        assert modes(Proxy.directory(ctx)) == before  # no chown, no o+x on any parent
        own = Proxy.squid_dir(ctx)
        uid = pwd.getpwnam("proxy").pw_uid
        st = own.stat()
        assert st.st_uid == 0 and st.st_mode & 0o022 == 0, oct(st.st_mode)
        for parent in own.parents:
            assert parent.stat().st_uid == 0 and parent.stat().st_mode & 0o002 == 0
        # squid's files are its user's; what it only reads (its hosts table) is root's
        assert {p.name: p.stat().st_uid for p in own.iterdir()} == {
            "access.log": uid,
            "cache.log": uid,
            "squid.pid": uid,
            "hosts": 0,
        }
        stderr = Proxy.directory(ctx) / "squid.stderr"
        assert stderr.stat().st_uid == 0 and not stderr.is_symlink()
    finally:
        proxy.release(dut, ctx)
        reset_dut(dut, proxy.backends())
    assert not Proxy.squid_dir(ctx).exists()
    kept = {p.name for p in Proxy.directory(ctx).iterdir()}
    assert {"access.log", "cache.log", "squid.stderr"} <= kept
    assert all(p.stat().st_uid == 0 for p in Proxy.directory(ctx).iterdir())


def test_root_never_writes_through_a_link_planted_where_squid_s_stderr_goes(
    tb: Testbed, tmp_path: Path
) -> None:
    ctx = context(tb, tmp_path / "files")
    proxy = Proxy(ProxySpec(dns_lookups=False))
    ctx.rendered = proxy.render(ctx)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.symlink(victim, Proxy.directory(ctx) / "squid.stderr")
    dut = tb.host("dut")
    try:
        with pytest.raises(MechanismError, match="symbolic link"):
            proxy.apply(dut, ctx)
    finally:
        proxy.release(dut, ctx)
        reset_dut(dut, proxy.backends())
    assert victim.read_text() == "precious\n"
    assert not proxy.daemons()
