"""The guest's kernel headers (tools/vm): staged beside /lib/modules/RELEASE as the packages install them."""

from __future__ import annotations

import os
from pathlib import Path

from tools.vm import kernel, rundisk

REL = "7.3.4+deb13-cloud-amd64"


def _headers(root: Path) -> Path:
    h = root / "headers"
    (h / "usr/src" / f"linux-headers-{REL}" / "include").mkdir(parents=True)
    (h / "usr/src" / "linux-headers-7.3.4+deb13-common" / "include").mkdir(parents=True)
    (h / "usr/lib/linux-kbuild-7.3.4+deb13/scripts").mkdir(parents=True)
    (h / "usr/src" / f"linux-headers-{REL}" / "include" / "x.h").write_text("#define X 1\n")
    return h


def test_stage_binds_headers_and_links_build_and_source(tmp_path: Path) -> None:
    mods = tmp_path / "lib-modules"
    mods.mkdir()
    (mods / "config").write_text("CONFIG_X=y\n")
    headers = _headers(tmp_path)
    stage = tmp_path / "stage"
    rundisk.stage(stage, "true", [], mods, REL, checkout=tmp_path, project=False, headers=headers)
    fstab = (stage / "fstab.run").read_text().splitlines()
    assert f"/mnt/scxvm/headers/usr/src/linux-headers-{REL} /usr/src/linux-headers-{REL} none " \
           "bind,X-mount.mkdir 0 0" in fstab
    assert any(line.startswith("/mnt/scxvm/headers/usr/lib/linux-kbuild-7.3.4+deb13 ") for line in fstab)
    assert os.readlink(stage / "kernel" / "build") == f"/usr/src/linux-headers-{REL}"
    assert os.readlink(stage / "kernel" / "source") == "/usr/src/linux-headers-7.3.4+deb13-common"
    staged = stage / "headers/usr/src" / f"linux-headers-{REL}" / "include" / "x.h"
    assert staged.read_text() == "#define X 1\n"
    assert staged.stat().st_ino == (headers / staged.relative_to(stage / "headers")).stat().st_ino  # linked
    assert not (mods / "build").exists()  # the cached kernel files stay as they were


def test_no_headers_no_binds(tmp_path: Path) -> None:
    mods = tmp_path / "lib-modules"
    mods.mkdir()
    stage = tmp_path / "stage"
    rundisk.stage(stage, "true", [], mods, REL, checkout=tmp_path, project=False)
    assert "headers" not in (stage / "fstab.run").read_text()
    assert not (stage / "kernel" / "build").exists()


def test_header_packages_are_the_kernels_exact_version() -> None:
    info = kernel.KernelInfo(REL, "7.3.4-1~bpo13+1", f"linux-image-{REL}")
    assert kernel.header_packages(info) == [
        f"linux-headers-{REL}=7.3.4-1~bpo13+1",
        "linux-headers-7.3.4+deb13-common=7.3.4-1~bpo13+1",
        "linux-kbuild-7.3.4+deb13=7.3.4-1~bpo13+1",
    ]
