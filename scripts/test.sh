#!/usr/bin/env bash
# Runs the whole test suite: lint, host tests and the VM tests (real sched_ext kernel in QEMU).
# Extra arguments go to pytest, e.g. scripts/test.sh -m 'not vm' for the host-only part.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check scxctl tests tools benchmarks
.venv/bin/python -m pytest "$@"
