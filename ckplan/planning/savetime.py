"""The save-time model: a plan's bytes and files on a storage profile's measured curve.

Predicted save time (one synchronous save, all writers at once):
  direct writes (O_DIRECT: the writer's thread waits for the device), or no page-cache figure:
  T_bw   = max(S_r + b_r ÷ B(1),                  the busiest writer alone: serialise, then one stream
               S_r + node's bytes ÷ B_node(w),     the node's writers sharing its bandwidth
               total bytes ÷ B_aggregate)          all nodes sharing the system
  buffered writes (through the page cache, fsync at the end):
  T_bw   = max(S_r + b_r ÷ C,                     each writer serialises and copies into the page cache (CPU)
               b_r ÷ B(1), node's bytes ÷ B_node(w), total bytes ÷ B_aggregate)   the flush (device)
           C is one writer's page-cache copy rate (probe, no flush). The kernel's writeback flushes
           dirty pages while the writers still serialise (it starts at 10% of memory dirty), so the
           device's part overlaps the CPU's instead of following it: on the development VM's disk, a
           DCP save of 2.4 GB took 1.66 s where the serialise-then-write sum gave 2.86 s
           (docs/benchmarks.md). On tmpfs the "flush" is the copy itself, and C ≈ B(1).
           B is the profile's curve for the plan's write path: buffered (page cache, fsync at the end:
           torch.save, DCP, safetensors) or direct (O_DIRECT: DeepSpeed FastPersist). B_node(w): per-host
           bandwidth at w writers per node, w the busiest node's writer count; B(1) the one-writer figure;
           B_aggregate: all the plan's nodes at once, planning/scaling.aggregate_estimate (measured, interpolated,
           or extrapolated by a stated model, labelled so). b_r is the busiest writer's bytes and S_r its serialisation
           time: each file's bytes ÷ its format's serialiser throughput per core (torch.save's zip with a
           CRC32 per record; safetensors' copy into its buffer; DCP's per-tensor torch.save; text: none).
           Serialisation and writing run one after the other in a writer's thread, so they add.
  T_coord = a collective save's fixed cost (DCP: plan gather and scatter, .metadata, barriers).
  T_meta = max(busiest node's files ÷ F_node,  all files ÷ F_aggregate)
           F_node: the small-file create+write+fsync+close rate measured on one host.
  T_tail = fsync p99: a synchronous save waits for its slowest writer's last flush.
  T_save = T_coord + T_bw + T_meta + T_tail
The serialiser rates and T_coord come, in this order, from a flag (--serialize-bandwidth), this machine's
calibration in the profile ("measured here"), or the named defaults in policy.py ("default"); every output
says which. A replay of the same plan through the same write path in the profile (probe --plan) is used
instead of the model: it is a direct measurement, extrapolated from its scale by bytes. A replay covers only
the nodes it wrote (`Replay.nodes`): for a plan with more, the save takes the longer of the replay and
T_coord + total bytes ÷ B_aggregate + T_meta + T_tail for all the plan's nodes, and says which binds. A replay of
every node on many hosts whose bytes would cross faster than REPLAY_OVER_AGGREGATE × B_aggregate left a cost
untimed (fio's raw writes through a FUSE client finish before the bytes cross, where the framework's saver's do
not: docs/benchmarks.md, the testbed's small files): the model is used, and a note says why. One host's replay
is ckplan's writer or the framework's saver, and is the save.
See docs/benchmarks.md (issues 7 and 13) for the measurements behind each term.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Literal, TypedDict

from ckplan.errors import InputError
from ckplan.frameworks.layout import WritePath
from ckplan.planning.defaults import DEFAULT_DESERIALIZE_BYTES_PER_S
from ckplan.planning.policy import DEFAULT_DCP_FIXED_S, DEFAULT_SERIALIZE_BYTES_PER_S
from ckplan.planning.scaling import AggregateEstimate, aggregate_estimate
from ckplan.profile import BandwidthPoint, Calibration, ReadReplay, Replay, StorageProfile, at_writers
from ckplan.schema import Model
from ckplan.sizing.plan import CheckpointPlan
from ckplan.sizing.restore import RestoreManifest
from ckplan.units import fmt_duration

FigureSource = Literal["given", "measured here", "default"]
# A replay of every node whose bytes would cross faster than this × the probe's own aggregate bandwidth measured
# something else (the aggregate's repeats spread up to 10% on a steady target: docs/benchmarks.md, the testbed)
REPLAY_OVER_AGGREGATE = 1.2


class MachineFigure(Model):
    """A figure that depends on the machine that saves, and where this one came from."""

    value: float
    source: FigureSource


class MachineFigures(Model):
    serialize_bytes_per_s: dict[str, MachineFigure]  # per file format, one writer on one core
    coordination_seconds: MachineFigure  # a collective save's fixed cost

    def rates(self) -> dict[str, float]:
        return {fmt: f.value for fmt, f in self.serialize_bytes_per_s.items()}

    def describe(self) -> str:
        parts = [f"{fmt} {f.value / 1e9:.3g} GB/s ({f.source})" for fmt, f in self.serialize_bytes_per_s.items()]
        c = self.coordination_seconds
        return (
            "serialisers per writer core: "
            + ", ".join(parts)
            + f"; DCP fixed cost per save {c.value:.3g} s ({c.source})"
        )


def machine_figures(calibration: Calibration | None, given: dict[str, float] | None = None) -> MachineFigures:
    """Serialiser rates and the collective save's fixed cost: a flag, else this machine's calibration, else the default."""
    rates = {fmt: MachineFigure(value=v, source="default") for fmt, v in DEFAULT_SERIALIZE_BYTES_PER_S.items()}
    coord = MachineFigure(value=DEFAULT_DCP_FIXED_S, source="default")
    if calibration is not None:
        rates.update(
            {
                fmt: MachineFigure(value=v, source="measured here")
                for fmt, v in calibration.serialize_bytes_per_s.items()
            }
        )
        if calibration.dcp_fixed_seconds is not None:
            coord = MachineFigure(value=calibration.dcp_fixed_seconds, source="measured here")
    rates.update({fmt: MachineFigure(value=v, source="given") for fmt, v in (given or {}).items()})
    return MachineFigures(serialize_bytes_per_s=rates, coordination_seconds=coord)


def coordination_seconds(plan: CheckpointPlan, machine: MachineFigures) -> float:
    """T_coord: the fixed cost of a collective save (DCP plans, gathers and scatters); its loads pay the same."""
    return machine.coordination_seconds.value if plan.coordinated_save else 0.0


class SaveTime(Model):
    seconds: float
    bandwidth_seconds: float  # includes the busiest writer's serialisation
    serialize_seconds: float = 0.0
    coordination_seconds: float = 0.0
    metadata_seconds: float
    fsync_tail_seconds: float
    node_bandwidth_bytes_per_s: float  # per node at the plan's writers per node, on the write path used
    aggregate_bandwidth_bytes_per_s: float
    aggregate: AggregateEstimate  # how the aggregate was arrived at: measured, interpolated or extrapolated, and how
    write_path: WritePath = "buffered"  # the curve used: the plan's path, or buffered where direct was not measured
    limited_by: Literal["node bandwidth", "aggregate bandwidth", "single writer", "replay"]
    source: Literal["model", "replay"]
    writers_per_node: int
    nodes: int
    machine: MachineFigures | None = None  # serialiser rates and fixed cost used, with their sources
    replay_seconds: float | None = None  # a matching replay's full-scale time, where the profile has one
    replay_nodes: int | None = None  # how many of the plan's nodes that replay wrote
    # the short end of the save time where the probe did not reach saturation (aggregate.unsaturated_bytes_per_s):
    # the save takes from this to `seconds`, which holds the aggregate flat
    shortest_seconds: float | None = None
    notes: list[str] = []

    def span(self) -> str:
        """The save time as shown: one figure, or the range a probe below the knee leaves."""
        if self.shortest_seconds is None:
            return fmt_duration(self.seconds)
        return f"{fmt_duration(self.shortest_seconds)} to {fmt_duration(self.seconds)}"


def writer_loads(
    plan: CheckpointPlan, node: int, serialize_bytes_per_s: dict[str, float]
) -> dict[int, tuple[float, float]]:
    """Rank → (bytes, serialisation seconds) of each writer on `node`."""
    return {
        rank: (
            float(sum(formats.values())),
            sum(b / serialize_bytes_per_s.get(fmt, math.inf) for fmt, b in formats.items()),
        )
        for rank, formats in plan.writer_bytes(node).items()
    }


class SaveOverrides(TypedDict, total=False):
    """What a what-if changes about a save (compressed bytes, merged files): predict_save's keyword overrides."""

    total_bytes: float
    node_bytes: float
    node_files: int
    total_files: int


