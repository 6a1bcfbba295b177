"""Debian package build harness: `python -m tools.deb build` (or scripts/build-deb.sh).

The .deb is the product, so it is built the way Debian builds it: `dpkg-buildpackage` in a clean
trixie chroot that holds only build-essential and the package's Build-Depends, never with the
host's own packages (a Debian 12 host). The chroot is debootstrapped once and cached as overlay
layers (`chroot.py`); each build, lintian run and autopkgtest gets a throw-away overlay on top.
"""
