"""The restore manifest: what the ranks of a job read from a checkpoint when it resumes, per rank, per node and in
total, from the reads a layout declares (frameworks/layout.py Layout.restore; the frameworks' load paths are in
docs/restore-reads.md).

A read names its readers as a progression of ranks (every rank, one rank, a model-parallel rank's data-parallel
replicas), so the sums below cost one pass over the files plus one over the ranks and nodes: a 16,384-GPU plan
is never expanded into ranks × files. A layout gives a file one reader only when that reader is the rank that wrote
it (tests/test_restore_manifest.py checks every layout), which is what own_files counts.
"""

from __future__ import annotations

import math
from collections import Counter
from itertools import accumulate
from typing import Annotated, get_args

from pydantic import Field

from ckplan.frameworks.layout import FileFormat, Layout, ManifestFile, Parallelism, Read, Readers, file_format
from ckplan.schema import Finite, Int, Model

Count = Annotated[Int, Field(ge=0)]

PAGE_CACHE = (
    "cold at the restart; each node's page cache (or NFS/Lustre client cache) then serves its other ranks' reads of "
    "a file, so a node reads each file once from storage while its files fit in free memory; with no sharing, "
    "storage serves the requested bytes"
)


class RestoreFile(Model):
    path: str
    bytes: Count  # what one reader reads of it: the file's size, times the reads of it (trainer_state.json: 2)
    format: FileFormat
    readers: Count  # ranks reading it
    nodes: Count  # nodes with at least one reader (this way, not already counted for the file's other row)


class RestoreManifest(Model):
    # the files two or more ranks read; a file only the rank that wrote it reads is counted in own_files and
    # own_bytes (its bytes times its reads) instead, as the save manifest lists it with that rank: a DCP or ZeRO-3
    # plan of half a million shards then does not list each twice. A file read two ways (DeepSpeed's first
    # model-states file, loaded by some ranks and checked by all) has a row, or an own count, per way.
    files: list[RestoreFile]
    own_files: Count
    own_bytes: Count
    rank_bytes: Count  # the busiest rank's reads
    # the same rank's reads with each file counted once: a second read of a file (DeepSpeed's check of its first
    # model-states file) comes from the page cache, so only deserialisation pays for it again
    rank_distinct_bytes: Count
    rank_bytes_by_format: dict[str, Count]  # the busiest rank's reads per FileFormat (what it deserialises)
    node_requested_bytes: Count  # busiest node: its ranks' reads summed
    node_bytes: Count  # busiest node: distinct bytes it reads from storage, its page cache serving its ranks
    node_files: Count  # distinct files the busiest node reads
    requested_bytes: Count  # all ranks' reads summed, no cache sharing
    storage_bytes: Count  # all nodes, cold, each node's page cache serving its own ranks
    read_amplification: Annotated[Finite, Field(ge=0)]  # storage_bytes / the checkpoint's bytes (plan.total_bytes)
    nodes: Count  # nodes that read
    readers_per_node: Count  # ranks per node reading at once (the busiest node)
    page_cache: str  # the page-cache assumption, in words
    notes: list[str]


def _add_file(node_diff: list[int], files_diff: list[int], first: int, last: int, nbytes: int) -> None:
    """One file of `nbytes` read by every node from `first` to `last`, in the per-node difference arrays."""
    node_diff[first] += nbytes
    node_diff[last + 1] -= nbytes
    files_diff[first] += 1
    files_diff[last + 1] -= 1


