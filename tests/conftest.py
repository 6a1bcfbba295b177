"""Shared test plumbing: the `vm` fixture (a QEMU guest on a sched_ext kernel, tools/vm).

Tests that need a real sched_ext kernel take the session-scoped `vm` fixture and are marked
`@pytest.mark.vm` (a test that uses the fixture without the marker gets it added, so
`-m 'not vm'` always deselects every guest boot). Boot once per module: run one script that does
all the checks and writes its findings under /results, then assert on them in small tests.
"""

from __future__ import annotations

import shutil

import pytest

from tools.vm import api, image, kernel, qemu
from tools.vm.api import VM
from tools.vm.codes import VMError

_current_test = {"nodeid": ""}  # the test being set up: who boots a module's guest


def vm_unavailable() -> str | None:
    """Why no guest can run here (the exact skip reason), or None; prepares kernel/image if missing."""
    if shutil.which(qemu.QEMU) is None:
        return f"{qemu.QEMU} is not installed (apt-get install qemu-system-x86), so no guest can run"
    try:
        if kernel.current() is None:
            kernel.prepare()
        if image.current() is None:
            image.build()
    except VMError as exc:
        return f"no guest kernel/image prepared and preparing them failed: {exc.message}"
    return None


@pytest.fixture(scope="session")
def vm(tmp_path_factory: pytest.TempPathFactory) -> VM:
    reason = vm_unavailable()
    if reason is not None:
        pytest.skip(reason)
    return VM(lambda: tmp_path_factory.mktemp("vm-results"), lambda: _current_test["nodeid"])


def pytest_runtest_setup(item: pytest.Item) -> None:
    _current_test["nodeid"] = item.nodeid


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Every guest boot that panicked and was run again: a retry must never hide silently."""
    if not api.RETRIED:
        return
    terminalreporter.section(f"guest boots retried after a kernel panic: {len(api.RETRIED)}")
    for r in api.RETRIED:
        terminalreporter.write_line(f"{r.who} (boot {r.attempt}): {r.report}")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects anything
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "vm" in getattr(item, "fixturenames", ()) and item.get_closest_marker("vm") is None:
            item.add_marker(pytest.mark.vm)
