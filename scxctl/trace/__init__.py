"""Kernel-side measurements with bcc: wake-up to run latency (`scxctl trace`, `scxctl bench --trace`)."""
