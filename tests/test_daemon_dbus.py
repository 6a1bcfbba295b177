"""scx_loader's D-Bus interface, served by a real daemon on a private system bus (tests/dbus_fakes.py)
against the fake sched_ext tree (tests/daemon_fakes.py), driven by busctl, gdbus, dbus-send and a
dbus-fast client; polkit is a stand-in on the same bus that answers from a table."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from daemon_fakes import TUNABLE, DaemonEnv, daemon_env
from dbus_fakes import NOBODY, Clients, PolkitStandin, PrivateBus, SignalWatcher, as_nobody, private_bus

from scxctl.daemon.arglist import MAX_ARG_CHARS, MAX_ARGS
from scxctl.daemon.dbus_service import MODE_NUMBERS
from scxctl.daemon.modes import Mode

_MISSING = [t for t in ("dbus-daemon", "busctl", "gdbus", "dbus-send") if shutil.which(t) is None]
pytestmark = pytest.mark.skipif(
    bool(_MISSING) or os.geteuid() != 0,
    reason=f"needs root (clients run as nobody) and {', '.join(_MISSING) or 'the D-Bus tools'} "
    "(apt-get install dbus-daemon systemd libglib2.0-bin dbus-bin)",
)

PROPERTIES = ("CurrentScheduler", "SchedulerMode", "CurrentSchedulerArgs", "SupportedSchedulers",
              "DefaultScheduler", "DefaultMode")

# scx_loader's configs/org.scx.Loader.xml: what a client built against it expects
SCX_LOADER_METHODS = {
    "StartScheduler": ["s", "u"],
    "StartSchedulerWithArgs": ["s", "as"],
    "SwitchScheduler": ["s", "u"],
    "SwitchSchedulerWithArgs": ["s", "as"],
    "StopScheduler": [],
    "RestartScheduler": [],
    "RestoreDefault": [],
}
SCX_LOADER_PROPERTIES = {
    "CurrentScheduler": "s", "SchedulerMode": "u", "CurrentSchedulerArgs": "as",
    "SupportedSchedulers": "as", "DefaultScheduler": "s", "DefaultMode": "u",
}



@dataclass
class Loader:
    d: DaemonEnv
    c: Clients
    w: SignalWatcher
    pk: PolkitStandin

    def fingerprint(self) -> tuple[Any, ...]:
        """Everything a refused call must leave as it was."""
        st = self.d.status()
        return (self.d.state_file.read_bytes() if self.d.state_file.exists() else None,
                self.d.kernel.state(), self.d.kernel.ops(), len(self.d.standin_starts()),
                st["desired"], st["supervisor"]["pid"])


def add_config(d: DaemonEnv, text: str) -> None:
    d.config.write_text(d.config.read_text() + text.format(py=json.dumps(sys.executable),
                                                           standin=json.dumps(str(d.standin))))


def start_daemon(d: DaemonEnv, address: str) -> None:
    # WATCHDOG_USEC: the heartbeat (the daemon's look at the kernel while idle) every 0.5 s
    d.start(extra_env={"DBUS_SYSTEM_BUS_ADDRESS": address, "WATCHDOG_USEC": "1000000"})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loader]:
    tmp = tmp_path_factory.mktemp("dbus")
    with private_bus(tmp) as bus:
        pk = PolkitStandin(tmp, bus.address)
        pk.start()
        (tmp / "d").mkdir()
        with daemon_env(tmp / "d") as d:
            add_config(d, TUNABLE)
            start_daemon(d, bus.address)
            w = SignalWatcher(bus.address)
            try:
                yield Loader(d, Clients(bus.address), w, pk)
            finally:
                w.close()
                pk.stop()


@pytest.fixture
def lo(world: Loader) -> Loader:
    """The module's daemon with nothing enabled, nothing foreign loaded, polkit up and saying no."""
    if world.pk.proc is None:
        world.pk.start()
    world.pk.answer({})
    world.pk.log_file.write_text("")
    assert world.d.request("disable")["ok"]
    if world.d.kernel.state() != "disabled":  # what is left is a foreign one
        world.d.kernel.unload()
    return world


