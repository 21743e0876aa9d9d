"""The one interface every probe target implements, and `open_target`, which picks one.

In the style of pip-audit's `_dependency_source/interface.py`: a small protocol, with interchangeable
implementations beside it (`filesystem.FilesystemTarget`, `s3.S3Target`, `cluster.HostsTarget`). The CLI
parses its flags into one `TargetSpec` (probe/base.py, beside the presets it names), asks `open_target`
for the target, and calls `run` or `clean`; it
never tells the kinds apart itself, and neither does the renderer (the profile records `target_kind`).

Adding a target: a module beside these with a class that has `kind`, `plan`, `estimated_seconds`, `run`
and `clean`, a kind in `TargetKind` (profile.py), and one branch in `open_target`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ckplan.probe.base import TargetSpec
from ckplan.profile import TargetKind

if TYPE_CHECKING:
    from ckplan.probe.base import Progress
    from ckplan.probe.clean import CleanResult
    from ckplan.profile import StorageProfile
    from ckplan.sizing.plan import CheckpointPlan


class ProbeTarget(Protocol):
    """A target that can be measured into a StorageProfile and cleaned of what a killed probe left."""

    kind: TargetKind
    plan: CheckpointPlan | None

    @property
    def estimated_seconds(self) -> float:
        """How long `run` will take; preparing for it does every check that can fail before a byte is written."""
        ...

    def run(self, progress: Progress | None = None) -> StorageProfile: ...

    def clean(self, force: bool = False) -> CleanResult: ...


def open_target(spec: TargetSpec) -> ProbeTarget:
    """The target `spec` names: S3 for s3://…, many hosts with hosts given, else a filesystem directory."""
    if spec.path.startswith("s3:"):  # s3://bucket/prefix; malformed ones get the S3 parser's message
        from ckplan.probe.s3 import S3Target

        return S3Target(spec)
    if spec.hosts or spec.hosts_file:
        from ckplan.probe.cluster import HostsTarget

        return HostsTarget(spec)
    from ckplan.probe.filesystem import FilesystemTarget

    return FilesystemTarget(spec)
