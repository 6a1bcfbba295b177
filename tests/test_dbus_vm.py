"""The packaged daemon's D-Bus interface, org.scx.Loader, driven by real clients on a trixie guest.

The installed image flavour under systemd, with the .deb installed from a local apt repository as
tests/test_deb_vm.py does, plus polkitd (the packaged rule lets the scxctl group in), power-profiles-
daemon and glib's gdbus from the same repository. One boot: the script below drives the bus with
busctl, gdbus, dbus-send, busctl monitor and powerprofilesctl and writes what it saw under /results;
the tests assert on those files. pyland is the only scheduler the guest has.

Every client that reads or changes state here is an external program, never scxctl's own client
code, so what is checked is the wire: signatures, error names, polkit, PropertiesChanged.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from guest_files import installed_package, read

from scxctl.log import json_events
from tools.vm import repo

# single-threaded TCG: pyland starts and stops a dozen times (see tools.vm.qemu.accel_args)
pytestmark = [pytest.mark.vm, pytest.mark.tcg_single]

# installed beside the .deb from the local repository: the clients and services the checks need
EXTRAS = ("polkitd", "power-profiles-daemon", "libglib2.0-bin")
PROPS = ("CurrentScheduler", "SchedulerMode", "CurrentSchedulerArgs", "SupportedSchedulers",
         "DefaultScheduler", "DefaultMode")  # fmt: skip

SCRIPT = r"""#!/bin/bash
set -u
R=/results
S=/sys/kernel/sched_ext
L="org.scx.Loader /org/scx/Loader org.scx.Loader"
PROPS="__PROPS__"
cd /root
kstate() { echo "$(cat $S/state 2>/dev/null) $(cat $S/root/ops 2>/dev/null || echo -)"; }
pyland_pid() {  # the daemon's pyland: python3 -m scxctl ... run pyland
    local p c
    for p in /proc/[0-9]*; do
        c=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue  # gone meanwhile: no message
        case "$c" in *" -m scxctl "*" run pyland"*) echo "${p#/proc/}"; return ;; esac
    done
}
props() {  # props NAME: every property through busctl, one "Prop type value" line each
    local p
    for p in $PROPS; do echo "$p $(busctl get-property $L $p 2>&1)"; done >$R/props_$1.txt
}
gprops() {  # gprops NAME: every property through gdbus (GLib's client), the same way
    local p
    for p in $PROPS; do
        echo "$p $(gdbus call --system --dest org.scx.Loader --object-path /org/scx/Loader \
            --method org.freedesktop.DBus.Properties.Get org.scx.Loader $p 2>&1)"
    done >$R/gprops_$1.txt
}
dsend() {  # dsend NAME METHOD ARGS...: dbus-send, which prints an error's name and its text
    local n=$1; shift
    dbus-send --system --print-reply --reply-timeout=120000 --dest=org.scx.Loader /org/scx/Loader \
        "$@" >$R/dsend_$n.out 2>&1
    echo $? >$R/dsend_$n.rc
}
cli() {  # cli NAME ARGS...: scxctl ARGS, its stdout, stderr and exit code
    local n=$1; shift
    scxctl "$@" >$R/cli_$n.out 2>$R/cli_$n.err; echo $? >$R/cli_$n.rc
}
journal() { journalctl -u scxctl.service -o cat --no-pager; }
waitfor() {  # waitfor SECONDS CMD...: poll CMD every 0.2 s; prints the seconds it took, or "timeout"
    local end=$((SECONDS + $1)) t0=$EPOCHREALTIME; shift
    while [ $SECONDS -lt $end ]; do
        "$@" && { echo "$EPOCHREALTIME $t0" | awk '{printf "%.2f\n", $1 - $2}'; return 0; }
        sleep 0.2
    done
    echo timeout; return 1
}
owned() { busctl status "$1" >/dev/null 2>&1; }
prop_is() { [ "$(busctl get-property $L $1 2>&1)" = "$2" ]; }
journal_count() { journal | grep -c "\"$1\""; }
journal_more() { [ "$(journal_count $1)" -gt "$2" ]; }
# busctl monitor of the daemon's name (sender or destination), one JSON message a line
MON=
mon_start() {
    stdbuf -oL busctl monitor --json=short org.scx.Loader >$R/mon_$1.json 2>$R/mon_$1.err &
    MON=$!
    mon_pinged() {
        busctl call org.scx.Loader /org/scx/Loader org.freedesktop.DBus.Peer Ping >/dev/null 2>&1
        grep -q '"Ping"' $R/mon_$1.json
    }
    waitfor 30 mon_pinged $1 >$R/mon_$1.ready
}
mon_stop() { kill $MON; wait $MON 2>/dev/null; }
signalled() { tr -d ' ' <$R/mon_$1.json | grep -F '"PropertiesChanged"' | grep -qF "$2"; }
# gdbus monitor beside it, a second client's view of the same signals
GMON=
gmon_start() {
    stdbuf -oL gdbus monitor --system --dest org.scx.Loader >$R/gmon_$1.txt 2>$R/gmon_$1.err &
    GMON=$!
    gmon_ready() { grep -q "is owned by" $R/gmon_$1.txt; }
    waitfor 30 gmon_ready $1 >$R/gmon_$1.ready
}
gmon_stop() { kill $GMON; wait $GMON 2>/dev/null; }
gsignalled() { grep -F 'PropertiesChanged' $R/gmon_$1.txt | grep -qF "$2"; }
kstate_is() { [ "$(kstate)" = "$1" ]; }
step() { echo "== $EPOCHREALTIME $*"; }  # progress, in the run's output: where a guest that stopped was

