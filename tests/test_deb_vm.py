"""The Debian package on a bare trixie guest under real systemd (QEMU, two boots of one disk).

The guest is the installed image flavour: no python3, none of scxctl's dependencies and no working
tree, so everything scxctl needs must come from the .deb and its declared Depends, which the guest
installs with apt from a local repository holding their closure as trixie resolves it
(tools/vm/repo.py). A wrong Depends fails the repository build or the install; a missing one fails
the first `scxctl` run with an import error.

The first boot installs the package, drives it (unit, enable/disable, a unit that cannot start, the
group) and leaves pyland enabled; the guest then reboots the same root disk into the oldest
sched_ext kernel the archive has, and the second boot checks restore_on_boot (pyland on that
kernel, without cpu.max, as doctor says), an upgrade over a corrupt config, remove and purge.
Each boot's script writes its findings under /results; the tests below assert on those files.

The .deb: $SCXCTL_DEB, else one built from this working tree by tools.deb (the cached trixie
chroot, as scripts/build-deb.sh; lintian is that command's and its test's job), never an older
dist/scxctl_*.deb that may not be what the tree now holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from guest_files import installed_package, read, steady_rate

from tools.vm import repo

# single-threaded TCG: several enable/disable cycles (see tools.vm.qemu.accel_args)
pytestmark = [pytest.mark.vm, pytest.mark.tcg_single]

UNIT_CGROUP = "/system.slice/scxctl.service"
# what the package suggests and the guest installs after it, from the same local repository
SUGGESTED = ("prometheus-node-exporter",)

# Shared by both boots: no python3 before the package brings it, so nothing here needs it.
PRELUDE = r"""#!/bin/bash
set -u
R=/results
S=/sys/kernel/sched_ext
now() { date +%s.%N; }
kstate() { echo "$(cat $S/state 2>/dev/null) $(cat $S/root/ops 2>/dev/null || echo -)"; }
# scxctl's own processes (the daemon: /usr/bin/scxctl daemon; pyland: python3 -m scxctl ... run pyland),
# matched on argv so that nothing else whose command line mentions scxctl counts
scx_procs() {
    local p c
    for p in /proc/[0-9]*; do
        c=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
        case "$c" in
            *"/usr/bin/scxctl "*|*" -m scxctl "*) echo "${p#/proc/} $(cat "$p/cgroup" 2>/dev/null) $c" ;;
        esac
    done
}
pyland_pid() { scx_procs | awk '/ run pyland/ {print $1; exit}'; }
wait_kstate() {  # wait_kstate WANT SECONDS: prints the seconds it took, or "timeout"
    local t0 end
    t0=$(now); end=$((SECONDS + $2))
    while [ $SECONDS -lt $end ]; do
        [ "$(kstate)" = "$1" ] && { echo "$(now) $t0" | awk '{printf "%.2f\n", $1 - $2}'; return 0; }
        sleep 0.2
    done
    echo timeout; return 1
}
cd /root
DEB=$(ls scxctl_*.deb)
"""

FIRST = r"""
cat /proc/sys/kernel/random/boot_id >$R/boot_id.1
uname -r >$R/uname.1
echo "__SOURCES__" >/etc/apt/sources.list.d/local.list
apt-get update >$R/apt_update.out 2>&1; echo $? >$R/apt_update.rc
{ command -v python3 || echo none; } >$R/python_before.txt

# install -> enabled: what a user does, timed from the start of the install
t0=$(now)
apt-get install -y "./$DEB" >$R/install.out 2>&1; echo $? >$R/install.rc
t1=$(now)
systemctl is-active scxctl.service >$R/is_active.txt 2>&1
scxctl enable >$R/enable.out 2>&1; echo $? >$R/enable.rc
t2=$(now)
kstate >$R/after_enable.txt
echo "$t0 $t1 $t2" >$R/times.txt
systemctl show scxctl.service -p FragmentPath -p UnitFileState -p ActiveState -p ExecStart >$R/unit_show.txt
systemd-analyze verify /usr/lib/systemd/system/scxctl.service >$R/verify.txt 2>&1; echo $? >$R/verify.rc
dpkg -l >$R/dpkg_l.txt

