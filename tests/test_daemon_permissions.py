"""SO_PEERCRED authorisation with real non-root uids: a forked child drops to uid 65534 and talks to
the daemon. Members of the configured group (nogroup in the test config) may change state; others
may only read."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_fakes import REPO, DaemonEnv, daemon_env

from scxctl.daemon import client
from scxctl.errors import ScxctlError

NOBODY, NOGROUP, OTHER_GID = 65534, 65534, 54321

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to another uid")


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonEnv]:
    runtime = Path(tempfile.mkdtemp(prefix="scxctl-perm-", dir="/tmp"))
    runtime.chmod(0o755)  # the uid under test must be able to reach the socket
    with daemon_env(tmp_path_factory.mktemp("perm"), runtime_dir=runtime) as env:
        env.start()
        yield env
    runtime.rmdir() if runtime.exists() and not any(runtime.iterdir()) else None


def as_user(uid: int, gid: int, op: str, args: dict[str, Any], sock: Path) -> dict[str, Any]:
    """Run client.call in a forked child with uid/gid dropped; its result or error as a dict."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            try:
                out = {"ok": True, "result": client.call(op, args, path=sock, timeout=30)}
            except ScxctlError as exc:
                out = {"ok": False, "code": int(exc.code), "message": exc.message}
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def test_outsider_may_read_status_but_not_enable(d: DaemonEnv) -> None:
    st = as_user(NOBODY, OTHER_GID, "status", {}, d.socket)
    assert st["ok"] and st["result"]["kernel"]["sched_ext"] is True
    denied = as_user(NOBODY, OTHER_GID, "enable", {"scheduler": "fake"}, d.socket)
    assert denied == {"ok": False, "code": 3, "message": denied["message"]}
    assert "needs root or membership of the 'nogroup' group (you are uid 65534)" in denied["message"]
    assert d.standin_starts() == [] and d.kernel.state() == "disabled"
    assert as_user(NOBODY, OTHER_GID, "disable", {}, d.socket)["code"] == 3
    assert d.events("request_denied")[-1]["uid"] == NOBODY


def test_group_member_may_enable_and_disable(d: DaemonEnv) -> None:
    res = as_user(NOBODY, NOGROUP, "enable", {"scheduler": "fake"}, d.socket)
    assert res["ok"], res
    assert d.kernel.ops() == "fake"
    assert json.loads(d.state_file.read_text())["updated_by_uid"] == NOBODY
    assert as_user(NOBODY, NOGROUP, "disable", {}, d.socket)["ok"]
    assert d.kernel.state() == "disabled"


def test_group_member_may_not_pass_a_policy_file(d: DaemonEnv) -> None:
    res = as_user(NOBODY, NOGROUP, "enable", {"scheduler": "pyland", "policy": "/tmp/evil.py"}, d.socket)
    assert res["code"] == 2 and "not allowed" in res["message"]


def test_cli_as_outsider_prints_one_line_and_exits_3(d: DaemonEnv) -> None:
    env = {**d.env, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={OTHER_GID}",
            "--clear-groups",
            str(REPO / ".venv/bin/python"),
            "-m",
            "scxctl",
            "enable",
            "fake",
        ],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("scxctl: error: enable needs root or membership of the 'nogroup' group")
    assert "Traceback" not in done.stderr