def gdbus_error(out: Any) -> tuple[str, str]:
    """(error name, message) of a failed gdbus call."""
    assert out.returncode != 0, out.stdout
    m = re.search(r"GDBus\.Error:([\w.]+): (.*)", out.stderr)
    assert m, out.stderr
    return m.group(1), m.group(2).strip()


def props(c: Clients, nobody: bool = False) -> dict[str, Any]:
    return {p: c.get(p, nobody=nobody) for p in PROPERTIES}


# -- the interface ---------------------------------------------------------------------------------


def test_introspection_has_scx_loaders_methods_properties_and_mode_numbers(lo: Loader) -> None:
    out = lo.c.run(["gdbus", "introspect", "--xml", "--address", lo.c.address, "--dest", "org.scx.Loader",
                     "--object-path", "/org/scx/Loader"], nobody=True)
    assert out.returncode == 0, out.stderr
    iface = next(i for i in ET.fromstring(out.stdout).iter("interface") if i.get("name") == "org.scx.Loader")
    methods = {m.get("name"): [a.get("type") for a in m.iter("arg") if a.get("direction", "in") == "in"]
               for m in iface.iter("method")}
    assert methods == SCX_LOADER_METHODS
    assert all(not [a for a in m.iter("arg") if a.get("direction") == "out"] for m in iface.iter("method"))
    assert {p.get("name"): p.get("type") for p in iface.iter("property")} == SCX_LOADER_PROPERTIES
    assert {p.get("access") for p in iface.iter("property")} == {"read"}
    assert {m.value: n for m, n in MODE_NUMBERS.items()} == {
        "auto": 0, "gaming": 1, "powersave": 2, "lowlatency": 3, "server": 4}
    assert set(MODE_NUMBERS) == set(Mode)


def test_every_property_is_free_to_read_with_busctl_and_gdbus(lo: Loader) -> None:
    idle = {
        "CurrentScheduler": "unknown",
        "SchedulerMode": 0,
        "CurrentSchedulerArgs": [],
        "SupportedSchedulers": ["pyland", "crashy", "ejecty", "fake", "hangy", "hotplug", "mute", "silent",
                                "tunable", "versioned"],
        "DefaultScheduler": "fake",
        "DefaultMode": 0,
    }
    assert props(lo.c) == idle
    assert props(lo.c, nobody=True) == idle  # polkit says no to nobody, and reading needs no yes
    out = lo.c.run(["gdbus", "call", "--address", lo.c.address, "--dest", "org.scx.Loader",
                     "--object-path", "/org/scx/Loader", "--method", "org.freedesktop.DBus.Properties.GetAll",
                     "org.scx.Loader"], nobody=True)
    assert out.returncode == 0, out.stderr
    for name in PROPERTIES:
        assert f"'{name}': <" in out.stdout
    assert "'CurrentScheduler': <'unknown'>" in out.stdout and "'DefaultMode': <uint32 0>" in out.stdout
    assert lo.pk.questions() == []
    refused = lo.c.busctl("set-property", "org.scx.Loader", "/org/scx/Loader", "org.scx.Loader",
                          "CurrentScheduler", "s", "fake")
    assert refused.returncode != 0 and props(lo.c) == idle


# -- the methods, as root (allowed without asking polkit) -----------------------------------------


def test_root_starts_switches_and_stops_without_polkit_and_both_doors_agree(lo: Loader) -> None:
    lo.pk.stop()  # root is allowed without asking: even with polkit gone
    out = lo.c.call("StartScheduler", "su", "fake", "1")
    assert out.returncode == 0, out.stderr
    assert lo.d.kernel.ops() == "fake"
    st = lo.d.status()
    assert (st["desired"]["scheduler"], st["desired"]["mode"], st["desired"]["updated_by_uid"]) == (
        "fake", "gaming", 0)
    assert st["kernel"]["owner"] == "scxctl" and st["supervisor"]["mode"] == "gaming"
    assert (lo.c.get("CurrentScheduler"), lo.c.get("SchedulerMode")) == ("fake", 1)
    assert lo.d.standin_starts()[-1]["argv"] == ["fake", "ok", "0", "gaming"]

    out = lo.c.gdbus("SwitchScheduler", "fake", "3")  # lowlatency: fake falls back to auto's arguments
    assert out.returncode == 0 and out.stdout.strip() == "()", out.stderr
    assert (lo.c.get("CurrentScheduler"), lo.c.get("SchedulerMode")) == ("fake", 3)
    assert lo.d.status()["desired"]["mode"] == "lowlatency"

    out = lo.c.call("StopScheduler")
    assert out.returncode == 0, out.stderr
    assert lo.d.kernel.state() == "disabled" and lo.d.status()["desired"]["enabled"] is False
    assert (lo.c.get("CurrentScheduler"), lo.c.get("SchedulerMode")) == ("unknown", 0)
    assert lo.pk.questions() == []


