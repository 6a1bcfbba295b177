#!/usr/bin/env bash
# One command installs everything scxctl and its test suite need on a fresh Debian 12 (or newer)
# machine, as root: system packages, the Python venv with the project, the BPF object, and the
# cached VM kernel and guest image used by the sched_ext tests. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/install.sh: run as root (it installs system packages)" >&2
    exit 3
fi

. /etc/os-release
export DEBIAN_FRONTEND=noninteractive
backports=()
if [ "${VERSION_CODENAME:-}" = bookworm ]; then
    # bookworm's libbpf (1.1) and bpftool (7.1) are too old; backports are pinned low by default,
    # so only what we name with -t comes from there. Never trixie/sid on the host.
    src=/etc/apt/sources.list.d/bookworm-backports.sources
    if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        log "adding bookworm-backports ($src)"
        cat >"$src" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    fi
    backports=(-t bookworm-backports)
fi

log "installing system packages"
apt-get update -q
apt-get install -y -q --no-install-recommends \
    python3 python3-venv python3-pip ca-certificates \
    clang-19 llvm-19 make gcc libc6-dev \
    qemu-system-x86 qemu-utils debootstrap e2fsprogs cpio zstd xz-utils kmod \
    stress-ng procps util-linux
apt-get install -y -q --no-install-recommends "${backports[@]}" libbpf1 libbpf-dev bpftool

log "creating .venv with the project"
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# compat mode: a plain .pth path entry, like an installed package; the default import-hook finder
# costs every Python start in the venv ~25 ms (measured by benchmarks/status_bench.py)
.venv/bin/pip install -q -e '.[test]' --config-settings editable_mode=compat

# pyland's BPF object (bpf/build/pyland.bpf.o, with its source hash embedded) and the test programs;
# make rebuilds only what changed, so re-running is cheap.
log "building the BPF objects (make -C bpf)"
make -C bpf PYTHON="$PWD/.venv/bin/python"

# The sched_ext tests run in a QEMU guest (tools/vm): fetch its kernel and build its root image once.
# Both are cached under .cache/vm (or $SCXCTL_VM_CACHE) and reused when nothing changed.
log "preparing the VM guest kernel (tools/vm kernel)"
.venv/bin/python -m tools.vm kernel
log "preparing the VM guest image (tools/vm image)"
.venv/bin/python -m tools.vm image

log "done: run scripts/test.sh"
