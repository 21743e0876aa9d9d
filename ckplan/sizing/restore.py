"""The restore manifest: what the ranks of a job read from a checkpoint when it resumes, per rank, per node and in
total, from the reads a layout declares (layouts/base.py Layout.restore; the frameworks' load paths are in
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
from typing import Annotated

from pydantic import Field

from ckplan.schema import Finite, Int, Model
from ckplan.sizing.layouts.base import FileFormat, Layout, ManifestFile, Parallelism, Read, Readers, file_format

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
                node_diff[n] += r.bytes
                node_diff[n + 1] -= r.bytes
                files_diff[n] += 1
                files_diff[n + 1] -= 1
            covered |= fresh
            nodes = len(fresh)
        elif who.step <= per_node or who.count == 1:  # readers on every node from the first's to the last's
            a, b = first // per_node, last // per_node
            node_diff[a] += r.bytes
            node_diff[b + 1] -= r.bytes
            files_diff[a] += 1
            files_diff[b + 1] -= 1
            nodes = b - a + 1
        else:  # one reader per node
            for rank in range(first, last + 1, who.step):
                node_diff[rank // per_node] += r.bytes
                node_diff[rank // per_node + 1] -= r.bytes
                files_diff[rank // per_node] += 1
                files_diff[rank // per_node + 1] -= 1
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
