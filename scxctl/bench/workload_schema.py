"""The JSON report of `scxctl bench workload` (JSON Schema 2020-12), documented in docs/bench-workload.md.

Bump SCHEMA_ID (scxctl.bench.workload) when a field changes meaning or goes away; adding one is compatible.
"""

from __future__ import annotations

from typing import Any

from scxctl.bench.schema import REPORT as BENCH_REPORT
from scxctl.bench.schema import SCHEDULER
from scxctl.bench.workload import SCHEMA_ID

_NUM = {"type": ["number", "null"]}
_INT = {"type": ["integer", "null"]}
_STR = {"type": ["string", "null"]}
_DIRECTION = {"enum": ["higher", "lower", None]}

STATE: dict[str, Any] = {
    "type": "object",
    "required": ["loadavg_1m", "procs_running", "sched_ext_state", "ops", "enable_seq"],
    "properties": {"loadavg_1m": _NUM, "procs_running": _INT, "sched_ext_state": _STR, "ops": _STR,
                   "enable_seq": _INT},
}

RUN: dict[str, Any] = {
    "type": "object",
    "required": ["round", "warmup", "position", "scheduler", "status", "exit_status", "wall_s", "cpu_s",
                 "user_s", "sys_s", "metrics", "missing_metrics", "before", "after", "scheduler_facts",
                 "invalid_reason", "error", "output", "harness_cpu_s", "harness_wakeups"],
    "properties": {
        "round": _INT,  # null for the probe; negative for warm-up rounds
        "warmup": {"type": "boolean"},
        "position": {"type": "integer", "minimum": 0},
        "scheduler": {"type": "string"},
        "status": {"enum": ["ok", "failed", "timeout", "invalid", "error"]},
        "exit_status": _INT,
        "wall_s": _NUM,
        "cpu_s": _NUM,
        "user_s": _NUM,
        "sys_s": _NUM,
        "metrics": {"type": "object", "additionalProperties": {"type": "number"}},
        "missing_metrics": {"type": "array", "items": {"type": "string"}},
        "before": STATE,
        "after": {"oneOf": [{"type": "null"}, STATE]},
        "scheduler_facts": {"oneOf": [{"type": "null"}, SCHEDULER]},
        "invalid_reason": _STR,
        "error": _STR,
        "output": _STR,
        "harness_cpu_s": _NUM,
        "harness_wakeups": _INT,
    },
}

SUMMARY: dict[str, Any] = {
    "type": ["object", "null"],
    "required": ["n", "median", "min", "max", "spread_pct"],
    "properties": {"n": {"type": "integer", "minimum": 1}, "median": {"type": "number"},
                   "min": {"type": "number"}, "max": {"type": "number"}, "spread_pct": _NUM},
}

RATIO: dict[str, Any] = {
    "type": ["object", "null"],
    "required": ["ratio", "ci_low", "ci_high", "n_pairs", "round_ratios"],
    "properties": {"ratio": {"type": "number"}, "ci_low": {"type": "number"}, "ci_high": {"type": "number"},
                   "n_pairs": {"type": "integer", "minimum": 1},
                   "round_ratios": {"type": "array", "items": {"type": "number"}}},
}

REPORT: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "type": "object",
    "required": ["schema", "created", "machine", "options", "schedulers", "harness", "probe", "order", "runs",
                 "metrics", "results", "exit_code"],
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "created": {"type": "string"},
        "machine": BENCH_REPORT["properties"]["machine"],
        "options": {
            "type": "object",
            "required": ["command", "rounds", "warmup", "timeout_s", "user", "keep_output", "metrics"],
            "properties": {
                "command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "rounds": {"type": "integer", "minimum": 1},
                "warmup": {"type": "integer", "minimum": 0},
                "timeout_s": _NUM,
                "user": _STR,
                "keep_output": _STR,
                "metrics": {"type": "array", "items": {
                    "type": "object", "required": ["name", "regex", "direction"],
                    "properties": {"name": {"type": "string"}, "regex": {"type": "string"},
                                   "direction": _DIRECTION}}},
            },
        },
        "schedulers": {"type": "array", "minItems": 1, "items": SCHEDULER},
        "harness": {
            "type": "object",
            "required": ["command", "runs", "wall_s_median", "wall_s_max", "poll_interval_s"],
            "properties": {"command": {"type": "string"}, "runs": {"type": "integer"},
                           "wall_s_median": {"type": "number"}, "wall_s_max": {"type": "number"},
                           "poll_interval_s": {"type": "number"}},
        },
        "probe": {"oneOf": [{"type": "null"}, RUN]},
        "order": {"type": "array", "items": {
            "type": "object", "required": ["round", "warmup", "schedulers"],
            "properties": {"round": {"type": "integer"}, "warmup": {"type": "boolean"},
                           "schedulers": {"type": "array", "items": {"type": "string"}}}}},
        "runs": {"type": "array", "items": RUN},
        "metrics": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["direction", "unit", "source"],
            "properties": {"direction": _DIRECTION, "unit": {"type": "string"},
                           "source": {"type": "string"}}}},
        "results": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["direction", "unit", "source", "schedulers"],
            "properties": {
                "direction": _DIRECTION,
                "schedulers": {"type": "object", "additionalProperties": {
                    "type": "object", "required": ["summary", "values", "vs_first", "verdict"],
                    "properties": {
                        "summary": SUMMARY,
                        "values": {"type": "array", "items": _NUM},  # one per counted round
                        "vs_first": RATIO,
                        "verdict": {"enum": ["better", "worse", "same", "more", "less", None]},
                    }}},
            }}},
        "exit_code": {"type": "integer"},
    },
}