def predict_save(
    plan: CheckpointPlan,
    profile: StorageProfile,
    *,
    total_bytes: float | None = None,
    node_bytes: float | None = None,
    node_files: int | None = None,
    total_files: int | None = None,
    given_serializers: dict[str, float] | None = None,
    framework_costs: bool = True,
    aggregate_limit: float | None = None,
) -> SaveTime:
    """Seconds for one save of `plan` on `profile`. Overrides model what-ifs (compressed bytes, merged files);
    `framework_costs=False` drops the serialiser and coordination terms (copying finished files); `aggregate_limit`
    is what the whole shared system sustains, as the user knows it (planning/scaling.py). Where the profile's probe
    did not reach saturation, the save at the range's short end is the same model with that end as the limit."""
    at_limit = partial(
        _predict_save,
        plan,
        profile,
        total_bytes=total_bytes,
        node_bytes=node_bytes,
        node_files=node_files,
        total_files=total_files,
        given_serializers=given_serializers,
        framework_costs=framework_costs,
    )
    save = at_limit(aggregate_limit=aggregate_limit)
    short_end = save.aggregate.unsaturated_bytes_per_s
    if short_end is None:
        return save
    shortest = at_limit(aggregate_limit=short_end).seconds
    return save.model_copy(update={"shortest_seconds": shortest} if shortest < save.seconds else {})


