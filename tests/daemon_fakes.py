"""Test doubles for the daemon tests: a fake sched_ext sysfs tree, a stand-in scheduler, a daemon runner.

The fake kernel behaves like the real one where the daemon can observe it: a scheduler appears in
`state`/`root/ops` when the stand-in attaches, and is unregistered when the stand-in detaches *or
dies* (the real kernel closes the struct_ops link when the process exits; a watcher thread here
does the same), so SIGKILL paths are exercised honestly.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def _put(path: Path, text: str) -> None:
    """Replace a fake sysfs file at once: the daemon reads them while the fake kernel writes, and a
    real sysfs read never sees a truncated file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
SCX = "sys/kernel/sched_ext"
# a stand-in scheduler that takes client arguments (they follow its behaviour and number); a config
# fragment to format with py= and standin= (JSON strings)
TUNABLE = """
[schedulers.tunable]
command = [{py}, {standin}, "tunable"]
ops = "tunable"
allowed_args = ["--slice-us=[0-9]{{1,6}}", "--verbose"]
[schedulers.tunable.modes]
auto = ["ok", "0"]
gaming = ["ok", "0", "gaming"]
"""

STANDIN = textwrap.dedent('''
    """Stand-in scheduler: attaches to the fake kernel, then behaves as told (argv: OPS BEHAVIOUR [ARG])."""
    import json, os, signal, sys, time
    from pathlib import Path
    ops, behaviour = sys.argv[1], sys.argv[2]
    arg = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    scx = Path(os.environ["SCXCTL_SYSROOT"]) / "sys/kernel/sched_ext"

    def put(path, text):  # sysfs reads are atomic: no reader may see a truncated file
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    with open(os.environ["STANDIN_LOG"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "argv": sys.argv[1:], "t": time.time()}) + "\\n")

    def detach():
        if (scx / "root/owner").exists() and (scx / "root/owner").read_text() == str(os.getpid()):
            put(scx / "state", "disabled\\n")
            for name in ("ops", "owner"):
                (scx / "root" / name).unlink(missing_ok=True)

    def on_term(signum, frame):
        detach()
        print(json.dumps({"event": "detached", "exit_kind": "UNREG",
                          "reason": "unregistered from user space"}), file=sys.stderr, flush=True)
        sys.exit(0)

    print("standin starting", ops, behaviour, flush=True)
    if behaviour == "hang-on-stop":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, on_term)
    if behaviour != "never-switch":
        if (scx / "state").read_text().strip() != "disabled":
            print("attach failed: EBUSY (another scheduler is loaded)", file=sys.stderr, flush=True)
            sys.exit(5)
        (scx / "root").mkdir(exist_ok=True)
        put(scx / "root/owner", str(os.getpid()))
        put(scx / "root/ops", ops + "\\n")
        put(scx / "state", "enabled\\n")
    deadline = time.monotonic() + arg
    reattached = 0
    while True:
        time.sleep(0.02)
        if behaviour == "crash-after" and time.monotonic() >= deadline:
            detach()
            print("Traceback (most recent call last): ...", file=sys.stderr)
            print("RuntimeError: boom in the policy", file=sys.stderr, flush=True)
            sys.exit(3)
        if behaviour == "eject-after" and time.monotonic() >= deadline:
            detach()
            print(json.dumps({"event": "ejected", "exit_kind": "ERROR_STALL", "reason": "runnable task stall",
                              "message": "watchdog failed to check in for 30s"}), file=sys.stderr, flush=True)
            sys.exit(8)
        if behaviour == "reattach-after" and time.monotonic() >= deadline:
            detach()  # as pyland on CPU hotplug: the kernel asked for a restart, and it re-attaches
            print(json.dumps({"event": "pyland restarting", "reason": "UNREG_KERN (cpu 1 going offline)",
                              "restarts": reattached + 1}), flush=True)
            time.sleep(4.0)  # longer than the daemon's 3 s ejection grace
            (scx / "root").mkdir(exist_ok=True)
            put(scx / "root/owner", str(os.getpid()))
            put(scx / "root/ops", ops + "\\n")
            put(scx / "state", "enabled\\n")
            reattached += 1
            deadline = time.monotonic() + (arg if reattached < 2 else 1e9)
        if behaviour == "silent-eject-after" and time.monotonic() >= deadline:
            detach()  # the kernel dropped it, but the process keeps running
            behaviour = "ok"
''')


