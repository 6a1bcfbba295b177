"""Quantities for people, shared by the commands and the reports libraries render."""

from __future__ import annotations


def fmt_ns(ns: float | None) -> str:
    """A duration for people: 850ns, 12.3us, 4.56ms, 1.20s ("-" when unknown)."""
    if ns is None:
        return "-"
    if ns < 1e3:
        return f"{ns:.0f}ns"
    if ns < 1e6:
        return f"{ns / 1e3:.1f}us"
    if ns < 1e9:
        return f"{ns / 1e6:.2f}ms"
    return f"{ns / 1e9:.2f}s"
