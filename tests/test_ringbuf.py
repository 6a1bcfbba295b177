"""scxctl.bpf.ringbuf against real BPF_MAP_TYPE_RINGBUF / USER_RINGBUF maps (no sched_ext needed).

bpf/tests/ringbuf_test.bpf.c feeds `ring` (produce) and drains `uring` (drain) when run with
BPF_PROG_TEST_RUN, and records what it did in .bss (struct rt_state, ringbuf_test.h). Every test
runs on both backends: the mmap one (x86-64) and the libbpf one (other architectures).

BUSY records: a BPF program cannot exit holding a reservation (the verifier forces submit or
discard) and user space cannot write a RINGBUF's data area (mapped read-only), so a BUSY record
can never be observed deterministically on a real map. The BUSY path is tested by running the same
RingBufferReader.read_batch over buffers laid out like the map (from_buffers).
"""

from __future__ import annotations

import errno
import json
import platform
import select
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from xml.etree import ElementTree as ET

import pytest

from scxctl.bpf import ringbuf as R
from scxctl.bpf.errors import BpfError
from scxctl.bpf.libbpf import BpfObject

if TYPE_CHECKING:  # tools/ is not copied into the guest, which runs this module too
    from tools.vm.api import VM, VMResult

ROOT = Path(__file__).resolve().parent.parent
OBJ = ROOT / "bpf" / "build" / "tests" / "ringbuf_test.bpf.o"
RING_SIZE = 16384
MAGIC = 0x52425431
TAIL_XOR = 0xA5A5A5A5A5A5A5A5
PRODUCE_ARGS = struct.Struct("=IIIIQ")  # struct rt_produce_args
DRAIN_ARGS = struct.Struct("=II")  # struct rt_drain_args
STATE = struct.Struct("=3Qq9Q")  # head of struct rt_state
STATE_FIELDS = ["produced", "discarded", "full", "drain_ret", "drained", "seq_sum", "value_sum",
                "bytes_sum", "last_seq", "bad_order", "bad_tail", "bad_read", "expect_seq"]

BACKENDS = ["mmap", "libbpf"] if R.mmap_supported() else ["libbpf"]


def build_test_objects() -> None:
    """make -C bpf/tests; in the VM guest (no toolchain) the copied tree already holds the objects."""
    if shutil.which("make"):
        subprocess.run(["make", "-s", "-C", str(ROOT / "bpf" / "tests")], check=True)


def record_fmt(size: int) -> struct.Struct:
    """struct rt_record + filler: what produce() writes for a record of `size` bytes."""
    return struct.Struct(f"=QII{size - 16}s")


def filler(seq: int, n: int) -> bytes:
    return bytes((seq + j) & 0xFF for j in range(n))


def urecord_fmt(size: int) -> struct.Struct:
    """struct rt_urecord + filler + tail: what drain() checks."""
    return struct.Struct(f"=QQ{size - 24}sQ")


def straddles(start: int, n: int, size: int) -> int:
    """How many of `n` records of payload `size`, starting at ring position `start`, wrap the end."""
    pos, count = start, 0
    for _ in range(n):
        if (pos & (RING_SIZE - 1)) + R.HDR_SIZE + size > RING_SIZE:
            count += 1
        pos += R.stride(size)
    return count


class Harness:
    """The loaded test object plus helpers to run its programs and read its counters."""

    def __init__(self, obj: BpfObject) -> None:
        self.obj = obj
        self.bss = obj.map(".bss").initial_value()
        self._produce = obj.program("produce")
        self._drain = obj.program("drain")
        self.ring_fd = obj.map("ring").fd
        self.uring_fd = obj.map("uring").fd

    def produce(self, count: int, size: int, discard_every: int = 0, seq_start: int = 0) -> None:
        assert self._produce.test_run(PRODUCE_ARGS.pack(count, size, discard_every, 0, seq_start)) == count

    def drain(self, limit: int = 0) -> None:
        self._drain.test_run(DRAIN_ARGS.pack(limit, 0))

    def state(self) -> dict[str, int]:
        return dict(zip(STATE_FIELDS, STATE.unpack_from(self.bss), strict=True))


@pytest.fixture(scope="session")
def built() -> Path:
    build_test_objects()
    return OBJ


@pytest.fixture
def h(built: Path) -> Iterator[Harness]:
    with BpfObject.open(built) as obj:
        obj.load()
        yield Harness(obj)


def read_all(reader: R.Reader, fmt: struct.Struct, limit: int = 1 << 20) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    while reader.read_batch(fmt, out, limit):
        pass
    return out


def check_records(out: list[tuple[object, ...]], seqs: list[int], size: int) -> None:
    assert [r[0] for r in out] == seqs
    for seq, rsize, magic, fill in out:
        assert (rsize, magic) == (size, MAGIC)
        assert fill == filler(seq, size - 16), f"record {seq} corrupted"


