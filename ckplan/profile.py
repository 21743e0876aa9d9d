"""StorageProfile: what a storage target sustains for checkpoint writes.

One shape for every target: a local or shared filesystem probed with fio, an
object store probed with ckplan's own client, many hosts probed at once, or a
built-in class of typical figures. `recommend` reads only this model.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ckplan.frameworks.layout import WritePath
from ckplan.schema import Bytes, Finite, Hosts, Int, Model, PerSecond, PositiveSeconds, Rate, Seconds, Writers
from ckplan.units import MAX_BYTES
from ckplan.version import __version__

SCHEMA_VERSION = 2  # 2: a curve per write path (buffered, direct), the replay's method, this machine's calibration
# what kind of target produced a profile: a directory (fio), an object store, many hosts at once, or a built-in class
TargetKind = Literal["filesystem", "s3", "hosts", "builtin"]


class Spread(Model):
    """Median of repeats, with the min and max, as hyperfine reports them."""

    median: Finite
    min: Finite
    max: Finite
    repeats: Int = Field(1, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _ordered(self) -> Spread:
        if not self.min <= self.median <= self.max:
            raise ValueError(f"min {self.min:g} ≤ median {self.median:g} ≤ max {self.max:g} does not hold")
        return self

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        ordered = sorted(values)
        n = len(ordered)
        median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
        return cls(median=median, min=ordered[0], max=ordered[-1], repeats=n)

    def contains(self, value: float) -> bool:
        """The value lies between the fastest and the slowest of two or more repeats: inside their own noise."""
        return self.repeats > 1 and self.min <= value <= self.max

    @property
    def relative_range(self) -> float:
        return (self.max - self.min) / self.median if self.median else 0.0


class BandwidthPoint(Model):
    writers: Writers  # concurrent writers (or, on a read curve, readers) per host
    hosts: Hosts = 1
    bytes_per_s: Rate  # median over repeats, summed over writers (and hosts)
    spread: Spread | None = None


class SmallFiles(Model):
    files_per_s: PerSecond
    ops_per_s: PerSecond  # create + write + fsync + close
    file_bytes_min: Bytes
    file_bytes_max: Bytes
    writers: Writers
    spread: Spread | None = None

    @model_validator(mode="after")
    def _ordered(self) -> SmallFiles:
        if self.file_bytes_min > self.file_bytes_max:
            raise ValueError(f"file_bytes_min {self.file_bytes_min:,} exceeds file_bytes_max {self.file_bytes_max:,}")
        if self.ops_per_s < self.files_per_s:  # a file is at least one operation (an object: its PUT)
            raise ValueError(f"ops_per_s {self.ops_per_s:g} is below files_per_s {self.files_per_s:g}")
        return self


class Latency(Model):
    p50_s: Seconds
    p99_s: Seconds
    p999_s: Seconds
    mean_s: Seconds | None = None
    samples: Int | None = Field(None, ge=1)

    @classmethod
    def of(cls, samples_s: list[float]) -> Latency:
        """From timed samples, in seconds: nearest-rank percentiles (the rank rounded down, as fio reports them)."""
        ordered = sorted(samples_s)

        def at(p: float) -> float:
            return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

        return cls(
            p50_s=at(50), p99_s=at(99), p999_s=at(99.9), mean_s=sum(ordered) / len(ordered), samples=len(ordered)
        )

    @model_validator(mode="after")
    def _ordered(self) -> Latency:
        if not self.p50_s <= self.p99_s <= self.p999_s:
            raise ValueError(f"p50_s {self.p50_s:g} ≤ p99_s {self.p99_s:g} ≤ p999_s {self.p999_s:g} does not hold")
        return self


class Replay(Model):
    """Wall time of one node's share of a plan, written as the framework would."""

    # "framework saver": the plan's own serialiser (torch.save, safetensors, DCP) in one process per writer;
    # "raw bytes": ckplan's writer through the plan's write path, its serialiser time added from the calibration
    method: Literal["framework saver", "raw bytes"] = "raw bytes"
    write_path: WritePath = "buffered"
    seconds: PositiveSeconds  # median over repeats, at the replayed scale
    bytes: Annotated[Int, Field(ge=1, le=MAX_BYTES)]  # bytes written at the replayed scale
    files: Int = Field(ge=1)
    writers: Writers
    scale: Annotated[Finite, Field(gt=0, le=1)]  # 1.0 = full size
    plan_fingerprint: str  # identifies the plan (ckplan.sizing.plan.CheckpointPlan.fingerprint)
    # fixed per-save cost (DCP coordination) + the rest × bytes(full)/bytes(scaled): bandwidth-bound extrapolation,
    # plus, for raw bytes, the busiest writer's serialisation at full size
    full_scale_seconds: PositiveSeconds
    fixed_seconds: Seconds = 0.0  # the part not scaled by bytes
    serialize_seconds: Seconds = 0.0  # raw bytes only: the serialiser time added at full scale
    spread: Spread | None = None
    nodes: Hosts = 1  # how many of the plan's nodes it wrote at once: a multi-host replay writes one node per host

    @model_validator(mode="after")
    def _consistent(self) -> Replay:
        # each writer wrote a file of its own, of at least one byte (sizing.plan.scaled_file_bytes)
        if self.writers > self.files:
            raise ValueError(f"writers {self.writers} exceeds files {self.files}: each writer writes a file")
        if self.bytes < self.files:
            raise ValueError(f"bytes {self.bytes} is below files {self.files}: each file holds at least one byte")
        _full_scale(self.method == "framework saver", self.serialize_seconds, "serialize_seconds", self)
        # the full size writes at least the replayed bytes (probe.engine.full_scale_seconds), so takes no less time
        if self.full_scale_seconds < self.seconds * (1 - 1e-9):
            raise ValueError(
                f"full_scale_seconds {self.full_scale_seconds:g} is below seconds {self.seconds:g}, the replayed "
                "scale's time"
            )
        return self


