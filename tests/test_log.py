"""scxctl.log: JSON or console rendering, levels, the rotating file, idempotent reconfiguration."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from scxctl import log


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    yield
    log.configure("json", logging.INFO)  # later tests' records reach their own captured stderr


def test_json_lines_with_level_logger_and_timestamp() -> None:
    stream = io.StringIO()
    log.configure("json", logging.INFO, stream)
    log.get_logger("scxctl.test").info("hello", answer=42)
    (entry,) = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert entry["event"] == "hello" and entry["answer"] == 42
    assert entry["level"] == "info" and entry["logger"] == "scxctl.test"
    assert entry["timestamp"].endswith("Z")


def test_json_events_are_read_back_among_plain_output_and_a_line_cut_short() -> None:
    stream = io.StringIO()
    log.configure("json", logging.INFO, stream)
    log.get_logger("scxctl.test").info("first", n=1)
    stream.write("scxctl: a plain line\n[1, 2]\n")
    log.get_logger("scxctl.test").info("second", n=2)
    stream.write('{"event": "third", "n"\n')  # still being written
    assert [(e["event"], e["n"]) for e in log.json_events(stream.getvalue())] == [("first", 1), ("second", 2)]


def test_default_stream_follows_sys_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest gives each test its own sys.stderr and closes the last one: records must follow it.
    first = io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    log.configure("json", logging.INFO)
    log.get_logger("scxctl.test").info("one")
    first.close()
    second = io.StringIO()
    monkeypatch.setattr("sys.stderr", second)
    log.get_logger("scxctl.test").info("two")
    assert [json.loads(line)["event"] for line in second.getvalue().splitlines()] == ["two"]


def test_auto_on_a_non_tty_is_json() -> None:
    stream = io.StringIO()
    log.configure("auto", logging.INFO, stream)
    log.get_logger().warning("w")
    assert json.loads(stream.getvalue())["event"] == "w"


def test_auto_on_a_tty_is_console() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    log.configure("auto", logging.INFO, stream)
    log.get_logger().info("to a person", k="v")
    text = stream.getvalue()
    assert "to a person" in text and "k" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


@pytest.mark.parametrize(("verbose", "quiet", "level"), [(0, False, logging.INFO), (1, False, logging.DEBUG),
                                                         (2, True, logging.WARNING)])
def test_level_for(verbose: int, quiet: bool, level: int) -> None:
    assert log.level_for(verbose, quiet) == level


def test_level_filters() -> None:
    stream = io.StringIO()
    log.configure("json", logging.WARNING, stream)
    logger = log.get_logger()
    logger.info("dropped")
    logger.debug("dropped too")
    logger.error("kept")
    assert [json.loads(line)["event"] for line in stream.getvalue().splitlines()] == ["kept"]


def test_reconfigure_does_not_duplicate_handlers() -> None:
    stream = io.StringIO()
    for _ in range(3):
        log.configure("json", logging.INFO, stream)
    log.get_logger().info("once")
    assert len(stream.getvalue().splitlines()) == 1


def test_file_handler_writes_json_and_rotates(tmp_path: Path) -> None:
    logfile = tmp_path / "sub" / "daemon.log"
    log.configure("console", logging.INFO, io.StringIO(), file=logfile, file_max_bytes=400, file_backups=2)
    logger = log.get_logger("scxctl.daemon")
    for i in range(20):
        logger.info("tick", i=i)
    entries = [json.loads(line) for line in logfile.read_text().splitlines()]
    assert entries and all(e["event"] == "tick" for e in entries)
    assert (tmp_path / "sub" / "daemon.log.1").exists()
    assert not (tmp_path / "sub" / "daemon.log.3").exists()


def test_stdlib_loggers_go_through_the_same_renderer() -> None:
    stream = io.StringIO()
    log.configure("json", logging.INFO, stream)
    logging.getLogger("some.library").warning("from stdlib %s", "logging")
    entry = json.loads(stream.getvalue())
    assert entry["event"] == "from stdlib logging" and entry["level"] == "warning"
