"""The validation result, and the comparison of a measurement with the save-time model (no torch here)."""

from __future__ import annotations

from typing import Literal

from ckplan import __version__
from ckplan.planning.savetime import SaveTime, predict_save
from ckplan.profile import Spread, StorageProfile
from ckplan.schema import Model
from ckplan.sizing.plan import CheckpointPlan

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


def scaled_prediction(plan: CheckpointPlan, profile: StorageProfile, scale: float) -> tuple[int, list, SaveTime]:
    """The model's time for the busiest node's share of the plan at `scale`, written by that node alone."""
    node = plan.busiest_node.node
    files = [f for f in plan.manifest if f.node == node]
    node_bytes = sum(max(1, int(f.bytes * scale)) for f in files)
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
