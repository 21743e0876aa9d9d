"""What every probe target shares: presets (time budgets), the progress interface, the writer sweep."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ckplan.profile import StorageProfile
    from ckplan.sizing.plan import CheckpointPlan

MiB = 2**20
SCRATCH_PREFIX = ".ckplan-probe-"  # every probe's scratch directory or object prefix starts so; `clean` looks for it


@dataclass(frozen=True)
class Preset:
    """Time budgets, split over the points and repeats: longer runs per point give steadier figures."""

    name: str
    bytes_per_writer: int  # upper bound per writer for a bandwidth point; the runtime cap usually ends it first
    bandwidth_budget_s: float  # all bandwidth points and repeats together (the filesystem probe: its warm-up too)
    small_files_budget_s: float  # all small-file repeats together
    latency_runtime_s: float  # each of the two latency runs
    repeats: int
    # the filesystem probe's unrecorded bandwidth run before the measured ones (a third of it for small
    # files); S3 and multi-host probes have no warm-up yet
    warm_up_s: float
    small_files_repeats: int

    def point_runtime_s(self, max_writers: int) -> float:
        return round(self.bandwidth_budget_s / (len(writer_counts(max_writers)) * self.repeats), 1)

    @property
    def small_files_runtime_s(self) -> float:
        return self.small_files_budget_s / self.small_files_repeats


PRESETS = {
    "quick": Preset("quick", 256 * MiB, 6.0, 2.0, 1.0, 1, warm_up_s=1.0, small_files_repeats=1),
    "default": Preset("default", 2048 * MiB, 36.0, 12.0, 3.0, 3, warm_up_s=3.0, small_files_repeats=5),
    "thorough": Preset("thorough", 8192 * MiB, 180.0, 40.0, 10.0, 5, warm_up_s=10.0, small_files_repeats=9),
}


class Progress(Protocol):
    """What the probe reports while it runs; the CLI draws it with rich."""

    def phase(self, name: str, budget_s: float) -> None: ...
    def update(self, bytes_written: int, elapsed_s: float) -> None: ...


class Silent:
    def phase(self, name: str, budget_s: float) -> None:
        pass

    def update(self, bytes_written: int, elapsed_s: float) -> None:
        pass


NOISY_RANGE = 0.10  # repeats spanning more than this are flagged: the bar for two probes to agree


def noise_notes(bandwidth, small_files=None, replay=None, direct=None) -> list[str]:
    """Warn, as hyperfine does on outliers, where a figure's own repeats disagree by more than NOISY_RANGE:
    a second probe of such a target can differ by as much, whatever the probe does. `bandwidth` is the
    buffered (or only) curve, `direct` the O_DIRECT one where measured."""
    best = max(bandwidth, key=lambda b: b.bytes_per_s)
    notes = []
    figures = [(f"the {best.writers}-writer {'buffered ' if direct else ''}bandwidth", best.spread)]
    if direct:
        top = max(direct, key=lambda b: b.bytes_per_s)
        figures.append((f"the {top.writers}-writer direct bandwidth", top.spread))
    if small_files is not None:
        figures.append(("the small-file rate", small_files.spread))
    if replay is not None:
        figures.append(("the replay's save time", replay.spread))
    for label, spread in figures:
        if spread is not None and spread.repeats > 1 and spread.relative_range > NOISY_RANGE:
            notes.append(
                f"{label} varied by {spread.relative_range:.0%} across its {spread.repeats} repeats (min…max): "
                "this target is noisy now, and a second probe may differ as much; the median is used "
                "(--thorough runs more, longer repeats)"
            )
    return notes


# every target's note that another live probe shared the target ends so; the CLI repeats such notes on stderr
SHARED_TARGET = "the bandwidth measured here was shared with it: probe again when it is done"


def concurrent_note(others: list[str]) -> str:
    """The note for a probe that found other live probes of its target: each one's scratch location and owner."""
    return f"another probe of this target ran at the same time ({'; '.join(others)}); {SHARED_TARGET}"


def shared_target_warnings(notes: list[str]) -> list[str]:
    """The notes that say another probe ran at the same time, whatever the target."""
    return [n for n in notes if n.endswith(SHARED_TARGET)]


def writer_counts(max_writers: int) -> list[int]:
    counts, w = [], 1
    while w < max_writers:
        counts.append(w)
        w *= 2
    return counts + [max_writers]


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
    emit_jobs: Path | None = None  # write every fio job file and command line that ran here (not S3: it runs no fio)
    hosts: str | None = None  # host[:port],… as given (--hosts), parsed by the hosts target
    hosts_file: Path | None = None  # one host[:port] per line (--hosts-file)
    agent_wait_s: float | None = None  # hosts: wait this long for every agent to answer before probing
    notice: Callable[[str], None] | None = None  # where a target says what it found (the hosts Slurm gave)
    s3: S3Options = field(default_factory=S3Options)


class PreparedTarget:
    """What every probe target shares: it prepares its job once, on first need (every check that can fail runs
    before a byte is written), and runs that job. A target supplies `_prepare` and `_run`, `kind` and `clean`."""

    def __init__(self, spec: TargetSpec):
        self.spec, self.plan = spec, spec.plan
        self._job: Any = None

    def _prepare(self) -> Any:
        raise NotImplementedError

    def _run(self, job: Any, progress: Progress | None) -> StorageProfile:
        raise NotImplementedError

    def prepare(self) -> Any:
        if self._job is None:
            self._job = self._prepare()
        return self._job

    @property
    def estimated_seconds(self) -> float:
        return float(self.prepare().estimated_seconds)

    def run(self, progress: Progress | None = None) -> StorageProfile:
        return self._run(self.prepare(), progress)
