"""scxctl.pyland.stats_log: the stats lines as the JSON logger writes them, told from other events."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from scxctl import log
from scxctl.pyland.stats_log import STATS_EVENT, stats_lines


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    yield
    log.configure("json", logging.INFO)


def test_the_logged_stats_lines_come_back_in_order_among_other_output() -> None:
    stream = io.StringIO()
    log.configure("json", logging.INFO, stream)
    logger = log.get_logger("scxctl.pyland")
    logger.info("pyland enabled", ops="pyland")
    logger.info(STATS_EVENT, nr_queued=1, consumed=1)
    stream.write("scxctl: a plain line\n")
    logger.info(STATS_EVENT, nr_queued=5, consumed=4)
    lines = stats_lines(stream.getvalue())
    assert [(s["nr_queued"], s["consumed"]) for s in lines] == [(1, 1), (5, 4)]
    assert all(s["logger"] == "scxctl.pyland" and "timestamp" in s for s in lines)


def test_events_that_only_look_like_it_are_not_stats_lines() -> None:
    text = '{"event": "pyland statistics"}\n{"msg": "pyland stats"}\n'
    assert stats_lines(text) == []
