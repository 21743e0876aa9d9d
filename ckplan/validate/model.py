"""The validation result, and the comparison of a measurement with the save-time model (no torch here)."""

from __future__ import annotations

from typing import Literal

from ckplan.frameworks.layout import Parallelism, Read
from ckplan.planning.savetime import LoadTime, SaveTime, predict_load, predict_save
from ckplan.profile import Spread, StorageProfile
from ckplan.schema import Model
from ckplan.sizing.plan import CheckpointPlan, scaled_file_bytes
from ckplan.sizing.restore import restore_manifest
from ckplan.version import __version__

LARGE_ERROR_PERCENT = 15.0


class Validation(Model):
    kind: Literal["ckplan.validation"] = "ckplan.validation"
    ckplan_version: str = __version__
    target: str
    storage: str
    framework: str
    saver: str  # the PyTorch calls used
    mode: Literal["sync", "async"]
    node: int
    writers: int
    files: int
    bytes: int
    scale: float
    repeats: int
    predicted_seconds: float
    predicted_stall_seconds: float
    prediction: SaveTime
    measured_seconds: float  # median wall time of the whole save, all ranks, fsync included
    measured: Spread
    measured_stall_seconds: float | None = None  # async: the blocking part
    error_percent: float  # (predicted − measured) ÷ measured × 100
    measured_range_percent: float  # (max − min) ÷ median × 100 of the measured saves: this target's own noise now
    within_measured_range: bool  # the prediction lies between the fastest and the slowest measured save
    stall_error_percent: float | None = None  # async: (predicted stall − measured blocking) ÷ measured blocking × 100
    effective_bytes_per_s: float
    diagnosis: str
    notes: list[str] = []
    restore: RestoreValidation | None = None  # --restore: the loads of the last save's files


def scaled_prediction(plan: CheckpointPlan, profile: StorageProfile, scale: float) -> tuple[int, list, SaveTime]:
    """The model's time for the busiest node's share of the plan at `scale`, written by that node alone."""
    node = plan.busiest_node.node
    files = [f for f in plan.manifest if f.node == node]
    node_bytes = sum(scaled_file_bytes(f.bytes, scale) for f in files)
    one_node = plan.model_copy(update={"nodes": [n for n in plan.nodes if n.node == node], "nodes_writing": 1})
    prediction = predict_save(
        one_node, profile, total_bytes=node_bytes, node_bytes=node_bytes, node_files=len(files), total_files=len(files)
    )
    return node, files, prediction


def diagnose(prediction: SaveTime, measured: Spread, nbytes: int, files: int) -> str:
    """Whether the error is inside the target's own noise, and which term of the model was off when it is not."""
    measured_s = measured.median
    error = (prediction.seconds - measured_s) / measured_s * 100
    if measured.contains(prediction.seconds):
        return (
            f"{error:+.0f}% lies inside the measured spread ({measured.min:.3g}…{measured.max:.3g} s, "
            f"{measured.relative_range:.0%} of the median): the saves themselves vary this much here"
        )
    if abs(error) <= LARGE_ERROR_PERCENT:
        return f"within ±{LARGE_ERROR_PERCENT:.0f}%: the model holds on this target"
    if prediction.source == "replay":
        return (
            f"the replay: the profile's replay of this plan took {prediction.seconds:.3g} s at full size and these saves "
            f"{measured_s:.3g} s; the target changed between the probe and now, or the replay ran cold — probe again"
        )
    fixed = prediction.metadata_seconds + prediction.fsync_tail_seconds
    left = measured_s - fixed
    if left <= 0:
        return (
            f"per-file overhead: the model spends {fixed:.3g} s on {files} files and fsync tails, more than the "
            f"whole measured save ({measured_s:.3g} s); the small-file rate overstates per-file cost here"
        )
    implied = nbytes / left
    ratio = implied / prediction.node_bandwidth_bytes_per_s
    if prediction.serialize_seconds > 0.3 * prediction.seconds:
        return (
            f"serialisation: {prediction.serialize_seconds:.3g} s of the prediction is the busiest writer's serialiser; "
            f"the bytes ran at {implied / 1e9:.2f} GB/s overall — re-measure the serialiser on this CPU"
        )
    if prediction.metadata_seconds > 0.3 * prediction.seconds:
        return (
            f"per-file overhead: {prediction.metadata_seconds:.3g} s of the prediction is per-file cost for {files} files; "
            f"the bytes ran at {implied / 1e9:.2f} GB/s against the probe's "
            f"{prediction.node_bandwidth_bytes_per_s / 1e9:.2f} GB/s"
        )
    return (
        f"bandwidth: the save's bytes moved at {implied / 1e9:.2f} GB/s, {ratio:.2f}× the probe's "
        f"{prediction.node_bandwidth_bytes_per_s / 1e9:.2f} GB/s at {prediction.writers_per_node} writers"
    )


# --- restores: the busiest node's loads against predict_load ---------------------------------------------------------

LOAD_TARGET_PERCENT = (
    20.0  # a load prediction holds within this of the measured median (the restore benchmark's target)
)
NOISY_SPREAD = 0.30  # loads (or saves) spreading this much of their median are judged on their range alone