# --- kernel -> user -------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_records_arrive_in_order_with_their_content(h: Harness, backend: R.Backend) -> None:
    with R.open_reader(h.ring_fd, backend) as reader:
        assert not reader.has_data()
        h.produce(100, 64)
        assert reader.has_data()
        out = read_all(reader, record_fmt(64))
        check_records(out, list(range(100)), 64)
        assert not reader.has_data()
        assert h.state()["produced"] == 100


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrap_around_many_laps(h: Harness, backend: R.Backend) -> None:
    size, per_round, rounds = 200, 50, 40  # 2000 records, about 25 laps of the 16 KiB ring
    fmt = record_fmt(size)
    got: list[tuple[object, ...]] = []
    with R.open_reader(h.ring_fd, backend) as reader:
        for r in range(rounds):
            h.produce(per_round, size, seq_start=r * per_round)
            while reader.read_batch(fmt, got, 7):  # odd batch sizes: the consumer stops anywhere
                pass
        if isinstance(reader, R.RingBufferReader):
            assert reader.consumer_pos == reader.producer_pos == rounds * per_round * R.stride(size)
    check_records(got, list(range(rounds * per_round)), size)
    assert straddles(0, rounds * per_round, size) > 20  # records whose payload crossed the end


@pytest.mark.parametrize("backend", BACKENDS)
def test_discarded_records_are_skipped(h: Harness, backend: R.Backend) -> None:
    with R.open_reader(h.ring_fd, backend) as reader:
        h.produce(40, 48, discard_every=4)
        out = read_all(reader, record_fmt(48))
        check_records(out, [s for s in range(40) if s % 4 != 3], 48)
        assert (h.state()["produced"], h.state()["discarded"]) == (30, 10)
        if isinstance(reader, R.RingBufferReader):
            assert reader.consumer_pos == 40 * R.stride(48)  # discarded slots consumed too


@pytest.mark.parametrize("backend", BACKENDS)
def test_full_ring_fails_reservations_until_consumed(h: Harness, backend: R.Backend) -> None:
    size = 100
    fits = RING_SIZE // R.stride(size)
    with R.open_reader(h.ring_fd, backend) as reader:
        h.produce(300, size)
        st = h.state()
        assert (st["produced"], st["full"]) == (fits, 300 - fits)
        out = read_all(reader, record_fmt(size))
        check_records(out, list(range(fits)), size)
        h.produce(10, size, seq_start=1000)  # room again once the consumer position moved
        assert h.state()["full"] == 300 - fits
        check_records(read_all(reader, record_fmt(size)), list(range(1000, 1010)), size)


@pytest.mark.parametrize("backend", BACKENDS)
def test_limit_keeps_the_rest_for_the_next_batch(h: Harness, backend: R.Backend) -> None:
    fmt = record_fmt(32)
    with R.open_reader(h.ring_fd, backend) as reader:
        h.produce(30, 32)
        out: list[tuple[object, ...]] = [("caller's",)]
        assert reader.read_batch(fmt, out, 10) == 10
        assert out[0] == ("caller's",) and [r[0] for r in out[1:]] == list(range(10))
        if isinstance(reader, R.RingBufferReader):
            assert reader.consumer_pos == 10 * R.stride(32)  # published at the end of the batch
        out.clear()
        assert reader.read_batch(fmt, out, 100) == 20
        assert [r[0] for r in out] == list(range(10, 30))
        assert reader.read_batch(fmt, out, 100) == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_epoll_reports_data(h: Harness, backend: R.Backend) -> None:
    with R.open_reader(h.ring_fd, backend) as reader:
        ep = select.epoll()
        try:
            ep.register(reader.fd, select.EPOLLIN)
            assert ep.poll(0) == []
            h.produce(1, 16)
            assert [ev & select.EPOLLIN for _, ev in ep.poll(1.0)] == [select.EPOLLIN]
            assert len(read_all(reader, record_fmt(16))) == 1
            assert ep.poll(0) == []
        finally:
            ep.close()


def test_short_records_are_counted_not_misread(h: Harness) -> None:
    for backend in BACKENDS:
        with R.open_reader(h.ring_fd, backend) as reader:
            h.produce(3, 16)
            out = read_all(reader, record_fmt(64))  # expects 64 bytes, the records have 16
            assert out == []
            assert reader.short_records == 3  # type: ignore[attr-defined]


def test_reader_and_writer_check_the_map_type(h: Harness) -> None:
    with pytest.raises(BpfError, match="not a ring buffer"):
        R.open_reader(h.uring_fd)
    with pytest.raises(BpfError, match="not a user ring buffer"):
        R.open_writer(h.ring_fd)


