"""What the policy watchdog sleeps on: the BPF heartbeat's word that a policy call is getting old.

Looking at policy_since every quarter budget woke the watchdog thread 40 times a second, busy or
idle, and each wake-up took a CPU from whatever ran there (about half a millisecond of CPU under
TCG). The BPF heartbeat, which runs anyway, submits one record to the `alarms` ring when a call
has run half its budget; the thread sleeps on that ring and on an eventfd that stop() writes.
"""

from __future__ import annotations

import contextlib
import os
import select
import struct

from scxctl.bpf.ringbuf import Reader

ALARM = struct.Struct("=Q")  # the policy_since of the call the heartbeat found old
_BATCH = 16


class PolicyAlarm:
    """The `alarms` ring and a wake-up of our own, behind one blocking wait()."""

    def __init__(self, reader: Reader) -> None:
        self._reader = reader
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._ep = select.epoll()
        self._ep.register(reader.fd, select.EPOLLIN)
        self._ep.register(self._wake_fd, select.EPOLLIN)
        self._out: list[tuple[object, ...]] = []

    def take(self) -> int:
        """The stamp of the newest alarm waiting (0: none), reading every one."""
        out = self._out
        newest = 0
        while self._reader.read_batch(ALARM, out, _BATCH):
            newest = int(out[-1][0])  # type: ignore[call-overload]
            out.clear()
        return newest

    def reset(self) -> None:
        """Forget alarms and wake-ups left from an earlier watch (an earlier attachment's)."""
        self.take()
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._wake_fd)

    def wait(self) -> int:
        """Block until an alarm (its stamp) or wake() (0)."""
        while True:
            if since := self.take():
                return since
            for fd, _ in self._ep.poll():
                if fd == self._wake_fd:
                    return 0

    def wake(self) -> None:
        """End a wait(), now or the next one: the watchdog is stopping."""
        os.eventfd_write(self._wake_fd, 1)

    def close(self) -> None:
        self._ep.close()
        os.close(self._wake_fd)
        self._reader.close()