class ReadReplay(Model):
    """Wall time of one node's restore reads of a plan (its restore manifest), read as the framework would, cold."""

    # "framework loader": the plan's own deserialiser (torch.load, safetensors, DCP) in one process per reader;
    # "raw bytes": plain sequential reads of the files, their deserialiser time added from the calibration
    method: Literal["framework loader", "raw bytes"] = "raw bytes"
    seconds: PositiveSeconds  # median over repeats, at the replayed scale
    bytes: Annotated[Int, Field(ge=1, le=MAX_BYTES)]  # bytes read at the replayed scale
    files: Int = Field(ge=1)
    readers: Writers
    scale: Annotated[Finite, Field(gt=0, le=1)]
    plan_fingerprint: str
    full_scale_seconds: PositiveSeconds  # fixed + the rest × bytes(full)/bytes(scaled) (+ deserialisation, raw bytes)
    fixed_seconds: Seconds = 0.0
    deserialize_seconds: Seconds = 0.0  # raw bytes only: the deserialiser time added at full scale
    spread: Spread | None = None
    nodes: Hosts = 1

    @model_validator(mode="after")
    def _consistent(self) -> ReadReplay:
        _full_scale(self.method == "framework loader", self.deserialize_seconds, "deserialize_seconds", self)
        return self


def _full_scale(framework: bool, cpu_seconds: float, cpu_field: str, replay: Replay | ReadReplay) -> None:
    """A replay's full-size time (probe.engine.full_scale_seconds) is its fixed part, plus the rest scaled, plus,
    for raw bytes, the (de)serialiser time at full size; a framework's own run holds that time already."""
    if framework and cpu_seconds:
        raise ValueError(f"{cpu_field} is {cpu_seconds:g} for method {replay.method!r}, whose run holds it: 0")
    floor = replay.fixed_seconds + cpu_seconds
    if replay.full_scale_seconds < floor * (1 - 1e-9):
        raise ValueError(
            f"full_scale_seconds {replay.full_scale_seconds:g} is below fixed_seconds + {cpu_field} ({floor:g}), "
            "which it holds"
        )


class Calibration(Model):
    """This machine's serialiser throughput per writer and DCP's fixed cost per save (`ckplan calibrate`).

    A serialiser writes into /dev/null, so the figure is its own CPU cost (pickling, CRC32, copies) and not
    the write, which the bandwidth curve already counts: measured into memory, a tmpfs save would pay the
    copy twice. DCP's fixed cost is the wall time of a save of a few KiB per rank in a gloo group of
    `dcp_ranks` processes: planning, the gather and scatter, `.metadata`, barriers.
    """

    serialize_bytes_per_s: dict[str, Rate]  # per file format (torch.save, safetensors, dcp), one writer, one core
    # per file format, one reader on one core, from memory: torch.load, safetensors' load_file (pages touched), DCP's
    # per-item torch.load and copy
    deserialize_bytes_per_s: dict[str, Rate] = Field(default_factory=dict)
    serialize_spread: dict[str, Spread] = Field(default_factory=dict)
    deserialize_spread: dict[str, Spread] = Field(default_factory=dict)
    sample_bytes: Annotated[Int, Field(ge=1, le=MAX_BYTES)]  # bytes serialised per run
    tensor_bytes: Annotated[Int, Field(ge=1, le=MAX_BYTES)]  # size of each tensor in the sample
    dcp_fixed_seconds: Seconds | None = None
    dcp_fixed_spread: Spread | None = None
    dcp_ranks: Writers | None = None
    torch_version: str
    safetensors_version: str | None = None
    host: str
    duration_s: Seconds


