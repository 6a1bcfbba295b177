"""The built-in pyland policies, by the name `--policy NAME` takes."""

from __future__ import annotations

from scxctl.pyland.policies.deadline import DeadlinePolicy
from scxctl.pyland.policies.fifo import FifoPolicy
from scxctl.pyland.policy import Policy

DEFAULT_POLICY = DeadlinePolicy.name

BUILTIN_POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in (DeadlinePolicy, FifoPolicy)}

__all__ = ["BUILTIN_POLICIES", "DEFAULT_POLICY", "DeadlinePolicy", "FifoPolicy"]