step install
# install: the package and the extras from the local repository, as a user would
echo "__SOURCES__" >/etc/apt/sources.list.d/local.list
apt-get update >$R/apt_update.out 2>&1; echo $? >$R/apt_update.rc
DEB=$(ls scxctl_*.deb)
stamp() { local l; while IFS= read -r l; do echo "$EPOCHREALTIME $l"; done; }  # when each line came
apt-get install -y "./$DEB" __EXTRAS__ 2>&1 | stamp >$R/install.out
echo "${PIPESTATUS[0]}" >$R/install.rc
dpkg-query -W -f='${Package} ${Version}\n' scxctl polkitd power-profiles-daemon libglib2.0-bin \
    >$R/versions.txt 2>&1
waitfor 120 owned org.scx.Loader >$R/name_wait.txt
journal | grep '"dbus_' >$R/journal_dbus_install.txt
systemctl is-active polkit.service power-profiles-daemon.service >$R/services_after_install.txt 2>&1
journalctl -u polkit.service -o short-monotonic --no-pager >$R/journal_polkit_install.txt 2>&1
# root may set the power profile, as a desktop user in an active session may (the guest has no session)
cat >/etc/polkit-1/rules.d/10-test-power-profiles.rules <<'JS'
polkit.addRule(function(action, subject) {
    if (action.id == "org.freedesktop.UPower.PowerProfiles.switch-profile" && subject.user == "root") {
        return polkit.Result.YES;
    }
});
JS
# polkit.service can fail during the install (D-Bus activated before polkitd's user exists), and
# power-profiles-daemon then holds no usable polkit authority: both start again, as at the next boot
systemctl restart polkit.service
waitfor 60 owned org.freedesktop.PolicyKit1 >$R/polkit_wait.txt
systemctl restart power-profiles-daemon.service
systemctl is-active polkit.service power-profiles-daemon.service >$R/services_active.txt 2>&1

step start
# 1. properties with nothing running, then 2. root starts pyland in mode 1 (gaming)
props idle
mon_start start
busctl --timeout=120 call $L StartScheduler su pyland 1 >$R/root_start.out 2>&1; echo $? >$R/root_start.rc
kstate >$R/root_start_kstate.txt
waitfor 30 signalled start '"SchedulerMode":{"type":"u","data":1}' >$R/mon_start.wait
mon_stop
props started
gprops started

step polkit
# 3. polkit: a member of group scxctl may switch without any agent, anyone else may not
useradd -m -G scxctl member >$R/useradd.out 2>&1 && useradd -m other >>$R/useradd.out 2>&1
echo $? >$R/useradd.rc
mon_start switch
gmon_start switch
runuser -u member -- busctl --timeout=120 call $L SwitchScheduler su pyland 3 >$R/member_switch.out 2>&1
echo $? >$R/member_switch.rc
waitfor 30 signalled switch '"SchedulerMode":{"type":"u","data":3}' >$R/mon_switch.wait
waitfor 30 gsignalled switch "'SchedulerMode': <uint32 3>" >$R/gmon_switch.wait
mon_stop
gmon_stop
props member
kstate >$R/member_kstate.txt
pid=$(pyland_pid)
runuser -u other -- dbus-send --system --print-reply --reply-timeout=120000 --dest=org.scx.Loader \
    /org/scx/Loader org.scx.Loader.SwitchScheduler string:pyland uint32:4 >$R/other_switch.out 2>&1
