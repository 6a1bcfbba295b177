"""The daemon under systemd on a real sched_ext kernel (QEMU guest, booted once for this module).

One guest script installs the unit, drives `scxctl enable/switch/disable` with pyland, takes cpu1
offline and online (pyland re-attaches in the same process), kills the scheduler with SIGKILL,
restarts the daemon, tries to enable as a non-root user, and writes what
it saw under /results; the tests below assert on those files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

# single-threaded TCG: many enable/disable cycles (see tools.vm.qemu.accel_args)
pytestmark = [pytest.mark.vm, pytest.mark.tcg_single]

GUEST = r"""#!/bin/bash
set -u
R=/results
now() { date +%s.%N; }
S=/sys/kernel/sched_ext
kstate() { echo "$(cat $S/state) $(cat $S/root/ops 2>/dev/null || echo -)"; }
field() { python3 -c "import json,sys; d=json.load(open('$1')); print(eval('d' + sys.argv[1]))" "$2"; }
# wait until the kernel runs pyland under a pid other than $1; prints the seconds it took
wait_new_pyland() {
    local old=$1 t0 pid
    t0=$(now)
    local end=$((SECONDS + 300))
    while [ $SECONDS -lt $end ]; do
        if [ "$(kstate)" = "enabled pyland" ]; then
            scxctl status --json >/tmp/st.json 2>/dev/null
            pid=$(field /tmp/st.json '["supervisor"]["pid"]')
            owner=$(field /tmp/st.json '["kernel"]["owner"]')
            if [ "$owner" = scxctl ] && [ "$pid" != "$old" ] && [ "$pid" != None ]; then
                python3 -c "print(round($(now) - $t0, 2))"; return 0
            fi
        fi
        sleep 0.2
    done
    echo timeout; return 1
}

# the guest runs the checkout's scxctl from /usr/local/bin: the README's pip/venv way to install the unit
sed 's|^ExecStart=/usr/bin/scxctl|ExecStart=/usr/local/bin/scxctl|' \
    /opt/scxctl/packaging/systemd/scxctl.service >/etc/systemd/system/scxctl.service
systemd-analyze verify /etc/systemd/system/scxctl.service >$R/verify.txt 2>&1; echo $? >$R/verify.rc
mkdir -p /etc/scxctl
printf '[supervisor]\nverify_timeout_s = 120\nbackoff_initial_s = 1\n' >/etc/scxctl/config.toml
groupadd -f scxctl
[ -d /run/systemd/system ] || { echo "not booted with systemd" >$R/no_systemd; }
systemctl daemon-reload
systemctl start scxctl.service; echo $? >$R/unit_start.rc
systemctl show scxctl.service -p ActiveState -p Type -p NotifyAccess -p WatchdogUSec -p StatusText \
    -p CapabilityBoundingSet >$R/unit_show.txt

su tester -s /bin/sh -c 'scxctl enable' >$R/tester_enable.out 2>&1; echo $? >$R/tester_enable.rc
su tester -s /bin/sh -c 'scxctl status --json' >$R/tester_status.json 2>&1; echo $? >$R/tester_status.rc

t0=$(now); scxctl enable >$R/enable.out 2>&1; echo $? >$R/enable.rc
python3 -c "print(round($(now) - $t0, 2))" >$R/enable_cli_s.txt
kstate >$R/after_enable.txt
scxctl status --json >$R/status_enabled.json

scxctl switch --mode gaming >$R/switch.out 2>&1; echo $? >$R/switch.rc
kstate >$R/after_switch.txt
scxctl status --json >$R/status_gaming.json
pid=$(field $R/status_gaming.json '["supervisor"]["pid"]')
tr '\0' ' ' </proc/$pid/cmdline >$R/gaming_cmdline.txt

# CPU hotplug: the kernel asks pyland to restart, and it re-attaches in the same process
for step in 0 1; do
    echo $step >/sys/devices/system/cpu/cpu1/online
    sleep 0.5
    end=$((SECONDS + 60))
    while [ $SECONDS -lt $end ] && [ "$(kstate)" != "enabled pyland" ]; do sleep 0.2; done
    kstate >$R/hotplug_$step.txt
done
sleep 2  # a monitor interval or two: the daemon has read the re-attach lines
scxctl status --json >$R/status_hotplug.json

kill -9 "$pid"
wait_new_pyland "$pid" >$R/restart_s.txt
scxctl status --json >$R/status_restarted.json