def test_restore_default_starts_the_configured_default_in_the_default_mode(lo: Loader) -> None:
    assert lo.c.call("StartScheduler", "su", "tunable", "1").returncode == 0
    out = lo.c.gdbus("RestoreDefault")
    assert out.returncode == 0, out.stderr
    assert lo.d.kernel.ops() == "fake"
    assert (lo.c.get("CurrentScheduler"), lo.c.get("SchedulerMode")) == ("fake", 0)
    assert lo.d.status()["desired"]["scheduler"] == "fake"


def test_the_socket_sees_what_dbus_did_and_dbus_announces_what_the_socket_did(lo: Loader) -> None:
    since = lo.w.mark()
    reply = lo.d.request("enable", {"scheduler": "fake", "mode": "powersave"})
    assert reply["ok"], reply
    lo.w.wait_for(lambda s: s.get("CurrentScheduler") == "fake" and s.get("SchedulerMode") == 2, since)
    assert lo.c.get("SchedulerMode") == 2
    since = lo.w.mark()
    assert lo.d.request("disable")["ok"]
    lo.w.wait_for(lambda s: s.get("CurrentScheduler") == "unknown" and s.get("SchedulerMode") == 0, since)
    assert lo.d.request("ping")["ok"] and lo.d.request("list")["ok"]


# -- PropertiesChanged ---------------------------------------------------------------------------


def test_a_switch_is_announced_stop_then_start(lo: Loader) -> None:
    assert lo.c.call("StartScheduler", "su", "fake", "1").returncode == 0
    since = lo.w.mark()
    assert lo.c.call("SwitchScheduler", "su", "fake", "2").returncode == 0
    gone = lo.w.wait_for(lambda s: s.get("CurrentScheduler") == "unknown", since)
    back = lo.w.wait_for(lambda s: s.get("CurrentScheduler") == "fake", gone + 1)
    assert lo.w.seen[back].get("SchedulerMode") == 2


def test_a_killed_scheduler_and_its_restart_are_announced(lo: Loader) -> None:
    assert lo.c.call("StartScheduler", "su", "fake", "0").returncode == 0
    pid = lo.d.status()["supervisor"]["pid"]
    since = lo.w.mark()
    os.kill(pid, signal.SIGKILL)
    gone = lo.w.wait_for(lambda s: s.get("CurrentScheduler") == "unknown", since)
    lo.w.wait_for(lambda s: s.get("CurrentScheduler") == "fake", gone + 1)
    st = lo.d.status()
    assert st["supervisor"]["pid"] not in (None, pid) and st["supervisor"]["restart_count"] == 1


def test_an_ejection_the_child_survives_is_announced_then_its_restart(lo: Loader) -> None:
    """`silent` stays alive when the kernel drops it: only a look at sysfs tells."""
    assert lo.c.call("StartScheduler", "su", "silent", "0").returncode == 0
    pid = lo.d.status()["supervisor"]["pid"]
    since = lo.w.mark()
    gone = lo.w.wait_for(lambda s: s.get("CurrentScheduler") == "unknown", since)
    lo.w.wait_for(lambda s: s.get("CurrentScheduler") == "silent", gone + 1)
    st = lo.d.status()
    assert st["supervisor"]["pid"] != pid and st["supervisor"]["last_exit"]["kind"] == "ejected"


