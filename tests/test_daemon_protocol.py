"""The control protocol: unit checks of the codec, then fuzzing a live daemon that must keep answering."""

from __future__ import annotations

import contextlib
import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_fakes import DaemonEnv, daemon_env

from scxctl.daemon import protocol
from scxctl.errors import ExitCode, ScxctlError


def test_request_round_trip_and_error_reply_carries_exit_code() -> None:
    req = protocol.parse_request(protocol.request_line("enable", {"mode": "gaming"}, req_id=3))
    assert (req.op, req.args, req.id) == ("enable", {"mode": "gaming"}, 3)
    line = protocol.error_reply(3, ScxctlError("busy", ExitCode.BUSY, hint="h"))
    with pytest.raises(ScxctlError) as exc:
        protocol.parse_reply(line)
    assert (exc.value.code, exc.value.message, exc.value.hint) == (ExitCode.BUSY, "busy", "h")
    assert protocol.parse_reply(protocol.ok_reply(1, {"a": 1})) == {"a": 1}


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"[]",
        b"null",
        b'{"v": 2, "op": "status"}',
        b'{"v": 1, "op": "rm"}',
        b'{"v": 1, "op": "status", "args": []}',
        b"\xff\xfe",
        b"[" * 100000,
    ],
)
def test_invalid_requests_raise_protocol_error(line: bytes) -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_request(line)


def test_random_bytes_never_raise_anything_but_protocol_error() -> None:
    rng = random.Random(1234)
    for _ in range(2000):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80)))
        with contextlib.suppress(protocol.ProtocolError):
            protocol.parse_request(blob)


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonEnv]:
    with daemon_env(tmp_path_factory.mktemp("proto")) as env:
        env.start()
        yield env


def _reply(d: DaemonEnv, payload: bytes) -> dict:
    return json.loads(d.raw(payload))


def test_malformed_requests_get_error_replies(d: DaemonEnv) -> None:
    assert _reply(d, b"hello\n")["error"]["message"].startswith("malformed request")
    wrong = _reply(d, b'{"v": 9, "op": "status", "id": 5}\n')
    assert wrong["error"]["code"] == "USAGE" and "version 9" in wrong["error"]["message"]
    unknown = _reply(d, b'{"v": 1, "op": "format_disk", "id": "x"}\n')
    assert "unknown op" in unknown["error"]["message"] and unknown["id"] == "x"
    bad_arg = _reply(d, b'{"v": 1, "op": "enable", "args": {"mode": 5}}\n')
    assert bad_arg["error"]["code"] == "USAGE"
    assert (
        _reply(d, b'{"v": 1, "op": "enable", "args": {"scheduler": "../../bin/sh"}}\n')["error"]["code"]
        == "USAGE"
    )


def test_random_byte_lines_then_daemon_still_answers(d: DaemonEnv) -> None:
    rng = random.Random(99)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(d.socket))
        f = s.makefile("rwb")
        sent = 0
        for _ in range(200):
            blob = bytes(rng.choice([*range(1, 10), *range(11, 256)]) for _ in range(rng.randrange(1, 200)))
            if not blob.strip():
                continue
            f.write(blob + b"\n")
            f.flush()
            sent += 1
            reply = json.loads(f.readline())
            assert reply["ok"] is False and reply["v"] == 1
        assert sent > 150
    assert d.request("ping")["ok"]


def test_huge_line_is_rejected_and_connection_closed(d: DaemonEnv) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(d.socket))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it may close before we finish
            s.sendall(b"x" * (4 * 1024 * 1024))
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
    assert (
        json.loads(data.splitlines()[0])["error"]["message"]
        == f"request longer than {protocol.MAX_LINE} bytes"
    )
    assert d.request("ping")["ok"]


def test_half_open_connections_do_not_block_others(d: DaemonEnv) -> None:
    held = []
    try:
        for _ in range(100):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(d.socket))
            s.sendall(b'{"v": 1, "op": "sta')  # never finished
            held.append(s)
        t0 = time.monotonic()
        assert d.request("status", timeout=5)["ok"]
        assert time.monotonic() - t0 < 3
        held[0].shutdown(socket.SHUT_WR)  # half-closed: EOF after a partial line
        held[0].settimeout(5)
        assert json.loads(held[0].recv(4096))["error"]["message"].startswith("malformed request")
    finally:
        for s in held:
            s.close()
    assert d.request("ping")["ok"]


def test_many_concurrent_clients_all_answered(d: DaemonEnv) -> None:
    results: list[bool] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(5):
            ok = d.request("status", timeout=20)["ok"]
            with lock:
                results.append(ok)

    threads = [threading.Thread(target=worker) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results.count(True) == 200


def test_pipelined_requests_on_one_connection_answered_in_order(d: DaemonEnv) -> None:
    lines = b"".join(protocol.request_line("ping", req_id=i) for i in range(20))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(d.socket))
        s.sendall(lines)
        f = s.makefile("rb")
        ids = [json.loads(f.readline())["id"] for _ in range(20)]
    assert ids == list(range(20))


def test_disconnect_mid_request_does_not_hurt(d: DaemonEnv, tmp_path: Path) -> None:
    for _ in range(20):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(d.socket))
            s.sendall(protocol.request_line("status"))
            # close without reading the reply
    assert d.request("ping")["ok"]
    assert d.proc is not None and d.proc.poll() is None
