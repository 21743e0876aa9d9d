"""Which saved files the busiest restore node's ranks load, and their cold loads the frameworks' way: what
`validate --restore` and the probe's read replay both run after a node's framework saves."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ckplan.errors import InputError
from ckplan.frameworks import framework_of
from ckplan.frameworks.layout import Parallelism, Read, file_format
from ckplan.sizing.plan import CheckpointPlan
from ckplan.sizing.restore import local_readers

LOADERS = {
    "torch.save": "torch.load(map_location='cpu') per file",
    "safetensors": "safetensors load_file (pages touched) + torch.load(map_location='cpu')",
    "dcp": "torch.distributed.checkpoint.load (gloo), each rank its keys",
}


def restore_node(plan: CheckpointPlan) -> tuple[int, list[Read], int]:
    """The node the plan's restore manifest calls busiest (the most distinct bytes read, then the most requested), its
    reads with readers numbered from the node's first rank, and how many ranks it holds."""
    restore = plan.restore
    if restore is None:
        raise InputError(
            f"this plan has no restore manifest ({plan.setup.framework}'s reads on resume are not known for it): "
            "which files each rank loads cannot be told"
        )
    s = plan.setup
    par = Parallelism(gpus=s.gpus, gpus_per_node=s.gpus_per_node, tp=s.tp, pp=s.pp, zero=s.zero, ep=s.ep)
    declared = framework_of(s.framework).layout.restore(par, plan.manifest)
    assert declared.reads is not None  # the plan has a manifest, so the layout declared its reads
    per_node = plan.setup.gpus_per_node
    best: tuple[tuple[int, int], int, list[Read], int] | None = None
    for node in range(plan.setup.nodes):
        lo, hi = node * per_node, min((node + 1) * per_node, plan.setup.gpus)
        reads = []
        for r in declared.reads:
            who = local_readers(r.readers, lo, hi)
            if who is not None:
                reads.append(Read(r.path, r.bytes, who, r.times))
        key = (sum(r.bytes for r in reads), sum(r.bytes * r.times * r.readers.count for r in reads))
        if key == (restore.node_bytes, restore.node_requested_bytes):  # the manifest's busiest: first of a tie
            return node, reads, hi - lo
        if best is None or key > best[0]:
            best = (key, node, reads, hi - lo)
    assert best is not None
    return best[1], best[2], best[3]


@dataclass
class NodeLoads:
    """What the busiest restore node's ranks load, from the saved node's files: the load processes' input."""

    node: int
    reads: list[Read]  # readers numbered from the node's first rank
    readers: int
    by_rank: dict[int, list[dict]]  # load process → its items, paths relative to the save's directory
    files: list[str]  # every file the node reads, relative to the save's directory (page caches dropped)
    bytes: int  # distinct bytes the node reads, at the saved files' (scaled) sizes
    requested_bytes: int
    notes: list[str]
    missing: list[str]  # files the node reads that the saved node did not write: nothing can be loaded then


def node_loads(plan: CheckpointPlan, saved: dict[int, list[dict]]) -> NodeLoads:
    """Which saved file each rank of the busiest restore node loads, and how (its framework's saver says); `saved` is
    what the save processes wrote (savers.saver.files_by_rank). Refused when the ranks would hold more than this
    machine has available."""
    node, reads, readers = restore_node(plan)
    written = {f["path"]: f for fs in saved.values() for f in fs}
    missing = sorted({r.path for r in reads} - written.keys())
    if missing:
        return NodeLoads(node, reads, readers, {}, [], 0, 0, [], missing)
    saver = framework_of(plan.setup.framework).saver.kind
    writer_of = {f.path: f.rank for f in plan.manifest}
    index = {rank: i for i, rank in enumerate(saved)}  # save process of each saved rank (DCP names files by it)
    by_rank: dict[int, list[dict]] = {}
    files, notes, requested = set(), [], 0
    for rank in range(readers):
        items: list[dict] = []
        dcp_writers: dict[int, list[dict]] = {}
        for r in reads:
            if rank not in r.readers:
                continue
            fmt = file_format(r.path)
            requested += written[r.path]["bytes"] * r.times
            if saver == "dcp" and fmt == "dcp":
                w = writer_of[r.path]
                dcp_writers[index[w]] = saved[w]
                files.add(f"__{index[w]}_0.distcp")
            elif saver == "dcp":  # .metadata is read by dcp.load itself; the DCP saver writes nothing else
                files.add(".metadata")
            else:
                items.append({"format": fmt, "path": r.path, "times": r.times})
                files.add(r.path)
        if dcp_writers:
            items.append({"format": "dcp", "path": "", "times": 1, "writers": dcp_writers})
        if items:
            by_rank[rank] = items
    if saver == "dcp":
        other = sorted({r.path for r in reads if file_format(r.path) != "dcp" and not r.path.endswith(".metadata")})
        if other:
            notes.append(
                f"not loaded: {len(other)} file(s) the DCP saver does not write ({', '.join(other[:3])}"
                f"{', …' if len(other) > 3 else ''}); the model counts them"
            )
    from ckplan.savers.saver import check_save_processes

    check_save_processes(len(by_rank), f"loading node {node}'s restore")
    import psutil

    # every rank holds what it loaded until its load ends
    if requested > 0.8 * psutil.virtual_memory().available:
        raise InputError(
            f"node {node}'s ranks hold {requested / 1e9:.2f} GB in memory at once when they load; this machine has "
            f"{psutil.virtual_memory().available / 1e9:.2f} GB available: lower ‹scale›"
        )
    nbytes = sum(written[p]["bytes"] for p in {r.path for r in reads})
    return NodeLoads(node, reads, readers, by_rank, sorted(files), nbytes, requested, notes, [])


def load_saved(loads: NodeLoads, saved: Path, runs: int, what: str) -> list[float]:
    """Load the node's files from the save in `saved` cold, `runs` times, one process per rank; the wall times."""
    from ckplan.savers.loader import run_loads

    by_rank = {
        rank: [{**item, "path": str(saved / item["path"])} for item in items] for rank, items in loads.by_rank.items()
    }
    return run_loads(by_rank, runs, [saved / f for f in loads.files], what=what)
