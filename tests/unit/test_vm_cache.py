"""The VM image cache is checked, not trusted (issue 41): each .deb against the SHA256 of
apt's signed index, the cache a 0700 directory of the user who boots the image, the
kernel and initramfs against the manifest, apt's download in its sandbox user's folder,
no guest binary run on the controller, and qemu confined."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import stat
from pathlib import Path

import pytest

from secperf.errors import TestbedError
from secperf.testbed.hosts import vmimage
from secperf.testbed.hosts.vmcache import private_dir, take_deb
from secperf.testbed.hosts.vmconfig import QEMU_SANDBOX, QEMU_USER, VmSettings, qemu_argv
from secperf.testbed.hosts.vmimage import Image, Recipe

GOOD = b"the package as Debian signed it\n"


def _recipe() -> Recipe:
    return Recipe(
        packages={"busybox-static": "1:1.35.0-4+b3"},
        kernel_package="linux-image-6.1.0-56-cloud-amd64",
        nfq_sha256="ab" * 32,
        sha256={"busybox-static": hashlib.sha256(GOOD).hexdigest()},
    )


def test_a_tampered_cached_deb_is_refused(tmp_path: Path) -> None:
    debs = tmp_path / "debs"
    debs.mkdir()
    deb = debs / "busybox-static_1.35.0-4+b3_amd64.deb"
    deb.write_bytes(GOOD)
    assert vmimage._cached_debs(_recipe(), debs) == {"busybox-static": deb}
    deb.write_bytes(GOOD + b"and a little more\n")
    with pytest.raises(TestbedError, match=r"not busybox-static 1:1\.35\.0-4\+b3 as apt's signed"):
        vmimage._cached_debs(_recipe(), debs)


def test_a_downloaded_deb_enters_the_cache_only_when_it_matches(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    got = tmp_path / "dl" / "busybox-static_1.35.0-4+b3_amd64.deb"
    got.parent.mkdir()
    got.write_bytes(b"something else\n")
    sha = _recipe().sha256["busybox-static"]
    with pytest.raises(TestbedError, match="signed index"):
        take_deb(got, cache, "busybox-static", "1:1.35.0-4+b3", sha)
    assert list(cache.iterdir()) == []
    got.write_bytes(GOOD)
    kept = take_deb(got, cache, "busybox-static", "1:1.35.0-4+b3", sha)
    assert kept.read_bytes() == GOOD and stat.S_IMODE(kept.stat().st_mode) == 0o600
    link = tmp_path / "dl" / "other_1_amd64.deb"
    link.symlink_to(got)
    with pytest.raises(TestbedError, match="not a plain file"):
        take_deb(link, cache, "other", "1", sha)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory away")
def test_a_cache_owned_by_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    os.chown(cache, 1000, 1000)
    with pytest.raises(TestbedError, match="belongs to uid 1000"):
        private_dir(cache)
    # ensure_image refuses it before it looks for, builds or boots anything
    monkeypatch.setenv(vmimage.CACHE_ENV, str(cache))
    monkeypatch.setattr(vmimage, "resolve_recipe", lambda nfq: _recipe())
    with pytest.raises(TestbedError, match="belongs to uid 1000"):
        vmimage.ensure_image(tmp_path / "nfq")
    os.chown(cache, 0, 0)
    cache.chmod(0o777)
    with pytest.raises(TestbedError, match="writable by others"):
        private_dir(cache)
    cache.chmod(0o755)  # readable by others only: closed
    assert stat.S_IMODE(private_dir(cache).stat().st_mode) == 0o700
    made = private_dir(tmp_path / "fresh" / "vm-image")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700


def test_the_kernel_and_initrd_are_checked_against_the_manifest(tmp_path: Path) -> None:
    image = tmp_path / "image"
    image.mkdir()
    (image / "vmlinuz").write_bytes(b"kernel")
    (image / "initrd.cpio").write_bytes(b"initrd")
    manifest = {
        "digest": "0" * 16,
        "vmlinuz_sha256": hashlib.sha256(b"kernel").hexdigest(),
        "initrd_sha256": hashlib.sha256(b"initrd").hexdigest(),
    }
    (image / "manifest.json").write_text(json.dumps(manifest))
    assert vmimage._image(image).kernel == image / "vmlinuz"
    (image / "initrd.cpio").write_bytes(b"initrd, changed")
    with pytest.raises(TestbedError, match=r"initrd\.cpio does not match"):
        vmimage._image(image)
    (image / "manifest.json").write_text(json.dumps({"digest": "0" * 16}))
    with pytest.raises(TestbedError, match="vmlinuz does not match"):
        vmimage._image(image)


def test_apt_downloads_as_its_sandbox_user_into_a_folder_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[list[str], Path | None]] = []
    owners: list[int] = []

    def fake_apt(argv: list[str], *, cwd: Path | None = None, timeout: float = 300) -> str:
        seen.append((argv, cwd))
        assert cwd is not None
        owners.append(cwd.stat().st_uid)
        (cwd / "busybox-static_1.35.0-4+b3_amd64.deb").write_bytes(GOOD)
        return ""

    monkeypatch.setattr(vmimage, "_apt", fake_apt)
    debs = tmp_path / "debs"
    debs.mkdir(mode=0o700)
    files = vmimage._download(_recipe(), ["busybox-static=1:1.35.0-4+b3"], debs, 1e12)
    (argv, cwd), = seen  # fmt: skip
    assert not any("Sandbox" in a for a in argv), argv  # apt's sandbox user left on
    assert cwd is not None and not cwd.is_relative_to(debs) and not cwd.exists()
    if os.geteuid() == 0:  # the folder apt writes is its sandbox user's; the cache root's
        assert owners == [pwd.getpwnam("_apt").pw_uid]
        assert files["busybox-static"].stat().st_uid == 0
    assert files["busybox-static"].parent == debs


def test_no_guest_program_runs_on_the_controller() -> None:
    """busybox's applets are linked when the guest boots, not by running it here."""
    source = Path(vmimage.__file__).read_text()
    assert "--list-full" not in source
    assert vmimage.RC.splitlines()[1:].count("/usr/bin/busybox --install -s") == 1


def test_qemu_is_confined_and_drops_root() -> None:
    image = Image(Path("/i"), "0" * 16, Path("/i/vmlinuz"), Path("/i/initrd.cpio"), {})
    argv = qemu_argv(
        image=image,
        accel="tcg",
        settings=VmSettings(),
        serial_log=Path("/tmp/serial"),
        taps=[],
        name="t",
    )
    assert argv[argv.index("-sandbox") + 1] == QEMU_SANDBOX
    assert QEMU_SANDBOX.startswith("on,") and "spawn=deny" in QEMU_SANDBOX
    assert argv[argv.index("-runas") + 1] == QEMU_USER == "nobody"