def test_factories_fall_back_to_libbpf_off_x86(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert not R.mmap_supported()
    with R.open_reader(h.ring_fd) as reader, R.open_writer(h.uring_fd) as writer:
        assert isinstance(reader, R.LibbpfRingBufferReader)
        assert isinstance(writer, R.LibbpfUserRingBufferWriter)
    with pytest.raises(BpfError, match="x86-64"):
        R.RingBufferReader(h.ring_fd)
    with pytest.raises(BpfError, match="x86-64"):
        R.open_writer(h.uring_fd, "mmap")


# --- BUSY: the parsing loop over synthetic memory laid out like the map ------------------------------


class FakeRing:
    """consumer page, producer page and a double-mapped data area, emulated with bytearrays."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self.cons = bytearray(8)
        self.prod = bytearray(8)
        self.data = bytearray(2 * size)
        self.reader = R.RingBufferReader.from_buffers(
            memoryview(self.cons), memoryview(self.prod), memoryview(self.data), size)
        self.pos = 0

    def _put(self, pos: int, blob: bytes) -> None:
        for k, b in enumerate(blob):
            p = (pos + k) & (self.size - 1)
            self.data[p] = self.data[p + self.size] = b  # both views of the same page

    def add(self, payload: bytes, flags: int = 0) -> int:
        at = self.pos
        self._put(at, struct.pack("=II", len(payload) | flags, 0) + payload)
        self.pos += R.stride(len(payload))
        struct.pack_into("=Q", self.prod, 0, self.pos)
        return at

    def set_flags(self, at: int, payload_len: int, flags: int) -> None:
        self._put(at, struct.pack("=I", payload_len | flags))

    @property
    def consumer_pos(self) -> int:
        return struct.unpack_from("=Q", self.cons)[0]


def test_busy_record_stops_the_batch_until_committed() -> None:
    ring, fmt = FakeRing(), struct.Struct("=Q")
    ring.add(struct.pack("=Q", 1))
    busy_at = ring.add(struct.pack("=Q", 2), R.BUSY_BIT)
    ring.add(struct.pack("=Q", 3))
    out: list[tuple[object, ...]] = []
    assert ring.reader.read_batch(fmt, out, 100) == 1
    assert out == [(1,)]
    assert ring.consumer_pos == busy_at  # stopped at the uncommitted record, not past it
    assert ring.reader.has_data()
    assert ring.reader.read_batch(fmt, out, 100) == 0  # still busy
    ring.set_flags(busy_at, 8, 0)  # the producer commits
    assert ring.reader.read_batch(fmt, out, 100) == 2
    assert out == [(1,), (2,), (3,)] and ring.consumer_pos == ring.pos


def test_synthetic_discard_and_wrapped_record() -> None:
    ring, fmt = FakeRing(), struct.Struct("=Q40s")
    out: list[tuple[object, ...]] = []
    payload = lambda i: struct.pack("=Q40s", i, bytes([i & 0xFF]) * 40)  # noqa: E731
    n = 0
    while ring.pos + R.stride(48) <= ring.size - 64:  # fill up to just before the end
        ring.add(payload(n))
        n += 1
    ring.add(struct.pack("=QQ", 999, 999), R.DISCARD_BIT)
    assert ring.reader.read_batch(fmt, out, 1000) == n
    wrap_at = ring.add(payload(n))  # header before the end, payload across it
    assert (wrap_at & (ring.size - 1)) + 8 < ring.size < (wrap_at & (ring.size - 1)) + 8 + 48
    assert ring.reader.read_batch(fmt, out, 1000) == 1
    assert [r[0] for r in out] == list(range(n + 1))
    assert out[-1] == (n, bytes([n & 0xFF]) * 40)


# --- user -> kernel -------------------------------------------------------------------------------


def write_records(writer: R.Writer, seqs: range, size: int) -> int:
    """Write records (seq, value = 3 * seq, filler, tail) until one does not fit; return how many."""
    fmt = urecord_fmt(size)
    written = 0
    for seq in seqs:
        if not writer.write(fmt, seq, 3 * seq, b"\x5a" * (size - 24), seq ^ TAIL_XOR):
            break
        written += 1
    return written


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernel_drains_what_we_write_in_order(h: Harness, backend: R.Backend) -> None:
    sizes = [24, 32, 40, 64, 100, 256]
    expect_bytes = 0
    with R.open_writer(h.uring_fd, backend) as writer:
        for seq in range(60):
            size = sizes[seq % len(sizes)]
            assert writer.write(urecord_fmt(size), seq, 3 * seq, b"\x00" * (size - 24), seq ^ TAIL_XOR)
            expect_bytes += size
        h.drain()
        st = h.state()
        assert st["drain_ret"] == 60 and st["drained"] == 60
        assert (st["bad_order"], st["bad_tail"], st["bad_read"]) == (0, 0, 0)
        assert st["seq_sum"] == sum(range(60)) and st["value_sum"] == 3 * sum(range(60))
        assert st["bytes_sum"] == expect_bytes and st["last_seq"] == 59
        assert writer.free_bytes() == RING_SIZE  # the kernel consumed everything


@pytest.mark.parametrize("backend", BACKENDS)
def test_full_user_ring_refuses_then_accepts_after_drain(h: Harness, backend: R.Backend) -> None:
    size = 200
    fits = RING_SIZE // R.stride(size)
    with R.open_writer(h.uring_fd, backend) as writer:
        assert write_records(writer, range(1000), size) == fits
        assert writer.free_bytes() == RING_SIZE - fits * R.stride(size)
        assert not writer.write(urecord_fmt(size), 0, 0, b"", 0)  # still full, never blocks
        h.drain(limit=10)
        assert h.state()["drained"] == 10 and h.state()["drain_ret"] == 10
        more = write_records(writer, range(fits, 1000), size)
        assert more == (RING_SIZE - (fits - 10) * R.stride(size)) // R.stride(size)
        h.drain()
        st = h.state()
        total = fits + more
        assert st["drained"] == total and st["last_seq"] == total - 1
        assert (st["bad_order"], st["bad_tail"]) == (0, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_records_straddling_the_wrap(h: Harness, backend: R.Backend) -> None:
    size, per_round, rounds = 200, 60, 20
    with R.open_writer(h.uring_fd, backend) as writer:
        for r in range(rounds):
            seqs = range(r * per_round, (r + 1) * per_round)
            assert write_records(writer, seqs, size) == per_round
            h.drain()
    st = h.state()
    n = rounds * per_round
    assert st["drained"] == n and st["seq_sum"] == sum(range(n))
    assert (st["bad_order"], st["bad_tail"], st["bad_read"]) == (0, 0, 0)
    assert straddles(0, n, size) > 10  # the tail check covers each record that crossed the end


@pytest.mark.parametrize("backend", BACKENDS)
def test_oversized_record_is_e2big(h: Harness, backend: R.Backend) -> None:
    with R.open_writer(h.uring_fd, backend) as writer:
        with pytest.raises(BpfError) as ei:
            writer.write(struct.Struct(f"={RING_SIZE}s"), b"")
        assert ei.value.errno == errno.E2BIG
        # the largest record that fits: header + payload == the whole ring
        assert writer.write(struct.Struct(f"=QQ{RING_SIZE - 8 - 24}sQ"), 0, 5, b"", TAIL_XOR)
        assert writer.free_bytes() == 0
        h.drain()
        assert h.state()["drained"] == 1 and h.state()["value_sum"] == 5
        assert h.state()["bad_tail"] == 0


# --- the same suite in the VM guest: Debian trixie's libbpf 1.5 (ring_buffer__consume_n path) ---------

GUEST_CMD = (
    "cd /opt/scxctl && python3 -c 'import json; from scxctl.bpf import libbpf_api as L; "
    'json.dump({"version": L.libbpf_version(), "consume_n": hasattr(L.lib(), "ring_buffer__consume_n")}, '
    'open("/results/libbpf.json", "w"))\' '
    "&& python3 -m pytest -q -p no:cacheprovider --noconftest -m 'not vm' "
    "tests/test_ringbuf.py tests/test_libbpf.py --junitxml=/results/junit.xml"
)


@pytest.fixture(scope="module")
def guest(vm: VM) -> VMResult:
    """One boot: run this module's and test_libbpf's host tests inside the guest."""
    return vm.run(GUEST_CMD, timeout=1200)


@pytest.mark.vm
@pytest.mark.tcg_single  # nothing timed: the suites' assertions do not need parallel vCPUs
def test_guest_has_libbpf_with_consume_n(guest: VMResult) -> None:
    path = guest.results / "libbpf.json"
    assert path.is_file(), f"{guest.message or 'no libbpf.json'}\n{guest.output[-2000:]}"
    info = json.loads(path.read_text())
    assert tuple(info["version"]) >= (1, 5), info
    assert info["consume_n"] is True  # so LibbpfRingBufferReader used ring_buffer__consume_n there


@pytest.mark.vm
@pytest.mark.tcg_single
def test_ring_and_libbpf_suites_pass_in_the_guest(guest: VMResult) -> None:
    assert guest.returncode == 0, f"{guest.message or ''}\n{guest.output[-4000:]}"
    suite = ET.parse(guest.results / "junit.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    assert counts["tests"] >= 35 and counts["failures"] == counts["errors"] == counts["skipped"] == 0, counts