def _predict_save(
    plan: CheckpointPlan,
    profile: StorageProfile,
    *,
    total_bytes: float | None,
    node_bytes: float | None,
    node_files: int | None,
    total_files: int | None,
    given_serializers: dict[str, float] | None,
    framework_costs: bool,
    aggregate_limit: float | None,
) -> SaveTime:
    machine = machine_figures(profile.calibration, given_serializers)
    total_bytes = plan.total_bytes if total_bytes is None else total_bytes
    busiest = plan.busiest_node
    scale = (node_bytes / busiest.bytes) if node_bytes is not None and busiest.bytes else 1.0
    node_bytes = busiest.bytes if node_bytes is None else node_bytes
    node_files = busiest.files if node_files is None else node_files
    total_files = plan.file_count if total_files is None else total_files
    nodes = plan.nodes_writing
    _, path = profile.curve(plan.write_path)
    notes = _path_notes(plan.write_path, path)
    node_bw = profile.bandwidth_at(busiest.writers, path)
    aggregate = aggregate_estimate(profile, node_bw, nodes, aggregate_limit)
    agg_bw = aggregate.bytes_per_s
    default_shape = total_bytes == plan.total_bytes and node_files == busiest.files and framework_costs
    replay = profile.replay if default_shape and _replays(profile.replay, plan) else None
    common = dict(
        node_bandwidth_bytes_per_s=node_bw,
        aggregate_bandwidth_bytes_per_s=agg_bw,
        aggregate=aggregate,
        write_path=path,
        writers_per_node=busiest.writers,
        nodes=nodes,
    )
    replayed = partial(_replayed, machine=machine, plan=plan, notes=notes, common=common)
    if replay is not None and replay.nodes >= nodes:  # it wrote every node's share: a direct measurement
        if (refused := _refused_replay(replay, plan.total_bytes, aggregate)) is None:
            return replayed(replay, [])
        notes, replay = [*notes, refused], None
    t_agg, rates = total_bytes / agg_bw, machine.rates() if framework_costs else {}
    t_bw, serialize, limited_by = _bandwidth_seconds(plan, profile, path, rates, scale, node_bytes / node_bw, t_agg)
    t_coord = coordination_seconds(plan, machine) if framework_costs else 0.0
    t_meta = node_files / profile.small_files.files_per_s
    if profile.shared and profile.aggregate_files_per_s:
        t_meta = max(t_meta, total_files / profile.aggregate_files_per_s)
    t_tail = profile.fsync_latency.p99_s
    terms = dict(coordination_seconds=t_coord, metadata_seconds=t_meta, fsync_tail_seconds=t_tail, source="model")
    if replay is not None:
        # the replay wrote only some of the plan's nodes: the others' bytes reach the shared system too, so the save
        # takes the longer of the replay and all nodes' bytes at the aggregate bandwidth (with the model's other terms)
        t_all = t_coord + t_agg + t_meta + t_tail
        covered = (
            f"the replay wrote {replay.nodes} of the plan's {nodes} nodes ({replay.full_scale_seconds:.3g} s at full "
            f"size); all {nodes} nodes' bytes at the aggregate bandwidth, {aggregate.label}, take {t_all:.3g} s"
        )
        if replay.full_scale_seconds >= t_all:
            return replayed(replay, [covered + ": the replay binds"])
        return SaveTime(
            seconds=t_all,
            bandwidth_seconds=t_agg,
            serialize_seconds=0.0,
            limited_by="aggregate bandwidth",
            machine=machine,
            replay_seconds=replay.full_scale_seconds,
            replay_nodes=replay.nodes,
            notes=notes + [covered + ": the aggregate binds"],
            **terms,
            **common,
        )
    return SaveTime(
        seconds=t_coord + t_bw + t_meta + t_tail,
        bandwidth_seconds=t_bw,
        serialize_seconds=serialize,
        limited_by=limited_by,
        machine=machine if framework_costs else None,
        notes=notes,
        **terms,
        **common,
    )


