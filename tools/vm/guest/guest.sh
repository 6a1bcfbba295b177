#!/bin/bash
# Per-run guest side of tools/vm, carried on the run disk (mounted at /mnt/scxvm) and started by
# the baked scxvm-boot. $1: "light" (we are PID 1, nothing is mounted yet) or "systemd" (we run
# from scxvm-run.service). Protocol with the host, on the virtio port "scxvm.ctl":
#   SCXVM:<nonce>:start       the command starts now
#   SCXVM:<nonce>:exit=<rc>   the command exited with rc (also written to /mnt/scxvm/exitcode)
#   SCXVM:<nonce>:error=<msg> the guest could not set the command up
# The command's stdout+stderr go to the virtio port "scxvm.out" (not a tty), nothing else does.
mode=${1:-light}
R=/mnt/scxvm
nonce=$(cat "$R/nonce")

port() {
    local p
    for p in /sys/class/virtio-ports/*; do
        [ "$(cat "$p/name" 2>/dev/null)" = "$1" ] && { echo "/dev/${p##*/}"; return 0; }
    done
    return 1
}

mountfs() {  # type target [options]: mount unless something is mounted there already
    mkdir -p "$2"
    mountpoint -q "$2" || mount -t "$1" ${3:+-o "$3"} "$1" "$2"
}

finish() {
    sync
    if [ "$mode" = light ]; then
        kill -TERM -1 2>/dev/null; sleep 0.3; kill -KILL -1 2>/dev/null
        umount /results /opt/scxctl 2>/dev/null
        sync
        umount "$R" 2>/dev/null || mount -o remount,ro "$R"
        echo o >/proc/sysrq-trigger
        while :; do sleep 60; done  # PID 1 must never exit (that would be a kernel panic)
    fi
    umount /results /opt/scxctl 2>/dev/null
    umount "$R" 2>/dev/null || umount -l "$R"
    sync
    systemctl poweroff --force
}

if [ "$mode" = light ]; then
    mountfs tmpfs /run mode=755
    mountfs tmpfs /tmp mode=1777
    mountfs devpts /dev/pts gid=5,mode=620
    mountfs tmpfs /dev/shm mode=1777
    mountfs cgroup2 /sys/fs/cgroup nsdelegate
    mountfs bpf /sys/fs/bpf mode=700
    mountfs debugfs /sys/kernel/debug
    mountfs tracefs /sys/kernel/tracing
    hostname scxvm
    ip link set lo up 2>/dev/null
fi

for _ in $(seq 1 50); do
    ctl=$(port scxvm.ctl) && out=$(port scxvm.out) && break
    sleep 0.1
done
if [ -z "${ctl:-}" ] || [ -z "${out:-}" ]; then
    echo "scxvm: virtio ports scxvm.ctl/scxvm.out missing" >/dev/console
    finish
fi
mark() { echo "SCXVM:$nonce:$*" >"$ctl"; }
fail() { mark "error=$*"; finish; }

rel=$(uname -r)
if [ -d "$R/kernel" ]; then
    mkdir -p "/lib/modules/$rel" /boot
    cp -a "$R/kernel/." "/lib/modules/$rel/" || fail "cannot install /lib/modules/$rel"
    cp "$R/kernel/config" "/boot/config-$rel" || fail "cannot install /boot/config-$rel"
fi

mkdir -p /opt/scxctl
mount --bind "$R/project" /opt/scxctl || fail "cannot bind the project to /opt/scxctl"

if [ -f "$R/copies.tsv" ]; then
    while IFS=$'\t' read -r idx dst; do
        [ -n "$idx" ] || continue
        src="$R/copies/$idx"
        mkdir -p "$(dirname "$dst")" || fail "--copy: cannot create $(dirname "$dst")"
        if [ -d "$src" ] && [ -d "$dst" ]; then
            cp -a "$src/." "$dst/" || fail "--copy: cannot copy to $dst"
        else
            cp -a "$src" "$dst" || fail "--copy: cannot copy to $dst"
        fi
    done <"$R/copies.tsv"
fi

mkdir -p "$R/results" /results
chmod 1777 "$R/results"
mount --bind "$R/results" /results || fail "cannot bind /results"

export HOME=/root USER=root LOGNAME=root LANG=C.UTF-8 TERM=dumb
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PYTHONPATH=/opt/scxctl PYTHONDONTWRITEBYTECODE=1
cd /
mark start
sh -c "$(cat "$R/cmd")" </dev/null >"$out" 2>&1
rc=$?
echo "$rc" >"$R/exitcode"
mark "exit=$rc"
finish
