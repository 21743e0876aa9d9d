"""Is storage the bottleneck in a running job? Save times from logs, and live device counters."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ckplan.diagnose.trend import Diagnosis
    from ckplan.profile import StorageProfile
    from ckplan.sizing.plan import CheckpointPlan


def diagnose_logs(
    logs: list[Path],
    pattern: str | None = None,
    by: str = "save number",
    interval_s: float | None = None,
    plan: CheckpointPlan | None = None,
    profile: StorageProfile | None = None,
    collective_timeout_s: float | None = None,
) -> Diagnosis:
    """Saves from the logs, their trend and a verdict; with a plan and its storage profile, beside ckplan's prediction
    (the sync save time under the default policy). The longest save is warned about where it nears the process
    group's timeout (COLLECTIVE_TIMEOUT_S unless given)."""
    from ckplan.diagnose.logs import MAX_LINE, extract
    from ckplan.diagnose.trend import diagnose

    predicted = None
    if plan is not None and profile is not None:
        from ckplan.planning.policy import Policy
        from ckplan.planning.scenario import sync_scenario

        predicted = sync_scenario(plan, profile, Policy()).save_seconds
    from ckplan.planning.defaults import COLLECTIVE_TIMEOUT_S
    from ckplan.planning.scenario import collective_timeout_warning

    saves, read, long_lines = extract(logs, pattern)
    result = diagnose(saves, [str(p) for p in logs], read, by, interval_s, predicted)
    timeout = COLLECTIVE_TIMEOUT_S if collective_timeout_s is None else collective_timeout_s
    warning = collective_timeout_warning(result.max_s, timeout, "the longest save in the logs")
    notes = [f"{long_lines:,} line(s) longer than {MAX_LINE:,} bytes skipped unread"] if long_lines else []
    return result.model_copy(update={"timeout_warning": warning, "notes": notes})
