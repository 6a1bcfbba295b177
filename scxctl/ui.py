"""Terminal output shared by the commands: one Rich console for results, one for diagnostics.

Rich costs tens of milliseconds to import, so `out` and `err` are created on first use (PEP 562
module attributes), and `line()` prints without Rich unless the stream is a terminal: short
commands such as `scxctl status` into a pipe never import it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

from scxctl.errors import ScxctlError

if TYPE_CHECKING:
    from rich.console import Console

    out: Console
    err: Console

Part = str | tuple[str, str | None]


def __getattr__(name: str) -> Any:
    if name in ("out", "err"):
        from rich.console import Console

        console = Console(stderr=name == "err", highlight=False)
        globals()[name] = console  # later look-ups find it without coming here
        return console
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _styled(stream: TextIO) -> bool:
    """Whether Rich would style this stream (a terminal, or colour forced as Rich understands it)."""
    return bool(os.environ.get("FORCE_COLOR")) or getattr(stream, "isatty", lambda: False)()


def line(*parts: Part, stderr: bool = False) -> None:
    """One line of human output from plain or (text, style) parts, never read as markup.

    Styled by Rich on a terminal; elsewhere the text is written as is (no wrapping, no Rich import).
    """
    stream = sys.stderr if stderr else sys.stdout
    if not _styled(stream):
        stream.write("".join(p if isinstance(p, str) else p[0] for p in parts) + "\n")
        stream.flush()
        return
    from rich.text import Text

    name = "err" if stderr else "out"
    console: Console = globals().get(name) or __getattr__(name)
    console.print(Text.assemble(*parts))


def print_json(data: Any) -> None:
    """Machine output: plain JSON on stdout, never styled or wrapped by Rich."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def report_error(exc: ScxctlError, prog: str = "scxctl") -> None:
    """The one-line error format every command uses (plus a hint line when there is one)."""
    sys.stderr.write(f"{prog}: error: {exc.message}\n")
    if exc.hint:
        sys.stderr.write(f"{prog}: hint: {exc.hint}\n")
    sys.stderr.flush()
