#!/bin/bash
# Per-run guest side of tools/vm, carried on the run disk (mounted at /mnt/scxvm) and started by
# the baked scxvm-boot. $1: "light" (we are PID 1, nothing is mounted yet) or "systemd" (we run
# from scxvm-run.service). Protocol with the host, on the virtio port "scxvm.ctl":
#   SCXVM:<nonce>:start       the command starts now
#   SCXVM:<nonce>:exit=<rc>   the command exited with rc (also written to /mnt/scxvm/exitcode)
#   SCXVM:<nonce>:error=<msg> the guest could not set the command up
# The command's stdout+stderr go to the virtio port "scxvm.out" (not a tty), nothing else does.
# Builtins wherever possible: under TCG every exec costs tens of milliseconds.
# Two commands ($R/then exists): the host boots the same root disk twice. The first boot runs
# $R/cmd and leaves the nonce in $MARK on the root disk; a boot that finds it there is the second
# and runs $R/then. The nonce ties the marker to this run, so a marker from any other run never counts.
mode=${1:-light}
R=/mnt/scxvm
MARK=/var/lib/scxvm/first-done
read -r nonce <"$R/nonce"
read -r rel </proc/sys/kernel/osrelease
# the installed flavour brings no working tree: no /opt/scxctl to mount, unmount or put on sys.path
proj=
[ -d "$R/project" ] && proj=/opt/scxctl
cmdfile=$R/cmd
second=
lost=
reboot=
if [ -f "$R/then" ]; then
    seen=
    read -r seen 2>/dev/null <"$MARK"  # stderr first: no message when there is no marker
    if [ "$seen" = "$nonce" ]; then
        second=1 cmdfile=$R/then
    elif [ -f "$R/exitcode" ]; then
        # the first command has run (the run disk says so) but the root disk forgot it: running
        # the first command again would pass off a fresh disk as a reboot of the same one
        lost=1
    fi
fi

port() {
    local p name
    for p in /sys/class/virtio-ports/*; do
        read -r name <"$p/name" 2>/dev/null && [ "$name" = "$1" ] && { echo "/dev/${p##*/}"; return 0; }
    done
    return 1
}

unbind_extra() {  # the headers' binds (run --headers) and a second kernel's modules keep the run disk busy
    local src dst rest
    while read -r src dst rest; do
        case "$src" in /mnt/scxvm/headers/*|/mnt/scxvm/kernel2) umount "$dst" 2>/dev/null ;; esac
    done <"$R/fstab.run"
}

finish() {
    unbind_extra
    if [ "$mode" = light ]; then
        kill -TERM -1 2>/dev/null && sleep 0.2
        kill -KILL -1 2>/dev/null
        umount /results $proj "/lib/modules/$rel" "$R" 2>/dev/null || {
            sync; mount -o remount,ro "$R"
        }
        echo o >/proc/sysrq-trigger
        while :; do sleep 60; done  # PID 1 must never exit (that would be a kernel panic)
    fi
    umount /results $proj "/lib/modules/$rel" 2>/dev/null
    umount "$R" 2>/dev/null || { sync; umount -l "$R"; }
    if [ -n "$reboot" ]; then
        # a second boot follows: shut down in order (units stopped as on a real reboot), not --force
        systemctl poweroff
    else
        systemctl poweroff --force
    fi
}

if [ "$mode" = light ]; then
    mount -a -T "$R/fstab.light"
    echo scxvm >/proc/sys/kernel/hostname
    ip link set lo up 2>/dev/null
fi

for _ in {1..50}; do
    ctl=$(port scxvm.ctl) && out=$(port scxvm.out) && break
    sleep 0.1
done
if [ -z "${ctl:-}" ] || [ -z "${out:-}" ]; then
    echo "scxvm: virtio ports scxvm.ctl/scxvm.out missing" >/dev/console
    finish
fi
mark() { echo "SCXVM:$nonce:$*" >"$ctl"; }
fail() { mark "error=$*"; finish; }
[ -n "$lost" ] && fail "second boot: the root disk has no marker of the first ($MARK)"

mount -a -T "$R/fstab.run" || fail "cannot mount the project, kernel files or /results (fstab.run)"
[ -f "/lib/modules/$rel/config" ] && ln -sf "/lib/modules/$rel/config" "/boot/config-$rel"

# copies go in on the first boot only: the second boots the same root disk, which still has them
[ -z "$second" ] && while IFS=$'\t' read -r idx dst; do
    [ -n "$idx" ] || continue
    src="$R/copies/$idx"
    mkdir -p "${dst%/*}/" || fail "--copy: cannot create ${dst%/*}"
    if [ -d "$src" ] && [ -d "$dst" ]; then
        cp -a "$src/." "$dst/" || fail "--copy: cannot copy to $dst"
    else
        cp -a "$src" "$dst" || fail "--copy: cannot copy to $dst"
    fi
done <"$R/copies.tsv"

export HOME=/root USER=root LOGNAME=root LANG=C.UTF-8 TERM=dumb
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
[ -n "$proj" ] && export PYTHONPATH=$proj
cd /
mark start
sh -c "$(<"$cmdfile")" </dev/null >"$out" 2>&1
rc=$?
if [ -f "$R/then" ] && [ -z "$second" ] && [ "$rc" = 0 ]; then
    # before the exit marker: once the host sees it, it may power the guest off at any moment
    mkdir -p "${MARK%/*}" && echo "$nonce" >"$MARK" && sync || fail "cannot write $MARK on the root disk"
    reboot=1
fi
echo "$rc" >"$R/exitcode"
mark "exit=$rc"
finish
