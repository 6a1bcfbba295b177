"""Test doubles for the D-Bus front door: a private system bus, a polkit stand-in, clients.

A power-profiles-daemon stand-in exports ActiveProfile under its bus names and announces changes.

The private bus is a real dbus-daemon with the system bus's default policy plus the packaged
packaging/dbus/org.scx.Loader.conf, on an abstract socket (no file permissions in the way of a
client running as nobody). The polkit stand-in owns org.freedesktop.PolicyKit1 on it and answers
CheckAuthorization from a table by the caller's uid, logging every question it gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from daemon_fakes import REPO
from dbus_fast import Message, MessageType
from dbus_fast.aio import MessageBus

NOBODY = 65534
NAME, PATH, IFACE = "org.scx.Loader", "/org/scx/Loader", "org.scx.Loader"

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:abstract={socket}</listen>
  <auth>EXTERNAL</auth>
  <!-- the system bus's default policy (Debian's system.conf) -->
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
  </policy>
  <!-- as polkit's own bus policy: root owns the authority, everybody may ask it -->
  <policy user="root">
    <allow own="org.freedesktop.PolicyKit1"/>
  </policy>
  <policy context="default">
    <allow send_destination="org.freedesktop.PolicyKit1"/>
  </policy>
  <!-- as power-profiles-daemon's own bus policy: root owns its names, everybody may ask it -->
  <policy user="root">
    <allow own="org.freedesktop.UPower.PowerProfiles"/>
    <allow own="net.hadess.PowerProfiles"/>
  </policy>
  <policy context="default">
    <allow send_destination="org.freedesktop.UPower.PowerProfiles"/>
    <allow send_destination="net.hadess.PowerProfiles"/>
  </policy>
  <include>{loader_conf}</include>
</busconfig>
"""

# no `from __future__ import annotations` here: dbus-fast reads signatures from the annotations
POLKIT = '''
import asyncio, json, sys
from dbus_fast import BusType, Message
from dbus_fast.aio import MessageBus
from dbus_fast.service import ServiceInterface, method

TABLE, LOG = sys.argv[1], sys.argv[2]
SUBJECT, S, DETAILS, U, RESULT = "(sa{sv})", "s", "a{ss}", "u", "(bba{ss})"


class Authority(ServiceInterface):
    def __init__(self, bus):
        super().__init__("org.freedesktop.PolicyKit1.Authority")
        self.bus = bus

    @method()
    async def CheckAuthorization(self, subject: SUBJECT, action_id: S, details: DETAILS, flags: U,
                                 cancellation_id: S) -> RESULT:
        name = subject[1]["name"].value
        reply = await self.bus.call(Message(
            destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
            interface="org.freedesktop.DBus", member="GetConnectionUnixUser", signature="s", body=[name]))
        uid = reply.body[0]
        with open(TABLE) as f:
            answer = json.load(f).get(str(uid), "no")
        with open(LOG, "a") as f:
            f.write(json.dumps({"kind": subject[0], "name": name, "uid": uid, "action": action_id,
                                "flags": flags, "answer": answer}) + "\\n")
        return [answer == "yes", answer == "challenge", {}]


async def main():
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    bus.export("/org/freedesktop/PolicyKit1/Authority", Authority(bus))
    await bus.request_name("org.freedesktop.PolicyKit1")
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
'''


