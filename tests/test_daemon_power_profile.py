"""follow_power_profile: the daemon follows power-profiles-daemon's ActiveProfile on a private system bus
(tests/dbus_fakes.py).

power-profiles-daemon is a stand-in here (FakePowerProfiles: ActiveProfile and PropertiesChanged under
its bus names, as 0.20 and later export them, or under the old name only, as 0.1x): the real daemon is
exercised in the VM acceptance. The scheduler side is the real daemon with its stand-in schedulers
(tests/daemon_fakes.py), driven over its socket, scx_loader's D-Bus interface and the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from daemon_fakes import REPO, DaemonEnv, daemon_env
from dbus_fakes import BOOKWORM_NAMES, Clients, FakePowerProfiles, PrivateBus, private_bus

from scxctl.daemon.config import ConfigError, Mode, parse_config

_MISSING = [t for t in ("dbus-daemon", "busctl") if shutil.which(t) is None]
needs_bus = pytest.mark.skipif(
    bool(_MISSING) or os.geteuid() != 0,
    reason=f"needs root (the bus policy lets root own the names) and {', '.join(_MISSING) or 'D-Bus'}",
)

FOLLOW = "follow_power_profile = true\n"


@dataclass
class World:
    d: DaemonEnv
    ppd: FakePowerProfiles
    bus: PrivateBus

    def desired(self) -> tuple[str | None, str | None, str]:
        st = self.d.status()["desired"]
        return st["scheduler"], st["mode"], st["mode_source"]

    def wait_mode(self, mode: str, what: str) -> None:
        """Until the kernel runs the daemon's scheduler in `mode` (desired and supervised)."""
        def there() -> bool:
            st = self.d.status()
            return (st["desired"]["mode"] == st["supervisor"]["mode"] == mode
                    and st["kernel"]["owner"] == "scxctl")
        self.d.wait_for(there, 20, what)

    def switches(self) -> list[tuple[str, str]]:
        return [(e["profile"], e["mode"]) for e in self.d.events("power_profile_switch")]

    def decided(self) -> int:
        return len(self.d.events("power_profile_held")) + len(self.d.events("power_profile_ignored"))

    def set_held(self, profile: str) -> None:
        """Change the profile to one the daemon must not follow; return once it decided so."""
        n = self.decided()
        self.ppd.set(profile)
        self.d.wait_for(lambda: self.decided() > n, 10, f"the daemon to decide on {profile}")


def _start(tmp: Path, config: str, address: str) -> DaemonEnv:
    (tmp / "d").mkdir()
    d = DaemonEnv(tmp / "d")
    d.config.write_text(config + d.config.read_text())
    d.start(extra_env={"DBUS_SYSTEM_BUS_ADDRESS": address})
    return d


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with private_bus(tmp_path) as bus:
        ppd = FakePowerProfiles(tmp_path, bus.address)
        ppd.start("balanced")
        d = _start(tmp_path, FOLLOW, bus.address)
        try:
            d.wait_for(lambda: d.status()["power_profile"]["profile"] == "balanced", 10, "the first read")
            yield World(d, ppd, bus)
        finally:
            d.close()
            ppd.stop()


@needs_bus
def test_the_mode_follows_the_profile_once_per_change_on_both_names(world: World) -> None:
    d, ppd = world.d, world.ppd
    pp = d.status()["power_profile"]
    assert pp == {"follow": True, "watching": True, "profile": "balanced",
                  "service": pp["service"], "mode": "auto"}
    assert pp["service"] in ("org.freedesktop.UPower.PowerProfiles", "net.hadess.PowerProfiles")
    assert d.request("enable", {"scheduler": "fake"})["ok"]  # no mode: the profile's
    assert world.desired() == ("fake", "auto", "auto")
    starts = len(d.standin_starts())
    ppd.set("performance")
    world.wait_mode("gaming", "performance -> gaming")
    assert d.standin_starts()[-1]["argv"] == ["fake", "ok", "0", "gaming"]
    ppd.set("power-saver")
    world.wait_mode("powersave", "power-saver -> powersave")
    # both names announced each change; each was followed once
    assert world.switches() == [("performance", "gaming"), ("power-saver", "powersave")]
    assert len(d.standin_starts()) == starts + 2
    event = d.events("power_profile_switch")[-1]
    assert (event["scheduler"], event["previous_mode"], event["level"]) == ("fake", "gaming", "info")
    assert json.loads(d.state_file.read_text())["mode_source"] == "auto"