def test_a_foreign_scheduler_is_reported_by_its_kernel_name_and_not_replaced(lo: Loader) -> None:
    since = lo.w.mark()
    lo.d.kernel.load_foreign("rusty_1.0.5")
    lo.w.wait_for(lambda s: s.get("CurrentScheduler") == "rusty_1.0.5", since)  # seen by the heartbeat
    assert (lo.c.get("CurrentScheduler"), lo.c.get("SchedulerMode"), lo.c.get("CurrentSchedulerArgs")) == (
        "rusty_1.0.5", 0, [])
    before = lo.fingerprint()
    name, text = gdbus_error(lo.c.gdbus("StartScheduler", "fake", "0"))
    assert name == "org.scx.Loader.Error.Busy" and "not started by scxctl" in text and "\n" not in text
    assert lo.fingerprint() == before and lo.d.kernel.ops() == "rusty_1.0.5"
    since = lo.w.mark()
    lo.d.kernel.unload()
    lo.w.wait_for(lambda s: s.get("CurrentScheduler") == "unknown", since)


# -- errors: named, one line, and nothing changes --------------------------------------------------


@pytest.mark.parametrize(
    ("method", "args", "error", "needle"),
    [
        ("StartScheduler", ["nope", "0"], "UnknownScheduler", "unknown scheduler 'nope' (supported: pyland"),
        ("SwitchScheduler", ["../../bin/sh", "1"], "UnknownScheduler", "unknown scheduler '../../bin/sh'"),
        ("StartSchedulerWithArgs", ["nope", "@as []"], "UnknownScheduler", "unknown scheduler"),
        ("StartScheduler", ["fake", "5"], "UnknownMode", "unknown mode 5 (modes: 0 auto"),
        ("SwitchScheduler", ["fake", "4294967295"], "UnknownMode", "unknown mode 4294967295"),
        ("StartSchedulerWithArgs", ["fake", "['--slice-us=5']"], "ArgsNotAllowed",
         "fake in mode auto takes no client arguments (rule: allowed_args of fake in mode auto is empty)"),
        ("SwitchSchedulerWithArgs", ["tunable", "['--verbose', '--slice-us=x']"], "ArgsNotAllowed",
         "argument 2 '--slice-us=x' is not allowed (rule: must fully match one of allowed_args of tunable "
         "in mode auto: --slice-us=[0-9]{1,6}, --verbose)"),
        ("StartSchedulerWithArgs", ["tunable", "['--verbose; rm -rf /']"], "ArgsNotAllowed", "not allowed"),
        ("StartSchedulerWithArgs", ["tunable", str(["--verbose"] * (MAX_ARGS + 1))], "ArgsNotAllowed",
         f"{MAX_ARGS + 1} arguments given (rule: at most {MAX_ARGS} arguments)"),
        ("StartSchedulerWithArgs", ["tunable", str(["--slice-us=" + "1" * MAX_ARG_CHARS])], "ArgsNotAllowed",
         f"at most {MAX_ARG_CHARS} characters an argument"),
        ("StartSchedulerWithArgs", ["pyland", "['--policy=/tmp/evil.py']"], "ArgsNotAllowed",
         "allowed_args of pyland in mode auto: --policy=(?:deadline|fifo)"),
    ],
)
def test_a_refused_call_names_the_error_and_changes_nothing(
    lo: Loader, method: str, args: list[str], error: str, needle: str
) -> None:
    assert lo.d.request("enable", {"scheduler": "fake", "mode": "gaming"})["ok"]
    before = lo.fingerprint()
    since = lo.w.mark()
    name, text = gdbus_error(lo.c.gdbus(method, *args))
    assert name == f"org.scx.Loader.Error.{error}" and needle in text
    assert lo.fingerprint() == before
    # the next signal is the next real change: the refused call announced nothing
    assert lo.d.request("disable")["ok"]
    first = lo.w.wait_for(lambda s: True, since)
    assert lo.w.seen[first] == {"CurrentScheduler": "unknown", "SchedulerMode": 0}


def test_restart_with_nothing_enabled_is_not_running(lo: Loader) -> None:
    before = lo.fingerprint()
    name, text = gdbus_error(lo.c.gdbus("RestartScheduler"))
    assert name == "org.scx.Loader.Error.NotRunning" and "no scheduler is enabled" in text
    assert lo.fingerprint() == before