# power-profiles-daemon's ActiveProfile under the names given (argv: profile, names...), changed by
# "set PROFILE" lines on stdin ("ok" once PropertiesChanged is sent on every name)
PPD = '''
import asyncio, sys
from dbus_fast import BusType
from dbus_fast.aio import MessageBus
from dbus_fast.service import PropertyAccess, ServiceInterface, dbus_property

PATHS = {"org.freedesktop.UPower.PowerProfiles": "/org/freedesktop/UPower/PowerProfiles",
         "net.hadess.PowerProfiles": "/net/hadess/PowerProfiles"}


class Profiles(ServiceInterface):
    def __init__(self, name, profile):
        super().__init__(name)
        self.profile = profile

    @dbus_property(access=PropertyAccess.READ)
    def ActiveProfile(self) -> "s":
        return self.profile


async def main():
    profile, names = sys.argv[1], sys.argv[2:]
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    exported = []
    for name in names:  # one object per name, as power-profiles-daemon exports it
        iface = Profiles(name, profile)
        bus.export(PATHS[name], iface)
        exported.append(iface)
    for name in names:
        await bus.request_name(name)
    print("ready", flush=True)
    reader = asyncio.StreamReader()
    protocol = asyncio.StreamReaderProtocol(reader)
    await asyncio.get_running_loop().connect_read_pipe(lambda: protocol, sys.stdin)
    while line := (await reader.readline()).decode().split():
        if line[0] == "set":
            for iface in exported:
                iface.profile = line[1]
                iface.emit_properties_changed({"ActiveProfile": line[1]})
            print("ok", flush=True)

asyncio.run(main())
'''

TRIXIE_NAMES = ("org.freedesktop.UPower.PowerProfiles", "net.hadess.PowerProfiles")  # ppd 0.20 and later
BOOKWORM_NAMES = ("net.hadess.PowerProfiles",)  # ppd 0.1x