old=$(field $R/status_restarted.json '["supervisor"]["pid"]')
systemctl restart scxctl.service; echo $? >$R/unit_restart.rc
wait_new_pyland "$old" >$R/restore_s.txt
scxctl status --json >$R/status_restored.json

scxctl disable >$R/disable.out 2>&1; echo $? >$R/disable.rc
kstate >$R/after_disable.txt
scxctl status --json >$R/status_disabled.json

# a scheduler the daemon did not start (pyland run by hand): reported as such, not clobbered
# unless --force, which unloads it (SysRq-S) and starts the daemon's own
scxctl --log-format json run >$R/foreign_run.log 2>&1 &
fpid=$!
end=$((SECONDS + 300))
while [ $SECONDS -lt $end ] && [ "$(kstate)" != "enabled pyland" ]; do sleep 0.2; done
kstate >$R/foreign_loaded.txt
scxctl status --json >$R/status_foreign.json
scxctl enable >$R/enable_foreign.out 2>&1; echo $? >$R/enable_foreign.rc
kstate >$R/after_refused_enable.txt
scxctl enable --force >$R/enable_force.out 2>&1; echo $? >$R/enable_force.rc
for _ in $(seq 1 300); do kill -0 $fpid 2>/dev/null || break; sleep 0.2; done
kill -9 $fpid 2>/dev/null  # only if --force failed to unload it: the next steps need a clean state
wait $fpid; echo $? >$R/foreign_run.rc
scxctl status --json >$R/status_forced.json
scxctl disable >$R/disable_forced.out 2>&1; echo $? >$R/disable_forced.rc