def test_wrong_signatures_are_refused_by_the_library_before_polkit(lo: Loader) -> None:
    lo.pk.answer({NOBODY: "yes"})
    before = lo.fingerprint()
    for argv in (["StartScheduler", "string:fake", "string:gaming"],
                 ["StartScheduler", "string:fake"],
                 ["StartSchedulerWithArgs", "string:fake", "string:--verbose"],
                 ["StopScheduler", "string:now"]):
        out = lo.c.dbus_send(*argv, nobody=True)
        assert out.returncode != 0 and "org.freedesktop.DBus.Error.UnknownMethod" in out.stderr, out.stderr
    out = lo.c.call("RestartScheduler", "u", "1", nobody=True)
    assert out.returncode != 0 and "could not be found" in out.stderr
    assert lo.fingerprint() == before and lo.pk.questions() == []


# -- arguments ---------------------------------------------------------------------------------------


def test_allowed_arguments_run_and_are_reported_until_a_start_by_mode(lo: Loader) -> None:
    since = lo.w.mark()
    out = lo.c.call("StartSchedulerWithArgs", "sas", "tunable", "2", "--slice-us=500", "--verbose")
    assert out.returncode == 0, out.stderr
    assert lo.d.standin_starts()[-1]["argv"] == ["tunable", "ok", "0", "--slice-us=500", "--verbose"]
    assert lo.c.get("CurrentSchedulerArgs") == ["--slice-us=500", "--verbose"]
    # mode auto, as scx_loader
    assert (lo.c.get("CurrentScheduler"), lo.c.get("SchedulerMode")) == ("tunable", 0)
    lo.w.wait_for(lambda s: s.get("CurrentSchedulerArgs") == ["--slice-us=500", "--verbose"], since)
    st = lo.d.status()
    assert st["desired"]["args"] == st["supervisor"]["args"] == ["--slice-us=500", "--verbose"]
    assert json.loads(lo.d.state_file.read_text())["args"] == ["--slice-us=500", "--verbose"]

    since = lo.w.mark()
    assert lo.c.call("RestartScheduler").returncode == 0  # the same arguments again, in a new process
    lo.w.wait_for(lambda s: s.get("CurrentScheduler") == "unknown", since)
    assert lo.d.standin_starts()[-1]["argv"] == ["tunable", "ok", "0", "--slice-us=500", "--verbose"]
    assert lo.d.standin_starts()[-1]["pid"] != lo.d.standin_starts()[-2]["pid"]
    assert lo.c.get("CurrentSchedulerArgs") == ["--slice-us=500", "--verbose"]

    assert lo.c.call("SwitchScheduler", "su", "tunable", "1").returncode == 0
    assert lo.d.standin_starts()[-1]["argv"] == ["tunable", "ok", "0", "gaming"]
    assert lo.c.get("CurrentSchedulerArgs") == [] and lo.d.status()["desired"]["args"] == []


def test_the_socket_takes_the_same_arguments_under_the_same_rules(lo: Loader) -> None:
    reply = lo.d.request("enable", {"scheduler": "tunable", "mode": "gaming", "args": ["--slice-us=77"]})
    assert reply["ok"], reply
    assert lo.d.standin_starts()[-1]["argv"] == ["tunable", "ok", "0", "gaming", "--slice-us=77"]
    assert (lo.c.get("SchedulerMode"), lo.c.get("CurrentSchedulerArgs")) == (1, ["--slice-us=77"])
    bad = lo.d.request("enable", {"scheduler": "tunable", "args": ["--slice-us=77", "-x"]})
    assert not bad["ok"] and bad["error"]["code"] == "USAGE" and "argument 2 '-x'" in bad["error"]["message"]
    assert lo.d.status()["desired"]["args"] == ["--slice-us=77"]