# status against the kernel's own view, read just before and after it
kstate >$R/kstate_before_status.txt
scxctl status --json >$R/status_enabled.json 2>$R/status_enabled.err; echo $? >$R/status_enabled.rc
kstate >$R/kstate_after_status.txt
scx_procs >$R/procs_enabled.txt
pid=$(pyland_pid)
cat /proc/${pid:-0}/cgroup >$R/pyland_cgroup.txt 2>&1
echo "${pid:-none}" >$R/pyland_pid.txt

# systemd's CPUQuota= (cpu.max) under the packaged daemon's pyland, and below under the default
# scheduler: two busy loops in a transient unit; systemd reports the unit's CPU time. The loops run
# until both status reads are done (a stop file; 60 s at most), not for a fixed time: each read costs
# seconds of Python start-up under TCG, and on a slow host two of them outlasted 10 s loops.
quota_run() {
    local stop=/run/scxctl-quota-$1.stop
    rm -f $stop
    systemd-run --wait -p CPUQuota=20% --unit=quota-$1 \
        sh -c "for i in 1 2; do timeout 60 sh -c 'while [ ! -e $stop ]; do :; done' & done; wait" \
        >$R/quota_$1.out 2>&1 &
    local q=$! stat=/sys/fs/cgroup/system.slice/quota-$1.service/cpu.stat
    for _ in $(seq 100); do [ -e $stat ] && break; sleep 0.1; done
    # the unit's CPU time every 200 ms for 8 s, "seconds usage_usec": its rate while the loops run.
    # Shell builtins only (one fork a sample, the sleep): with date and awk at 100 ms the status
    # reads below took long enough in one run to miss the unit's cgroup.
    ( end=$(( EPOCHSECONDS + 8 )); while [ "$EPOCHSECONDS" -lt $end ]; do
        while read -r k v; do [ "$k" = usage_usec ] && echo "$EPOCHREALTIME $v"; done <$stat
        sleep 0.2
      done ) >$R/quota_$1_samples.txt 2>/dev/null &
    # both reads while the loops run: the unit's cgroup (with its row in pyland's snapshot) goes
    # when they end
    sleep 3
    scxctl status >$R/quota_$1_status.txt 2>&1
    scxctl status --json >$R/quota_$1_status.json 2>&1
    wait $!
    touch $stop
    wait $q
}
quota_run pyland
kstate >$R/after_quota.txt

scxctl disable >$R/disable.out 2>&1; echo $? >$R/disable.rc
kstate >$R/after_disable.txt
scxctl status --json >$R/status_disabled.json 2>&1
scx_procs >$R/procs_disabled.txt

quota_run default

# the bench as installed: the packaged native worker runs its roles, and doctor checks that worker
scxctl doctor --json >$R/doctor_installed.json 2>$R/doctor_installed.err
scxctl bench adaptive-priority --min-time 0.5 --max-time 1 --output $R/bench_installed.json \
    >$R/bench_installed.out 2>&1; echo $? >$R/bench_installed.rc

# the unit exists but cannot start: enable must say so, and start no daemon of its own
mkdir -p /etc/systemd/system/scxctl.service.d
printf '[Service]\nExecStart=\nExecStart=/bin/false\n' >/etc/systemd/system/scxctl.service.d/broken.conf
systemctl daemon-reload
systemctl stop scxctl.service
scxctl enable >$R/broken_enable.out 2>&1; echo $? >$R/broken_enable.rc
sleep 1
scx_procs >$R/broken_procs.txt
kstate >$R/broken_kstate.txt
rm -rf /etc/systemd/system/scxctl.service.d
systemctl daemon-reload
systemctl reset-failed scxctl.service
systemctl start scxctl.service; echo $? >$R/unit_restart.rc

# the group: a member may change state without root, anyone else may not
getent group scxctl >$R/group.txt; echo $? >$R/group.rc
useradd -m -G scxctl u1 >$R/useradd.out 2>&1; echo $? >$R/useradd.rc
runuser -u u1 -- scxctl enable >$R/u1_enable.out 2>&1; echo $? >$R/u1_enable.rc
kstate >$R/u1_after_enable.txt
runuser -u u1 -- scxctl disable >$R/u1_disable.out 2>&1; echo $? >$R/u1_disable.rc
kstate >$R/u1_after_disable.txt
id tester >$R/tester_id.txt
runuser -u tester -- scxctl enable >$R/tester_enable.out 2>&1; echo $? >$R/tester_enable.rc
kstate >$R/tester_after_enable.txt

