"""`ckplan calibrate`: this machine's serialiser and deserialiser throughput per rank, and DCP's fixed cost per save.

Why: a save's serialiser (pickling, CRC32, copies) runs on the CPU of the machine that saves, and on a fast
target it is most of the save (docs/benchmarks.md). A figure measured on one machine and applied
to every other is a guess, so the probe measures it here and stores it in the profile.

- Serialisers, each in one process pinned to one thread, as one writer rank runs it, into /dev/null: the
  write into the page cache is what the probe's bandwidth curve measures, so a sink that keeps the bytes
  (BytesIO, tmpfs) would count that copy twice.
  - torch.save: `torch.save(state_dict, "/dev/null")` (DeepSpeed, Lightning, HF optimizer.pt);
  - safetensors (HF shards): `safetensors.torch.save_file(tensors, FILE)` into a scratch directory in memory
    (/dev/shm where it exists), the file removed after each run. Not onto /dev/null: since 0.8 save_file
    writes a temporary file beside its target and renames it over, which made /dev/null a regular file when
    run as root (and in /dev that temporary file was in memory all along, so the figure is unchanged). Not
    `safetensors.torch.save` to bytes: it ran at 0.9 GB/s against save_file's 3.0 GB/s here (256 MiB, one
    thread), a cost a real save does not pay;
  - dcp: one `torch.save(tensor, stream)` per tensor into an open file, which is what DCP's
    FileSystemWriter does for each tensor item (torch.distributed.checkpoint.filesystem._write_item).
- Deserialisers, in the same process, one reader on one core, from bytes already in memory, so the figure is
  the CPU's part of a load and not the read, which the probe's read curve measures:
  - torch.load: `torch.load(BytesIO(bytes), map_location="cpu")` of the sample's torch.save bytes;
  - safetensors: `safetensors.torch.load_file` of the sample saved in the scratch directory in memory, every page
    of its tensors touched (savers/loader.touch_pages), as the cold loads do: load_file maps the file and
    returns tensors backed by the mapping, so it has no copy to pay. Not `safetensors.torch.load(bytes)`,
    which copies every tensor out of the bytes (2.1 GB/s here, 256 MiB, one thread): a cost load_file, the
    call HF Trainer makes, does not pay;
  - dcp: per tensor, `torch.load` of its torch.save bytes and a copy into a preallocated tensor, which is what
    DCP's FileSystemReader.read_data does for each tensor item (torch.distributed.checkpoint.filesystem).
  The sample is fp32 tensors (the optimizer states and master weights are most of a checkpoint's bytes);
  one unrecorded warm-up run of each, then the repeats go round the formats in turn; medians are kept.
- DCP's fixed cost: `dcp.save` of a few KiB per rank from `ranks` processes in a gloo group, into a
  temporary directory in memory (/dev/shm where it exists), so the figure is the coordination (local and
  global planning, gather, scatter, barriers, `.metadata`) and not the target's per-file cost, which the
  model counts separately. One warm-up save, then the median of the repeats.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from ckplan.errors import EnvironmentProblem, InputError, MeasurementFailed
from ckplan.profile import Calibration, Spread

MiB = 2**20
TENSOR_BYTES = 32 * MiB  # a typical large weight or optimizer tensor (4096 × 2048 fp32)
SAMPLE_BYTES = {"quick": 128 * MiB, "default": 384 * MiB, "thorough": 1024 * MiB}
REPEATS = {"quick": 3, "default": 5, "thorough": 9}
DCP_TINY_BYTES = 4096
# seconds a calibration took on the 2-core development VM (each process's torch import included): the progress bar's estimate
ESTIMATE_S = {"quick": 12.0, "default": 22.0, "thorough": 45.0}


def torch_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


# Saver kinds (frameworks.SaverKind) whose saves need numpy beside torch: torch does not require numpy, but
# torch.distributed.checkpoint's save and safetensors' save_file convert tensors through it and fail without it
# ("Numpy is not available"), after the probe's earlier phases have run for minutes. torch.save alone does not.
NEEDS_NUMPY = frozenset({"dcp", "safetensors"})


def torch_saves_missing(kinds: Iterable[str]) -> list[str]:
    """What saves of `kinds` (frameworks.SaverKind: the calibration's are "dcp", and "safetensors" where it is
    installed) need beside torch that cannot be imported here. numpy is imported, not only looked up (~0.2 s), so
    that a broken install is found as well as a missing one; torch is not (seconds: only the save processes import
    it, and a torch that fails there costs the late phases, whose failures the probe survives)."""
    import importlib.util

    kinds = set(kinds)
    missing = []
    if kinds & NEEDS_NUMPY:
        try:
            import numpy  # noqa: F401
        except ImportError as exc:
            absent = isinstance(exc, ModuleNotFoundError) and exc.name == "numpy"
            missing.append("numpy" if absent else f"a numpy that imports (here: {type(exc).__name__}: {exc})")
    if "safetensors" in kinds and importlib.util.find_spec("safetensors") is None:
        missing.append("safetensors")
    return missing


def check_torch_saves(what: str, kinds: Iterable[str], instead: str = "") -> None:
    """Refuse `what` before it starts where its saves of `kinds` would fail for want of a package beside torch: exit
    3 with the install line, not exit 4 minutes later. `instead` says how to go without it."""
    missing = torch_saves_missing(kinds)
    if missing:
        raise EnvironmentProblem(
            f"{what} needs {' and '.join(missing)} beside PyTorch: pip install 'ckplan[torch]'" + instead
        )


def scratch_parents() -> list[Path]:
    """Where a calibration's files may go, best first: memory (/dev/shm), so the target's per-file cost is not in
    them, then the temporary directory."""
    shm = Path("/dev/shm")
    memory = [shm] if shm.is_dir() and os.access(shm, os.W_OK) else []
    return [*memory, Path(tempfile.gettempdir())]


def scratch_parent(need_bytes: int) -> Path:
    """The first of scratch_parents() with room for `need_bytes`: a container's /dev/shm is often 64 MiB, less
    than a sample."""
    for parent in scratch_parents():
        if shutil.disk_usage(parent).free >= need_bytes:
            return parent
    raise EnvironmentProblem(
        f"the calibration needs {need_bytes / MiB:.0f} MiB of scratch space and neither "
        f"{' nor '.join(map(str, scratch_parents()))} has it: free some, or probe with --no-calibrate"
    )


def _codec_worker(sample_bytes: int, tensor_bytes: int, repeats: int, scratch: Path, results) -> None:
    from ckplan.children import worker_dies_with_parent

    worker_dies_with_parent()
    try:
        import io

        import torch

        from ckplan.savers.loader import touch_pages

        torch.set_num_threads(1)
        count = max(1, sample_bytes // tensor_bytes)
        tensors = {f"t{i}": torch.empty(tensor_bytes // 4, dtype=torch.float32).normal_(0, 0.02) for i in range(count)}

        def torch_save() -> None:
            torch.save(tensors, os.devnull)

        def dcp_stream() -> None:
            with open(os.devnull, "wb") as stream:
                for t in tensors.values():
                    torch.save(t, stream)

        def saved(obj) -> bytes:
            stream = io.BytesIO()
            torch.save(obj, stream)
            return stream.getvalue()

        whole, items = saved(tensors), [saved(t) for t in tensors.values()]
        targets = [torch.empty_like(t) for t in tensors.values()]

        def torch_load() -> None:
            torch.load(io.BytesIO(whole), map_location="cpu", weights_only=True)

        def dcp_load() -> None:
            for item, target in zip(items, targets, strict=True):
                target.copy_(torch.load(io.BytesIO(item), map_location="cpu", weights_only=True))

        codecs = {
            "save torch.save": torch_save,
            "save dcp": dcp_stream,
            "load torch.save": torch_load,
            "load dcp": dcp_load,
        }
        try:
            from safetensors.torch import load_file, save_file

            def safetensors_save() -> None:
                save_file(tensors, scratch / "sample.safetensors")
                (scratch / "sample.safetensors").unlink()

            save_file(tensors, scratch / "load.safetensors")

            def safetensors_load() -> None:
                touch_pages(load_file(scratch / "load.safetensors").values())

            codecs |= {"save safetensors": safetensors_save, "load safetensors": safetensors_load}
        except ImportError:
            pass
        nbytes = count * (tensor_bytes // 4) * 4
        times: dict[str, list[float]] = {name: [] for name in codecs}
        for r in range(repeats + 1):
            for name, run in codecs.items():
                start = time.perf_counter()
                run()
                if r:  # the first round is the warm-up
                    times[name].append(time.perf_counter() - start)
        results.put(("ok", nbytes, times))
    except BaseException as exc:  # reported to the parent as one line
        results.put(("error", 0, f"{type(exc).__name__}: {exc}"))


def measure_codecs(
    sample_bytes: int, repeats: int, scratch: Path, tensor_bytes: int = TENSOR_BYTES
) -> tuple[int, dict[str, Spread], dict[str, Spread]]:
    """Bytes per run, and throughput (bytes/s) of each serialiser and each deserialiser (by file format), one process
    on one core; files go in `scratch`."""
    import multiprocessing as mp

    from ckplan.children import collect, stop_all

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_codec_worker, args=(sample_bytes, tensor_bytes, repeats, scratch, results))
    proc.start()
    try:
        [(status, nbytes, payload)] = collect(
            results, [proc], 1, 600, lambda why: MeasurementFailed(f"the serialiser calibration stopped: {why}")
        )
        proc.join()
    finally:
        stop_all([proc])
    if status != "ok":
        raise MeasurementFailed(f"the serialiser calibration failed: {payload}")
    rates = {name: Spread.of([nbytes / t for t in ts]) for name, ts in payload.items()}
    return (
        nbytes,
        {name.removeprefix("save "): v for name, v in rates.items() if name.startswith("save ")},
        {name.removeprefix("load "): v for name, v in rates.items() if name.startswith("load ")},
    )


def measure_dcp_fixed(ranks: int, repeats: int, scratch: Path) -> Spread:
    """Wall time of a DCP save of a few KiB per rank, from `ranks` processes in a gloo group, into `scratch`."""
    from ckplan.savers.saver import run_saves

    files = {r: [{"path": f"tiny-{r}", "bytes": DCP_TINY_BYTES, "kind": "small", "rank": r}] for r in range(ranks)}
    walls, _ = run_saves(scratch / "dcp", files, "dcp", repeats + 1, "sync", what="the DCP calibration")
    return Spread.of(walls[1:])


def calibrate(preset: str = "default", dcp_ranks: int = 2, progress=None) -> Calibration:
    """Measure this machine's serialisers, deserialisers and DCP's fixed cost; needs PyTorch."""
    from ckplan.savers.saver import max_save_processes

    if not 1 <= dcp_ranks <= max_save_processes():
        raise InputError(
            f"‹ranks› must be 1 to {max_save_processes()} (4 save processes per CPU core here), got {dcp_ranks}"
        )
    if not torch_available():
        raise EnvironmentProblem(
            "calibration needs PyTorch: pip install 'ckplan[torch]' (the CPU build, torch==2.13.0)"
        )
    check_torch_saves("calibration", ("dcp",))  # safetensors is measured where it is installed
    from importlib.metadata import PackageNotFoundError, version

    started = time.monotonic()
    repeats = REPEATS[preset]
    if progress:
        progress.phase(f"calibrate: serialisers and deserialisers, {SAMPLE_BYTES[preset] / MiB:.0f} MiB × {repeats}", 0)
    from ckplan.scratch import CALIBRATE_PREFIX, ScratchDir, remove_tree, scratch_dirs

    # with its owner's pid: what a kill -9 left (up to a sample's size, in RAM where it is /dev/shm) is removed by
    # the next calibration here, or by `ckplan clean DIR`
    for parent in scratch_parents():
        for stale in scratch_dirs(parent, (CALIBRATE_PREFIX,)):
            if not stale.live:
                remove_tree(stale.path)
    # the safetensors sample, its temporary file renamed over it, and the sample the loads read
    with ScratchDir(scratch_parent(3 * SAMPLE_BYTES[preset]), prefix=CALIBRATE_PREFIX) as scratch:
        nbytes, rates, load_rates = measure_codecs(SAMPLE_BYTES[preset], repeats, scratch.path)
        if progress:
            progress.phase(f"calibrate: DCP fixed cost, {dcp_ranks} ranks × {repeats} tiny saves", 0)
        fixed = measure_dcp_fixed(dcp_ranks, repeats, scratch.path)
    try:
        st_version: str | None = version("safetensors")
    except PackageNotFoundError:
        st_version = None
    return Calibration(
        serialize_bytes_per_s={k: v.median for k, v in rates.items()},
        serialize_spread=rates,
        deserialize_bytes_per_s={k: v.median for k, v in load_rates.items()},
        deserialize_spread=load_rates,
        sample_bytes=nbytes,
        tensor_bytes=TENSOR_BYTES,
        dcp_fixed_seconds=fixed.median,
        dcp_fixed_spread=fixed,
        dcp_ranks=dcp_ranks,
        torch_version=version("torch"),
        safetensors_version=st_version,
        host=socket.gethostname(),
        duration_s=time.monotonic() - started,
    )
