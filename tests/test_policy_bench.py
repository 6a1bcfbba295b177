"""benchmarks.policy_bench replays records in the loop's own unpacking order: run it small on the host."""

from __future__ import annotations

import pytest

from benchmarks import policy_bench
from scxctl.pyland.policy import Task
from scxctl.pyland.records import TASK


def test_record_stream_has_one_value_per_task_field() -> None:
    records = policy_bench.record_stream(20, nr_cpus=2)
    assert len(records) == 20
    assert all(len(rec) == len(Task.__slots__) == len(TASK.unpack_from(bytes(TASK.size))) for rec in records)


def test_every_builtin_and_example_policy_replays(capsys: pytest.CaptureFixture[str]) -> None:
    assert policy_bench.main(["--records", "300", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    for name in ("null", "fifo", "deadline", "classify.py", "round_robin.py"):
        assert sum(line.split()[0] == name for line in out.splitlines() if line.strip()) == 2, out
