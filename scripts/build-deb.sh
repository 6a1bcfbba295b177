#!/usr/bin/env bash
# Builds the Debian package in a clean, cached Debian trixie chroot (tools/deb), never with the
# host's packages, and checks it with lintian --pedantic: dist/scxctl_*.deb (+ .buildinfo, .changes).
# As root (debootstrap, chroot, overlay mounts). Extra arguments go to `python -m tools.deb build`,
# e.g. --check-reproducible, --autopkgtest, --out DIR, --refresh.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    echo "scripts/build-deb.sh: no .venv: run scripts/install.sh first" >&2
    exit 1
fi
exec .venv/bin/python -m tools.deb build "$@"