echo $? >$R/other_switch.rc
props other
echo "$pid $(pyland_pid)" >$R/other_pids.txt
kstate >$R/other_kstate.txt
journal | grep '"request_denied"' >$R/journal_denied.txt

step kill
# 4. a killed scheduler: the supervisor restarts it, and says so on the bus (no property is read
# meanwhile: a read announces what it finds, and this is about the daemon's own announcements)
mon_start kill
gmon_start kill
old=$(pyland_pid); echo "${old:-none}" >$R/killed_pid.txt
kill -9 $old
restarted() { local p; p=$(pyland_pid); [ -n "$p" ] && [ "$p" != "$old" ] && kstate_is "enabled pyland"; }
waitfor 120 restarted >$R/kill_restart_wait.txt
waitfor 30 signalled kill '"CurrentScheduler":{"type":"s","data":"pyland"}' >$R/mon_kill.wait
waitfor 30 gsignalled kill "'CurrentScheduler': <'pyland'>" >$R/gmon_kill.wait
mon_stop
gmon_stop
props killed

step refusals
# 5. refusals change nothing: arguments off the allow-list, a wrong signature, an unknown name or mode
pid=$(pyland_pid)
dsend args_switch org.scx.Loader.SwitchSchedulerWithArgs string:pyland array:string:--evil-flag
dsend args_start org.scx.Loader.StartSchedulerWithArgs string:pyland array:string:--slice-us=5000,--evil-flag
dsend signature org.scx.Loader.SwitchScheduler string:pyland
busctl call $L SwitchScheduler s pyland >$R/busctl_signature.out 2>&1; echo $? >$R/busctl_signature.rc
dsend unknown_sched org.scx.Loader.SwitchScheduler string:nosuch uint32:1
dsend unknown_mode org.scx.Loader.SwitchScheduler string:pyland uint32:7
props refused
echo "$pid $(pyland_pid)" >$R/refused_pids.txt
kstate >$R/refused_kstate.txt
# ... and arguments the allow-list admits run, in mode auto
dsend args_ok org.scx.Loader.SwitchSchedulerWithArgs string:pyland array:string:--slice-us=5000
props args
gprops args

step cli
# 7. scx_loader's CLI verbs on the installed package
cli get_args get
cli stop stop
cli get_stopped get
props stopped
cli start start -s pyland -m powersave
cli start_again start -s pyland -m gaming
cli get_powersave get
cli switch switch -s pyland -m server
busctl get-property $L SchedulerMode >$R/cli_switch_mode.txt 2>&1
cli restore restore
cli modes modes
cli restart restart
cli get_restored get
cli stop_end stop

step power profile
# 6. following power-profiles-daemon
powerprofilesctl version >$R/ppd_version.txt 2>&1
powerprofilesctl list >$R/ppd_list.txt 2>&1
busctl list --no-legend 2>/dev/null | awk '{print $1}' | grep -i powerprofiles >$R/ppd_names.txt
mkdir -p /etc/scxctl
printf 'follow_power_profile = true\n' >/etc/scxctl/config.toml
systemctl restart scxctl.service
waitfor 120 owned org.scx.Loader >$R/pp_name_wait.txt
cli pp_enable enable
busctl get-property $L SchedulerMode >$R/pp_mode_enabled.txt 2>&1
powerprofilesctl set power-saver >$R/pp_set_power-saver.out 2>&1; echo $? >$R/pp_set_power-saver.rc
waitfor 120 prop_is SchedulerMode "u 2" >$R/pp_follow_wait.txt
journal | grep '"power_profile_switch"' >$R/journal_pp_switch.txt
cli pp_gaming switch -m gaming
for p in performance balanced power-saver; do  # performance: only where a driver offers it
    n=$(journal_count power_profile_held)
    powerprofilesctl set $p >$R/pp_set_$p.out 2>&1; echo $? >$R/pp_set_$p.rc
    [ "$(cat $R/pp_set_$p.rc)" = 0 ] && waitfor 60 journal_more power_profile_held $n >$R/pp_held_$p.wait
    busctl get-property $L SchedulerMode >$R/pp_mode_$p.txt 2>&1