class FakePowerProfiles:
    """power-profiles-daemon's ActiveProfile on the private bus: a stand-in for the real daemon, whose
    own run is the VM acceptance's. It owns `names` (both, as 0.20 and later do, or the old one only)."""

    def __init__(self, tmp: Path, address: str) -> None:
        self.script = tmp / "ppd_standin.py"
        self.script.write_text(PPD)
        self.address = address
        self.proc: subprocess.Popen[str] | None = None

    def start(self, profile: str, names: tuple[str, ...] = TRIXIE_NAMES) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(self.script), profile, *names],
            env={**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": self.address},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def set(self, profile: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"set {profile}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


class PrivateBus:
    """A dbus-daemon of our own, with the packaged policy for org.scx.Loader."""

    def __init__(self, tmp: Path) -> None:
        self.config = tmp / "bus.conf"
        self.config.write_text(BUS_CONFIG.format(
            socket=f"scxctl-test-{uuid.uuid4().hex}",
            loader_conf=REPO / "packaging/dbus/org.scx.Loader.conf",
        ))
        self.address = self._start()

    def _start(self) -> str:
        self.proc = subprocess.Popen(
            ["dbus-daemon", f"--config-file={self.config}", "--nofork", "--print-address"],
            stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        address = self.proc.stdout.readline().strip()
        assert address.startswith("unix:abstract="), address
        # without the bus's guid, as the system bus's well-known address is: a client given one
        # would refuse the same bus restarted
        return address.split(",guid=")[0]

    def restart(self) -> None:
        """The bus goes away and comes back at the same address, as `systemctl restart dbus` does:
        every connection to it is gone, and with them every name owned on it."""
        self.close()
        assert self._start() == self.address

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class PolkitStandin:
    """org.freedesktop.PolicyKit1 answering from `table` (uid -> "yes" | "no" | "challenge")."""

    def __init__(self, tmp: Path, address: str) -> None:
        self.table_file = tmp / "polkit-table.json"
        self.log_file = tmp / "polkit.log"
        self.log_file.touch()
        self.script = tmp / "polkit_standin.py"
        self.script.write_text(POLKIT)
        self.address = address
        self.proc: subprocess.Popen[str] | None = None
        self.answer({})

    def answer(self, table: dict[int, str]) -> None:
        self.table_file.write_text(json.dumps({str(k): v for k, v in table.items()}))

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(self.script), str(self.table_file), str(self.log_file)],
            env={**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": self.address}, stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def questions(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.log_file.read_text().splitlines() if x.strip()]


def as_nobody() -> dict[str, Any]:
    """subprocess.run keywords that run the client as nobody, with no supplementary groups."""
    return {"user": NOBODY, "group": NOBODY, "extra_groups": [], "env": {"PATH": os.environ["PATH"]}}


class Clients:
    """busctl, gdbus and dbus-send against the private bus, as root or as nobody."""

    def __init__(self, address: str) -> None:
        self.address = address

    @staticmethod
    def run(argv: list[str], nobody: bool = False) -> subprocess.CompletedProcess[str]:
        kw = as_nobody() if nobody else {}
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)

    def busctl(self, *args: str, nobody: bool = False) -> subprocess.CompletedProcess[str]:
        return self.run(["busctl", f"--address={self.address}", *args], nobody)

    def call(self, method: str, signature: str = "", *args: str, nobody: bool = False
             ) -> subprocess.CompletedProcess[str]:
        sig = [signature, *args] if signature else []
        return self.busctl("--", "call", NAME, PATH, IFACE, method, *sig, nobody=nobody)  # args may start "-"

    def get(self, prop: str, nobody: bool = False) -> Any:
        out = self.busctl("--json=short", "get-property", NAME, PATH, IFACE, prop, nobody=nobody)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["data"]

    def gdbus(self, method: str, *args: str, nobody: bool = False) -> subprocess.CompletedProcess[str]:
        return self.run(["gdbus", "call", "--address", self.address, "--dest", NAME, "--object-path", PATH,
                          "--method", f"{IFACE}.{method}", *args], nobody)

    def dbus_send(self, method: str, *args: str, nobody: bool = False) -> subprocess.CompletedProcess[str]:
        return self.run(["dbus-send", f"--bus={self.address}", "--print-reply", f"--dest={NAME}", PATH,
                          f"{IFACE}.{method}", *args], nobody)


class SignalWatcher:
    """A dbus-fast client in a thread of its own, collecting org.scx.Loader's PropertiesChanged."""

    def __init__(self, address: str) -> None:
        self.seen: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.bus: MessageBus = asyncio.run_coroutine_threadsafe(self._connect(address), self._loop).result(10)

    async def _connect(self, address: str) -> MessageBus:
        bus = await MessageBus(bus_address=address).connect()
        rule = (f"type='signal',path='{PATH}',interface='org.freedesktop.DBus.Properties',"
                "member='PropertiesChanged'")
        await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                               interface="org.freedesktop.DBus", member="AddMatch", signature="s",
                               body=[rule]))
        bus.add_message_handler(self._on_message)
        return bus

    def _on_message(self, msg: Message) -> None:
        if msg.message_type is MessageType.SIGNAL and msg.member == "PropertiesChanged" and msg.path == PATH:
            interface, changed, _invalidated = msg.body
            if interface == IFACE:
                with self._cond:
                    self.seen.append({k: v.value for k, v in changed.items()})
                    self._cond.notify_all()

    def mark(self) -> int:
        """The index the next signal will have; first a round trip to the daemon (a property read),
        whose reply comes after every signal it sent before: none of those can arrive later."""
        get = Message(destination=NAME, path=PATH, interface="org.freedesktop.DBus.Properties", member="Get",
                      signature="ss", body=[IFACE, "CurrentScheduler"])
        reply = self.run(self.bus.call(get))
        assert reply is not None and reply.message_type is MessageType.METHOD_RETURN, reply
        with self._cond:
            return len(self.seen)

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], since: int, timeout: float = 20) -> int:
        """Index of the first signal from `since` on that satisfies pred; AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i in range(since, len(self.seen)):
                    if pred(self.seen[i]):
                        return i
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no such PropertiesChanged in {timeout}s: {self.seen[since:]}")
                self._cond.wait(left)

    def run(self, coro: Any, timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._loop.call_soon_threadsafe(self.bus.disconnect)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@contextlib.contextmanager
def private_bus(tmp: Path) -> Iterator[PrivateBus]:
    bus = PrivateBus(tmp)
    try:
        yield bus
    finally:
        bus.close()
