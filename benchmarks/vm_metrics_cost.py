"""What the daemon's Prometheus metrics cost it: its CPU time with the metrics file on and off.

One boot of the installed-flavour guest (tests/test_deb_vm.py's: the .deb and prometheus-node-exporter
from the local repository, under systemd), pyland enabled by the packaged daemon. Then rounds of
WINDOW seconds each, alternating which setting goes first (on, off, off, on, ...): the daemon is
restarted with the setting in /etc/scxctl/config.toml, pyland restored, and the daemon's own CPU time
(utime + stime of its process, in clock ticks, /proc/PID/stat) read at both ends of the window. "on"
is the default interval (15 s) to node-exporter's directory; "off" is `file = ""`. Prints the CPU
seconds per window, the metric writes seen, and the on/off ratio of the medians.

Usage: .venv/bin/python -m benchmarks.vm_metrics_cost [--rounds 2] [--window 60] [--interval 15]
Runs as root (boots QEMU, builds the .deb in its cached chroot).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from tools.deb.build import build_working_tree
from tools.vm import image, repo
from tools.vm.api import VM

SCRIPT = r"""#!/bin/bash
set -u
R=/results
S=/sys/kernel/sched_ext
M=/var/lib/prometheus/node-exporter/scxctl.prom
cd /root
echo "__SOURCES__" >/etc/apt/sources.list.d/local.list
apt-get update >/dev/null 2>&1
apt-get install -y ./scxctl_*.deb prometheus-node-exporter >$R/install.out 2>&1 || exit 1
scxctl enable >$R/enable.out 2>&1 || exit 1
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
setting() {  # setting on|off: restart the daemon with it, wait until pyland runs again
    if [ "$1" = on ]; then conf='interval_s = __INTERVAL__'; else conf='file = ""'; fi
    printf '[metrics]\n%s\n' "$conf" >/etc/scxctl/config.toml
    systemctl restart scxctl.service
    for _ in $(seq 1 600); do
        [ "$(cat $S/state 2>/dev/null) $(cat $S/root/ops 2>/dev/null)" = "enabled pyland" ] && break
        sleep 0.2
    done
    sleep 5  # past the daemon's start-up work
}
for s in __ORDER__; do
    setting $s
    pid=$(systemctl show -P MainPID scxctl.service)
    m0=$(stat -c %Y $M 2>/dev/null || echo 0); n=0; t0=$(ticks $pid)
    end=$((SECONDS + __WINDOW__))
    while [ $SECONDS -lt $end ]; do  # count the file's replacements (one stat a second)
        m=$(stat -c %Y $M 2>/dev/null || echo 0); [ "$m" != "$m0" ] && { n=$((n + 1)); m0=$m; }
        sleep 1
    done
    t1=$(ticks $pid)
    echo "$s $((t1 - t0)) $n $(getconf CLK_TCK)" >>$R/rounds.txt
done
exit 0
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2, help="windows per setting")
    p.add_argument("--window", type=int, default=60, help="seconds per window")
    p.add_argument("--interval", type=float, default=15.0, help="the metrics interval when on")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="metrics-cost-"))
    deb = build_working_tree(tmp)
    image.current(image.INSTALLED) or image.build(flavour=image.INSTALLED)
    repository = repo.build(deb, extras=("prometheus-node-exporter",))
    pairs = [("on", "off") if i % 2 == 0 else ("off", "on") for i in range(args.rounds)]
    order = " ".join(s for pair in pairs for s in pair)
    script = (SCRIPT.replace("__SOURCES__", repo.SOURCES_LINE).replace("__ORDER__", order)
              .replace("__WINDOW__", str(args.window)).replace("__INTERVAL__", str(args.interval)))
    path = tmp / "cost.sh"
    path.write_text(script)
    copies = [(str(deb), f"/root/{deb.name}"), (str(repository), repo.GUEST_DIR),
              (str(path), "/root/cost.sh")]
    res = VM(lambda: Path(tempfile.mkdtemp(prefix="metrics-cost-vm-"))).run(
        "bash /root/cost.sh", flavour="installed", systemd=True, copy=copies,
        timeout=600 + 2 * args.rounds * (args.window + 90))
    rounds_file = res.results / "rounds.txt"
    if res.returncode != 0 or not rounds_file.is_file():
        print(f"guest run failed ({res.message}): {res.output[-2000:]}", file=sys.stderr)
        return 1
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    print(f"daemon CPU per {args.window} s window (pyland enabled, installed package, TCG guest):")
    for line in rounds_file.read_text().split("\n"):
        if not line.strip():
            continue
        setting, ticks, writes, hz = line.split()
        seconds = int(ticks) / int(hz)
        cpu[setting].append(seconds)
        print(f"  metrics {setting:<3}  {seconds:6.2f} CPU s  ({int(writes)} file writes seen)")
    on, off = statistics.median(cpu["on"]), statistics.median(cpu["off"])
    print(f"median on {on:.2f} s, off {off:.2f} s: on/off {on / off:.2f}x, "
          f"+{(on - off) / args.window * 1e3:.1f} ms of CPU a second with metrics every {args.interval:g} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
