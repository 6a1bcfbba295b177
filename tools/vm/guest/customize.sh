# Runs inside the freshly debootstrapped root (chroot) after the packages are installed.
set -eu
echo scxvm >/etc/hostname
printf '127.0.0.1\tlocalhost\n127.0.1.1\tscxvm\n::1\tlocalhost\n' >/etc/hosts
printf '# root is mounted rw by the kernel (root=PARTUUID=... rw)\n' >/etc/fstab
echo 5c7c7e11a5c7c7e11a5c7c7e11a5c7c7 >/etc/machine-id
id tester >/dev/null 2>&1 || useradd --create-home --shell /bin/bash --user-group tester
# Masked: consoles (the harness owns ttyS0), timers, and boot units a throw-away guest without
# kernel modules does not need; under TCG each one costs seconds of --systemd boot time.
for unit in serial-getty@ttyS0.service serial-getty@ttyS1.service getty@tty1.service \
        apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer \
        e2scrub_reap.service fstrim.timer systemd-timesyncd.service systemd-networkd-wait-online.service \
        modprobe@.service systemd-modules-load.service dev-hugepages.mount dev-mqueue.mount \
        sys-fs-fuse-connections.mount sys-kernel-config.mount systemd-random-seed.service \
        systemd-remount-fs.service systemd-sysusers.service systemd-sysctl.service ldconfig.service \
        systemd-update-done.service systemd-journal-catalog-update.service systemd-firstboot.service \
        systemd-tmpfiles-clean.timer systemd-pstore.service systemd-hwdb-update.service; do
    ln -sf /dev/null "/etc/systemd/system/$unit"
done
mkdir -p /etc/systemd/journald.conf.d
printf '[Journal]\nStorage=volatile\n' >/etc/systemd/journald.conf.d/scxvm.conf
ln -sf /lib/systemd/system/multi-user.target /etc/systemd/system/default.target
mkdir -p /etc/systemd/system/multi-user.target.wants /opt/scxctl /results /mnt/scxvm
ln -sf /etc/systemd/system/scxvm-run.service /etc/systemd/system/multi-user.target.wants/scxvm-run.service
echo /opt/scxctl >/usr/lib/python3/dist-packages/scxctl-worktree.pth
apt-get clean
rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/info/* /var/cache/debconf/*-old
