"""Shared test plumbing: the `vm` fixture (a QEMU guest on a sched_ext kernel, tools/vm).

Tests that need a real sched_ext kernel take the session-scoped `vm` fixture and are marked
`@pytest.mark.vm` (a test that uses the fixture without the marker gets it added, so
`-m 'not vm'` always deselects every guest boot). Boot once per module: run one script that does
all the checks and writes its findings under /results, then assert on them in small tests.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from tools.vm import api, image, kernel, qemu
from tools.vm.api import VM
from tools.vm.codes import VMError

_current_test: dict[str, Any] = {"nodeid": "", "single": False}  # the test being set up: who boots a guest

# The order tests run in: host tests first, then the guests that run single-threaded TCG (one host
# core each), then those that want every core. scripts/test.sh runs the longest single-threaded
# modules in a second pytest process beside this one: two single-threaded guests share a 2-core
# host (tools.vm.slots), and while a guest runs on one core the host tests use the other.
HOST, SINGLE_GUEST, WHOLE_HOST_GUEST = 0, 1, 2


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
    return VM(
        lambda: tmp_path_factory.mktemp("vm-results"),
        lambda: _current_test["nodeid"],
        lambda: _current_test["single"],
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    _current_test["nodeid"] = item.nodeid
    _current_test["single"] = item.get_closest_marker("tcg_single") is not None


def run_order(item: pytest.Item) -> int:
    if item.get_closest_marker("vm") is None:
        return HOST
    return SINGLE_GUEST if item.get_closest_marker("tcg_single") is not None else WHOLE_HOST_GUEST


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    _guest_runs(terminalreporter)
    _retried_boots(terminalreporter)


def _guest_runs(terminalreporter: pytest.TerminalReporter) -> None:
    """Each module's guest runs, in the order they started: where a suite's wall time goes."""
    if not api.RUNS:
        return
    modules: dict[str, list[api.GuestRun]] = {}
    for r in api.RUNS:
        modules.setdefault(r.who.split("::")[0], []).append(r)
    t0 = api.RUNS[0].started
    terminalreporter.section(f"guest runs: {len(api.RUNS)}")
    terminalreporter.write_line("start+s  runs cores   wall_s  queued_s  module")
    for module, runs in modules.items():
        terminalreporter.write_line(
            f"{runs[0].started - t0:7.0f} {len(runs):5d} {max(r.slots for r in runs):5d} "
            f"{sum(r.wall_s for r in runs):8.0f} {sum(r.queued_s for r in runs):9.0f}  {module}")


def _retried_boots(terminalreporter: pytest.TerminalReporter) -> None:
    """Every guest boot that panicked or hung and was run again: a retry must never hide silently."""
    if not api.RETRIED:
        return
    terminalreporter.section(f"guest boots retried after a kernel panic or a boot hang: {len(api.RETRIED)}")
    for r in api.RETRIED:
        terminalreporter.write_line(f"{r.who} (boot {r.attempt}): {r.report}")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects anything
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "vm" in getattr(item, "fixturenames", ()) and item.get_closest_marker("vm") is None:
            item.add_marker(pytest.mark.vm)
    items.sort(key=run_order)  # stable: a module's tests stay together and in order