def restore_manifest(reads: list[Read], par: Parallelism, checkpoint_bytes: int, notes: list[str]) -> RestoreManifest:
    """Sum the reads per rank and per node. The busiest node is the one reading the most distinct bytes from storage
    (ties: the most requested); `checkpoint_bytes` is the save's total, which the read amplification divides by."""
    gpus, per_node = par.gpus, par.gpus_per_node
    node_count = math.ceil(gpus / per_node)
    rank_diff = [0] * (gpus + 1)  # bytes each rank reads, as differences over runs of consecutive ranks
    node_diff = [0] * (node_count + 1)  # distinct bytes each node reads, likewise over runs of nodes
    files_diff = [0] * (node_count + 1)
    files: list[RestoreFile] = []
    own_files = own_bytes = 0
    repeated: dict[str, set[int]] = {path: set() for path, n in Counter(r.path for r in reads).items() if n > 1}
    for r in reads:
        who, per_reader = r.readers, r.bytes * r.times
        first, last = who.start, who.start + who.step * (who.count - 1)
        if who.step == 1 or who.count == 1:
            rank_diff[first] += per_reader
            rank_diff[last + 1] -= per_reader
        else:
            for rank in range(first, last + 1, who.step):
                rank_diff[rank] += per_reader
                rank_diff[rank + 1] -= per_reader
        if r.path in repeated:  # read two ways (DeepSpeed's first model-states file): its nodes counted once
            covered = repeated[r.path]
            fresh = {rank // per_node for rank in range(first, last + 1, who.step)} - covered
            for n in fresh:
                _add_file(node_diff, files_diff, n, n, r.bytes)
            covered |= fresh
            nodes = len(fresh)
        elif who.step <= per_node or who.count == 1:  # readers on every node from the first's to the last's
            a, b = first // per_node, last // per_node
            _add_file(node_diff, files_diff, a, b, r.bytes)
            nodes = b - a + 1
        else:  # one reader per node
            for rank in range(first, last + 1, who.step):
                _add_file(node_diff, files_diff, rank // per_node, rank // per_node, r.bytes)
            nodes = who.count
        if who.count == 1:
            own_files += 1
            own_bytes += per_reader
        else:
            files.append(
                RestoreFile(path=r.path, bytes=per_reader, format=file_format(r.path), readers=who.count, nodes=nodes)
            )
    rank_bytes = list(accumulate(rank_diff))[:gpus]
    node_bytes = list(accumulate(node_diff))[:node_count]
    node_files = list(accumulate(files_diff))[:node_count]
    node_requested = [sum(rank_bytes[n * per_node : (n + 1) * per_node]) for n in range(node_count)]
    busiest = max(range(gpus), key=rank_bytes.__getitem__)
    by_format: dict[str, int] = {}
    distinct: dict[str, int] = {}
    for r in reads:
        if busiest in r.readers:
            fmt = file_format(r.path)
            by_format[fmt] = by_format.get(fmt, 0) + r.bytes * r.times
            distinct[r.path] = r.bytes
    node = max(range(node_count), key=lambda n: (node_bytes[n], node_requested[n]))
    storage = sum(node_bytes)
    return RestoreManifest(
        files=files,
        own_files=own_files,
        own_bytes=own_bytes,
        rank_bytes=rank_bytes[busiest],
        rank_distinct_bytes=sum(distinct.values()),
        rank_bytes_by_format=by_format,
        node_requested_bytes=node_requested[node],
        node_bytes=node_bytes[node],
        node_files=node_files[node],
        requested_bytes=sum(rank_bytes),
        storage_bytes=storage,
        read_amplification=storage / checkpoint_bytes,
        nodes=sum(1 for b in node_files if b),
        readers_per_node=sum(1 for b in rank_bytes[node * per_node : (node + 1) * per_node] if b),
        page_cache=PAGE_CACHE,
        notes=notes,
    )


def restore_error(
    m: RestoreManifest, *, gpus: int, gpus_per_node: int, nodes: int, files: dict[str, int], total_bytes: int
) -> str | None:
    """What is wrong with a plan's restore manifest, as 'restore.FIELD …', or None: the relations restore_manifest's
    sums always satisfy, for a save of `files` (path → bytes) on `gpus` ranks, `gpus_per_node` to a node, `nodes`
    nodes, `total_bytes` in all. A plan from elsewhere that breaks one would divide by zero (no reader on a node, no
    node reading) or give figures no resume reads. The layout's reads themselves are not recomputed: a plan measured
    from disk got them under assumptions (`--ep`, the stage its names imply) that its setup does not record."""
    if not 1 <= m.readers_per_node <= gpus_per_node:
        return (
            f"restore.readers_per_node is {m.readers_per_node}: the busiest node's readers are 1 to "
            f"setup.gpus_per_node {gpus_per_node}"
        )
    if not 1 <= m.nodes <= nodes:
        return f"restore.nodes is {m.nodes}: the nodes that read are 1 to setup.nodes {nodes}"
    if not 1 <= m.node_files <= len(files):
        return f"restore.node_files is {m.node_files}: the busiest node reads 1 to the manifest's {len(files):,} files"
    if m.own_files + len(m.files) > 2 * len(files):  # a layout reads a file at most two ways
        return (
            f"restore.own_files {m.own_files} and restore.files ({len(m.files)}) read more than twice the "
            f"manifest's {len(files):,} files"
        )
    if error := _listed_file_error(m, files, gpus, nodes):
        return error
    requested = m.own_bytes + sum(f.bytes * f.readers for f in m.files)
    if m.requested_bytes != requested:
        return f"restore.requested_bytes is {m.requested_bytes:,}, but own_bytes + the files' bytes × readers give {requested:,}"
    unknown = sorted(set(m.rank_bytes_by_format) - set(get_args(FileFormat)))
    if unknown:
        return (
            f"restore.rank_bytes_by_format names {unknown[0]!r}, not a file format ({', '.join(get_args(FileFormat))})"
        )
    by_format = sum(m.rank_bytes_by_format.values())
    if m.rank_bytes != by_format:
        return f"restore.rank_bytes is {m.rank_bytes:,}, but rank_bytes_by_format sums to {by_format:,}"
    # the busiest rank reads at least what any listed reader does, and all ranks together at most gpus times it
    widest = max((f.bytes for f in m.files), default=0)
    if not widest <= m.rank_bytes <= m.requested_bytes <= gpus * m.rank_bytes:
        return (
            f"restore.rank_bytes {m.rank_bytes:,}: the busiest rank reads at least a listed file's {widest:,} bytes, "
            f"and requested_bytes {m.requested_bytes:,} lies between it and setup.gpus {gpus} × it"
        )
    # a node reads each of its ranks' files once: at least the busiest rank's distinct bytes, at most what they ask
    if not m.rank_distinct_bytes <= m.node_bytes <= m.node_requested_bytes:
        return (
            f"restore.node_bytes {m.node_bytes:,} must lie between rank_distinct_bytes {m.rank_distinct_bytes:,} "
            f"and node_requested_bytes {m.node_requested_bytes:,}"
        )
    if m.rank_distinct_bytes > m.rank_bytes:
        return f"restore.rank_distinct_bytes {m.rank_distinct_bytes:,} exceeds rank_bytes {m.rank_bytes:,}"
    if m.node_requested_bytes > min(m.requested_bytes, m.readers_per_node * m.rank_bytes):
        return (
            f"restore.node_requested_bytes {m.node_requested_bytes:,} exceeds requested_bytes or readers_per_node "
            f"{m.readers_per_node} × rank_bytes {m.rank_bytes:,}"
        )
    if not m.node_bytes <= m.storage_bytes <= min(m.requested_bytes, m.nodes * m.node_bytes):
        return (
            f"restore.storage_bytes {m.storage_bytes:,} must lie between node_bytes {m.node_bytes:,} and the lesser "
            f"of requested_bytes and nodes {m.nodes} × node_bytes"
        )
    if not math.isclose(m.read_amplification, m.storage_bytes / total_bytes, rel_tol=1e-9):
        return (
            f"restore.read_amplification is {m.read_amplification:g}, but storage_bytes ÷ total_bytes is "
            f"{m.storage_bytes / total_bytes:g}"
        )
    return None


def _listed_file_error(m: RestoreManifest, files: dict[str, int], gpus: int, nodes: int) -> str | None:
    """What is wrong with one of the manifest's files read by many ranks, or None."""
    rows: Counter[str] = Counter()
    for i, f in enumerate(m.files):
        where = f"restore.files.{i}"
        size = files.get(f.path)
        rows[f.path] += 1
        if size is None:
            return f"{where}.path {f.path[:120]!r} is not in the manifest"
        if rows[f.path] > 2:
            return f"{where}.path {f.path[:120]!r} is listed a third time: a file is read at most two ways"
        if f.format != file_format(f.path):
            return f"{where}.format is {f.format!r}; the file's name gives {file_format(f.path)!r}"
        if f.bytes < size or (f.bytes % size if size else f.bytes):
            return f"{where}.bytes is {f.bytes:,}: each reader reads the file's {size:,} bytes a whole number of times"
        if not 2 <= f.readers <= gpus:  # a file only one rank reads is counted in own_files instead
            return f"{where}.readers is {f.readers}: a listed file is read by 2 to setup.gpus {gpus} ranks"
        if f.nodes > min(f.readers, nodes):
            return f"{where}.nodes is {f.nodes}: more than its {f.readers} readers or setup.nodes {nodes}"
    return None


def plan_restore(
    layout: Layout, par: Parallelism, manifest: list[ManifestFile], checkpoint_bytes: int
) -> tuple[RestoreManifest | None, list[str]]:
    """The restore manifest of a save whose files are `manifest`, or None and the notes saying why the layout
    cannot tell its reads (they belong in the plan's assumptions then)."""
    declared = layout.restore(par, manifest)
    if declared.reads is None:
        return None, declared.notes
    return restore_manifest(declared.reads, par, checkpoint_bytes, declared.notes), []


def local_readers(readers: Readers, lo: int, hi: int) -> Readers | None:
    """The readers among ranks lo…hi−1, numbered from lo; None when none is."""
    first = max(0, -(-(lo - readers.start) // readers.step))
    last = min(readers.count - 1, (hi - 1 - readers.start) // readers.step)
    if last < first:
        return None
    return Readers(readers.start + first * readers.step - lo, readers.step, last - first + 1)