# Prometheus: node-exporter, which the package only suggests, installed after it as a user would. Its
# package brings the textfile directory; scxctl's trigger restarts the daemon, whose sandbox was set up
# without that directory (the config's 2 s interval, read at that start, keeps the waits short).
scxctl enable >$R/metrics_enable.out 2>&1; echo $? >$R/metrics_enable.rc
printf '[metrics]\ninterval_s = 2\n' >/etc/scxctl/config.toml
M=/var/lib/prometheus/node-exporter/scxctl.prom
apt-get install -y prometheus-node-exporter >$R/ne_install.out 2>&1; echo $? >$R/ne_install.rc
wait_kstate "enabled pyland" 120 >$R/ne_restore_wait.txt
grep -c " /var/lib/prometheus/node-exporter " /proc/$(systemctl show -P MainPID scxctl.service)/mountinfo \
    >$R/ne_mount.txt 2>&1
scrape() {  # scrape NAME: node-exporter's own /metrics, its scxctl lines and the textfile collector's
    python3 -c 'import sys, urllib.request
t = urllib.request.urlopen("http://localhost:9100/metrics", timeout=30).read().decode()
sys.stdout.write("".join(ln + "\n" for ln in t.splitlines() if "scxctl" in ln or "textfile" in ln))' \
        >$R/$1.prom 2>$R/$1.err
}
written() {  # written AFTER: wait until the daemon replaces the metrics file after that time
    for _ in $(seq 1 300); do
        [ "$(stat -c %.3Y $M 2>/dev/null || echo 0)" \> "$1" ] && return 0; sleep 0.1
    done; return 1
}
for _ in $(seq 1 300); do scrape up && grep -q '^scxctl_scheduler_up 1' $R/up.prom && break; sleep 0.2; done
stress-ng --cpu 2 --timeout 60 >/dev/null 2>&1 &
load=$!
sleep 1
scrape first; written $(date +%s.%N); scrape second
pid=$(pyland_pid); echo "${pid:-none}" >$R/killed_pid.txt
kill -9 $pid
for _ in $(seq 1 600); do
    p=$(pyland_pid)
    [ -n "$p" ] && [ "$p" != "$pid" ] && [ "$(kstate)" = "enabled pyland" ] && break
    sleep 0.2
done
echo "$(pyland_pid) $(kstate)" >$R/after_kill.txt
written $(date +%s.%N); scrape third
kill $load 2>/dev/null; wait $load
ls -l $M >$R/metrics_file_mode.txt 2>&1
scxctl stats --json --interval 1 >$R/stats_root.json 2>$R/stats_root.err; echo $? >$R/stats_root.rc
runuser -u u1 -- scxctl stats --json --interval 1 >$R/stats_u1.json 2>$R/stats_u1.err; echo $? >$R/stats_u1.rc
rm -f /etc/scxctl/config.toml
systemctl restart scxctl.service

# D-Bus: the daemon owns scx_loader's name under the packaged bus policy. No polkitd in this image:
# root may change state, a group member is refused (polkit cannot be asked: the daemon fails closed)
wait_kstate "enabled pyland" 120 >$R/dbus_restore_wait.txt
L="org.scx.Loader /org/scx/Loader org.scx.Loader"
busctl get-property $L CurrentScheduler >$R/dbus_current.txt 2>&1
busctl --timeout=120 call $L SwitchScheduler su pyland 1 >$R/dbus_root_switch.out 2>&1
echo $? >$R/dbus_root_switch.rc
busctl get-property $L SchedulerMode >$R/dbus_mode_root.txt 2>&1
# dbus-send prints the error's own text (busctl says "Access denied" for any AccessDenied)
runuser -u u1 -- dbus-send --system --print-reply --reply-timeout=120000 --dest=org.scx.Loader \
    /org/scx/Loader org.scx.Loader.SwitchScheduler string:pyland uint32:0 >$R/dbus_u1_switch.out 2>&1
echo $? >$R/dbus_u1_switch.rc
journalctl -u scxctl.service -o cat --no-pager | grep '"request_denied"' >$R/dbus_denied.txt
busctl get-property $L SchedulerMode >$R/dbus_mode_u1.txt 2>&1
kstate >$R/dbus_kstate.txt