@needs_bus
def test_an_explicit_mode_holds_until_enable_without_a_mode_or_restore(world: World) -> None:
    d, ppd = world.d, world.ppd
    assert d.request("enable", {"scheduler": "fake"})["ok"]
    assert d.request("switch", {"mode": "lowlatency"})["ok"]  # the socket, explicitly
    assert world.desired() == ("fake", "lowlatency", "explicit")
    world.set_held("performance")
    assert world.desired() == ("fake", "lowlatency", "explicit") and world.switches() == []
    held = d.events("power_profile_held")[-1]
    assert (held["profile"], held["mode"], held["held_mode"]) == ("performance", "gaming", "lowlatency")

    # a switch of scheduler only carries the mode and its holding over
    assert d.request("switch", {"scheduler": "fake", "keep_mode": True})["ok"]
    assert world.desired() == ("fake", "lowlatency", "explicit")

    # enable without a mode: following again, from the profile now in force
    assert d.request("enable", {"scheduler": "fake"})["ok"]
    assert world.desired() == ("fake", "gaming", "auto")
    ppd.set("balanced")
    world.wait_mode("auto", "balanced -> auto")

    # the CLI's -m is explicit too; restore lets go of it
    scx = [sys.executable, "-m", "scxctl"]
    done = subprocess.run([*scx, "switch", "-m", "server"], env=d.env, cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    world.set_held("power-saver")
    assert world.desired() == ("fake", "server", "explicit")
    done = subprocess.run([*scx, "restore"], env=d.env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "restored default scheduler Fake in PowerSave mode\n"
    assert world.desired() == ("fake", "powersave", "auto")


@needs_bus
def test_dbus_start_is_explicit_and_restore_default_follows_again(world: World) -> None:
    c = Clients(world.bus.address)
    assert c.call("StartScheduler", "su", "fake", "4").returncode == 0  # server, by number
    assert world.desired() == ("fake", "server", "explicit")
    world.set_held("performance")
    assert world.desired()[1] == "server" and c.get("SchedulerMode") == 4
    assert c.call("RestoreDefault").returncode == 0
    assert world.desired() == ("fake", "gaming", "auto") and c.get("SchedulerMode") == 1


@needs_bus
def test_nothing_enabled_nothing_started(world: World) -> None:
    world.set_held("performance")
    assert world.d.events("power_profile_ignored")[-1]["reason"] == "no scheduler enabled"
    assert world.d.kernel.state() == "disabled" and world.d.status()["desired"]["enabled"] is False


@needs_bus
def test_a_service_that_comes_later_goes_and_comes_back(tmp_path: Path) -> None:
    """Debian bookworm's power-profiles-daemon 0.12 owns only net.hadess.PowerProfiles."""
    with private_bus(tmp_path) as bus:
        ppd = FakePowerProfiles(tmp_path, bus.address)
        d = _start(tmp_path, FOLLOW, bus.address)
        w = World(d, ppd, bus)
        try:
            # the daemon answers its socket first, then goes on the bus
            d.wait_for(lambda: d.events("power_profile_watching"), 10, "the watcher")
            assert d.status()["power_profile"]["watching"] is True
            assert d.request("enable", {"scheduler": "fake"})["ok"]
            assert w.desired() == ("fake", "auto", "auto")  # no profile yet: default_mode
            ppd.start("power-saver", BOOKWORM_NAMES)
            w.wait_mode("powersave", "the appearing service's profile")
            assert d.status()["power_profile"]["service"] == "net.hadess.PowerProfiles"
            ppd.stop()
            d.wait_for(lambda: d.events("power_profile_service_gone"), 10, "the service to go")
            assert d.status()["power_profile"]["profile"] is None and w.desired()[1] == "powersave"
            ppd.start("performance", BOOKWORM_NAMES)
            w.wait_mode("gaming", "the returning service's profile")
            assert w.switches() == [("power-saver", "powersave"), ("performance", "gaming")]
        finally:
            d.close()
            ppd.stop()


@needs_bus
def test_off_by_default(tmp_path: Path) -> None:
    with private_bus(tmp_path) as bus:
        ppd = FakePowerProfiles(tmp_path, bus.address)
        ppd.start("performance")
        d = _start(tmp_path, "", bus.address)
        try:
            d.wait_for(lambda: d.events("dbus_serving"), 10, "the daemon on the bus")
            assert d.request("enable", {"scheduler": "fake"})["ok"]
            ppd.set("power-saver")
            assert d.request("ping")["ok"]
            pp: dict[str, Any] = d.status()["power_profile"]
            assert pp == {"follow": False, "watching": False, "profile": None, "service": None, "mode": None}
            assert d.status()["desired"]["mode"] == "auto"
            assert [e for e in d.events() if str(e.get("event", "")).startswith("power_profile")] == []
        finally:
            d.close()
            ppd.stop()


def test_without_a_bus_the_daemon_warns_once_and_works(tmp_path: Path) -> None:
    with daemon_env(tmp_path) as d:
        d.config.write_text(FOLLOW + d.config.read_text())
        d.start()  # DBUS_SYSTEM_BUS_ADDRESS names a socket that does not exist
        d.wait_for(lambda: d.events("power_profile_unavailable"), 10, "the warning")
        assert d.request("enable", {"scheduler": "fake"})["ok"]
        (warning,) = d.events("power_profile_unavailable")
        assert warning["level"] == "warning" and warning["action"] == "not following the power profile"
        assert d.status()["power_profile"]["watching"] is False and d.status()["desired"]["mode"] == "auto"


def test_config_keys() -> None:
    default = parse_config({})
    assert default.follow_power_profile is False
    assert default.power_profile_modes == {"power-saver": Mode.powersave, "balanced": Mode.auto,
                                           "performance": Mode.gaming}
    mine = parse_config({"follow_power_profile": True, "power_profile_modes": {"performance": "lowlatency"}})
    assert mine.follow_power_profile and mine.power_profile_modes == {"performance": Mode.lowlatency}
    for bad in ({"follow_power_profile": "yes"}, {"power_profile_modes": {"balanced": "turbo"}},
                {"power_profile_modes": ["balanced"]}):
        with pytest.raises(ConfigError):
            parse_config(bad)


@needs_bus
def test_following_goes_on_after_the_bus_restarts(world: World) -> None:
    """dbus restarted: both the daemon's and power-profiles-daemon's connections are gone; the
    daemon connects again and follows the profile the service announces once it is back."""
    d, ppd = world.d, world.ppd
    assert d.request("enable", {"scheduler": "fake"})["ok"]
    world.wait_mode("auto", "balanced -> auto")
    ppd.stop()
    world.bus.restart()
    ppd.start("power-saver")
    world.wait_mode("powersave", "power-saver -> powersave after the bus came back")
    reasons = [e["reason"] for e in d.events("power_profile_watching")]
    assert reasons == ["follow_power_profile", "reconnected"]
    assert len(d.events("power_profile_disconnected")) == 1
    assert world.switches() == [("power-saver", "powersave")]
    ppd.set("performance")
    world.wait_mode("gaming", "performance -> gaming on the new connection")