done
kstate >$R/pp_kstate.txt

step bus restart
# 8. the system bus restarts (an upgrade of dbus does it): the daemon owns its name again
pid_before=$(systemctl show -p MainPID --value scxctl.service)
systemctl restart dbus.service
waitfor 90 owned org.scx.Loader >$R/busrestart_wait.txt
busctl get-property $L CurrentScheduler >$R/busrestart_current.txt 2>&1
busctl get-property $L SchedulerMode >$R/busrestart_mode.txt 2>&1
[ "$(systemctl show -p MainPID --value scxctl.service)" = "$pid_before" ] && echo same >$R/busrestart_pid.txt
journal | grep '"dbus_serving"' >$R/journal_dbus_serving.txt
journal >$R/journal.txt
journalctl -u polkit.service -u power-profiles-daemon.service -o short-monotonic --no-pager \
    >$R/journal_services.txt
echo done >$R/done
step done
"""


@pytest.fixture(scope="module")
def package(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the .deb, the local apt repository of its Depends closure and the extras' closures)."""
    return installed_package(tmp_path_factory.mktemp("deb"), EXTRAS)


@pytest.fixture(scope="module")
def guest(vm: Any, package: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One boot of the installed flavour running SCRIPT; the directory of what it wrote."""
    deb, repository = package
    script = tmp_path_factory.mktemp("dbus-vm") / "dbus.sh"
    script.write_text(SCRIPT.replace("__SOURCES__", repo.SOURCES_LINE).replace("__EXTRAS__", " ".join(EXTRAS))
                      .replace("__PROPS__", " ".join(PROPS)))  # fmt: skip
    res = vm.run(
        "bash /root/dbus.sh", flavour="installed", systemd=True, timeout=1200,
        copy=[(str(deb), f"/root/{deb.name}"), (str(repository), repo.GUEST_DIR),
              (str(script), "/root/dbus.sh")],
    )  # fmt: skip
    (res.results / "guest_output.txt").write_text(res.output)
    print(f"\nD-Bus VM run ({deb.name}): rc={res.returncode} wall={res.wall_s:.1f}s boot={res.boot_s}s "
          f"results={res.results}")  # fmt: skip
    assert (res.results / "done").exists(), (
        f"the guest script did not finish (rc {res.returncode}): {res.message}\n{res.output[-3000:]}"
    )
    return res.results


def _r(results: Path, name: str) -> str:
    return read(results, name).strip()


def _props(results: Path, name: str) -> dict[str, str]:
    """props_NAME.txt (or gprops_NAME.txt) as {property: what the client printed}."""
    lines = _r(results, name).splitlines()
    return {k: v for k, _, v in (line.partition(" ") for line in lines)}


def _signals(results: Path, name: str) -> list[dict[str, Any]]:
    """The PropertiesChanged the daemon sent while monitor NAME ran: {property: value} each, in order."""
    out = []
    for msg in json_events(read(results, f"mon_{name}.json")):
        if msg.get("member") == "PropertiesChanged" and msg.get("path") == "/org/scx/Loader":
            iface, changed, _ = msg["payload"]["data"]
            assert iface == "org.scx.Loader", msg
            out.append({k: v["data"] for k, v in changed.items()})
    return out


def _denied(text: str) -> None:
    assert "Error org.freedesktop.DBus.Error.AccessDenied" in text and "org.scxctl.manage" in text, text


def test_install_with_polkitd_power_profiles_daemon_and_gdbus(guest: Path) -> None:
    assert _r(guest, "apt_update.rc") == "0", _r(guest, "apt_update.out")
    assert _r(guest, "install.rc") == "0", _r(guest, "install.out")[-3000:]
    stamps = [float(m[1]) for m in re.finditer(r"^(\d+\.\d+) ", _r(guest, "install.out"), re.M)]
    after = _r(guest, "services_after_install.txt").split()
    print(f"\napt-get install: {stamps[-1] - stamps[0]:.0f} s; then polkit.service, power-profiles-daemon: "
          f"{after}\n{_r(guest, 'versions.txt')}")
    assert _r(guest, "services_active.txt").split() == ["active", "active"], _r(guest, "services_active.txt")
    assert _r(guest, "polkit_wait.txt") != "timeout"


def test_the_daemon_owns_its_name_after_install(guest: Path) -> None:
    """The unit the package starts owns org.scx.Loader, although the bus policy came in the same install."""
    assert _r(guest, "name_wait.txt") != "timeout", _r(guest, "journal_dbus_install.txt")
    assert '"dbus_serving"' in _r(guest, "journal_dbus_install.txt")


def test_properties_with_nothing_running(guest: Path) -> None:
    assert _props(guest, "props_idle.txt") == {
        "CurrentScheduler": 's "unknown"', "SchedulerMode": "u 0", "CurrentSchedulerArgs": "as 0",
        "SupportedSchedulers": 'as 1 "pyland"', "DefaultScheduler": 's "pyland"', "DefaultMode": "u 0",
    }


def test_root_starts_pyland_in_gaming_mode(guest: Path) -> None:
    assert _r(guest, "root_start.rc") == "0", _r(guest, "root_start.out")
    assert _r(guest, "root_start_kstate.txt") == "enabled pyland"


def test_busctl_reads_every_property_with_its_type(guest: Path) -> None:
    assert _props(guest, "props_started.txt") == {
        "CurrentScheduler": 's "pyland"', "SchedulerMode": "u 1", "CurrentSchedulerArgs": "as 0",
        "SupportedSchedulers": 'as 1 "pyland"', "DefaultScheduler": 's "pyland"', "DefaultMode": "u 0",
    }
    assert _props(guest, "props_args.txt") == {
        "CurrentScheduler": 's "pyland"', "SchedulerMode": "u 0",
        "CurrentSchedulerArgs": 'as 1 "--slice-us=5000"',
        "SupportedSchedulers": 'as 1 "pyland"', "DefaultScheduler": 's "pyland"', "DefaultMode": "u 0",
    }


def test_gdbus_reads_every_property_with_its_type(guest: Path) -> None:
    assert _props(guest, "gprops_started.txt") == {
        "CurrentScheduler": "(<'pyland'>,)", "SchedulerMode": "(<uint32 1>,)",
        "CurrentSchedulerArgs": "(<@as []>,)", "SupportedSchedulers": "(<['pyland']>,)",
        "DefaultScheduler": "(<'pyland'>,)", "DefaultMode": "(<uint32 0>,)",
    }
    assert _props(guest, "gprops_args.txt")["CurrentSchedulerArgs"] == "(<['--slice-us=5000']>,)"


def test_a_group_member_switches_the_mode_without_a_prompt(guest: Path) -> None:
    assert _r(guest, "useradd.rc") == "0", _r(guest, "useradd.out")
    assert _r(guest, "member_switch.rc") == "0", _r(guest, "member_switch.out")
    assert _props(guest, "props_member.txt")["SchedulerMode"] == "u 3"
    assert _r(guest, "member_kstate.txt") == "enabled pyland"


def test_anyone_else_is_refused_and_nothing_changes(guest: Path) -> None:
    assert _r(guest, "other_switch.rc") != "0"
    _denied(_r(guest, "other_switch.out"))
    assert _props(guest, "props_other.txt") == _props(guest, "props_member.txt")
    before, after = _r(guest, "other_pids.txt").split(" ")
    assert before == after != "", "pyland was restarted by a refused call"
    assert _r(guest, "other_kstate.txt") == "enabled pyland"
    denied = [e for e in json_events(_r(guest, "journal_denied.txt")) if e.get("event") == "request_denied"]
    assert len(denied) == 1 and denied[0]["op"] == "SwitchScheduler", denied
    assert denied[0]["uid"] != 0 and "org.scxctl.manage" in denied[0]["reason"], denied


def test_properties_changed_for_a_start_and_a_switch(guest: Path) -> None:
    start, switch = _signals(guest, "start"), _signals(guest, "switch")
    assert _r(guest, "mon_start.ready") != "timeout" and _r(guest, "mon_start.wait") != "timeout", start
    assert start[-1] == {"CurrentScheduler": "pyland", "SchedulerMode": 1}, start
    assert _r(guest, "mon_switch.wait") != "timeout", switch
    assert switch[-1].get("SchedulerMode") == 3, switch
    assert {"SchedulerMode"} <= set().union(*switch), switch


def test_properties_changed_for_a_killed_schedulers_restart(guest: Path) -> None:
    assert _r(guest, "killed_pid.txt") != "none"
    assert _r(guest, "kill_restart_wait.txt") != "timeout"
    seen = _signals(guest, "kill")
    assert _r(guest, "mon_kill.wait") != "timeout", seen
    current = [s["CurrentScheduler"] for s in seen if "CurrentScheduler" in s]
    assert current == ["unknown", "pyland"], seen  # gone, then back: both announced
    assert seen[-1] == {"CurrentScheduler": "pyland", "SchedulerMode": 3}, seen
    assert _props(guest, "props_killed.txt")["SchedulerMode"] == "u 3"


def test_gdbus_monitor_sees_the_same_signals(guest: Path) -> None:
    """A second client, GLib's, beside busctl: the switch and the killed scheduler's return."""
    expected = {"switch": "'SchedulerMode': <uint32 3>", "kill": "'CurrentScheduler': <'pyland'>"}
    for step, value in expected.items():
        text = _r(guest, f"gmon_{step}.txt")
        assert _r(guest, f"gmon_{step}.ready") != "timeout", (text, _r(guest, f"gmon_{step}.err"))
        assert _r(guest, f"gmon_{step}.wait") != "timeout", text
        changed = [line for line in text.splitlines() if "PropertiesChanged ('org.scx.Loader'," in line]
        assert changed and value in changed[-1], text
    killed = [line for line in _r(guest, "gmon_kill.txt").splitlines() if "PropertiesChanged" in line]
    assert any("'CurrentScheduler': <'unknown'>" in line for line in killed), killed


@pytest.mark.parametrize("call", ["args_switch", "args_start"])
def test_arguments_off_the_allow_list_are_refused_naming_the_rule(guest: Path, call: str) -> None:
    out = _r(guest, f"dsend_{call}.out")
    assert _r(guest, f"dsend_{call}.rc") != "0", out
    assert out.startswith("Error org.scx.Loader.Error.ArgsNotAllowed: "), out
    assert "'--evil-flag' is not allowed (rule: must fully match one of allowed_args of pyland" in out, out


@pytest.mark.parametrize(("call", "error"), [
    ("signature", "org.freedesktop.DBus.Error.UnknownMethod"),
    ("unknown_sched", "org.scx.Loader.Error.UnknownScheduler"),
    ("unknown_mode", "org.scx.Loader.Error.UnknownMode"),
])  # fmt: skip
def test_a_malformed_or_unknown_request_is_a_dbus_error(guest: Path, call: str, error: str) -> None:
    out = _r(guest, f"dsend_{call}.out")
    assert _r(guest, f"dsend_{call}.rc") != "0", out
    assert out.startswith(f"Error {error}: "), out


def test_busctl_with_a_wrong_signature_fails(guest: Path) -> None:
    assert _r(guest, "busctl_signature.rc") != "0", _r(guest, "busctl_signature.out")


def test_refused_requests_change_nothing(guest: Path) -> None:
    assert _props(guest, "props_refused.txt") == _props(guest, "props_killed.txt")
    before, after = _r(guest, "refused_pids.txt").split(" ")
    assert before == after != "", "pyland was restarted by a refused call"
    assert _r(guest, "refused_kstate.txt") == "enabled pyland"


def test_allowed_arguments_run_in_mode_auto(guest: Path) -> None:
    assert _r(guest, "dsend_args_ok.rc") == "0", _r(guest, "dsend_args_ok.out")


CLI = [  # (name, exit code, stdout)
    ("get_args", 0, 'running Pyland with arguments "--slice-us=5000"'),
    ("stop", 0, "stopped"),
    ("get_stopped", 0, "no scx scheduler running"),
    ("start", 0, "started Pyland in PowerSave mode"),
    ("start_again", 2, ""),
    ("get_powersave", 0, "running Pyland in PowerSave mode"),
    ("switch", 0, "switched to Pyland in Server mode"),
    ("restore", 0, "restored default scheduler Pyland in Auto mode"),
    ("modes", 0, 'supported modes: ["auto", "gaming", "powersave", "lowlatency", "server"]'),
    ("restart", 0, "restarted"),
    ("get_restored", 0, "running Pyland in Auto mode"),
    ("stop_end", 0, "stopped"),
]


@pytest.mark.parametrize(("name", "code", "out"), CLI, ids=[c[0] for c in CLI])
def test_scx_loader_cli_verbs(guest: Path, name: str, code: int, out: str) -> None:
    err = _r(guest, f"cli_{name}.err")
    assert (_r(guest, f"cli_{name}.rc"), _r(guest, f"cli_{name}.out")) == (str(code), out), err


def test_cli_verbs_and_dbus_agree(guest: Path) -> None:
    assert _props(guest, "props_stopped.txt")["CurrentScheduler"] == 's "unknown"'
    assert _r(guest, "cli_switch_mode.txt") == "u 4"
    assert "use 'switch' instead of 'start'" in _r(guest, "cli_start_again.err")


def _offered(guest: Path) -> list[str]:
    """The profiles `powerprofilesctl list` offers, as it lists them."""
    return re.findall(r"^\*?\s*([a-z-]+):$", _r(guest, "ppd_list.txt"), re.M)


def test_power_profiles_daemon_as_trixie_ships_it(guest: Path) -> None:
    names = set(_r(guest, "ppd_names.txt").split())
    print(f"\npower-profiles-daemon {_r(guest, 'ppd_version.txt')}; bus names {sorted(names)}; "
          f"profiles {_offered(guest)}")
    assert names == {"org.freedesktop.UPower.PowerProfiles", "net.hadess.PowerProfiles"}, names
    assert {"power-saver", "balanced"} <= set(_offered(guest)), _r(guest, "ppd_list.txt")


def test_the_mode_follows_the_power_profile(guest: Path) -> None:
    assert _r(guest, "pp_name_wait.txt") != "timeout"
    assert _r(guest, "cli_pp_enable.rc") == "0", _r(guest, "cli_pp_enable.err")
    assert _r(guest, "pp_mode_enabled.txt") == "u 0"  # balanced: auto
    assert _r(guest, "pp_set_power-saver.rc") == "0", _r(guest, "pp_set_power-saver.out")
    assert _r(guest, "pp_follow_wait.txt") != "timeout", _r(guest, "journal.txt")[-3000:]
    lines = json_events(_r(guest, "journal_pp_switch.txt"))
    switched = [e for e in lines if e.get("event") == "power_profile_switch"]
    assert [(e["profile"], e["mode"], e["previous_mode"]) for e in switched] == [
        ("power-saver", "powersave", "auto")], switched


def test_an_explicit_mode_holds_against_the_power_profile(guest: Path) -> None:
    # `switch -m` without -s is our own switch, which prints the daemon's summary (as `switch --mode`)
    assert _r(guest, "cli_pp_gaming.rc") == "0", _r(guest, "cli_pp_gaming.err")
    assert _r(guest, "cli_pp_gaming.out").startswith("pyland (gaming) running, pid ")
    tried = [p for p in ("performance", "balanced", "power-saver") if p in _offered(guest)]
    assert tried[-2:] == ["balanced", "power-saver"], _offered(guest)
    for p in ("performance", "balanced", "power-saver"):
        if p not in tried:  # not offered: powerprofilesctl refuses it, and nothing changes
            assert _r(guest, f"pp_set_{p}.rc") != "0", _r(guest, f"pp_set_{p}.out")
        else:
            assert _r(guest, f"pp_set_{p}.rc") == "0", _r(guest, f"pp_set_{p}.out")
            assert _r(guest, f"pp_held_{p}.wait") != "timeout", _r(guest, "journal.txt")[-3000:]
        assert _r(guest, f"pp_mode_{p}.txt") == "u 1", p
    held = [e for e in json_events(_r(guest, "journal.txt")) if e.get("event") == "power_profile_held"]
    assert [(e["profile"], e["held_mode"]) for e in held] == [(p, "gaming") for p in tried], held
    assert _r(guest, "pp_kstate.txt") == "enabled pyland"


def test_the_daemon_owns_its_name_again_after_the_bus_restarts(guest: Path) -> None:
    """`systemctl restart dbus` (a dbus upgrade does it): the same daemon process connects again,
    owns org.scx.Loader and answers with the state it kept (pyland, the explicit gaming mode)."""
    assert _r(guest, "busrestart_wait.txt") != "timeout", _r(guest, "journal.txt")[-3000:]
    assert _r(guest, "busrestart_pid.txt") == "same"
    assert _r(guest, "busrestart_current.txt") == 's "pyland"'
    assert _r(guest, "busrestart_mode.txt") == "u 1"
    lines = json_events(_r(guest, "journal_dbus_serving.txt"))
    serving = [e for e in lines if e.get("event") == "dbus_serving"]
    assert serving and serving[-1]["reason"] == "reconnected" and serving[-1]["tries"] >= 1, serving
