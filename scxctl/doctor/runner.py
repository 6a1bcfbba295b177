"""Runs the registered checks in order and summarises them."""

from __future__ import annotations

from typing import Any

from scxctl import __version__
from scxctl.doctor import registry
from scxctl.doctor.model import SCHEMA_VERSION, CheckResult, DoctorContext, Status
from scxctl.log import get_logger

log = get_logger("scxctl.doctor")


def run_checks(ctx: DoctorContext | None = None) -> list[CheckResult]:
    ctx = ctx or DoctorContext()
    results: list[CheckResult] = []
    for reg in registry.ordered():
        try:
            result = reg.fn(ctx)
        except Exception as exc:  # a check must yield a result, whatever the machine looks like
            result = CheckResult(
                reg.id,
                reg.title,
                Status.FAIL,
                f"the check itself failed: {type(exc).__name__}: {exc}",
                "report this as a bug in scxctl, with `scxctl doctor --json` output",
            )
            log.debug("doctor check crashed", check=reg.id, exc_info=True)  # traceback only with -v
        log.debug("doctor check", check=result.id, status=result.status.value, finding=result.finding)
        ctx.results[result.id] = result
        results.append(result)
    return results


def summary(results: list[CheckResult]) -> dict[str, int]:
    return {s.value: sum(1 for r in results if r.status is s) for s in Status}


def report(results: list[CheckResult]) -> dict[str, Any]:
    """The `--json` document (schema in man/scxctl.1 and docs/reference.md)."""
    counts = summary(results)
    return {
        "schema": SCHEMA_VERSION,
        "scxctl_version": __version__,
        "ok": counts[Status.FAIL.value] == 0,
        "summary": counts,
        "checks": [r.to_json() for r in results],
    }