# left enabled for the reboot
scxctl enable >$R/reboot_enable.out 2>&1; echo $? >$R/reboot_enable.rc
kstate >$R/before_reboot.txt
cp /var/lib/scxctl/state.json $R/state_before_reboot.json 2>&1
echo done >$R/first_done
exit 0  # whatever failed is in /results: the second boot runs in any case
"""

SECOND = r"""
cat /proc/sys/kernel/random/boot_id >$R/boot_id.2
uname -r >$R/uname.2
wait_kstate "enabled pyland" 300 >$R/restore_wait.txt
kstate >$R/after_reboot.txt
scxctl doctor --json >$R/doctor_after_reboot.json 2>/dev/null
systemctl is-active scxctl.service >$R/after_reboot_active.txt 2>&1
scxctl status --json >$R/status_after_reboot.json 2>&1
scx_procs >$R/procs_after_reboot.txt
pid=$(pyland_pid)
cat /proc/${pid:-0}/cgroup >$R/after_reboot_cgroup.txt 2>&1
journalctl -b -u scxctl.service -o cat --no-pager >$R/journal_after_reboot.txt 2>&1

# an upgrade (here: the same .deb again) over a corrupt config keeps the file; the daemon reports it
mkdir -p /etc/scxctl
printf 'this is = not [toml\n' >/etc/scxctl/config.toml
sha256sum /etc/scxctl/config.toml >$R/config_before.sha
apt-get install -y --reinstall -o Dpkg::Options::=--force-confold "./$DEB" >$R/reinstall.out 2>&1
echo $? >$R/reinstall.rc
sha256sum /etc/scxctl/config.toml >$R/config_after.sha
# the restarted daemon's start-up decision about the saved state, logged once it is taken
for _ in $(seq 1 300); do
  journalctl -u scxctl.service -o cat --no-pager | grep '"event": "restore_' |
    grep -q 'config invalid' && break
  sleep 0.2
done
scxctl status --json >$R/status_bad_config.json 2>&1; echo $? >$R/status_bad_config.rc
scxctl status >$R/status_bad_config.txt 2>&1
kstate >$R/bad_config_kstate.txt
scx_procs >$R/procs_bad_config.txt
journalctl -u scxctl.service -o cat --no-pager >$R/journal_bad_config.txt 2>&1

# remove with pyland running, then purge
rm -f /etc/scxctl/config.toml
systemctl restart scxctl.service
scxctl enable >$R/remove_enable.out 2>&1; echo $? >$R/remove_enable.rc
kstate >$R/before_remove.txt
ls /var/lib/prometheus/node-exporter >$R/metrics_dir_before_remove.txt 2>&1
apt-get remove -y scxctl >$R/remove.out 2>&1; echo $? >$R/remove.rc
kstate >$R/after_remove.txt
scx_procs >$R/procs_after_remove.txt
apt-get purge -y scxctl >$R/purge.out 2>&1; echo $? >$R/purge.rc
dpkg -L scxctl >$R/dpkg_L.txt 2>&1; echo $? >$R/dpkg_L.rc
for d in /etc/scxctl /var/lib/scxctl /var/log/scxctl /run/scxctl /usr/lib/systemd/system/scxctl.service \
        /etc/systemd/system/multi-user.target.wants/scxctl.service /usr/bin/scxctl /usr/lib/scxctl \
        /var/lib/prometheus/node-exporter/scxctl.prom; do
    [ -e "$d" ] && echo "$d"
done >$R/left_after_purge.txt
echo done >$R/second_done
"""


@pytest.fixture(scope="module")
def package(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the .deb, the local apt repository of its Depends closure), for the guests below."""
    return installed_package(tmp_path_factory.mktemp("deb"), SUGGESTED)


