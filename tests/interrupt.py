"""Child processes that a test interrupts with SIGINT (Ctrl-C).

A shell starts a background job with SIGINT ignored, and an ignored signal stays ignored across
exec: Python then installs no KeyboardInterrupt handler, and a suite run from a background job saw
every Ctrl-C test's child ignore the signal. Each such child starts with SIGINT at its default.
"""

from __future__ import annotations

import signal


def sigint_default() -> None:
    """preexec_fn for subprocess.Popen: SIGINT back to its default before the child's exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
