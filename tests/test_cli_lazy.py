"""The root command list is lazy, and `scxctl status` stays light.

Structural checks, not timings (the timing is benchmarks/status_bench.py): which modules a real
`python -m scxctl ...` process has imported when it exits, whatever the Typer/Click version. (Not
`-X importtime`: it does not report modules loaded through importlib.import_module.)
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
import typer.main
from daemon_fakes import REPO, DaemonEnv, daemon_env
from typer.core import TyperGroup
from typer.testing import CliRunner

from scxctl import ui
from scxctl.cli import COMMANDS, _ScxctlGroup, app, load_commands

# Never on the status path: Typer 0.29's pydantic adapters, the log library (lazy in scxctl.log),
# Rich (only for a terminal), and every command module or library status does not use.
HEAVY = ("pydantic", "typer._adapters", "structlog", "rich", "asyncio")
OTHER_COMMANDS = tuple(sorted({c.module for c in COMMANDS} - {"scxctl.commands.lifecycle"}))
LIBRARIES = ("scxctl.bench", "scxctl.pyland", "scxctl.doctor", "scxctl.bpf", "scxctl.daemon.service")

# `python -m scxctl ARGS`, then the names in sys.modules written to $MODULES_OUT at exit.
_RUN = """
import atexit, json, os, runpy, sys
atexit.register(lambda: open(os.environ["MODULES_OUT"], "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["scxctl", *sys.argv[1:]]
runpy.run_module("scxctl", run_name="__main__", alter_sys=True)
"""


def _imports(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    out = Path(env.get("TMPDIR", "/tmp")) / f"scxctl-modules-{os.getpid()}.json"
    out.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, *args],
        env={**env, "MODULES_OUT": str(out)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    names = set(json.loads(out.read_text()))
    out.unlink()
    assert "scxctl.cli" in names, proc.stderr[-2000:]
    return proc, names


@pytest.fixture(scope="module")
def typer_itself() -> set[str]:
    """What `import typer` loads on its own (Debian's typer 0.15 imports Rich eagerly, for one):
    scxctl cannot avoid those, so they do not count against it. A fixture, not a module constant,
    so that collecting (or deselecting) these tests starts no process."""
    code = "import json, sys, typer, typer.main; print(json.dumps(sorted(sys.modules)))"
    argv = [sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(done.stdout))


def _offenders(names: set[str], prefixes: tuple[str, ...], typer_itself: set[str]) -> list[str]:
    """Modules under `prefixes` that scxctl itself caused to be imported."""
    return sorted(
        n for n in names - typer_itself if any(n == p or n.startswith(p + ".") for p in prefixes)
    )


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonEnv]:
    with daemon_env(tmp_path_factory.mktemp("lazy")) as env:
        env.start()
        yield env


@pytest.mark.parametrize("args", [["status", "--json"], ["status"]], ids=" ".join)
def test_status_against_a_daemon_imports_nothing_heavy(
    d: DaemonEnv, args: list[str], typer_itself: set[str]
) -> None:
    proc, names = _imports(d.env, *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if "--json" in args:
        assert json.loads(proc.stdout)["daemon"]["pid"] > 0  # a real answer from the daemon
    else:
        assert "supervisor: idle" in proc.stdout
    assert "scxctl.daemon.client" in names and "scxctl.commands.lifecycle" in names
    assert _offenders(names, HEAVY + OTHER_COMMANDS + LIBRARIES, typer_itself) == []


def test_status_without_a_daemon_imports_nothing_heavy(tmp_path: Path, typer_itself: set[str]) -> None:
    env = {**os.environ, "SCXCTL_RUNTIME_DIR": str(tmp_path), "SCXCTL_SYSROOT": str(tmp_path / "none")}
    proc, names = _imports(env, "status")
    assert proc.returncode == 6, proc.stderr[-2000:]
    assert proc.stdout.startswith("daemon:     not running (no scxctl daemon answers on ")
    assert _offenders(names, HEAVY + OTHER_COMMANDS + LIBRARIES, typer_itself) == []


def test_root_help_lists_every_command_without_importing_them(typer_itself: set[str]) -> None:
    proc, names = _imports({**os.environ, "COLUMNS": "200"}, "--help")
    assert proc.returncode == 0
    for c in COMMANDS:
        row = next((ln for ln in proc.stdout.splitlines() if ln.strip(" │").startswith(c.name + " ")), "")
        assert c.help in row, (c.name, proc.stdout)
    assert _offenders(names, tuple(c.module for c in COMMANDS) + LIBRARIES, typer_itself) == []


def test_a_commands_own_help_loads_only_its_module(typer_itself: set[str]) -> None:
    proc, names = _imports(dict(os.environ), "bench", "--help")
    assert proc.returncode == 0 and "adaptive-priority" in proc.stdout
    assert "scxctl.commands.bench" in names
    others = tuple(m for m in OTHER_COMMANDS if m != "scxctl.commands.bench")
    assert _offenders(names, others, typer_itself) == []


@pytest.mark.parametrize("module", sorted({c.module for c in COMMANDS}))
def test_the_table_matches_what_each_module_registers(module: str) -> None:
    """A command a module registers but the table lacks would be unreachable; a stale help text
    would make `scxctl --help` disagree with `scxctl CMD --help`."""
    loaded = load_commands(module)
    listed = {c.name: c.help for c in COMMANDS if c.module == module}
    assert set(loaded) == set(listed)
    for name, cmd in loaded.items():
        first_paragraph = " ".join((cmd.help or "").strip().split("\n\n")[0].split())
        assert first_paragraph == listed[name]


def test_root_resolves_every_listed_command_to_the_real_one() -> None:
    root = typer.main.get_command(app)
    ctx = typer.Context(root)
    assert root.list_commands(ctx) == [c.name for c in COMMANDS]
    for c in COMMANDS:
        cmd = root.get_command(ctx, c.name)
        assert cmd is not None and cmd.name == c.name
        assert isinstance(cmd, TyperGroup) or cmd.callback is not None  # the real command, not a stand-in
    assert root.get_command(ctx, "no-such-command") is None


def test_a_group_without_a_table_keeps_its_eager_commands() -> None:
    t = typer.Typer(cls=_ScxctlGroup)

    @t.command()
    def one() -> None:
        typer.echo("one ran")

    @t.command()
    def two() -> None:
        pass

    r = CliRunner().invoke(t, ["one"])
    assert r.exit_code == 0 and r.stdout == "one ran\n"
    root = typer.main.get_command(t)
    assert root.list_commands(typer.Context(root)) == ["one", "two"]  # type: ignore[attr-defined]


def _complete(words: str, cword: int, shell: str = "bash") -> tuple[str, set[str]]:
    env = {**os.environ, "_SCXCTL_COMPLETE": f"complete_{shell}", "COMP_WORDS": words,
           "COMP_CWORD": str(cword), "_TYPER_COMPLETE_ARGS": words}
    proc, names = _imports(env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, names


def test_completion_of_command_names_comes_from_the_table(typer_itself: set[str]) -> None:
    out, names = _complete("scxctl ", 1)
    assert out.split() == [c.name for c in COMMANDS]
    assert _offenders(names, tuple(c.module for c in COMMANDS), typer_itself) == []
    zsh, _ = _complete("scxctl ", 1, "zsh")
    for c in COMMANDS:
        assert f'"{c.name}":"{c.help[:20].replace(chr(39), chr(39) * 2)}' in zsh


@pytest.mark.parametrize(
    ("words", "cword", "expected"),
    [
        ("scxctl st", 1, {"status", "stats", "start", "stop"}),
        ("scxctl bench ", 2, {"adaptive-priority", "fairness", "all", "workload", "list"}),
        ("scxctl status --", 2, {"--json", "--help"}),
        ("scxctl run --pol", 2, {"--policy", "--policy-budget-ms"}),
        ("scxctl --log-format ", 2, {"auto", "console", "json"}),
    ],
)
def test_completion_reaches_into_lazy_commands(words: str, cword: int, expected: set[str]) -> None:
    out, _ = _complete(words, cword)
    assert set(out.split()) == expected


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_ui_line_is_plain_in_a_pipe_and_styled_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """What status prints without Rich must be what Rich would print, minus the styling."""
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stdout", pipe)
    ui.line(("sched_ext", "bold"), " [red]not markup[/red]")
    assert pipe.getvalue() == "sched_ext [red]not markup[/red]\n"
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    # A console made earlier saw no terminal; the one made now is dropped again after the test.
    monkeypatch.setattr(ui, "out", None, raising=False)
    monkeypatch.delattr(ui, "out")
    ui.line(("sched_ext", "bold"), " [red]not markup[/red]")
    assert "\x1b[1msched_ext\x1b[0m [red]not markup[/red]" in terminal.getvalue()
