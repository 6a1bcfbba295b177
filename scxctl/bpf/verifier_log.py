"""Reading the kernel verifier's log: the one-line reason and the tail worth showing a user.

A rejection's log runs to megabytes of instruction trace; the CLI prints one line and a hint, and
doctor a short tail, so both need the complaint picked out of the trace and its statistics.
"""

from __future__ import annotations

import re

LOG_TAIL_LINES = 25

_INSN_LINE = re.compile(r"^\d+: \(")  # "8: (79) r6 = *(u64 *)(r0 +32)" (classic log, column 0)
_STATS_LINE = re.compile(r"^(processed \d+ insns|verification time|stack depth)")
# The verifier's complaint when a kfunc with implicit arguments has no `_impl` entry in kernel BTF
_MISSING_IMPL = re.compile(r"cannot find function (?P<name>\w+?)_impl in BTF")


def _split_log(log: str) -> tuple[list[str], list[str], list[str]]:
    """(instruction trace, the verifier's complaint after the last instruction, what follows).

    The complaint ends at the first blank line: kernels >= 7.x append an extended diagnostic
    ("Verification failed: ...", "Reason:", source and instruction context) after one."""
    lines = log.splitlines()
    last = max((i for i, line in enumerate(lines) if _INSN_LINE.match(line)), default=-1)
    end = next((j for j in range(last + 1, len(lines)) if not lines[j].strip()), len(lines))
    return lines[: last + 1], lines[last + 1 : end], lines[end:]


def verifier_reason(log: str) -> str:
    """The verifier's complaint in one line: the lines after the last instruction, minus statistics."""
    _, complaint, _ = _split_log(log)
    return "; ".join(line.strip() for line in complaint if line.strip() and not _STATS_LINE.match(line))


def log_tail(log: str, lines: int = LOG_TAIL_LINES) -> str:
    """What to show of a verifier log: the end of the instruction trace and the complaint, plus the
    summary of a newer kernel's extended diagnostic (up to its source context)."""
    trace, complaint, extra = _split_log(log)
    kept = [line for line in trace + complaint if line.strip()][-lines:]
    if any(line.startswith("Verification failed") for line in extra):
        start = next(i for i, line in enumerate(extra) if line.startswith("Verification failed"))
        summary = []
        for line in extra[start:]:
            if line.startswith(("At:", "Causal path:", "Suggestion:")):
                break
            summary.append(line)
        kept += ["", *summary]
    return "\n".join(kept).rstrip()


def kfunc_missing_impl(log: str) -> str | None:
    """The kfunc the verifier could not call because kernel BTF lacks its `NAME_impl` entry, if that is
    the complaint: a defect of the kernel build rather than of the program, so it is told apart."""
    m = _MISSING_IMPL.search(log)
    return m["name"] if m else None