def _path_notes(planned: WritePath, measured: WritePath) -> list[str]:
    if planned == measured:
        return []
    return [f"the plan writes with {planned} I/O, which this profile did not measure: its {measured} curve is used"]


def _refused_replay(replay: Replay, total_bytes: int, aggregate: AggregateEstimate) -> str | None:
    """Why a replay of every node is not the save, or None where it is. One host's replay is the save, even where it
    beats the probe's earlier bandwidth phases (a disk's rate moves between minutes: 1.51 GB/s replayed after
    818 MB/s measured, the saves 1.64 s for a 1.59 s replay). A replay on many hosts faster than the aggregate
    bandwidth of the same probe allows measured something else."""
    implied = total_bytes / replay.full_scale_seconds
    if replay.nodes == 1 or implied <= aggregate.bytes_per_s * REPLAY_OVER_AGGREGATE:
        return None
    return (
        f"the replay's {replay.full_scale_seconds:.3g} s would move {implied / 1e6:.4g} MB/s, more than the "
        f"aggregate bandwidth the probe measured ({aggregate.bytes_per_s / 1e6:.4g} MB/s, {aggregate.label}) "
        "allows: it left a cost untimed, and the model is used instead"
    )


def _replays(replay: Replay | None, plan: CheckpointPlan) -> bool:
    """Whether the profile's replay wrote this plan's files through its write path."""
    return replay is not None and replay.plan_fingerprint == plan.fingerprint and replay.write_path == plan.write_path


def _replayed(
    replay: Replay,
    extra: list[str],
    *,
    machine: MachineFigures,
    plan: CheckpointPlan,
    notes: list[str],
    common: dict[str, Any],
) -> SaveTime:
    r = replay.full_scale_seconds
    return SaveTime(
        seconds=r,
        bandwidth_seconds=r,
        serialize_seconds=replay.serialize_seconds,
        coordination_seconds=replay.fixed_seconds,
        metadata_seconds=0,
        fsync_tail_seconds=0,
        limited_by="replay",
        source="replay",
        machine=machine if replay.method == "raw bytes" or plan.coordinated_save else None,
        replay_seconds=r,
        replay_nodes=replay.nodes,
        notes=notes + extra,
        **common,
    )


BandwidthLimit = Literal["node bandwidth", "aggregate bandwidth", "single writer"]


