"""Plans and storage profiles built by hand with round figures, so that a test can work a formula out on paper.

`hand_plan` takes the manifest itself: (path, bytes, rank, node) per file. A file's format follows its name as in
ckplan (`.pt` torch.save, `.distcp` dcp, `.safetensors`, anything else raw: no serialiser).
"""

from __future__ import annotations

from ckplan.frameworks.layout import ManifestFile
from ckplan.model.states import StateBytes
from ckplan.planning.compression import CompressionDefault
from ckplan.planning.data import PlanningData
from ckplan.planning.policy import Policy
from ckplan.profile import BandwidthPoint, Calibration, Latency, Measurement, Replay, SmallFiles, StorageProfile
from ckplan.sizing.plan import CheckpointPlan, TrainingSetup, manifest_fields


def hand_plan(
    files: list[tuple[str, int, int, int]],
    *,
    write_path: str = "buffered",
    coordinated: bool = False,
    framework: str = "deepspeed",
) -> CheckpointPlan:
    manifest = [
        ManifestFile(path=p, bytes=b, rank=r, node=n, kind="small" if b < 10**6 else "weights") for p, b, r, n in files
    ]
    nodes = {f.node for f in manifest}
    per_node = max(len({f.rank for f in manifest if f.node == n}) for n in nodes)
    gpus = per_node * len(nodes)
    assert all(f.rank < gpus for f in manifest), "ranks are numbered node × writers per node + i"
    total = sum(f.bytes for f in manifest)
    return CheckpointPlan(
        setup=TrainingSetup(
            parameters=max(1, total // 16),
            shape_source="hand",
            framework=framework,
            gpus=gpus,
            gpus_per_node=per_node,
            nodes=len(nodes),
            dp=gpus,
        ),
        parameters=max(1, total // 16),
        bytes_per_parameter=16,
        state_bytes=total,
        small_file_bytes=0,
        breakdown=[StateBytes(name="weights", kind="weights", dtype="fp32", bytes=total)],
        not_saved=[],
        **manifest_fields(manifest, renames=0),
        write_path=write_path,
        coordinated_save=coordinated,
        assumptions=["built by hand"],
    )


def hand_profile(
    curve: dict[int, float],
    *,
    name: str = "hand",
    direct: dict[int, float] | None = None,
    page_cache: float | None = None,
    files_per_s: float = 100.0,
    p99_s: float = 0.0,
    shared: bool = False,
    limit: float | None = None,
    hosts_curve: dict[int, float] | None = None,
    files_limit: float | None = None,
    calibration: Calibration | None = None,
    replay: Replay | None = None,
    storage_class: str = "local-disk",
) -> StorageProfile:
    """A profile with `curve` (writers per host → bytes/s) on the buffered path and the rest as given."""
    return StorageProfile(
        name=name,
        source="builtin",
        target=f"/{name}",
        fs_type="ext4",
        storage_class=storage_class,
        shared=shared,
        hosts=max(hosts_curve or {1: 0}),
        buffered_bandwidth=[BandwidthPoint(writers=w, bytes_per_s=b) for w, b in sorted(curve.items())],
        direct_bandwidth=[BandwidthPoint(writers=w, bytes_per_s=b) for w, b in sorted((direct or {}).items())],
        page_cache_write=BandwidthPoint(writers=1, bytes_per_s=page_cache) if page_cache else None,
        aggregate_bandwidth=[
            BandwidthPoint(writers=1, hosts=h, bytes_per_s=b) for h, b in sorted((hosts_curve or {}).items())
        ],
        aggregate_limit_bytes_per_s=limit,
        best_write_bytes_per_s=max(curve.values()),
        small_files=SmallFiles(
            files_per_s=files_per_s, ops_per_s=4 * files_per_s, file_bytes_min=4096, file_bytes_max=4096, writers=1
        ),
        aggregate_files_per_s=files_limit,
        fsync_latency=Latency(p50_s=p99_s / 2, p99_s=p99_s, p999_s=p99_s),
        calibration=calibration,
        replay=replay,
        measurement=Measurement(tool="by hand", date="-", host="-", preset="-", duration_s=0),
    )


def hand_calibration(rates: dict[str, float], dcp_fixed_s: float | None = None) -> Calibration:
    return Calibration(
        serialize_bytes_per_s=rates,
        sample_bytes=1,
        tensor_bytes=1,
        dcp_fixed_seconds=dcp_fixed_s,
        dcp_ranks=2 if dcp_fixed_s is not None else None,
        torch_version="hand",
        host="hand",
        duration_s=0,
    )


# A two-node case worked out by hand in tests/test_mitigations.py (and rendered in tests/test_render.py): each node's
# one writer writes a 10 GB torch.save file and 99 empty raw files; the target is shared, 1 GB/s per node and 2 GB/s
# measured on two hosts at once, 100 files/s. The faster and slower shared classes carry a limit, as the built-in ones
# do: per node × 2 nodes, at most the limit (planning/scaling.py).
GB = 10**9
FILES = [(f"n{n}.pt", 10 * GB, n, n) for n in range(2)] + [
    (f"n{n}-{k}.json", 0, n, n) for n in range(2) for k in range(99)
]
PLAN = hand_plan(FILES)
TARGET = hand_profile({1: 1e9}, name="target", shared=True, files_per_s=100, hosts_curve={1: 1e9, 2: 2e9})
TMPFS = hand_profile({1: 10e9}, name="tmpfs", files_per_s=1000, storage_class="tmpfs")
NVME = hand_profile({1: 5e9}, name="local-nvme", files_per_s=500, storage_class="local-nvme")
FAST = hand_profile({1: 4e9}, name="fast", shared=True, files_per_s=1000, storage_class="lustre", limit=100e9)
SLOW = hand_profile({1: 0.5e9}, name="slow", shared=True, files_per_s=1000, storage_class="nfs", limit=10e9)
CODEC = CompressionDefault(codec="zstd-1", ratio=2.0, bytes_per_s_per_core=10e9, measured="by hand")
DATA = PlanningData(storage_classes={"tmpfs": TMPFS, "local-nvme": NVME, "fast": FAST, "slow": SLOW}, codec=CODEC)
POLICY = Policy(serialize_bytes_per_s={"torch.save": 10e9}, changed_fraction=0.25, mtbf_s=3600)
