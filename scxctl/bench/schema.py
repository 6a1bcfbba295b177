"""The JSON report's schema (JSON Schema 2020-12), documented in docs/reference.md.

Bump SCHEMA_ID when a field changes meaning or goes away; adding a field is compatible.
"""

from __future__ import annotations

from typing import Any

SCHEMA_ID = "scxctl.bench/1"

_NUM = {"type": ["number", "null"]}
_INT = {"type": ["integer", "null"]}

LATENCY: dict[str, Any] = {
    "type": "object",
    "required": ["count", "retained", "p50_ns", "p90_ns", "p99_ns", "min_ns", "max_ns", "histogram"],
    "properties": {
        "count": {"type": "integer", "minimum": 0},
        "retained": {"type": "integer", "minimum": 0},  # <= 1024 per semaphore sampled
        "p50_ns": _NUM,
        "p90_ns": _NUM,
        "p99_ns": _NUM,
        "min_ns": _INT,
        "max_ns": _INT,
        "histogram": {"type": "array", "items": {"type": "integer", "minimum": 0}},
    },
}

MEASUREMENT: dict[str, Any] = {
    "type": "object",
    "required": ["iters", "elapsed_s", "counted", "metric"],
    "properties": {
        "iters": {"type": "integer", "minimum": 1},
        "elapsed_s": {"type": "number", "minimum": 0},
        "counted": {"type": "boolean"},
        "metric": _NUM,
        # adaptive_priority
        "unreliable": {"type": "boolean"},
        "fast": LATENCY,
        "slow": LATENCY,
        # fairness
        "cpu_time_s": {
            "type": "object",
            "required": ["min", "p10", "mean", "max"],
            "properties": {k: _NUM for k in ("min", "p10", "mean", "max")},
        },
        "processes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["pinned_cpu", "cpu_time_s"],
                "properties": {"pinned_cpu": _INT, "cpu_time_s": {"type": "number", "minimum": 0}},
            },
        },
    },
}

TEST_RESULT: dict[str, Any] = {
    "type": "object",
    "required": [
        "test",
        "threshold",
        "direction",
        "status",
        "metric",
        "pass",
        "unreliable",
        "error",
        "cpu",
        "overhead",
        "measurements",
        "final",
        "elapsed_s",
    ],
    "properties": {
        "test": {"enum": ["adaptive_priority", "fairness"]},
        "threshold": {"type": "number"},
        "direction": {"enum": ["<", ">="]},
        "status": {"enum": ["pass", "fail", "unreliable", "invalid", "error"]},
        "metric": _NUM,
        "pass": {"type": ["boolean", "null"]},
        "unreliable": {"type": "boolean"},
        "error": {"type": ["string", "null"]},
        "cpu": _INT,
        "overhead": {
            "type": ["object", "null"],
            "required": ["cpu", "round_trips", "wake"],
            "properties": {"cpu": {"type": "integer"}, "round_trips": {"type": "integer"}, "wake": LATENCY},
        },
        "measurements": {"type": "array", "items": MEASUREMENT},
        "final": {"oneOf": [{"type": "null"}, MEASUREMENT]},
        "elapsed_s": _NUM,
        # adaptive_priority: each wake percentile / the default scheduler's in the same report
        "vs_default": {
            "type": ["object", "null"],
            "properties": {
                side: {"type": "object", "properties": {q: _NUM for q in ("p50", "p90", "p99")}}
                for side in ("fast", "slow")
            },
        },
    },
}

SCHEDULER: dict[str, Any] = {
    "type": "object",
    "required": ["name", "kind", "policy", "partial_requested", "command", "expected_ops"],
    "properties": {
        "name": {"type": "string"},
        "kind": {"enum": ["default", "pyland", "external"]},
        "policy": {"type": ["string", "null"]},
        "partial_requested": {"type": "boolean"},
        "command": {"type": ["array", "null"], "items": {"type": "string"}},
        "expected_ops": {"type": ["string", "null"]},
        "pid": _INT,
        "ops": {"type": ["string", "null"]},
        "switch_all": {"type": ["boolean", "null"]},
        "partial": {"type": "boolean"},
        "enable_seq": _INT,
        "sched_ext_state": {"type": ["string", "null"]},
    },
}

REPORT: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "type": "object",
    "required": ["schema", "created", "machine", "options", "runs", "exit_code"],
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "created": {"type": "string"},
        "machine": {
            "type": "object",
            "required": ["kernel", "cpus_online", "online_cpus", "cores", "sched_ext"],
            "properties": {
                "kernel": {"type": "string"},
                "machine": {"type": "string"},
                "cpu_model": {"type": ["string", "null"]},
                "cpus_online": {"type": "integer", "minimum": 1},
                "online_cpus": {"type": "array", "items": {"type": "integer"}},
                "cores": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
                "python": {"type": "string"},
                "scxctl": {"type": "string"},
                "sched_ext": {
                    "type": "object",
                    "required": ["available", "state", "ops"],
                    "properties": {
                        "available": {"type": "boolean"},
                        "state": {"type": ["string", "null"]},
                        "ops": {"type": ["string", "null"]},
                    },
                },
            },
        },
        "options": {
            "type": "object",
            "required": ["tests", "min_time_s", "max_time_s", "cpu", "schedulers"],
            "properties": {
                "tests": {"type": "array", "items": {"enum": ["adaptive_priority", "fairness"]}},
                "min_time_s": {"type": "number", "exclusiveMinimum": 0},
                "max_time_s": {"type": "number", "exclusiveMinimum": 0},
                "cpu": {"type": "integer", "minimum": 0},
                "schedulers": {"type": "array", "items": {"type": "string"}},
                # the native worker that ran the roles (native/scxctl-bench-worker.c)
                "harness": {
                    "type": "object",
                    "required": ["worker", "source_hash"],
                    "properties": {"worker": {"type": "string"}, "source_hash": {"type": ["string", "null"]}},
                },
            },
        },
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["scheduler", "valid", "invalid_reason", "tests"],
                "properties": {
                    "scheduler": SCHEDULER,
                    "valid": {"type": "boolean"},
                    "invalid_reason": {"type": ["string", "null"]},
                    "tests": {"type": "array", "items": TEST_RESULT},
                },
            },
        },
        "exit_code": {"type": "integer"},
    },
}