# -- authorisation: polkit for everyone but root --------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "needle"),
    [
        ("no", "org.scxctl.manage is not allowed for uid 65534"),
        ("challenge", "needs authentication, and the daemon asks without interaction"),
        ("unreachable", "polkit could not be asked about org.scxctl.manage"),
    ],
)
def test_polkit_refusals_are_access_denied_and_change_nothing(lo: Loader, answer: str, needle: str) -> None:
    if answer == "unreachable":
        lo.pk.stop()
    else:
        lo.pk.answer({NOBODY: answer})
    before = lo.fingerprint()
    for method, args in (("StartScheduler", ["fake", "1"]), ("StopScheduler", []), ("RestoreDefault", [])):
        name, text = gdbus_error(lo.c.gdbus(method, *args, nobody=True))
        assert name == "org.freedesktop.DBus.Error.AccessDenied" and needle in text
    assert lo.c.call("StartScheduler", "su", "fake", "1", nobody=True).returncode != 0  # busctl too
    assert lo.fingerprint() == before
    asked = lo.pk.questions()
    if answer == "unreachable":
        assert asked == []
    else:
        assert len(asked) == 4 and {q["answer"] for q in asked} == {answer}


def test_polkit_is_asked_about_the_caller_without_interaction_and_its_yes_counts(lo: Loader) -> None:
    lo.pk.answer({NOBODY: "yes"})
    out = lo.c.call("StartScheduler", "su", "fake", "1", nobody=True)
    assert out.returncode == 0, out.stderr
    assert lo.d.kernel.ops() == "fake" and lo.d.status()["desired"]["updated_by_uid"] == NOBODY
    (asked,) = lo.pk.questions()
    assert asked == {"kind": "system-bus-name", "name": asked["name"], "uid": NOBODY,
                     "action": "org.scxctl.manage", "flags": 0, "answer": "yes"}
    assert asked["name"].startswith(":")  # the caller's unique name, which polkit resolves itself


def test_only_root_may_own_the_name(lo: Loader) -> None:
    own = ["dbus-send", f"--bus={lo.c.address}", "--print-reply", "--dest=org.freedesktop.DBus",
           "/org/freedesktop/DBus", "org.freedesktop.DBus.RequestName", "string:org.scx.Loader", "uint32:4"]
    out = lo.c.run(own, nobody=True)
    assert out.returncode != 0 and "org.freedesktop.DBus.Error.AccessDenied" in out.stderr
    out = lo.c.run(own, nobody=False)  # root may, but the daemon has it: EXISTS (3)
    assert out.returncode == 0 and "uint32 3" in out.stdout


# -- daemons of their own: no bus, D-Bus off, the name taken, no default, shut-down -------------------


def _own_bus_daemon(tmp: Path, config: str = "") -> tuple[PrivateBus, DaemonEnv]:
    bus = PrivateBus(tmp)
    (tmp / "d").mkdir()
    d = DaemonEnv(tmp / "d")
    d.config.write_text(d.config.read_text() + config)
    return bus, d


def test_without_a_bus_the_daemon_warns_once_and_serves_the_socket(tmp_path: Path) -> None:
    with daemon_env(tmp_path) as d:
        d.start()  # daemon_fakes points DBUS_SYSTEM_BUS_ADDRESS at a socket that does not exist
        assert d.request("enable", {"scheduler": "fake"})["ok"] and d.kernel.ops() == "fake"
        assert d.request("disable")["ok"] and d.kernel.state() == "disabled"
        (warning,) = d.events("dbus_unavailable")
        assert warning["level"] == "warning" and warning["action"] == "serving the control socket only"
        assert d.events("dbus_serving") == []


@pytest.mark.parametrize("case", ["disabled", "taken"])
def test_dbus_off_or_the_name_taken_leaves_the_socket_serving(tmp_path: Path, case: str) -> None:
    bus, d = _own_bus_daemon(tmp_path, "[dbus]\nenabled = false\n" if case == "disabled" else "")
    w = SignalWatcher(bus.address)
    try:
        if case == "taken":  # e.g. scx_loader got there first
            assert w.run(w.bus.request_name("org.scx.Loader")).name == "PRIMARY_OWNER"
        start_daemon(d, bus.address)
        assert d.request("enable", {"scheduler": "fake"})["ok"]
        assert d.status()["kernel"]["owner"] == "scxctl"
        if case == "disabled":
            assert d.events("dbus_disabled") and not d.events("dbus_unavailable")
            out = Clients(bus.address).busctl("status", "org.scx.Loader")
            assert out.returncode != 0  # nobody has the name
        else:
            (warning,) = d.events("dbus_unavailable")
            assert "org.scx.Loader is owned by another service" in warning["reason"]
    finally:
        w.close()
        d.close()
        bus.close()