@pytest.fixture(scope="module")
def guest(vm: Any, package: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    deb, repository = package
    tmp = tmp_path_factory.mktemp("deb-vm")
    first, second = tmp / "first.sh", tmp / "second.sh"
    first.write_text(PRELUDE + FIRST.replace("__SOURCES__", repo.SOURCES_LINE))
    second.write_text(PRELUDE + SECOND)
    res = vm.run(
        "bash /root/first.sh", then="bash /root/second.sh", then_kernel="oldest", flavour="installed",
        systemd=True, timeout=1500,
        copy=[(str(deb), f"/root/{deb.name}"), (str(repository), repo.GUEST_DIR),
              (str(first), "/root/first.sh"), (str(second), "/root/second.sh")],
    )  # fmt: skip
    (res.results / "guest_output.txt").write_text(res.output)
    print(f"\n.deb VM run ({deb.name}): rc={res.returncode} wall={res.wall_s:.1f}s boot={res.boot_s}s "
          f"second boot={res.second_boot_s}s results={res.results}")  # fmt: skip
    assert (res.results / "first_done").exists(), (
        f"first boot did not finish (rc {res.returncode}): {res.message}\n{res.output[-3000:]}"
    )
    assert (res.results / "second_done").exists(), (
        f"second boot did not finish (rc {res.returncode}): {res.message}\n{res.output[-3000:]}"
    )
    return res.results


def _r(results: Path, name: str) -> str:
    return read(results, name).strip()


def _json(results: Path, name: str) -> dict[str, Any]:
    text = read(results, name)
    try:
        return json.loads(text)
    except ValueError:
        pytest.fail(f"{name} is not JSON: {text[-1500:]}")


def _scx_procs(results: Path, name: str) -> list[str]:
    return [line for line in read(results, name).splitlines() if line.strip()]


def test_install_from_the_local_repository_and_time_to_enabled(guest: Path) -> None:
    assert _r(guest, "apt_update.rc") == "0", _r(guest, "apt_update.out")
    assert _r(guest, "python_before.txt") == "none"  # the image has no python3: the package brought it
    assert _r(guest, "install.rc") == "0", _r(guest, "install.out")[-3000:]
    assert _r(guest, "after_enable.txt") == "enabled pyland", _r(guest, "enable.out")
    t0, t1, t2 = (float(x) for x in _r(guest, "times.txt").split())
    install_s, enabled_s = t1 - t0, t2 - t0
    timing = {"install_s": round(install_s, 2), "install_to_enabled_s": round(enabled_s, 2)}
    (guest / "timing.json").write_text(json.dumps(timing) + "\n")
    print(f"\napt-get install (closure from the local repo): {install_s:.1f} s; install start -> "
          f"`scxctl enable` returned with state enabled: {enabled_s:.1f} s (TCG guest)")  # fmt: skip


def test_unit_is_active_after_install_and_verifies_clean(guest: Path) -> None:
    assert _r(guest, "is_active.txt") == "active", _r(guest, "unit_show.txt")
    assert "FragmentPath=/usr/lib/systemd/system/scxctl.service" in _r(guest, "unit_show.txt")
    verify = _r(guest, "verify.txt")
    assert "scxctl.service" not in verify, verify


def test_enable_runs_pyland_in_the_unit_and_status_tells_the_truth(guest: Path) -> None:
    assert _r(guest, "enable.rc") == "0", _r(guest, "enable.out")
    assert _r(guest, "status_enabled.rc") == "0", _r(guest, "status_enabled.err")
    pid = _r(guest, "pyland_pid.txt")
    assert pid != "none", _r(guest, "procs_enabled.txt")
    cgroup = _r(guest, "pyland_cgroup.txt")
    assert cgroup.splitlines()[-1].endswith(UNIT_CGROUP), cgroup
    st = _json(guest, "status_enabled.json")
    before, after = _r(guest, "kstate_before_status.txt"), _r(guest, "kstate_after_status.txt")
    assert before == after == "enabled pyland"
    assert (st["kernel"]["state"], st["kernel"]["ops"]) == tuple(before.split())
    assert st["kernel"]["owner"] == "scxctl" and str(st["supervisor"]["pid"]) == pid


def test_disable_returns_to_the_default_scheduler(guest: Path) -> None:
    assert _r(guest, "disable.rc") == "0", _r(guest, "disable.out")
    assert _r(guest, "after_disable.txt") == "disabled -"
    st = _json(guest, "status_disabled.json")
    assert st["kernel"]["state"] == "disabled" and st["kernel"]["owner"] is None
    assert not [p for p in _scx_procs(guest, "procs_disabled.txt") if " run pyland" in p]


def _cpu_consumed(text: str) -> float:
    """systemd-run --wait's "CPU time consumed: 2.013s" (or "987ms") in seconds."""
    line = next(ln for ln in text.splitlines() if "CPU time consumed:" in ln)
    value = line.split("CPU time consumed:")[1].strip()
    return float(value[:-2]) / 1000 if value.endswith("ms") else float(value.rstrip("s"))


def _quota_rate(guest: Path, scheduler: str) -> float:
    lines = _r(guest, f"quota_{scheduler}_samples.txt").split("\n")
    return steady_rate([(float(t), int(u)) for t, u in (ln.split() for ln in lines if len(ln.split()) == 2)])


def test_cpu_quota_of_a_unit_holds_under_the_packaged_daemons_pyland(guest: Path) -> None:
    assert _r(guest, "after_quota.txt") == "enabled pyland", _r(guest, "quota_pyland.out")
    # compared while the loops run, not as the units' totals (their start and end under the quota)
    mine, theirs = _quota_rate(guest, "pyland"), _quota_rate(guest, "default")
    total = {s: _cpu_consumed(_r(guest, f"quota_{s}.out")) for s in ("pyland", "default")}
    print(f"\nCPUQuota=20%, two busy loops: pyland {mine:.3f} CPU s/s, default {theirs:.3f} "
          f"({mine / theirs:.2f}x), allowed 0.2; unit totals pyland {total['pyland']:.2f} s, "
          f"default {total['default']:.2f} s")
    assert 0.8 <= mine / theirs <= 1.25, [_r(guest, f"quota_{s}_samples.txt") for s in ("pyland", "default")]
    st = _json(guest, "quota_pyland_status.json")
    rows = {r["path"]: r for r in (st["cgroups"] or {}).get("cgroups", [])}
    unit = rows.get("/system.slice/quota-pyland.service")
    assert unit is not None, st.get("cgroups")
    assert (unit["quota_us"], unit["period_us"]) == (20000, 100000) and unit["nr_throttled"] > 0, unit
    assert "cpu.max:" in _r(guest, "quota_pyland_status.txt")


def test_bench_runs_the_packaged_worker_and_doctor_checks_it(guest: Path) -> None:
    assert _r(guest, "bench_installed.rc") in ("0", "1"), _r(guest, "bench_installed.out")[-3000:]
    report = _json(guest, "bench_installed.json")
    harness = report["options"]["harness"]
    assert harness["worker"] == "/usr/lib/scxctl/scxctl-bench-worker" and harness["source_hash"], harness
    test = report["runs"][0]["tests"][0]
    assert test["final"]["fast"]["count"] > 0 and test["overhead"]["wake"]["count"] > 0, test
    checks = {c["id"]: c for c in _json(guest, "doctor_installed.json")["checks"]}
    worker = checks["bench.worker"]
    assert worker["status"] == "ok", worker
    assert worker["details"]["chosen"] == "/usr/lib/scxctl/scxctl-bench-worker", worker


def test_enable_fails_with_exit_6_when_the_unit_cannot_start(guest: Path) -> None:
    out = _r(guest, "broken_enable.out")
    assert _r(guest, "broken_enable.rc") == "6", out
    errors = [line for line in out.splitlines() if line.startswith("scxctl: error:")]
    assert len(errors) == 1 and "scxctl.service is installed but did not start" in errors[0], out
    assert any(line.startswith("scxctl: hint:") and "journalctl -u scxctl.service" in line
               for line in out.splitlines()), out  # fmt: skip
    assert _scx_procs(guest, "broken_procs.txt") == []  # no daemon of its own beside the failed unit
    assert _r(guest, "broken_kstate.txt") == "disabled -"
    assert _r(guest, "unit_restart.rc") == "0"


def test_scxctl_group_member_may_enable_and_disable_others_may_not(guest: Path) -> None:
    assert _r(guest, "group.rc") == "0", "the package did not create the scxctl group"
    assert _r(guest, "useradd.rc") == "0", _r(guest, "useradd.out")
    assert _r(guest, "u1_enable.rc") == "0", _r(guest, "u1_enable.out")
    assert _r(guest, "u1_after_enable.txt") == "enabled pyland"
    assert _r(guest, "u1_disable.rc") == "0", _r(guest, "u1_disable.out")
    assert _r(guest, "u1_after_disable.txt") == "disabled -"
    assert "scxctl" not in _r(guest, "tester_id.txt")
    assert _r(guest, "tester_enable.rc") == "3", _r(guest, "tester_enable.out")
    assert _r(guest, "tester_after_enable.txt") == "disabled -"


def test_enabled_scheduler_is_restored_after_a_reboot(guest: Path) -> None:
    assert _r(guest, "reboot_enable.rc") == "0", _r(guest, "reboot_enable.out")
    assert _r(guest, "before_reboot.txt") == "enabled pyland"
    assert _r(guest, "boot_id.1") != _r(guest, "boot_id.2")  # a real second boot of the same disk
    waited = _r(guest, "restore_wait.txt")
    assert waited != "timeout", _r(guest, "journal_after_reboot.txt")[-3000:]
    assert _r(guest, "after_reboot.txt") == "enabled pyland"
    assert _r(guest, "after_reboot_active.txt") == "active"
    assert _r(guest, "after_reboot_cgroup.txt").splitlines()[-1].endswith(UNIT_CGROUP)
    st = _json(guest, "status_after_reboot.json")
    assert st["kernel"]["owner"] == "scxctl" and st["desired"]["enabled"] is True
    assert '"event": "restored"' in _r(guest, "journal_after_reboot.txt")
    print(f"\nafter the reboot, pyland was enabled again within {waited} s of the test script's start")


def test_upgrade_keeps_a_corrupt_config_and_the_daemon_runs_no_scheduler(guest: Path) -> None:
    assert _r(guest, "reinstall.rc") == "0", _r(guest, "reinstall.out")[-3000:]
    assert _r(guest, "config_before.sha") == _r(guest, "config_after.sha")
    assert _r(guest, "status_bad_config.rc") == "0", _r(guest, "status_bad_config.json")
    st = _json(guest, "status_bad_config.json")
    assert st["daemon"]["config_error"], st["daemon"]
    journal = _r(guest, "journal_bad_config.txt")
    assert '"event": "config_invalid"' in journal
    assert any('"event": "restore_skipped"' in ln and "config invalid" in ln for ln in journal.splitlines())
    assert _r(guest, "bad_config_kstate.txt") == "disabled -"
    assert not [p for p in _scx_procs(guest, "procs_bad_config.txt") if " run pyland" in p]


def test_remove_with_pyland_running_stops_everything(guest: Path) -> None:
    assert _r(guest, "before_remove.txt") == "enabled pyland", _r(guest, "remove_enable.out")
    assert _r(guest, "remove.rc") == "0", _r(guest, "remove.out")[-3000:]
    assert _r(guest, "after_remove.txt") == "disabled -"
    assert _scx_procs(guest, "procs_after_remove.txt") == []


def test_purge_leaves_nothing_of_the_package(guest: Path) -> None:
    assert _r(guest, "purge.rc") == "0", _r(guest, "purge.out")[-3000:]
    assert _r(guest, "dpkg_L.rc") != "0", _r(guest, "dpkg_L.txt")
    assert _r(guest, "left_after_purge.txt") == ""


# The second boot runs the oldest sched_ext kernel the archive still has (the first the newest), as a
# machine booting an older kernel of its own would: the package's restored pyland must run there.


def test_the_package_runs_pyland_on_the_oldest_kernel_after_the_reboot(guest: Path) -> None:
    from tools.vm import kernel

    assert _r(guest, "uname.2") == kernel.prepare("oldest").release
    assert _r(guest, "uname.2") != _r(guest, "uname.1")
    assert _r(guest, "after_reboot.txt") == "enabled pyland", _r(guest, "journal_after_reboot.txt")[-3000:]
    pyland = [p for p in _scx_procs(guest, "procs_after_reboot.txt") if " run pyland" in p]
    assert len(pyland) == 1 and UNIT_CGROUP in pyland[0], pyland


def test_doctor_says_a_kernel_before_6_17_cannot_give_pyland_cpu_max(guest: Path) -> None:
    checks = {c["id"]: c for c in _json(guest, "doctor_after_reboot.json")["checks"]}
    row = checks["cgroup.bandwidth"]
    assert row["details"]["kernel_hooks"] is False and row["details"]["scheduler"] == "pyland", row


def _scrape(results: Path, name: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One scrape of node-exporter, parsed by prometheus_client: (sample name, labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    text = read(results, f"{name}.prom")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}  # fmt: skip


def test_node_exporter_installed_later_gets_the_daemon_restarted_by_the_trigger(guest: Path) -> None:
    assert _r(guest, "metrics_enable.rc") == "0", _r(guest, "metrics_enable.out")
    out = _r(guest, "ne_install.out")
    assert _r(guest, "ne_install.rc") == "0", out[-3000:]
    assert "scxctl: restarting scxctl.service so that it may write its metrics" in out, out[-3000:]
    assert _r(guest, "ne_restore_wait.txt") != "timeout"
    assert int(_r(guest, "ne_mount.txt")) >= 1  # the restarted daemon's sandbox has the directory
    assert _r(guest, "metrics_file_mode.txt").startswith("-rw-r--r-- 1 root root")


def test_node_exporter_serves_scxctl_metrics_whose_pyland_counters_grow(guest: Path) -> None:
    first, second = _scrape(guest, "first"), _scrape(guest, "second")
    for scrape in (first, second):
        assert scrape[("scxctl_scheduler_up", ())] == 1, scrape
        assert scrape[("node_textfile_scrape_error", ())] == 0
    info = next(labels for (name, labels) in second if name == "scxctl_scheduler_info")
    assert dict(info)["scheduler"] == "pyland" and dict(info)["kernel"] == _r(guest, "uname.1"), info
    for counter in ("scxctl_pyland_records_total", "scxctl_pyland_placed_in_bpf_total",
                    "scxctl_pyland_loop_cpu_seconds_total"):
        assert second[(counter, ())] > first[(counter, ())], counter


def test_a_killed_scheduler_shows_in_the_restart_counter(guest: Path) -> None:
    killed = _r(guest, "killed_pid.txt")
    new_pid, state = _r(guest, "after_kill.txt").split(" ", 1)
    assert killed != "none" and new_pid != killed and state == "enabled pyland", (killed, new_pid, state)
    before, after = _scrape(guest, "second"), _scrape(guest, "third")
    reason = ("scxctl_scheduler_restarts_total", (("reason", "killed"),))
    assert (before[reason], after[reason]) == (0, 1), {k: v for k, v in after.items() if "restart" in k[0]}
    assert after[("scxctl_scheduler_up", ())] == 1


@pytest.mark.parametrize("who", ["root", "u1"])
def test_stats_shows_pyland_live_to_root_and_to_a_group_member(guest: Path, who: str) -> None:
    assert _r(guest, f"stats_{who}.rc") == "0", _r(guest, f"stats_{who}.err")
    doc = _json(guest, f"stats_{who}.json")
    p = doc["pyland"]
    assert doc["scheduler"] == "pyland" and p is not None and p["live"], doc
    assert p["total"]["records"] > 0 and p["per_s"] is not None, p
    assert doc["daemon"]["running"] and doc["daemon"]["restarts"] == 1, doc["daemon"]


def test_purge_removes_the_metrics_file(guest: Path) -> None:
    assert "scxctl.prom" in _r(guest, "metrics_dir_before_remove.txt")  # so that purge had one to remove
    assert _r(guest, "left_after_purge.txt") == ""


def test_the_daemon_serves_org_scx_loader_on_the_system_bus(guest: Path) -> None:
    assert _r(guest, "dbus_restore_wait.txt") != "timeout"
    assert _r(guest, "dbus_current.txt") == 's "pyland"', _r(guest, "journal_bad_config.txt")[-2000:]
    assert _r(guest, "dbus_root_switch.rc") == "0", _r(guest, "dbus_root_switch.out")
    assert _r(guest, "dbus_mode_root.txt") == "u 1"  # gaming, in scx_loader's numbering
    refused = _r(guest, "dbus_u1_switch.out")  # by the daemon (not the bus), which could not ask polkit
    assert _r(guest, "dbus_u1_switch.rc") != "0", refused
    assert "org.freedesktop.DBus.Error.AccessDenied" in refused and "org.scxctl.manage" in refused, refused
    assert "SwitchScheduler" in _r(guest, "dbus_denied.txt"), _r(guest, "dbus_denied.txt")
    assert _r(guest, "dbus_mode_u1.txt") == "u 1" and _r(guest, "dbus_kstate.txt") == "enabled pyland"