class RestoreValidation(Model):
    """Real cold loads of the files a save wrote, by the busiest restore node's ranks, against predict_load."""

    loader: str  # the PyTorch calls used
    node: int
    readers: int
    files: int  # distinct files the node's ranks read
    bytes: int  # distinct bytes the node reads (its page cache serving its other ranks' reads of a file)
    requested_bytes: int  # every rank's reads summed
    scale: float
    repeats: int
    cold: bool  # each file's cached pages were dropped before each load; False on a filesystem in memory
    predicted_seconds: float
    prediction: LoadTime
    measured_seconds: float  # median wall time, first rank's start to last rank's end
    measured: Spread
    error_percent: float  # (predicted − measured) ÷ measured × 100
    measured_range_percent: float  # (max − min) ÷ median × 100
    within_measured_range: bool  # min ≤ prediction ≤ max
    judged_on: Literal["error", "range"]  # range: the loads spread ≥ NOISY_SPREAD of their median
    holds: bool  # judged on the error: within ±LOAD_TARGET_PERCENT, or inside the range; on the range: inside it
    effective_bytes_per_s: float  # distinct bytes ÷ the median
    diagnosis: str
    notes: list[str] = []


def judge(predicted: float, measured: Spread) -> tuple[Literal["error", "range"], bool]:
    """What a prediction is judged on, and whether it holds: rows whose repeats spread ≥ NOISY_SPREAD of the median
    only on lying inside the measured range; quieter ones also within ±LOAD_TARGET_PERCENT of the median."""
    inside = measured.contains(predicted)
    if measured.relative_range >= NOISY_SPREAD:
        return "range", inside
    return "error", inside or abs(predicted - measured.median) <= LOAD_TARGET_PERCENT / 100 * measured.median


def scaled_load_prediction(
    plan: CheckpointPlan, profile: StorageProfile, reads: list[Read], readers: int, scale: float
) -> tuple[LoadTime, list[str]]:
    """predict_load for one node's `reads` (readers numbered 0…readers−1) at `scale`, that node loading alone."""
    scaled = [Read(r.path, scaled_file_bytes(r.bytes, scale), r.readers, r.times) for r in reads]
    par = Parallelism(gpus=readers, gpus_per_node=readers, tp=1, pp=1, zero=plan.setup.zero)
    one_node = restore_manifest(scaled, par, max(1, sum(r.bytes for r in scaled)), [])
    notes = []
    replay = profile.read_replay
    if scale != 1 and replay is not None and replay.plan_fingerprint == plan.fingerprint:
        profile = profile.model_copy(update={"read_replay": None})
        notes.append(
            f"the profile's read replay of this plan is of its full size; at ‹scale› {scale:g} the model predicts"
        )
    return predict_load(plan.model_copy(update={"restore": one_node}), profile), notes


def diagnose_load(p: LoadTime, measured: Spread) -> str:
    """Whether a load's error is inside the target's own noise, and which term of the model was off when it is not."""
    error = (p.seconds - measured.median) / measured.median * 100
    if measured.contains(p.seconds):
        return (
            f"{error:+.0f}% lies inside the measured spread ({measured.min:.3g}…{measured.max:.3g} s, "
            f"{measured.relative_range:.0%} of the median): the loads themselves vary this much here"
        )
    if abs(error) <= LOAD_TARGET_PERCENT and measured.relative_range < NOISY_SPREAD:
        return f"within ±{LOAD_TARGET_PERCENT:.0f}%: the load model holds on this target"
    if abs(error) <= LOAD_TARGET_PERCENT:
        return (
            f"within ±{LOAD_TARGET_PERCENT:.0f}% of the median but outside the measured {measured.min:.3g}…"
            f"{measured.max:.3g} s; the loads spread {measured.relative_range:.0%} (≥{NOISY_SPREAD:.0%}), so the "
            "range judges: repeat with more --repeats on a quieter machine"
        )
    if p.source == "replay":
        return (
            f"the read replay: the profile's replay of this plan's restore took {p.seconds:.3g} s and these loads "
            f"{measured.median:.3g} s; the target changed between the probe and now — probe again"
        )
    if p.deserialize_seconds > 0.3 * p.seconds:
        return (
            f"deserialisation: {p.deserialize_seconds:.3g} s of the prediction is the busiest reader's deserialiser "
            f"({', '.join(f'{fmt} {f.value / 1e9:.3g} GB/s ({f.source})' for fmt, f in p.deserializers.items())}); "
            "re-measure it on this CPU (`ckplan calibrate`)"
        )
    left = measured.median - p.deserialize_seconds
    curve = "cold read curve" if p.read_curve == "read" else "write curve (no reads measured)"
    if left <= 0:
        return f"deserialisation: the model's {p.deserialize_seconds:.3g} s exceeds the whole measured load"
    implied = max(p.node_bytes, p.rank_bytes) / left
    return (
        f"read bandwidth: the loads' bytes moved at {implied / 1e9:.2f} GB/s after deserialisation, "
        f"{implied / p.node_read_bandwidth_bytes_per_s:.2f}× the profile's {curve} "
        f"({p.node_read_bandwidth_bytes_per_s / 1e9:.2f} GB/s at {p.streams_per_node:.3g} streams)"
    )
