"""VM test harness: run commands on a Debian sched_ext kernel in QEMU (`python -m tools.vm`).

The host kernel of the development and CI machines has no sched_ext, so every check that needs a
real sched_ext kernel runs in a guest. Sub-commands: `kernel` (fetch a trixie(-backports) kernel,
any version the archive still has), `image` (debootstrap the guest root filesystem), `run` (boot,
run one command, stream its output, exit with its code), `matrix` (pyland on each installable
kernel, a table), `probe-kvm`. Harness failures use the exit codes in `tools.vm.codes`.
"""
