# The "installed" image flavour (tools/vm/image.py) runs this in the chroot right after
# customize.sh. It takes out what only the development overlay needs, so that a guest of this
# flavour sees what the Debian package brings and nothing of a working tree.
set -eu
rm -f /usr/lib/python3/dist-packages/scxctl-worktree.pth
# customize.sh made these only for the .pth and the overlay's mount point; python3 is not installed
rmdir /usr/lib/python3/dist-packages /usr/lib/python3 /opt/scxctl
# The guest has no network: the mirror in sources.list would make every `apt-get update` fail.
# The only source is the local repository a test carries in (/etc/apt/sources.list.d/local.list).
rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*
