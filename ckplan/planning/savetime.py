"""The save-time model: a plan's bytes and files on a storage profile's measured curve.

Predicted save time (one synchronous save, all writers at once):
  T_bw   = max(S_r + b_r ÷ B(1),                  the busiest writer alone: serialise, then one stream
               S_r + node's bytes ÷ B_node(w),     the node's writers sharing its bandwidth
               total bytes ÷ B_aggregate)          all nodes sharing the system
           B_node(w): the profile's per-host bandwidth at w writers per node, where w
           is the busiest node's writer count; B(1) the one-writer figure;
           B_aggregate = B_node × nodes, capped by the shared system's aggregate
           limit (node-local targets have none). b_r is the busiest writer's bytes and
           S_r its serialisation time: bytes ÷ the format's serialiser throughput per
           core (torch.save's zip writer checksums every record; DCP and raw files
           write tensor storage as is). Serialisation and writing run one after the
           other in a writer's thread, so they add. See docs/benchmarks.md for the
           validate measurements that motivated the writer terms.
  T_meta = max(busiest node's files ÷ F_node,  all files ÷ F_aggregate)
           F_node: the small-file create+write+fsync+close rate measured on one host.
  T_tail = fsync p99: a synchronous save waits for its slowest writer's last flush.
  T_save = T_bw + T_meta + T_tail
A replay of the same plan in the profile (probe --plan) is used instead: it is a
direct measurement, extrapolated from its scale by bytes.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel

from ckplan.profile import StorageProfile
from ckplan.sizing.plan import CheckpointPlan


class SaveTime(BaseModel):
    seconds: float
    bandwidth_seconds: float  # includes the busiest writer's serialisation
    serialize_seconds: float = 0.0
    metadata_seconds: float
    fsync_tail_seconds: float
    node_bandwidth_bytes_per_s: float  # per node at the plan's writers per node
    aggregate_bandwidth_bytes_per_s: float
    limited_by: Literal["node bandwidth", "aggregate bandwidth", "single writer", "replay"]
    source: Literal["model", "replay"]
    writers_per_node: int
    nodes: int


def plan_fingerprint(plan: CheckpointPlan) -> str:
    from ckplan.probe.replay import fingerprint
    return fingerprint([(f.path, f.bytes, f.rank) for f in plan.manifest])


def aggregate_bandwidth(profile: StorageProfile, node_bw: float, nodes: int) -> float:
    """Bandwidth of `nodes` hosts writing at once.

    From the probe's measured curve over hosts when it has one: interpolated between
    measured host counts, and beyond the largest, its per-host share times the nodes
    (capped by the system's limit when known). Otherwise the per-node figure times the
    nodes, capped by the limit.
    """
    limit = profile.aggregate_limit_bytes_per_s if profile.shared and profile.aggregate_limit_bytes_per_s else math.inf
    points = sorted(profile.aggregate_bandwidth, key=lambda p: p.hosts)
    if not points:
        return min(node_bw * nodes, limit)
    if nodes <= points[0].hosts:
        return points[0].bytes_per_s * nodes / points[0].hosts
    for lo, hi in zip(points, points[1:]):
        if nodes <= hi.hosts:
            return lo.bytes_per_s + (nodes - lo.hosts) / (hi.hosts - lo.hosts) * (hi.bytes_per_s - lo.bytes_per_s)
    return min(points[-1].bytes_per_s * nodes / points[-1].hosts, limit)


def writer_loads(plan: CheckpointPlan, node: int, serialize_bytes_per_s: dict[str, float]) -> list[tuple[float, float]]:
    """(bytes, serialisation seconds) of each writer on `node`."""
    loads: dict[int, list[float]] = {}
    for f in plan.manifest:
        if f.node == node:
            load = loads.setdefault(f.rank, [0.0, 0.0])
            load[0] += f.bytes
            load[1] += f.bytes / serialize_bytes_per_s.get(f.format, math.inf)
    return [tuple(v) for v in loads.values()]


def predict_save(plan: CheckpointPlan, profile: StorageProfile, *, total_bytes: float | None = None,
                 node_bytes: float | None = None, node_files: int | None = None, total_files: int | None = None,
                 serialize_bytes_per_s: dict[str, float] | None = None) -> SaveTime:
    """Seconds for one save of `plan` on `profile`. Overrides model what-ifs (compressed bytes, merged files)."""
    total_bytes = plan.total_bytes if total_bytes is None else total_bytes
    busiest = max(plan.nodes, key=lambda n: n.bytes)
    scale = (node_bytes / busiest.bytes) if node_bytes is not None and busiest.bytes else 1.0
    node_bytes = busiest.bytes if node_bytes is None else node_bytes
    node_files = busiest.files if node_files is None else node_files
    total_files = plan.file_count if total_files is None else total_files
    writers = busiest.writers
    nodes = plan.nodes_writing
    node_bw = profile.bandwidth_at(writers)
    agg_bw = aggregate_bandwidth(profile, node_bw, nodes)
    default_shape = total_bytes == plan.total_bytes and node_files == busiest.files
    if profile.replay and default_shape and profile.replay.plan_fingerprint == plan_fingerprint(plan):
        r = profile.replay.full_scale_seconds
        return SaveTime(seconds=r, bandwidth_seconds=r, metadata_seconds=0, fsync_tail_seconds=0,
                        node_bandwidth_bytes_per_s=node_bw, aggregate_bandwidth_bytes_per_s=agg_bw,
                        limited_by="replay", source="replay", writers_per_node=writers, nodes=nodes)
    loads = [(b * scale, ser * scale) for b, ser in writer_loads(plan, busiest.node, serialize_bytes_per_s or {})]
    one_stream = profile.bandwidth_at(1)
    t_single, ser_single = max(((ser + b / one_stream), ser) for b, ser in loads)
    ser_heaviest = max(loads)[1]
    t_node, t_agg = ser_heaviest + node_bytes / node_bw, total_bytes / agg_bw
    t_bw = max(t_single, t_node, t_agg)
    limited_by = "aggregate bandwidth" if t_bw == t_agg else "single writer" if t_bw == t_single else "node bandwidth"
    serialize = ser_single if limited_by == "single writer" else ser_heaviest if limited_by == "node bandwidth" else 0.0
    t_meta = node_files / profile.small_files.files_per_s
    if profile.shared and profile.aggregate_files_per_s:
        t_meta = max(t_meta, total_files / profile.aggregate_files_per_s)
    t_tail = profile.fsync_latency.p99_s
    return SaveTime(seconds=t_bw + t_meta + t_tail, bandwidth_seconds=t_bw, serialize_seconds=serialize,
                    metadata_seconds=t_meta, fsync_tail_seconds=t_tail, node_bandwidth_bytes_per_s=node_bw,
                    aggregate_bandwidth_bytes_per_s=agg_bw, limited_by=limited_by, source="model",
                    writers_per_node=writers, nodes=nodes)


def required_bandwidth(plan: CheckpointPlan, profile: StorageProfile, save_seconds: float,
                       serialize_bytes_per_s: dict[str, float] | None = None) -> tuple[float, float] | None:
    """The model solved for bandwidth: (aggregate, per-node) bytes/s that finish a save in `save_seconds`.

    None when the per-file, fsync and serialisation terms alone already exceed the time: no bandwidth helps.
    """
    fixed = predict_save(plan, profile, serialize_bytes_per_s=serialize_bytes_per_s)
    ser = max(s for _, s in writer_loads(plan, max(plan.nodes, key=lambda n: n.bytes).node, serialize_bytes_per_s or {}))
    left = save_seconds - fixed.metadata_seconds - fixed.fsync_tail_seconds - ser
    if left <= 0:
        return None
    return plan.total_bytes / left, max(n.bytes for n in plan.nodes) / left


def required_file_rate(plan: CheckpointPlan, seconds: float) -> float:
    """Files per second, per node, so that the per-file cost fits in `seconds`."""
    return max(n.files for n in plan.nodes) / seconds
