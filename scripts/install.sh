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
# (dbus-daemon, dbus-bin, libglib2.0-bin, systemd: the D-Bus tests' private bus and its clients
# dbus-send, gdbus and busctl)
apt-get update -q
apt-get install -y -q --no-install-recommends \
    python3 python3-venv python3-pip ca-certificates \
    clang-19 llvm-19 make gcc libc6-dev pkg-config \
    debootstrap e2fsprogs cpio zstd xz-utils kmod \
    stress-ng rt-tests procps util-linux git \
    dbus-daemon dbus-bin libglib2.0-bin systemd
apt-get install -y -q --no-install-recommends "${backports[@]}" libbpf1 libbpf-dev bpftool
# QEMU from backports too on bookworm: 7.2's multi-threaded TCG can run stale code after the guest
# kernel patches its own text (static keys flipped and BPF programs freed as sched_ext detaches),
# and the guest dies of "Oops: int3".
apt-get install -y -q --no-install-recommends "${backports[@]}" qemu-system-x86 qemu-utils

log "creating .venv with the project"
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# compat mode: a plain .pth path entry, like an installed package; the default import-hook finder
# costs every Python start in the venv ~25 ms (measured by benchmarks/status_bench.py)
.venv/bin/pip install -q -e '.[test]' --config-settings editable_mode=compat

# pyland's BPF object (bpf/build/pyland.bpf.o, with its source hash embedded) and the test programs;
# make rebuilds only what changed, so re-running is cheap.
log "building the BPF objects and the bench worker (make -C bpf)"
make -C bpf PYTHON="$PWD/.venv/bin/python"
# the independent cross-checks the tests compare `scxctl bench` and `scxctl trace` with
make -C tests/native
make -C benchmarks/native

# The sched_ext tests run in a QEMU guest (tools/vm): fetch its kernels and build its root image once.
# All are cached under /var/cache/scxctl-dev/vm (or $SCXCTL_VM_CACHE), shared by every clone on this
# machine, and reused when nothing changed. pyland's
# scenario runs on the newest and on the oldest sched_ext kernel the archive still has.
log "preparing the VM guest kernels (tools/vm kernel: newest, oldest)"
# with the default kernel's headers (unpacked beside it, never installed): the trace tests run bcc in the guest
.venv/bin/python -m tools.vm kernel --headers
.venv/bin/python -m tools.vm kernel --version oldest
# the Debian 7.2 builds with broken kfunc BTF, for pyland's compat tests; the archive drops a kernel
# once its series moves on, and the tests then skip it by name, so a missing one is not fatal here
for v in 7.2.11 7.2.6 7.2.12 7.2.9; do
    .venv/bin/python -m tools.vm kernel --version "$v" || log "kernel $v is not installable any more"
done
# the kernel's example scheduler scx_simple, built from the default guest kernel's source, for the
# tests that run a sched_ext scheduler other than pyland (and the benchmarks that compare with it)
log "building the kernel's example schedulers for the guest kernel (tools.vm.anchors)"
.venv/bin/python -m tools.vm.anchors --quiet >/dev/null
log "preparing the VM guest images (tools/vm image: the development one, the bare one for the .deb)"
.venv/bin/python -m tools.vm image
.venv/bin/python -m tools.vm image --flavour installed

# The Debian package is built (and its VM tests install it) in a cached trixie chroot (tools/deb).
log "preparing the package build chroot (tools/deb chroot)"
.venv/bin/python -m tools.deb chroot

log "done: run scripts/test.sh"