def _bandwidth_seconds(
    plan: CheckpointPlan,
    profile: StorageProfile,
    path: WritePath,
    rates: dict[str, float],
    scale: float,
    t_node_bytes: float,
    t_agg: float,
) -> tuple[float, float, BandwidthLimit]:
    """T_bw = max(T_single, T_node, T_agg), the serialisation inside it, and which term binds; `t_node_bytes` is the
    busiest node's bytes at its bandwidth, `scale` its bytes over the plan's."""
    loads = [(b * scale, ser * scale) for b, ser in writer_loads(plan, plan.busiest_node.node, rates).values()]
    one_stream = profile.bandwidth_at(1, path)
    copy = (
        profile.page_cache_write.bytes_per_s * profile.alone_factor()
        if path == "buffered" and profile.page_cache_write
        else None
    )
    if copy is not None:  # the flush overlaps the writers' CPU work
        t_single, ser_single = (
            max(max(ser + b / copy, b / one_stream) for b, ser in loads),
            max(ser for _, ser in loads),
        )
        ser_heaviest = 0.0
    else:
        t_single, ser_single = max(((ser + b / one_stream), ser) for b, ser in loads)
        ser_heaviest = max(loads)[1]
    t_node = ser_heaviest + t_node_bytes
    t_bw = max(t_single, t_node, t_agg)
    limited_by: BandwidthLimit = (
        "single writer"
        if t_bw == t_single
        else "node bandwidth"
        if t_bw == t_node or plan.nodes_writing == 1
        else "aggregate bandwidth"
    )
    serialize = ser_single if limited_by == "single writer" else ser_heaviest if limited_by == "node bandwidth" else 0.0
    return t_bw, serialize, limited_by


def required_bandwidth(
    plan: CheckpointPlan, save_seconds: float, *, fixed_seconds: float, writer_cpu_seconds: float, overlap: bool
) -> tuple[float, float] | None:
    """The model solved for bandwidth: (aggregate, busiest node's) bytes/s that finish a save in `save_seconds`.

    `fixed_seconds` is what no bandwidth shortens (per-file, fsync, coordination terms); `writer_cpu_seconds` the
    busiest writer's CPU part (serialise, plus the page-cache copy where it overlaps the flush). With `overlap` (the
    buffered path with a page-cache figure) the flush gets the whole time left, if the CPU part fits in it;
    otherwise the CPU part comes first. None when no bandwidth is enough.
    """
    left = save_seconds - fixed_seconds
    if overlap:
        if writer_cpu_seconds >= left:
            return None
    else:
        left -= writer_cpu_seconds
    if left <= 0:
        return None
    return plan.total_bytes / left, plan.busiest_node.bytes / left


def required_bandwidth_on(
    plan: CheckpointPlan,
    profile: StorageProfile,
    save_seconds: float,
    given_serializers: dict[str, float] | None = None,
) -> tuple[float, float] | None:
    """required_bandwidth with the fixed terms and the writers' CPU part that `profile` gives this plan."""
    fixed = predict_save(plan, profile, given_serializers=given_serializers)
    rates = machine_figures(profile.calibration, given_serializers).rates()
    loads = writer_loads(plan, plan.busiest_node.node, rates).values()
    overlap = fixed.write_path == "buffered" and profile.page_cache_write is not None
    copy = profile.page_cache_write.bytes_per_s if overlap and profile.page_cache_write else math.inf
    return required_bandwidth(
        plan,
        save_seconds,
        overlap=overlap,
        fixed_seconds=fixed.metadata_seconds + fixed.fsync_tail_seconds + fixed.coordination_seconds,
        writer_cpu_seconds=max(ser + b / copy for b, ser in loads),
    )


def required_file_rate(plan: CheckpointPlan, seconds: float) -> float:
    """Files per second, per node, so that the per-file cost fits in `seconds`."""
    return max(n.files for n in plan.nodes) / seconds