class JobFile(Model):
    """One fio run of a probe, as `probe --emit-jobs DIR` wrote it (file names relative to `jobs_dir`)."""

    number: int  # its place in the order the runs happened (the files' NNN- prefix)
    files: list[str]  # its job file; one per host for a multi-host run
    phase: str
    figure: str  # the profile figure it produced, or why none (a warm-up, a calibration run)
    raw_fio: Int | None = None  # index of its output in the profile's raw_fio


class Measurement(Model):
    tool: str  # 'fio-3.33', 'ckplan-s3 (boto3 1.x)', 'builtin'
    date: str
    host: str
    preset: str
    duration_s: Seconds
    bandwidth_bytes_per_writer: Annotated[Int, Field(ge=1, le=MAX_BYTES)] | None = None
    runtime_cap_s: Seconds | None = None
    repeats: Int = Field(1, ge=1, le=1_000_000)
    # `probe --emit-jobs DIR`: where every fio run's job file and run.sh went, and what each run produced. Optional
    # fields with defaults: profiles without them read as before, and older ckplans ignore them (schema 2 still)
    jobs_dir: str | None = None
    jobs: list[JobFile] = Field(default_factory=list)


# the phases a probe keeps going without: each one's figure is optional in the profile, and the planner has a stated
# stand-in for it (the named serialiser defaults; the save-time model; the load model)
LatePhase = Literal["calibration", "replay", "read replay"]


class FailedPhase(Model):
    """A late phase of a probe that failed while it ran: the profile keeps the phases measured before it and says
    what it lacks, rather than throwing minutes of measurements away (`ckplan probe` then exits 4)."""

    phase: LatePhase
    error: str  # the failure, in the one line the CLI would have printed
    missing: str  # what the profile lacks because of it, and what stands in for it


# a node's or a pod's name as an agent reports it (Kubernetes' are DNS subdomains, Slurm's host names)
NodeName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]


class HostPlacement(Model):
    """One host a multi-host probe drove: the name it was reached by, the node its agent reported, and the agent's
    pod where it ran in one (Kubernetes), so that runs of one storage from Slurm and Kubernetes compare."""

    host: str
    node: NodeName
    pod: NodeName | None = None


