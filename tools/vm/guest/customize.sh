# Runs inside the freshly debootstrapped root (chroot) after the packages are installed.
set -eu
echo scxvm >/etc/hostname
printf '127.0.0.1\tlocalhost\n127.0.1.1\tscxvm\n::1\tlocalhost\n' >/etc/hosts
printf '# root is mounted rw by the kernel (root=PARTUUID=... rw)\n' >/etc/fstab
echo 5c7c7e11a5c7c7e11a5c7c7e11a5c7c7 >/etc/machine-id
id tester >/dev/null 2>&1 || useradd --create-home --shell /bin/bash --user-group tester
for unit in serial-getty@ttyS0.service serial-getty@ttyS1.service getty@tty1.service \
        apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer \
        e2scrub_reap.service fstrim.timer systemd-timesyncd.service systemd-networkd-wait-online.service; do
    ln -sf /dev/null "/etc/systemd/system/$unit"
done
ln -sf /lib/systemd/system/multi-user.target /etc/systemd/system/default.target
mkdir -p /etc/systemd/system/multi-user.target.wants /opt/scxctl /results /mnt/scxvm
ln -sf /etc/systemd/system/scxvm-run.service /etc/systemd/system/multi-user.target.wants/scxvm-run.service
echo /opt/scxctl >/usr/lib/python3/dist-packages/scxctl-worktree.pth
apt-get clean
rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/info/* /var/cache/debconf/*-old
