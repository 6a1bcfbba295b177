"""Exit codes of the harness itself, distinct from any code the guest command returns.

They follow timeout(1)'s conventions, so a caller can tell "the command failed" from "the
harness could not run it". Documented in docs/vm.md; never renumber one.
"""

from __future__ import annotations

from enum import IntEnum

from scxctl.errors import ScxctlError


class HarnessCode(IntEnum):
    TIMEOUT = 124  # the guest command ran past --timeout; QEMU was killed
    PANIC = 125  # the guest kernel panicked (seen on the serial console)
    NO_COMMAND = 126  # the guest never reached the command (boot hang, init failure, QEMU died)
    SETUP = 127  # harness set-up error: missing qemu/kernel/image, build or download failure


class VMError(ScxctlError):
    """A harness failure: printed as one line (plus a hint) and mapped to a HarnessCode."""

    def __init__(self, message: str, code: HarnessCode = HarnessCode.SETUP, hint: str | None = None) -> None:
        super().__init__(message, code, hint)