class FakeKernel:
    """A sched_ext sysfs tree under `root`, plus the kernel's "owner died -> unregister" rule."""

    def __init__(self, root: Path, available: bool = True) -> None:
        self.root = root
        self.scx = root / SCX
        if available:
            (self.scx / "root").mkdir(parents=True)
            _put(self.scx / "state", "disabled\n")
            for name in ("switch_all", "nr_rejected", "enable_seq"):
                _put(self.scx / name, "0\n")
        (root / "proc").mkdir(parents=True, exist_ok=True)
        (root / "proc/sysrq-trigger").write_text("")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def state(self) -> str:
        return (self.scx / "state").read_text().strip()

    def ops(self) -> str | None:
        with contextlib.suppress(FileNotFoundError):
            return (self.scx / "root/ops").read_text().strip()
        return None

    def load_foreign(self, ops: str) -> None:
        """A scheduler some other tool loaded (owner pid 1 never dies)."""
        _put(self.scx / "root/owner", "1")
        _put(self.scx / "root/ops", ops + "\n")
        _put(self.scx / "state", "enabled\n")

    def unload(self) -> None:
        _put(self.scx / "state", "disabled\n")
        for name in ("ops", "owner"):
            (self.scx / "root" / name).unlink(missing_ok=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            owner = self.scx / "root/owner"
            with contextlib.suppress(OSError, ValueError):
                pid = int(owner.read_text())
                if pid != 1 and not _alive(pid):
                    self.unload()
            trigger = self.root / "proc/sysrq-trigger"
            with contextlib.suppress(OSError):
                if trigger.read_text() == "S":  # SysRq-S: the kernel unloads any scheduler
                    trigger.write_text("")
                    self.unload()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purpose
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    return False


def fake_config(tmp: Path, standin: Path, group: str = "nogroup", **limits: Any) -> str:
    lim = {
        "verify_timeout_s": 2,
        "stop_timeout_s": 1,
        "backoff_initial_s": 0.2,
        "backoff_max_s": 0.8,
        "max_failures": 4,
        "failure_window_s": 30,
        "monitor_interval_s": 0.2,
        **limits,
    }
    py = json.dumps(sys.executable)
    sp = json.dumps(str(standin))
    out = [f'group = "{group}"', 'default_scheduler = "fake"', "[supervisor]"]
    out += [f"{k} = {v}" for k, v in lim.items()]
    schedulers = {
        "fake": (
            "fake",
            {"auto": ["ok"], "gaming": ["ok", "0", "gaming"], "powersave": ["ok", "0", "powersave"]},
        ),
        "crashy": ("crashy", {"auto": ["crash-after", "0.3"]}),
        "hangy": ("hangy", {"auto": ["hang-on-stop"]}),
        "mute": ("mute", {"auto": ["never-switch"]}),
        "ejecty": ("ejecty", {"auto": ["eject-after", "0.4"]}),
        "silent": ("silent", {"auto": ["silent-eject-after", "0.4"]}),
        "hotplug": ("hotplug", {"auto": ["reattach-after", "0.5"]}),
        # as scx's Rust schedulers register: the configured name, then version, git and target
        "versioned": ("versioned_1.0.14_g3c5df27_x86_64_unknown_linux_gnu", {"auto": ["ok"]}),
    }
    for name, (registered, modes) in schedulers.items():
        out.append(f"[schedulers.{name}]")
        out.append(f"command = [{py}, {sp}, {json.dumps(registered)}]")
        out.append(f'ops = "{name}"')
        out.append(f"[schedulers.{name}.modes]")
        out += [f"{m} = {json.dumps(a)}" for m, a in modes.items()]
    return "\n".join(out) + "\n"


class DaemonEnv:
    """Paths and environment of one test daemon, and helpers to drive it."""

    def __init__(self, tmp: Path, runtime_dir: Path | None = None, sched_ext: bool = True) -> None:
        self.tmp = tmp
        self.kernel = FakeKernel(tmp / "sysroot", available=sched_ext)
        runtime = runtime_dir or tmp / "run"
        self.standin = tmp / "standin.py"
        self.standin.write_text(STANDIN)
        self.standin_log = tmp / "standin.log"
        self.standin_log.touch()
        self.config = tmp / "etc/config.toml"
        self.config.parent.mkdir()
        self.config.write_text(fake_config(tmp, self.standin))
        # the default metrics file, in a directory of its own (never the machine's node-exporter's)
        self.metrics = tmp / "node-exporter/scxctl.prom"
        self.metrics.parent.mkdir()
        self.env = {
            **os.environ,
            "SCXCTL_SYSROOT": str(tmp / "sysroot"),
            "SCXCTL_CONFIG": str(self.config),
            "SCXCTL_STATE_DIR": str(tmp / "state"),
            "SCXCTL_LOG_DIR": str(tmp / "log"),
            "SCXCTL_RUNTIME_DIR": str(runtime),
            "SCXCTL_METRICS_FILE": str(self.metrics),
            "STANDIN_LOG": str(self.standin_log),
            "PYTHONPATH": str(REPO),
            # never the machine's system bus: a test that wants D-Bus passes its private bus
            "DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={tmp / 'no-system-bus'}",
        }
        self.env.pop("NOTIFY_SOCKET", None)
        self.socket = runtime / "control.sock"
        self.state_file = tmp / "state/state.json"
        self.log_file = tmp / "log/daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def apply_env(self, monkeypatch: Any) -> None:
        for key in (
            "SCXCTL_SYSROOT",
            "SCXCTL_CONFIG",
            "SCXCTL_STATE_DIR",
            "SCXCTL_LOG_DIR",
            "SCXCTL_RUNTIME_DIR",
            "SCXCTL_METRICS_FILE",
        ):
            monkeypatch.setenv(key, self.env[key])

    def start(self, wait: bool = True, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scxctl", "daemon"],
            cwd=REPO,
            env={**self.env, **(extra_env or {})},
            stdout=open(self.tmp / "daemon.stdout", "ab"),  # noqa: SIM115 - the child owns it
            stderr=subprocess.STDOUT,
        )
        if wait:
            self.wait_for(lambda: self.socket.exists() and self.request("ping")["ok"], 15, "daemon socket")
        return self.proc

    def stop(self, timeout: float = 15) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def raw(self, payload: bytes, timeout: float = 10) -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(self.socket))
            s.sendall(payload)
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data

    def request(self, op: str, args: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
        line = json.dumps({"v": 1, "id": 7, "op": op, "args": args or {}}).encode() + b"\n"
        return json.loads(self.raw(line, timeout))

    def status(self) -> dict[str, Any]:
        reply = self.request("status")
        assert reply["ok"], reply
        return reply["result"]

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        if not self.log_file.exists():
            return []
        out = [json.loads(x) for x in self.log_file.read_text().splitlines() if x.strip()]
        return [e for e in out if name is None or e.get("event") == name]

    def standin_starts(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.standin_log.read_text().splitlines() if x.strip()]

    @staticmethod
    def wait_for(pred: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError, KeyError):
                if pred():
                    return
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        for entry in self.standin_starts() if self.standin_log.exists() else []:
            with contextlib.suppress(OSError):  # only our stand-ins, never a recycled pid
                if str(self.standin) in Path(f"/proc/{entry['pid']}/cmdline").read_text():
                    os.kill(entry["pid"], signal.SIGKILL)
        self.kernel.close()


@contextlib.contextmanager
def daemon_env(tmp: Path, **kw: Any) -> Iterator[DaemonEnv]:
    env = DaemonEnv(tmp, **kw)
    try:
        yield env
    finally:
        env.close()
