"""`scxctl stats` on a real sched_ext kernel (QEMU guest): nothing loaded, and a scheduler that is not
pyland (the kernel's own scx_simple, built by tools.vm.anchors) read and then leaving between two readings.

pyland's own numbers, for root and for a member of the scxctl group, are read from the installed package
in tests/test_deb_vm.py, where the files' owners and modes are the package's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from guest_files import read

from tools.vm import anchors
from tools.vm.codes import VMError

# single-threaded TCG: nothing here depends on the vCPUs running side by side
pytestmark = [pytest.mark.vm, pytest.mark.tcg_single]

SCRIPT = r"""#!/bin/bash
set -u
R=/results
S=/sys/kernel/sched_ext
scxctl stats >$R/none.txt 2>&1; echo $? >$R/none.rc
scxctl stats --json >$R/none.json 2>$R/none.err; echo $? >$R/none_json.rc

# job control on, as in a terminal: without it bash starts background jobs with SIGINT ignored, and
# Python then never turns Ctrl-C into KeyboardInterrupt
set -m
/tmp/scx_simple >$R/simple.log 2>&1 &
simple=$!
for _ in $(seq 1 600); do [ "$(cat $S/root/ops 2>/dev/null)" = simple ] && break; sleep 0.1; done
cat $S/root/ops >$R/simple_ops.txt 2>&1
stress-ng --cpu 2 --timeout 30 >/dev/null 2>&1 &
load=$!
sleep 2
scxctl stats --json --interval 1 >$R/simple.json 2>$R/simple.err; echo $? >$R/simple.rc

# the scheduler leaves while `stats -f` reads every second: one document says so, then no scheduler
scxctl stats -f --json --interval 1 >$R/follow.jsonl 2>$R/follow.err &
follow=$!
for _ in $(seq 1 300); do [ "$(wc -l <$R/follow.jsonl)" -ge 2 ] && break; sleep 0.1; done
kill -INT $simple; wait $simple; echo $? >$R/simple_exit.rc
n=$(wc -l <$R/follow.jsonl)
for _ in $(seq 1 300); do [ "$(wc -l <$R/follow.jsonl)" -ge $((n + 2)) ] && break; sleep 0.1; done
kill -INT $follow; wait $follow; echo $? >$R/follow.rc
kill $load 2>/dev/null; wait $load
set +m
exit 0
"""


@pytest.fixture(scope="module")
def guest(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        simple = anchors.build()["scx_simple"]
    except VMError as exc:
        pytest.fail(f"building scx_simple from the guest kernel's source failed: {exc.message}")
    script = tmp_path_factory.mktemp("stats") / "stats.sh"
    script.write_text(SCRIPT)
    res = vm.run("bash /tmp/stats.sh", timeout=600,
                 copy=[(str(script), "/tmp/stats.sh"), (str(simple), "/tmp/scx_simple")])
    assert res.returncode == 0, f"guest run failed ({res.message}): {res.output[-3000:]}"
    return res.results


def _doc(text: str) -> dict[str, Any]:
    try:
        return json.loads(text)
    except ValueError:
        pytest.fail(f"not one JSON document: {text[-1500:]}")


def test_nothing_loaded_says_so_and_exits_0(guest: Path) -> None:
    assert read(guest, "none.rc").strip() == "0", read(guest, "none.txt")
    assert "no sched_ext scheduler is loaded" in read(guest, "none.txt")
    assert read(guest, "none_json.rc").strip() == "0", read(guest, "none.err")
    doc = _doc(read(guest, "none.json"))
    assert (doc["loaded"], doc["scheduler"], doc["pyland"]) == (False, None, None), doc
    assert doc["sched_ext"]["state"] == "disabled", doc["sched_ext"]


def test_an_external_scheduler_shows_the_kernels_event_counters(guest: Path) -> None:
    assert read(guest, "simple_ops.txt").strip() == "simple", read(guest, "simple.log")
    assert read(guest, "simple.rc").strip() == "0", read(guest, "simple.err")
    doc = _doc(read(guest, "simple.json"))
    assert (doc["loaded"], doc["scheduler"], doc["pyland"]) == (True, "simple", None), doc
    assert doc["sched_ext"]["state"] == "enabled" and doc["sched_ext"]["switch_all"] is True, doc
    events = doc["events"]
    # this kernel (7.3) has root/events; every counter is a count, and a one-second rate was taken
    assert events is not None and events["total"] and all(v >= 0 for v in events["total"].values()), events
    assert events["per_s"] is not None and set(events["per_s"]) == set(events["total"]), events
    assert doc["interval_s"] and doc["interval_s"] >= 1.0, doc["interval_s"]


def test_a_scheduler_that_leaves_between_two_readings(guest: Path) -> None:
    assert read(guest, "simple_exit.rc").strip() == "0", read(guest, "simple.log")
    assert read(guest, "follow.rc").strip() == "0", read(guest, "follow.err")
    assert "Traceback" not in read(guest, "follow.err")
    docs = [_doc(line) for line in read(guest, "follow.jsonl").splitlines() if line.strip()]
    scheds = [d["scheduler"] for d in docs]
    assert scheds[0] == "simple" and scheds[-1] is None, scheds
    left = [d for d in docs if d["exited"]]
    assert len(left) == 1 and left[0]["previous"] == "simple" and left[0]["scheduler"] is None, scheds
    assert left[0]["events"] is None or left[0]["events"]["per_s"] is None, left[0]["events"]
