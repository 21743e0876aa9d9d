"""The one interface every probe target implements, and `open_target`, which picks one.

In the style of pip-audit's `_dependency_source/interface.py`: a small protocol, with interchangeable
implementations beside it (`filesystem.FilesystemTarget`, `s3.S3Target`, `cluster.HostsTarget`). The CLI
parses its flags into one `TargetSpec`, asks `open_target` for the target, and calls `run` or `clean`; it
never tells the kinds apart itself, and neither does the renderer (the profile records `target_kind`).

Adding a target: a module beside these with a class that has `kind`, `plan`, `estimated_seconds`, `run`
and `clean`, a kind in `TargetKind` (profile.py), and one branch in `open_target`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ckplan.profile import TargetKind

if TYPE_CHECKING:
    from ckplan.probe.base import Progress
    from ckplan.probe.clean import CleanResult
    from ckplan.profile import StorageProfile
    from ckplan.sizing.plan import CheckpointPlan


@dataclass(frozen=True)
class S3Options:
    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    part_bytes: int | None = None  # None: the S3 target's default part size
    timeout_s: float = 30.0


@dataclass(frozen=True)
class TargetSpec:
    """What to probe or clean, parsed: a directory, s3://bucket/prefix, or a directory as many hosts see it."""

    path: str
    preset: str = "default"
    writers: int | None = None
    plan: CheckpointPlan | None = None
    scale: float = 1.0
    max_bytes: int | None = None  # the filesystem target's byte budget
    name: str | None = None  # the profile's name (--save)
    calibrate: bool = True  # measure this machine's serialisers (filesystem target, PyTorch installed)
    hosts: str | None = None  # host[:port],… as given (--hosts), parsed by the hosts target
    hosts_file: Path | None = None  # one host[:port] per line (--hosts-file)
    s3: S3Options = field(default_factory=S3Options)


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