def test_no_default_scheduler_reads_unknown_and_restore_default_fails(tmp_path: Path) -> None:
    bus, d = _own_bus_daemon(tmp_path)
    d.config.write_text(d.config.read_text().replace('default_scheduler = "fake"', 'default_scheduler = ""'))
    try:
        start_daemon(d, bus.address)
        c = Clients(bus.address)
        assert c.get("DefaultScheduler") == "unknown"
        before = d.state_file.read_bytes() if d.state_file.exists() else None
        name, text = gdbus_error(c.gdbus("RestoreDefault"))
        assert name == "org.scx.Loader.Error.NoDefault" and "no default scheduler is configured" in text
        assert d.kernel.state() == "disabled" and (d.state_file.read_bytes() if d.state_file.exists()
                                                   else None) == before
        reply = d.request("enable", {})
        assert reply["error"]["code"] == "USAGE" and "no default_scheduler" in reply["error"]["message"]
    finally:
        d.close()
        bus.close()


def test_a_bus_that_goes_away_is_one_warning_and_the_socket_serves_on(tmp_path: Path) -> None:
    bus, d = _own_bus_daemon(tmp_path)
    try:
        start_daemon(d, bus.address)
        d.wait_for(lambda: d.events("dbus_serving"), 10, "the daemon on the bus")
        bus.close()
        d.wait_for(lambda: d.events("dbus_disconnected"), 10, "the daemon to notice")
        # a start and a stop tell the (gone) D-Bus side; the socket answers all the same
        assert d.request("enable", {"scheduler": "fake"})["ok"] and d.kernel.ops() == "fake"
        assert d.request("disable")["ok"] and d.kernel.state() == "disabled"
        assert len(d.events("dbus_disconnected")) == 1 and d.events("dbus_notify_failed") == []
        assert d.stop() == 0
    finally:
        d.close()
        bus.close()  # again: a no-op


def test_the_daemon_owns_the_name_again_when_the_bus_comes_back(tmp_path: Path) -> None:
    """dbus restarted (an upgrade does it): the daemon connects again, owns org.scx.Loader again,
    answers calls on it and announces the state to the new connection's watchers."""
    bus, d = _own_bus_daemon(tmp_path)
    try:
        start_daemon(d, bus.address)
        d.wait_for(lambda: d.events("dbus_serving"), 10, "the daemon on the bus")
        c = Clients(bus.address)
        assert c.call("StartScheduler", "su", "fake", "1").returncode == 0
        bus.restart()
        d.wait_for(lambda: any(e["reason"] == "reconnected" for e in d.events("dbus_serving")), 20,
                   "the daemon to connect again")
        (back,) = [e for e in d.events("dbus_serving") if e["reason"] == "reconnected"]
        assert back["tries"] >= 1 and len(d.events("dbus_disconnected")) == 1
        assert c.get("CurrentScheduler") == "fake" and c.get("SchedulerMode") == 1
        w = SignalWatcher(bus.address)
        try:
            since = w.mark()
            assert c.call("SwitchScheduler", "su", "fake", "2").returncode == 0
            w.wait_for(lambda s: s.get("SchedulerMode") == 2, since)
        finally:
            w.close()
        assert d.kernel.ops() == "fake" and d.status()["desired"]["mode"] == "powersave"
        assert d.stop() == 0
    finally:
        d.close()
        bus.close()


def test_shutdown_announces_the_stop_and_releases_the_name(tmp_path: Path) -> None:
    bus, d = _own_bus_daemon(tmp_path)
    w = SignalWatcher(bus.address)
    try:
        start_daemon(d, bus.address)
        c = Clients(bus.address)
        assert c.call("StartScheduler", "su", "fake", "0").returncode == 0
        since = w.mark()
        assert d.stop() == 0
        w.wait_for(lambda s: s.get("CurrentScheduler") == "unknown", since)
        assert c.busctl("status", "org.scx.Loader").returncode != 0
    finally:
        w.close()
        d.close()
        bus.close()


def test_as_nobody_really_is_not_root() -> None:
    out = subprocess.run(["id", "-u"], capture_output=True, text=True, check=True, **as_nobody())
    assert out.stdout.strip() == str(NOBODY)
