"""The packaged figures the planner reads, passed in from the edge: never loaded inside a pure function.

Apart from policy.py so that the CLI, which reads policy.py's defaults for its --help, does not import the
StorageProfile model at start-up.
"""

from __future__ import annotations

from ckplan.planning.compression import CompressionDefault
from ckplan.profile import StorageProfile
from ckplan.schema import Model


class PlanningData(Model):
    """Packaged figures the planner reads, passed in from the edge (`catalog.planning_data()`), never loaded inside:
    the built-in storage classes (staging tiers, faster shared targets) and the compression codec's measured figures."""

    storage_classes: dict[str, StorageProfile]
    codec: CompressionDefault

    def tier(self, name: str) -> StorageProfile:
        return self.storage_classes[name]