class LoadTime(Model):
    """One restore's load of a plan's checkpoint on a profile (predict_load), with its terms and their sources."""

    seconds: float
    read_seconds: float  # the longest read term: the busiest reader alone, its node, or all nodes at once
    coordination_seconds: float = 0.0  # a collective load's fixed cost (DCP), before the reads
    deserialize_seconds: float  # the busiest reader's deserialisation, beside the reads
    node_read_bandwidth_bytes_per_s: float  # per node, at the node's concurrent read streams
    aggregate_read_bandwidth_bytes_per_s: float
    aggregate: AggregateEstimate
    read_curve: Literal["read", "write"]  # "write": the profile measured no reads, its write curve stands in
    limited_by: Literal["deserialiser", "single reader", "node bandwidth", "aggregate bandwidth", "replay"]
    source: Literal["model", "replay"]
    streams_per_node: float  # node's ÷ busiest rank's distinct bytes (1 … readers): a shared file is one stream
    nodes: int
    rank_bytes: int  # the busiest reader's bytes from storage, each file once
    node_bytes: int
    storage_bytes: int
    deserializers: dict[str, MachineFigure]  # per file format, one reader on one core
    page_cache: str
    replay_seconds: float | None = None
    replay_nodes: int | None = None
    notes: list[str] = []


def deserializer_figures(calibration: Calibration | None) -> dict[str, MachineFigure]:
    """Deserialiser rates per file format: this machine's calibration, else the default."""
    rates = {fmt: MachineFigure(value=v, source="default") for fmt, v in DEFAULT_DESERIALIZE_BYTES_PER_S.items()}
    if calibration is not None:
        rates.update(
            {
                fmt: MachineFigure(value=v, source="measured here")
                for fmt, v in calibration.deserialize_bytes_per_s.items()
            }
        )
    return rates


def deserialize_seconds(restore: RestoreManifest, deserializers: dict[str, MachineFigure]) -> float:
    """The busiest reader's deserialisation: its reads per format ÷ that format's rate (text files: none)."""
    return sum(b / deserializers[fmt].value for fmt, b in restore.rank_bytes_by_format.items() if fmt in deserializers)


def read_curves(profile: StorageProfile) -> tuple[list[BandwidthPoint], list[BandwidthPoint], Literal["read", "write"]]:
    """(per-host curve, aggregate curve, which) for loads: the measured reads, else the buffered writes standing in."""
    if profile.read_bandwidth:
        return profile.read_bandwidth, profile.aggregate_read_bandwidth, "read"
    return profile.buffered_bandwidth, profile.aggregate_bandwidth, "write"


