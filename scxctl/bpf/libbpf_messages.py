"""libbpf's own messages (libbpf_set_print): to structlog, and the recent warnings kept.

An errno alone rarely says what went wrong ("No such file or directory" for a struct_ops type the
kernel lacks); libbpf's last warning does, so `scxctl.bpf.errors` adds it to the error it raises.
"""

from __future__ import annotations

import collections
import ctypes
import logging

from scxctl.log import get_logger

# libbpf.h enum libbpf_print_level
_LIBBPF_WARN = 0

PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)

_log = get_logger("scxctl.libbpf")
_stdlib_log = logging.getLogger("scxctl.libbpf")
_recent_warnings: collections.deque[str] = collections.deque(maxlen=20)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]
_libc.vsnprintf.restype = ctypes.c_int


def _on_libbpf_print(level: int, fmt: bytes | None, args: int | None) -> int:
    """libbpf_set_print callback: format the va_list with libc's vsnprintf, hand it to structlog."""
    if fmt is None:
        return 0
    if level != _LIBBPF_WARN and not _stdlib_log.isEnabledFor(logging.DEBUG):
        return 0  # libbpf is chatty at debug level; skip the formatting cost when nobody listens
    buf = ctypes.create_string_buffer(2048)
    n = _libc.vsnprintf(buf, len(buf), fmt, args)  # va_list is passed by pointer on x86-64 and arm64
    text = buf.value.decode("utf-8", "replace").rstrip("\n") if n >= 0 else fmt.decode("utf-8", "replace")
    if level == _LIBBPF_WARN:
        _recent_warnings.append(text)
    _log.debug("libbpf", level=("warn", "info", "debug")[min(level, 2)], msg=text)
    return 0


print_callback = PRINT_FN(_on_libbpf_print)  # module-level reference: libbpf keeps the raw pointer


def forget_warnings() -> None:
    """Called before an operation, so that `last_warning` speaks of that operation only."""
    _recent_warnings.clear()


def last_warning() -> str:
    """libbpf's last specific complaint (not its generic "failed to load object" epilogue)."""
    for text in reversed(_recent_warnings):
        text = text.removeprefix("libbpf: ")
        if not text.startswith(("failed to load object", "failed to load BPF skeleton")):
            return text
    return ""
