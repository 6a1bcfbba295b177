"""The exit codes users read about are the ones scxctl returns: docs/reference.md's table and the man
page's EXIT STATUS list name every ExitCode, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from scxctl.errors import ExitCode

ROOT = Path(__file__).resolve().parents[1]


def test_reference_table_lists_every_exit_code() -> None:
    section = (ROOT / "docs/reference.md").read_text().split("\n## Exit codes", 1)[1]
    table = section.split("What each command", 1)[0]
    codes = {int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)}
    assert codes == {int(c) for c in ExitCode}


def test_man_page_lists_every_exit_code() -> None:
    section = (ROOT / "man/scxctl.1").read_text().split(".SH EXIT STATUS", 1)[1].split("\n.SH ", 1)[0]
    codes = {int(m) for m in re.findall(r"^\.B (\d+)$", section, re.M)}
    assert codes == {int(c) for c in ExitCode}