def predict_load(plan: CheckpointPlan, profile: StorageProfile, aggregate_limit: float | None = None) -> LoadTime:
    """Seconds for every rank to load `plan`'s checkpoint at a restart on `profile` (the plan's restore manifest):

      D_r    = the busiest reader's bytes per format ÷ that format's deserialiser rate (one core per reader)
      streams = the node's distinct bytes ÷ the busiest reader's (each file once), between 1 and the node's readers:
                ranks of a node reading the same file are served by one storage read, the page-cache assumption the
                manifest states, so eight ranks reading one file are one stream and eight reading their own, eight
      T_load = T_coord + max(D_r,                        the busiest reader's deserialisation (every read: a
                                                          file loaded twice costs twice)
                   b_r ÷ R(1),                           its bytes from storage, each file once, alone
                   node's distinct bytes ÷ R_node(streams),
                   all nodes' distinct bytes ÷ R_aggregate)  (planning/scaling.py, as for writes)
           The reads and the deserialisation overlap rather than add: torch.load and DCP copy each record out of the
           page cache into its tensor, which is the deserialiser's own cost (calibrated from memory) and the copy a
           cold-read probe times too, while the kernel's readahead keeps the device busy beside it. On /dev/shm the
           measured loads equal the deserialisation alone (0.67, 0.86, 0.86 s against 0.61, 0.87, 0.78 s), where
           the sum overshot by 25-59% (docs/benchmarks.md, bench_restore). T_coord: a collective load (DCP)
           plans, gathers and scatters as its save does, so the save's calibrated fixed cost stands in for it.
    R is the profile's cold read curve, or its buffered write curve where it measured no reads (said in the notes).
    A read replay of the same plan (probe --plan) replaces the model for the nodes it read, as a save's replay does.
    """
    restore = plan.restore
    if restore is None:
        raise InputError("this plan has no restore manifest (its framework's reads are not known): give ‹restart_s›")
    per_host, aggregate_points, which = read_curves(profile)
    notes = (
        []
        if which == "read"
        else [f"{profile.name} has no read curve: its buffered write curve stands in for cold reads"]
    )
    streams = min(float(restore.readers_per_node), max(1.0, restore.node_bytes / max(restore.rank_distinct_bytes, 1)))

    alone = profile.alone_factor(reads=which == "read")
    node_bw, one_stream = at_writers(per_host, streams) * alone, at_writers(per_host, 1) * alone
    aggregate = aggregate_estimate(profile, node_bw, restore.nodes, aggregate_limit, aggregate_points)
    deserializers = deserializer_figures(profile.calibration)
    deserialize = deserialize_seconds(restore, deserializers)
    t_single = restore.rank_distinct_bytes / one_stream
    t_node = restore.node_bytes / node_bw
    t_agg = restore.storage_bytes / aggregate.bytes_per_s
    t_read = max(t_single, t_node, t_agg)
    # a collective load (DCP) plans, gathers and scatters like its save: the same fixed cost, calibrated on saves
    t_coord = coordination_seconds(plan, machine_figures(profile.calibration))
    seconds = t_coord + max(deserialize, t_read)
    limited_by: Literal["deserialiser", "single reader", "node bandwidth", "aggregate bandwidth"] = (
        "deserialiser"
        if deserialize >= t_read
        else "single reader"
        if t_read == t_single
        else "node bandwidth"
        if t_read == t_node
        else "aggregate bandwidth"
    )
    common = dict(
        node_read_bandwidth_bytes_per_s=node_bw,
        aggregate_read_bandwidth_bytes_per_s=aggregate.bytes_per_s,
        aggregate=aggregate,
        read_curve=which,
        streams_per_node=streams,
        nodes=restore.nodes,
        rank_bytes=restore.rank_distinct_bytes,
        node_bytes=restore.node_bytes,
        storage_bytes=restore.storage_bytes,
        deserializers=deserializers,
        page_cache=restore.page_cache,
    )
    replay = profile.read_replay
    if replay is not None and replay.plan_fingerprint == plan.fingerprint:
        return _read_replayed(replay, restore.nodes, t_agg, notes, common)
    return LoadTime(
        seconds=seconds,
        read_seconds=t_read,
        coordination_seconds=t_coord,
        deserialize_seconds=deserialize,
        limited_by=limited_by,
        source="model",
        notes=notes,
        **common,
    )


def _read_replayed(replay: ReadReplay, nodes: int, t_agg: float, notes: list[str], common: dict[str, Any]) -> LoadTime:
    """The load from a read replay of the plan: the replay where it read every node or binds, else all `nodes` at
    the aggregate read bandwidth (`t_agg`)."""
    r = replay.full_scale_seconds
    covered = f"the read replay loaded {replay.nodes} of the plan's {nodes} nodes ({r:.3g} s at full size)"
    if replay.nodes >= nodes or r >= t_agg:
        return LoadTime(
            seconds=r,
            read_seconds=r,
            deserialize_seconds=replay.deserialize_seconds,
            limited_by="replay",
            source="replay",
            replay_seconds=r,
            replay_nodes=replay.nodes,
            notes=notes + ([] if replay.nodes >= nodes else [covered + ": the replay binds"]),
            **common,
        )
    return LoadTime(
        seconds=t_agg,
        read_seconds=t_agg,
        deserialize_seconds=0.0,
        limited_by="aggregate bandwidth",
        source="model",
        replay_seconds=r,
        replay_nodes=replay.nodes,
        notes=[*notes, f"{covered}; all nodes at the aggregate read bandwidth take {t_agg:.3g} s: the aggregate binds"],
        **common,
    )


def required_read_bandwidth(
    plan: CheckpointPlan, load_seconds: float, calibration: Calibration | None = None
) -> tuple[float, float] | None:
    """predict_load solved for bandwidth: (aggregate, per node) read bytes/s that finish the load in `load_seconds`
    on a storage that gives a node that rate at any reader count; None when deserialisation alone takes longer."""
    restore = plan.restore
    if restore is None:
        raise InputError("this plan has no restore manifest (its framework's reads are not known)")
    deserialize = deserialize_seconds(restore, deserializer_figures(calibration))
    if deserialize > load_seconds:
        return None
    return restore.storage_bytes / load_seconds, max(restore.rank_distinct_bytes, restore.node_bytes) / load_seconds
