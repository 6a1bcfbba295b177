"""tools.vm.anchors' cache: built once per kernel and recipe, never a stale or partial build reused.

The build itself (Debian's kernel source, clang) is what benchmarks/vm_sched_compare.py runs; it
downloads 166 MB, so it is not repeated here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.vm import anchors, config
from tools.vm.kernel import KernelInfo

INFO = KernelInfo("7.3.4+deb13-cloud-amd64", "7.3.4-1~bpo13+1", "linux-image-7.3.4+deb13-cloud-amd64")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(config, "cache_dir", lambda: tmp_path)
    return tmp_path


def fake_build(built: list[str], key: str | None = None) -> Path:
    d = anchors.anchor_dir(INFO)
    (d / "bin").mkdir(parents=True)
    for name in built:
        (d / "bin" / name).write_text("#!/bin/sh\n")
    (d / "meta.json").write_text(json.dumps({"key": key or anchors.cache_key(INFO), "built": built}))
    return d


def test_the_key_follows_the_kernel_and_the_recipe() -> None:
    other = KernelInfo(INFO.release, "7.3.4-2~bpo13+1", INFO.package)
    assert anchors.cache_key(INFO) == anchors.cache_key(INFO)
    assert anchors.cache_key(INFO) != anchors.cache_key(other)
    assert anchors.recipe(INFO)["targets"][0] == anchors.REQUIRED == "scx_simple"


def test_a_complete_build_of_this_recipe_is_reused(cache: Path) -> None:
    d = fake_build(["scx_qmap", "scx_simple"])
    assert anchors.cached(INFO) == {name: d / "bin" / name for name in ("scx_simple", "scx_qmap")}


@pytest.mark.parametrize("built,key", [
    (["scx_qmap"], None),  # the required one is missing
    (["scx_simple"], "another-recipe"),  # built by another recipe
])
def test_a_partial_or_stale_build_is_not(cache: Path, built: list[str], key: str | None) -> None:
    fake_build(built, key)
    assert anchors.cached(INFO) is None


def test_no_cache_at_all(cache: Path) -> None:
    assert anchors.cached(INFO) is None
