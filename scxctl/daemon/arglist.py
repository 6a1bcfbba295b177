"""Arguments a client may add to a scheduler's command line (`args` of enable/switch, the D-Bus
*WithArgs methods).

scx_loader passed a client's arguments to the scheduler unchecked, as many and as long as the client
liked (an audit of it found memory exhaustion through exactly that). Here the count and the length
are capped before any pattern runs, and every argument must fully match a pattern the config allows
for that scheduler and mode; pyland's patterns are built in. A refusal names the rule it broke.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from scxctl.errors import UsageError

MAX_ARGS = 32
MAX_ARG_CHARS = 256

# the options the modes pass to `scxctl run pyland` (modes.py), in --name=value form: one argument
# each, so that no pattern has to allow a bare value
_PYLAND_FIXED = (
    "--builtin-idle",
    "--no-builtin-idle",
    "--slice-us=[1-9][0-9]{0,6}",
    "--slice-min-us=[1-9][0-9]{0,6}",
)


class ArgsRefused(UsageError):
    """A client argument list the allow-list does not admit; `rule` names the rule it broke."""

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(f"{message} (rule: {rule})")
        self.rule = rule


def pyland_patterns(policies: Sequence[str]) -> tuple[str, ...]:
    """pyland's built-in allow-list: the modes' options, and the policies the config lets clients name."""
    names = "|".join(re.escape(p) for p in policies)
    return (f"--policy=(?:{names})", *_PYLAND_FIXED) if policies else _PYLAND_FIXED


@functools.lru_cache(maxsize=256)
def compiled(pattern: str) -> re.Pattern[str]:
    """The compiled pattern; re.error for an invalid one (the config loader reports it)."""
    return re.compile(pattern)


def check_args(args: object, patterns: Sequence[str], where: str) -> tuple[str, ...]:
    """`args` as a tuple when every rule admits it; ArgsRefused naming the first rule broken.

    `where` names the allow-list in messages, e.g. "scx_bpfland in mode auto".
    """
    if not isinstance(args, (list, tuple)):
        raise ArgsRefused("args must be a list of strings", "type")
    if len(args) > MAX_ARGS:
        raise ArgsRefused(f"{len(args)} arguments given", f"at most {MAX_ARGS} arguments")
    for i, arg in enumerate(args, 1):
        if not isinstance(arg, str):
            raise ArgsRefused(f"argument {i} is not a string", "type")
        if len(arg) > MAX_ARG_CHARS:
            raise ArgsRefused(f"argument {i} is {len(arg)} characters long",
                              f"at most {MAX_ARG_CHARS} characters an argument")
        if any(ord(c) < 32 or ord(c) == 127 for c in arg):
            raise ArgsRefused(f"argument {i} contains a control character", "no control characters")
        if not patterns:
            raise ArgsRefused(f"{where} takes no client arguments", f"allowed_args of {where} is empty")
        if not any(compiled(p).fullmatch(arg) for p in patterns):
            raise ArgsRefused(f"argument {i} {arg!r} is not allowed",
                              f"must fully match one of allowed_args of {where}: {', '.join(patterns)}")
    return tuple(args)
