"""A policy that misbehaves on purpose, to force pyland's safety paths in the VM tests.

The built-in "deadline" policy until the file $ARM_FILE exists (looked for every 50 ms; loading and
validation see a well-behaved policy), then what PYLAND_TEST_MODE says, in decide() (round-trip
mode) and in observe() (steer mode) alike:

- stuck:    it never returns (writes the time it got stuck to $STUCK_FILE first);
- stuck-observe: as stuck, in observe() only (in steer mode decide() also runs, for sync wake-ups);
- swallow:  as stuck, and swallows every exception, BaseException included;
- slow:     it sleeps SLOW_S per task;
- slow-grant: as slow, and every decision grants direct wake-ups: BPF places the task's next
            wake-ups at once, so a slow decision comes back after its task has woken again;
- unruly:   decide(): tasks named STARVE_COMM get a deadline behind every other task's, forever,
            and tasks named MOB_COMM one behind theirs; every other decision asks for CPU 9999
            and a 10 s slice. observe(): every task gets its own parameters out of range
            (weight 50000, a 1000 s slice, CPU 9999).
"""

from __future__ import annotations

import os
import time

from scxctl.pyland.policies.deadline import DeadlinePolicy
from scxctl.pyland.policy import Decision, Params, PolicyOptions, Task

FAR = 1 << 62


class Misbehave(DeadlinePolicy):
    name = "misbehave"

    def __init__(self, options: PolicyOptions) -> None:
        super().__init__(options)
        self.mode = os.environ.get("PYLAND_TEST_MODE", "")
        self.arm_file = os.environ.get("ARM_FILE", "/tmp/arm")
        self.armed = False
        self.next_look = 0.0
        self.slow_s = float(os.environ.get("SLOW_S", "0.002"))
        self.starve = os.environ.get("STARVE_COMM", "starveme").encode().ljust(16, b"\0")
        self.mob = os.environ.get("MOB_COMM", "").encode().ljust(16, b"\0")
        # Created here, not when the policy gets stuck: creating a file on the results disk can
        # block past the budget under TCG, and the watchdog would fire before the time is written.
        self.stuck_fd = -1
        if self.mode in ("stuck", "swallow", "stuck-observe"):
            stuck_file = os.environ.get("STUCK_FILE", "/tmp/stuck_at")
            self.stuck_fd = os.open(stuck_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def _misbehaving(self, where: str) -> bool:
        """Armed (the file exists) and in a mode that stalls here (in `where`): then stall."""
        if not self.armed:
            now = time.monotonic()
            if now < self.next_look:
                return False
            self.next_look = now + 0.05
            self.armed = os.path.exists(self.arm_file)
            if not self.armed:
                return False
        if self.mode in ("stuck", "swallow") or (self.mode == "stuck-observe" and where == "observe"):
            self._get_stuck()
        elif self.mode in ("slow", "slow-grant"):
            time.sleep(self.slow_s)
        return True

    def observe(self, task: Task, params: Params) -> bool:
        changed = super().observe(task, params)
        if not self._misbehaving("observe") or self.mode != "unruly":
            return changed
        params.own = True
        params.weight, params.slice_ns, params.cpu = 50_000, 1000 * 10**9, 9999
        return True

    def decide(self, task: Task, decision: Decision) -> None:
        super().decide(task, decision)
        if not self._misbehaving("decide"):
            return
        if self.mode == "slow-grant":
            decision.direct_wake = True
        elif self.mode == "unruly":
            if task.comm in (self.starve, self.mob):
                decision.deadline = FAR if task.comm == self.starve else FAR + (1 << 40)
                decision.vtime = task.vtime
            else:
                decision.cpu = 9999
                decision.slice_ns = 10_000_000_000

    def _get_stuck(self) -> None:
        os.write(self.stuck_fd, f"{time.clock_gettime(time.CLOCK_REALTIME):.6f}\n".encode())
        n = 0
        while True:
            if self.mode == "swallow":
                try:
                    while True:
                        n += 1
                except BaseException:  # swallowing everything is the point of this mode
                    continue
            n += 1