class StorageProfile(Model):
    kind: Literal["ckplan.storage"] = "ckplan.storage"
    schema_version: int = SCHEMA_VERSION
    ckplan_version: str = __version__
    name: str
    source: Literal["measured", "builtin"] = "measured"
    target_kind: TargetKind = "filesystem"  # set by the probe backend that measured it (probe/engine.py)
    target: str
    fs_type: str
    storage_class: str
    mount_point: str | None = None
    mount_options: dict[str, str] = Field(default_factory=dict)
    shared: bool = True  # one target shared by all nodes (NFS, Lustre, S3) or node-local (NVMe, tmpfs)
    hosts: Hosts = 1
    placement: list[HostPlacement] = Field(default_factory=list)  # per host (probe --agent-info-port); else empty
    labels: dict[str, str] = Field(default_factory=dict)  # what the prober said about where it ran (--label)
    direct_io: bool | None = None  # the target accepts O_DIRECT (None: not a file system probe)
    # per host, against writers per host: writes through the page cache with an fsync at the end of each file
    # (object stores: the client's streams), what torch.save, DCP and safetensors get
    buffered_bandwidth: list[BandwidthPoint] = Field(min_length=1)
    direct_bandwidth: list[BandwidthPoint] = Field(default_factory=list)  # O_DIRECT writes; empty where not measured
    # one writer copying into the page cache, no flush: the CPU part of a buffered write, which adds to the
    # writer's serialisation, while the flush to the device runs in the kernel's writeback beside it
    page_cache_write: BandwidthPoint | None = None
    aggregate_bandwidth: list[BandwidthPoint] = Field(default_factory=list)  # against hosts writing at once
    # cold sequential reads of files the probe wrote (their cached pages dropped first), per host against readers
    # per host, and the aggregate against hosts reading at once: what a restart's load gets
    read_bandwidth: list[BandwidthPoint] = Field(default_factory=list)
    aggregate_read_bandwidth: list[BandwidthPoint] = Field(default_factory=list)
    aggregate_limit_bytes_per_s: Rate | None = None  # what the whole shared system sustains, if known
    best_write_bytes_per_s: Rate
    small_files: SmallFiles
    aggregate_files_per_s: PerSecond | None = None  # metadata service limit for a shared system, if known
    fsync_latency: Latency
    sync_write_latency: Latency | None = None
    replay: Replay | None = None
    read_replay: ReadReplay | None = None  # the busiest node's restore reads of a plan (probe --plan)
    calibration: Calibration | None = None
    # late phases that failed (empty: every phase the probe set out to run ran). Optional, so schema 2 still
    failed_phases: list[FailedPhase] = Field(default_factory=list)
    measurement: Measurement
    notes: list[str] = Field(default_factory=list)
    raw_fio: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _kind_of_older_files(cls, data: Any) -> Any:
        """Profiles saved before target_kind was recorded: the kind their fields imply, decided here once."""
        if isinstance(data, dict) and "target_kind" not in data:
            kind = (
                "builtin"
                if data.get("source") == "builtin"
                else "s3"
                if data.get("fs_type") == "s3"
                else "hosts"
                if isinstance(data.get("hosts"), int) and data["hosts"] > 1
                else "filesystem"
            )
            data = {**data, "target_kind": kind}
        return data

    @model_validator(mode="after")
    def _curves_ordered(self) -> StorageProfile:
        """Each curve is sorted by its x with no point twice: interpolate reads them so, and two figures for one
        writer count contradict each other."""
        for name, points, x in (
            ("buffered_bandwidth", self.buffered_bandwidth, "writers"),
            ("direct_bandwidth", self.direct_bandwidth, "writers"),
            ("aggregate_bandwidth", self.aggregate_bandwidth, "hosts"),
            ("read_bandwidth", self.read_bandwidth, "writers"),
            ("aggregate_read_bandwidth", self.aggregate_read_bandwidth, "hosts"),
        ):
            xs = [getattr(p, x) for p in points]
            for i, (a, b) in enumerate(zip(xs, xs[1:], strict=False)):
                if a >= b:
                    why = "twice" if a == b else f"after {x} {a}"
                    raise ValueError(f"{name}[{i + 1}]: {x} {b} comes {why}: give each point once, in rising order")
        if self.placement and len(self.placement) != self.hosts:
            raise ValueError(f"placement names {len(self.placement)} hosts, the profile's hosts are {self.hosts}")
        if any(p.hosts > self.hosts for p in self.aggregate_bandwidth + self.aggregate_read_bandwidth):
            raise ValueError(f"aggregate_bandwidth has a point of more hosts than the profile's hosts {self.hosts}")
        # a replay writes (or reads) one of the plan's nodes per probed host
        for name, replay in (("replay", self.replay), ("read_replay", self.read_replay)):
            if replay is not None and replay.nodes > self.hosts:
                raise ValueError(f"{name}.nodes {replay.nodes} exceeds hosts {self.hosts}: one node per probed host")
        return self

    def curve(self, path: WritePath = "buffered") -> tuple[list[BandwidthPoint], WritePath]:
        """The curve of a write path, and the path it really is: the buffered one where the direct one was not measured."""
        if path == "direct" and self.direct_bandwidth:
            return self.direct_bandwidth, "direct"
        return self.buffered_bandwidth, "buffered"

    def bandwidth_at(self, writers: int, path: WritePath = "buffered") -> float:
        """One node's bandwidth alone at this many writers: the measured curve interpolated, flat beyond it, times
        `alone_factor`."""
        return at_writers(self.curve(path)[0], writers) * self.alone_factor()

    def alone_factor(self, reads: bool = False) -> float:
        """How much faster one host writes (reads) alone than while every probed host does at once. A multi-host
        probe measures its per-host curves with all its hosts at once and keeps the slowest host's figure, so that
        a straggler shows; but a node's share of a shared system is the aggregate model's to give (fewer nodes
        than were probed share it among fewer, and a work-conserving system gives a slow node more once the
        others are done), so the per-node term needs the node alone: the host-scaling run at one host measured
        it. The ratio of that point to the per-host curve at its writers, never below 1; 1 for one host."""
        per_host = self.read_bandwidth if reads else self.buffered_bandwidth
        scaling = self.aggregate_read_bandwidth if reads else self.aggregate_bandwidth
        alone = next((p for p in scaling if p.hosts == 1), None)
        if self.hosts == 1 or alone is None or not per_host:
            return 1.0
        return max(1.0, alone.bytes_per_s / at_writers(per_host, alone.writers))


def at_writers(points: list[BandwidthPoint], writers: float) -> float:
    """A per-host curve at this many writers: interpolated, flat beyond its last point."""
    inside = interpolate([(p.writers, p.bytes_per_s) for p in points], writers)
    return inside if inside is not None else max(p.bytes_per_s for p in points)


def interpolate(points: list[tuple[float, float]], x: float) -> float | None:
    """A measured curve at x: proportional below its first point (fewer writers or hosts share less), linear
    between points, and None beyond the last, where each caller states its own rule (flat for writers on one
    host, planning/scaling.py for more hosts)."""
    points = sorted(points)
    if x <= points[0][0]:
        return points[0][1] * x / points[0][0]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x <= x1:
            return y0 + (x - x0) / (x1 - x0) * (y1 - y0)
    return None
