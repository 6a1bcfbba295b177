"""Entry point of `scxctl` and `python -m scxctl`.

Importing the CLI takes a noticeable moment on a loaded machine; a Ctrl-C in that window (or while
Typer parses the arguments) must end like any other interrupted command: one line, exit 130, no
traceback. Once a command runs, the CLI group handles interrupts itself.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from scxctl.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        from scxctl.errors import ExitCode, ScxctlError
        from scxctl.ui import report_error

        report_error(ScxctlError("interrupted", ExitCode.INTERRUPTED))
        sys.exit(int(ExitCode.INTERRUPTED))


if __name__ == "__main__":
    main()