systemctl stop scxctl.service
systemctl show scxctl.service -p Result -p ExecMainStatus -p ActiveState >$R/unit_stop.txt
scxctl logs -n 400 --json >$R/daemon_log.jsonl 2>&1
scxctl logs -n 30 >$R/logs_pretty.txt 2>&1; echo $? >$R/logs.rc
journalctl -u scxctl.service --no-pager -o cat >$R/journal.txt 2>&1
echo done >$R/done
"""


@pytest.fixture(scope="module")
def guest(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("daemon-vm") / "daemon_vm.sh"
    script.write_text(GUEST)
    res = vm.run(
        "bash /root/daemon_vm.sh", systemd=True, timeout=1500, copy=[(str(script), "/root/daemon_vm.sh")],
    )
    (res.results / "guest_output.txt").write_text(res.output)
    print(f"daemon VM run: rc={res.returncode} wall={res.wall_s:.1f}s results={res.results}")
    assert (res.results / "done").exists(), (
        f"guest script did not finish: {res.message}\n{res.output[-3000:]}"
    )
    return res.results


def _read(results: Path, name: str) -> str:
    return (results / name).read_text().strip()


def _json(results: Path, name: str) -> dict[str, Any]:
    return json.loads((results / name).read_text())


def _events(results: Path) -> list[dict[str, Any]]:
    return [
        json.loads(x) for x in (results / "daemon_log.jsonl").read_text().splitlines() if x.startswith("{")
    ]


def test_unit_verifies_and_starts_as_notify_service(guest: Path) -> None:
    assert _read(guest, "verify.rc") == "0", _read(guest, "verify.txt")
    assert "scxctl.service" not in _read(guest, "verify.txt")  # no warning about our unit
    show = _read(guest, "unit_show.txt")
    assert _read(guest, "unit_start.rc") == "0"
    assert "ActiveState=active" in show and "Type=notify" in show and "WatchdogUSec=30s" in show


def test_non_root_user_cannot_enable_but_can_read_status(guest: Path) -> None:
    assert _read(guest, "tester_enable.rc") == "3"
    assert _read(guest, "tester_enable.out").startswith("scxctl: error: enable needs root or membership")
    assert _read(guest, "tester_status.rc") == "0"
    assert _json(guest, "tester_status.json")["kernel"]["sched_ext"] is True


def test_enable_loads_pyland(guest: Path) -> None:
    assert _read(guest, "enable.rc") == "0", _read(guest, "enable.out")
    assert _read(guest, "after_enable.txt") == "enabled pyland"
    st = _json(guest, "status_enabled.json")
    assert st["kernel"]["owner"] == "scxctl" and st["supervisor"]["phase"] == "running"
    print(
        f"enable CLI wall {_read(guest, 'enable_cli_s.txt')}s, "
        f"spawn->enabled {st['supervisor']['enable_latency_s']}s (TCG guest)"
    )


def test_switch_mode_changes_pyland_options(guest: Path) -> None:
    assert _read(guest, "switch.rc") == "0", _read(guest, "switch.out")
    assert _read(guest, "after_switch.txt") == "enabled pyland"
    st = _json(guest, "status_gaming.json")
    assert st["supervisor"]["mode"] == "gaming" and st["desired"]["mode"] == "gaming"
    assert st["supervisor"]["pid"] != _json(guest, "status_enabled.json")["supervisor"]["pid"]
    assert "--slice-us 5000 --slice-min-us 500" in _read(guest, "gaming_cmdline.txt")


def test_cpu_hotplug_reattaches_in_the_same_child_and_is_not_a_failure(guest: Path) -> None:
    assert [_read(guest, f"hotplug_{step}.txt") for step in (0, 1)] == ["enabled pyland"] * 2
    before = _json(guest, "status_gaming.json")["supervisor"]
    st = _json(guest, "status_hotplug.json")
    sup = st["supervisor"]
    assert (sup["pid"], sup["phase"], sup["reattach_count"]) == (before["pid"], "running", 2)
    assert sup["restart_count"] == before["restart_count"] and sup["failures_in_window"] == 0
    assert sup["gave_up"] is None and st["kernel"]["owner"] == "scxctl"
    ev = [e for e in _events(guest) if e["event"] == "scheduler_reattaching"]
    assert [e["reattach_count"] for e in ev] == [1, 2] and all(e["pid"] == before["pid"] for e in ev)


def test_kill_9_is_restarted_and_logged_with_reason(guest: Path) -> None:
    took = _read(guest, "restart_s.txt")
    assert took != "timeout"
    print(f"restart after kill -9: {took}s until the kernel ran a new pyland (TCG guest)")
    killed = _json(guest, "status_gaming.json")["supervisor"]["pid"]
    st = _json(guest, "status_restarted.json")
    assert st["supervisor"]["restart_count"] >= 1 and st["supervisor"]["mode"] == "gaming"
    assert st["supervisor"]["last_exit"]["kind"] == "killed"
    ev = [e for e in _events(guest) if e["event"] == "scheduler_exited" and e["pid"] == killed]
    assert ev and ev[0]["reason"] == "killed by SIGKILL" and ev[0]["scheduler"] == "pyland"


def test_daemon_restart_restores_desired_state(guest: Path) -> None:
    assert _read(guest, "unit_restart.rc") == "0"
    assert _read(guest, "restore_s.txt") != "timeout"
    st = _json(guest, "status_restored.json")
    assert (st["supervisor"]["scheduler"], st["supervisor"]["mode"]) == ("pyland", "gaming")
    assert any(e["event"] == "restored" for e in _events(guest))


def test_disable_returns_to_default_scheduler(guest: Path) -> None:
    assert _read(guest, "disable.rc") == "0", _read(guest, "disable.out")
    assert _read(guest, "after_disable.txt") == "disabled -"
    st = _json(guest, "status_disabled.json")
    assert st["kernel"]["owner"] is None and st["desired"]["enabled"] is False


def test_foreign_scheduler_is_reported_and_only_replaced_with_force(guest: Path) -> None:
    assert _read(guest, "foreign_loaded.txt") == "enabled pyland", _read(guest, "foreign_run.log")[-2000:]
    st = _json(guest, "status_foreign.json")
    assert st["kernel"]["owner"] == "other" and st["kernel"]["ops"] == "pyland"
    assert _read(guest, "enable_foreign.rc") == "5", _read(guest, "enable_foreign.out")
    assert "not started by scxctl" in _read(guest, "enable_foreign.out")
    assert _read(guest, "after_refused_enable.txt") == "enabled pyland"  # left alone
    assert _read(guest, "enable_force.rc") == "0", _read(guest, "enable_force.out")
    assert _read(guest, "foreign_run.rc") == "8"  # the hand-run pyland saw itself ejected (SysRq)
    forced = _json(guest, "status_forced.json")
    assert forced["kernel"]["owner"] == "scxctl" and forced["kernel"]["ops"] == "pyland"
    assert forced["supervisor"]["pid"] is not None
    assert any(e.get("event") == "foreign_scheduler_evicted" for e in _events(guest))
    assert _read(guest, "disable_forced.rc") == "0"


def test_unit_stops_cleanly_and_logs_are_readable(guest: Path) -> None:
    stop = _read(guest, "unit_stop.txt")
    assert "Result=success" in stop and "ExecMainStatus=0" in stop
    assert _read(guest, "logs.rc") == "0" and "scheduler_enabled" in _read(guest, "logs_pretty.txt")
    assert '"event": "daemon_started"' in _read(guest, "journal.txt")  # stdout JSON lines reach journald
