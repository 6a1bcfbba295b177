#!/usr/bin/env bash
# Runs the whole test suite: lint, host tests and the VM tests (real sched_ext kernel in QEMU).
# Extra arguments go to pytest, e.g. scripts/test.sh -m 'not vm' for the host-only part.
#
# Without arguments the suite runs as two pytest processes side by side. The longest modules whose
# guests run single-threaded TCG (one host core each, tools.vm.slots), and a short one to even the
# two out, go to the second one; the first runs the host tests, then its own single-threaded
# guests, then the guests that want every core (tests/conftest.py orders them). Two single-threaded
# guests, or one and the host tests, share a 2-core host; a guest with a thread per vCPU still waits
# until it has the host to itself, so a single-threaded guest still running then leaves a core idle
# for as long as it runs. The split gives the second process about as much guest time as the
# first's host tests and its own single-threaded guests take, so that both finish those together.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check scxctl tests tools benchmarks
if [ $# -gt 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi

# the slowest steps of each process, to see where the fresh-clone time goes
TIMES=(--durations=30 --durations-min=15)
SECOND=(tests/test_deb_vm.py tests/test_dbus_vm.py tests/test_daemon_vm.py tests/test_doctor_vm.py)
logs=$(mktemp -d /tmp/scxctl-test.XXXXXX)
.venv/bin/python -m pytest -p no:cacheprovider "${TIMES[@]}" "${SECOND[@]}" >"$logs/second.log" 2>&1 &
second=$!
trap 'kill $second 2>/dev/null || true' EXIT INT TERM

ignore=()
for m in "${SECOND[@]}"; do ignore+=("--ignore=$m"); done
first_rc=0
.venv/bin/python -m pytest "${TIMES[@]}" "${ignore[@]}" 2>&1 | tee "$logs/first.log" || first_rc=$?
second_rc=0
wait $second || second_rc=$?
trap - EXIT INT TERM

echo "=================== second pytest process: ${SECOND[*]} ==================="
cat "$logs/second.log"
summary() {  # the failures and the final line of one process's output
    grep -E '^(FAILED|ERROR) |^=+ .*(passed|failed|error|skipped|no tests ran).* in [0-9.]+s' "$1" || true
}
echo "=================== both processes ==================="
echo "first (exit $first_rc):"
summary "$logs/first.log"
echo "second (exit $second_rc):"
summary "$logs/second.log"
rm -rf "$logs"
[ "$first_rc" -eq 0 ] && [ "$second_rc" -eq 0 ]
