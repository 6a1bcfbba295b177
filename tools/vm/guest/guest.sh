#!/bin/bash
# Per-run guest side of tools/vm, carried on the run disk (mounted at /mnt/scxvm) and started by
# the baked scxvm-boot. $1: "light" (we are PID 1, nothing is mounted yet) or "systemd" (we run
# from scxvm-run.service). Protocol with the host, on the virtio port "scxvm.ctl":
#   SCXVM:<nonce>:start       the command starts now
#   SCXVM:<nonce>:exit=<rc>   the command exited with rc (also written to /mnt/scxvm/exitcode)
#   SCXVM:<nonce>:error=<msg> the guest could not set the command up
# The command's stdout+stderr go to the virtio port "scxvm.out" (not a tty), nothing else does.
# Builtins wherever possible: under TCG every exec costs tens of milliseconds.
mode=${1:-light}
R=/mnt/scxvm
read -r nonce <"$R/nonce"
read -r rel </proc/sys/kernel/osrelease

port() {
    local p name
    for p in /sys/class/virtio-ports/*; do
        read -r name <"$p/name" 2>/dev/null && [ "$name" = "$1" ] && { echo "/dev/${p##*/}"; return 0; }
    done
    return 1
}

finish() {
    if [ "$mode" = light ]; then
        kill -TERM -1 2>/dev/null && sleep 0.2
        kill -KILL -1 2>/dev/null
        umount /results /opt/scxctl "/lib/modules/$rel" "$R" 2>/dev/null || {
            sync; mount -o remount,ro "$R"
        }
        echo o >/proc/sysrq-trigger
        while :; do sleep 60; done  # PID 1 must never exit (that would be a kernel panic)
    fi
    umount /results /opt/scxctl "/lib/modules/$rel" 2>/dev/null
    umount "$R" 2>/dev/null || { sync; umount -l "$R"; }
    systemctl poweroff --force
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

mount -a -T "$R/fstab.run" || fail "cannot mount the project, kernel files or /results (fstab.run)"
[ -f "$R/kernel/config" ] && ln -sf "/lib/modules/$rel/config" "/boot/config-$rel"

while IFS=$'\t' read -r idx dst; do
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
export PYTHONPATH=/opt/scxctl
cd /
mark start
sh -c "$(<"$R/cmd")" </dev/null >"$out" 2>&1
rc=$?
echo "$rc" >"$R/exitcode"
mark "exit=$rc"
finish
