"""Example pyland policy in steer mode: classes by program name, by cgroup and by behaviour.

    scxctl run pyland --policy examples/policies/classify.py

The classes are defined once (class_params(), sent to BPF at every attach); observe() then puts each
task in one from its reports, and BPF places every task by its class's parameters without asking:

- INTERACTIVE (1): the programs named in INTERACTIVE_NAMES: a 1 ms slice, which is also the request
  in their deadline, and a deadline 5 ms sooner: they run first among tasks that woke together;
- BACKGROUND (2): the tasks of the cgroups in BACKGROUND_CGROUPS (e.g. a build's slice), and any
  task that ran through a whole report period without sleeping: weight 25 (about nice 6), a 20 ms
  slice, their wake-ups decided here (sync), behind everyone else's, and preempted by any task
  that wakes with an earlier deadline. A hog is known by never sleeping, not by its CPU share: two
  hogs sharing a CPU, on a machine busy with anything else, each get half of it or less;
- everything else stays in class 0: BPF's defaults.

A task is told only when its class changes: its report says which class BPF has for it.
"""

from __future__ import annotations

import os

from scxctl.pyland.policy import (
    NSEC_PER_MSEC,
    PYLAND_CPU_ANY,
    SCX_ENQ_WAKEUP,
    Decision,
    Params,
    Policy,
    PolicyOptions,
    Task,
)

INTERACTIVE_NAMES = frozenset(name.ljust(16, b"\0") for name in (b"Xorg", b"kwin_wayland", b"pipewire"))
BACKGROUND_CGROUPS = ("/sys/fs/cgroup/build.slice", "/sys/fs/cgroup/system.slice/backup.service")
DEFAULT, INTERACTIVE, BACKGROUND = 0, 1, 2


class Classify(Policy):
    name = "classify"

    def __init__(self, options: PolicyOptions) -> None:
        super().__init__(options)
        # a cgroup's id is its directory's inode number (Task.cgroup_id); ones that do not exist are skipped
        self.background_ids = frozenset(os.stat(p).st_ino for p in BACKGROUND_CGROUPS if os.path.isdir(p))
        # a report covers at least one report period (100 ms): a task that slept through none of it
        # and ran at least a slice is a CPU hog (one runnable all along but starved has run less,
        # and is not pushed further back)
        self.busy_ns = options.min_slice_ns
        self.turn = 0
        self.moves = 0
        self.to_background = 0

    def class_params(self) -> dict[int, Params]:
        return {
            DEFAULT: Params(),
            INTERACTIVE: Params(slice_ns=1 * NSEC_PER_MSEC, lag_ns=-5 * NSEC_PER_MSEC),
            BACKGROUND: Params(weight=25, slice_ns=self.options.slice_ns, sync=True, preemptible=True),
        }

    def observe(self, task: Task, params: Params) -> bool:
        # a BACKGROUND task's wake-up comes here before decide(), its record counting that wake-up
        slept = task.nr_wakeups > (1 if task.flags & SCX_ENQ_WAKEUP else 0)
        if task.comm in INTERACTIVE_NAMES:
            cls = INTERACTIVE
        elif task.cgroup_id in self.background_ids or (not slept and task.run_ns >= self.busy_ns):
            cls = BACKGROUND
        else:
            cls = DEFAULT
        if cls == task.class_id:  # the report says what BPF has now
            return False
        self.moves += 1
        self.to_background += cls == BACKGROUND
        params.class_id = cls  # params arrive at the defaults: set what you want, return True
        return True

    def decide(self, task: Task, decision: Decision) -> None:
        """A BACKGROUND task's wake-up (steer mode): BPF's deadline, on every other task's scale; in
        round-trip mode (--round-trip, task.deadline 0) tasks simply take turns."""
        self.turn += 1
        decision.pid = task.pid
        decision.cpu = task.cpu if task.nr_cpus_allowed == 1 else PYLAND_CPU_ANY
        decision.preempt = False
        decision.direct_wake = False
        decision.slice_ns = 0
        decision.deadline = task.deadline or self.turn
        decision.vtime = task.vtime
        decision.enq_cnt = task.enq_cnt

    def stats(self) -> dict[str, int]:
        return {"class_moves": self.moves, "to_background": self.to_background}
