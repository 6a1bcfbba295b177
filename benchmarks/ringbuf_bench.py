"""Ring buffer cost per record: our mmap reader/writer vs libbpf's own calls through ctypes.

    .venv/bin/python -m benchmarks.ringbuf_bench [--rounds N] [--batch N] [--json]

Same maps, same record counts, same record formats (pyland's 80-byte task and 48-byte decision),
measured side by side in one run, alternating the two backends every round so that CPU frequency
and cache effects hit both alike:

- consumer: bpf/tests/ringbuf_test.bpf.o's `produce` fills the RINGBUF with `--batch` records
  (untimed), then one backend reads them all; timed is only the read: mmap `read_batch` vs
  libbpf `ring_buffer__consume(_n)` calling a Python callback per record (which does the same
  unpack-and-append). Target: mmap >= 5x cheaper per record.
- producer: one backend writes `--batch` decisions into the USER_RINGBUF (timed), then the BPF
  `drain` program empties it (untimed): mmap `write` vs `user_ring_buffer__reserve` + pack +
  `__submit`.

Needs root and `make -C bpf/tests`. gc is disabled while timing (as in the scheduler loop).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from scxctl.bpf.libbpf import BpfObject
from scxctl.bpf.ringbuf import Reader, Writer, open_reader, open_writer, stride
from scxctl.pyland.records import DECISION, TASK

ROOT = Path(__file__).resolve().parent.parent
OBJ = ROOT / "bpf" / "build" / "tests" / "ringbuf_test.bpf.o"
RING_SIZE = 16384
PRODUCE_ARGS = struct.Struct("=IIIIQ")
DRAIN_ARGS = struct.Struct("=II")


def consume_ns(reader: Reader, n: int, out: list[tuple[object, ...]]) -> int:
    out.clear()
    t0 = time.perf_counter_ns()
    got = 0
    while got < n:
        got += reader.read_batch(TASK, out, 4096)
    dt = time.perf_counter_ns() - t0
    assert got == n and len(out) == n, (got, len(out))
    return dt


def produce_ns(writer: Writer, n: int) -> int:
    w = writer.write
    t0 = time.perf_counter_ns()
    for i in range(n):
        if not w(DECISION, i, -1, 0, 1_000_000, i, i, i):
            raise SystemExit(f"user ring full after {i} records: lower --batch")
    return time.perf_counter_ns() - t0


def run(rounds: int, batch: int) -> dict[str, float]:
    subprocess.run(["make", "-s", "-C", str(ROOT / "bpf" / "tests")], check=True)
    if batch * stride(TASK.size) > RING_SIZE or batch * stride(DECISION.size) > RING_SIZE:
        raise SystemExit(f"--batch {batch} does not fit the {RING_SIZE}-byte test rings")
    times: dict[str, list[int]] = {"mmap_read": [], "libbpf_read": [], "mmap_write": [], "libbpf_write": []}
    with BpfObject.open(OBJ) as obj:
        obj.load()
        produce, drain = obj.program("produce"), obj.program("drain")
        ring_fd, uring_fd = obj.map("ring").fd, obj.map("uring").fd
        readers = {"mmap": open_reader(ring_fd, "mmap"), "libbpf": open_reader(ring_fd, "libbpf")}
        writers = {"mmap": open_writer(uring_fd, "mmap"), "libbpf": open_writer(uring_fd, "libbpf")}
        fill: Callable[[], int] = lambda: produce.test_run(PRODUCE_ARGS.pack(batch, TASK.size, 0, 0, 0))  # noqa: E731
        empty: Callable[[], int] = lambda: drain.test_run(DRAIN_ARGS.pack(0, 0))  # noqa: E731
        out: list[tuple[object, ...]] = []
        gc.collect()
        gc.disable()
        try:
            for r in range(rounds + 1):  # round 0 warms up both paths and is not counted
                for name in ("mmap", "libbpf") if r % 2 else ("libbpf", "mmap"):
                    fill()
                    dt = consume_ns(readers[name], batch, out)
                    if r:
                        times[f"{name}_read"].append(dt)
                    dt = produce_ns(writers[name], batch)
                    empty()
                    if r:
                        times[f"{name}_write"].append(dt)
        finally:
            gc.enable()
            for x in (*readers.values(), *writers.values()):
                x.close()
    per = {k: statistics.median(v) / batch for k, v in times.items()}
    return {
        "records_per_batch": batch,
        "rounds": rounds,
        "read_ns_per_record_mmap": per["mmap_read"],
        "read_ns_per_record_libbpf": per["libbpf_read"],
        "read_speedup": per["libbpf_read"] / per["mmap_read"],
        "write_ns_per_record_mmap": per["mmap_write"],
        "write_ns_per_record_libbpf": per["libbpf_write"],
        "write_speedup": per["libbpf_write"] / per["mmap_write"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200, help="timed rounds per backend (median reported)")
    ap.add_argument("--batch", type=int, default=150, help="records per round (<= 186 for the 16 KiB ring)")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = ap.parse_args(argv)
    res = run(args.rounds, args.batch)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"ring buffer cost per record ({res['records_per_batch']} records/batch, median of "
          f"{res['rounds']} rounds, backends alternated)")
    print(f"  consume 80 B tasks:     mmap {res['read_ns_per_record_mmap']:8.1f} ns   libbpf callback "
          f"{res['read_ns_per_record_libbpf']:8.1f} ns   -> mmap {res['read_speedup']:.1f}x cheaper"
          " (target >= 5x)")
    print(f"  produce 48 B decisions: mmap {res['write_ns_per_record_mmap']:8.1f} ns   libbpf reserve/submit "
          f"{res['write_ns_per_record_libbpf']:8.1f} ns   -> mmap {res['write_speedup']:.1f}x cheaper")
    return 0


if __name__ == "__main__":
    sys.exit(main())
