"""Rich rendering of a StorageProfile, a live probe progress display, and the profiles list."""

from __future__ import annotations

import time

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ckplan.profile import StorageProfile
from ckplan.profile_store import ProfileList
from ckplan.render.console import console, err_console, shown
from ckplan.units import fmt_bytes, fmt_duration, fmt_rate


def _spread(s, fmt) -> str:
    if s is None or s.repeats < 2:
        return ""
    return f"{fmt(s.min)} … {fmt(s.max)} (n={s.repeats}, range {s.relative_range * 100:.1f}%)"


def render_profile(p: StorageProfile) -> None:
    out = console()
    objects = p.target_kind == "s3"
    _render_where(p, objects)
    _render_bandwidth(p, objects)
    s = p.small_files
    how = "one PUT each" if objects else "create+write+fsync+close"
    out.print(
        f"Small {'objects' if objects else 'files'} ({fmt_bytes(s.file_bytes_min)}–{fmt_bytes(s.file_bytes_max)}, {how}, "
        f"{s.writers} writers): [bold]{s.files_per_s:,.0f} files/s[/bold], {s.ops_per_s:,.0f} ops/s "
        + _spread(s.spread, lambda v: f"{v:,.0f}")
    )
    out.print(_latency_table(p, objects))
    if p.replay:
        r = p.replay
        out.print(
            f"Replay of one node's share ({shown(r.method)}, {shown(r.write_path)} writes): {r.files} files, "
            f"{fmt_bytes(r.bytes)} "
            f"from {r.writers} writers at scale {r.scale:g}: [bold]{fmt_duration(r.seconds)}[/bold] "
            f"({fmt_rate(r.bytes / r.seconds)}) "
            + _spread(r.spread, fmt_duration)
            + f"; at full size ≈ {fmt_duration(r.full_scale_seconds)}"
        )
    if p.calibration:
        c = p.calibration
        out.print(
            "This machine's serialisers (measured here, one writer per core, into /dev/null): "
            + ", ".join(
                f"{shown(fmt)} {fmt_rate(v)} " + _spread(c.serialize_spread.get(fmt), fmt_rate)
                for fmt, v in c.serialize_bytes_per_s.items()
            )
            + (
                f"; DCP fixed cost per save {fmt_duration(c.dcp_fixed_seconds)} ({c.dcp_ranks} ranks) "
                + _spread(c.dcp_fixed_spread, fmt_duration)
                if c.dcp_fixed_seconds is not None
                else ""
            )
        )
    for note in p.notes:
        out.print(f"[yellow]note:[/yellow] {shown(note)}")


def _render_where(p: StorageProfile, objects: bool) -> None:
    """What was measured, where, and how."""
    out = console()
    mode = {True: "buffered and direct I/O measured", False: "buffered only (O_DIRECT refused)", None: "n/a"}[
        p.direct_io
    ]
    if objects:
        where = f"endpoint {shown(p.mount_options.get('endpoint', '-'))}, region {shown(p.mount_options.get('region', '-'))}"
    elif p.target_kind == "hosts":
        where = f"{p.hosts} hosts ({shown(p.mount_options.get('hosts', '-'))})"
    else:
        where = f"mounted at {shown(p.mount_point or '-')}, {mode}"
    out.print(
        f"[bold]{shown(p.name)}[/bold]: {shown(p.target)} — {shown(p.fs_type)} ({shown(p.storage_class)}), {where}, "
        f"{'shared' if p.shared else 'node-local'}"
    )
    interesting = {
        k: v
        for k, v in p.mount_options.items()
        if k in ("nconnect", "rsize", "wsize", "vers", "proto", "hard", "soft", "ro", "sync")
    }
    if interesting:
        out.print("mount options: " + ", ".join(f"{k}={shown(v)}" if v else k for k, v in interesting.items()))
    if p.labels:
        out.print("labels: " + ", ".join(f"{shown(k)}={shown(v)}" for k, v in p.labels.items()))
    if p.placement:
        out.print(
            "placement: "
            + ", ".join(
                f"{shown(h.host)} on node {shown(h.node)}" + (f" (pod {shown(h.pod)})" if h.pod else "")
                for h in p.placement
            )
        )
    m = p.measurement
    out.print(
        f"measured with {shown(m.tool)} on {shown(m.host)} at {shown(m.date)}, preset {shown(m.preset)}, "
        f"{fmt_duration(m.duration_s)}"
        + (
            f", up to {fmt_bytes(m.bandwidth_bytes_per_writer)} per writer, {m.runtime_cap_s:g} s per point"
            if m.bandwidth_bytes_per_writer
            else ""
        )
    )
    if m.jobs_dir:
        out.print(
            f"fio job files of its {len(m.jobs)} runs, in order: {shown(m.jobs_dir)} "
            f"(`sh {shown(m.jobs_dir)}/run.sh` runs them again)"
        )


def _render_bandwidth(p: StorageProfile, objects: bool) -> None:
    out = console()
    table = Table(
        title="Write bandwidth against concurrent multipart streams"
        if objects
        else "Write bandwidth against writers per host, slowest host (flushed)"
        if p.target_kind == "hosts"
        else "Write bandwidth against writers (flushed)",
        title_justify="left",
    )
    for col in ("write path", "writers", "hosts", "median", "min … max"):
        table.add_column(col, justify="right" if col != "write path" else "left")
    # buffered first: torch.save, DCP and safetensors all write through the page cache
    for path, curve in (
        ("buffered" if not objects else "streams", p.buffered_bandwidth),
        ("direct (O_DIRECT)", p.direct_bandwidth),
    ):
        for b in curve:
            table.add_row(path, str(b.writers), str(b.hosts), fmt_rate(b.bytes_per_s), _spread(b.spread, fmt_rate))
    out.print(table)
    if p.aggregate_bandwidth:
        agg = Table(
            title=f"Aggregate bandwidth against hosts writing at once ({p.aggregate_bandwidth[0].writers} writers each)",
            title_justify="left",
        )
        for col in ("hosts", "all clients", "per host", "min … max"):
            agg.add_column(col, justify="right")
        for b in p.aggregate_bandwidth:
            agg.add_row(
                str(b.hosts), fmt_rate(b.bytes_per_s), fmt_rate(b.bytes_per_s / b.hosts), _spread(b.spread, fmt_rate)
            )
        out.print(agg)


def _latency_table(p: StorageProfile, objects: bool) -> Table:
    lat = Table(title="Latency", title_justify="left")
    for col in ("operation", "p50", "p99", "p99.9"):
        lat.add_column(col, justify="right" if col != "operation" else "left")
    lat.add_row(
        "small-object PUT" if objects else "fsync after a 4 KiB write",
        *(fmt_duration(v) for v in (p.fsync_latency.p50_s, p.fsync_latency.p99_s, p.fsync_latency.p999_s)),
    )
    if p.sync_write_latency:
        w = p.sync_write_latency
        lat.add_row("4 KiB O_SYNC write", *(fmt_duration(v) for v in (w.p50_s, w.p99_s, w.p999_s)))
    return lat


def render_calibration(c) -> None:
    out = console()
    table = Table(
        title=f"Serialisers on {shown(c.host)}, one writer on one core, into /dev/null "
        f"({fmt_bytes(c.sample_bytes)} of fp32 tensors of {fmt_bytes(c.tensor_bytes)})",
        title_justify="left",
    )
    for col in ("serialiser", "median", "min … max"):
        table.add_column(col, justify="right" if col != "serialiser" else "left")
    for fmt, v in c.serialize_bytes_per_s.items():
        table.add_row(shown(fmt), fmt_rate(v), _spread(c.serialize_spread.get(fmt), fmt_rate))
    out.print(table)
    if c.deserialize_bytes_per_s:
        loads = Table(
            title="Deserialisers, one reader on one core, from bytes in memory (torch.load; safetensors load_file, "
            "pages touched; DCP's per-item torch.load and copy)",
            title_justify="left",
        )
        for col in ("format", "median", "min … max"):
            loads.add_column(col, justify="right" if col != "format" else "left")
        for fmt, v in c.deserialize_bytes_per_s.items():
            loads.add_row(shown(fmt), fmt_rate(v), _spread(c.deserialize_spread.get(fmt), fmt_rate))
        out.print(loads)
    if c.dcp_fixed_seconds is not None:
        out.print(
            f"DCP fixed cost per save ({c.dcp_ranks} ranks over gloo, a few KiB each): "
            f"[bold]{fmt_duration(c.dcp_fixed_seconds)}[/bold] " + _spread(c.dcp_fixed_spread, fmt_duration)
        )
    out.print(
        f"torch {shown(c.torch_version)}, safetensors {shown(c.safetensors_version or 'not installed')}; "
        f"took {fmt_duration(c.duration_s)}. "
        'Stored in a profile by `ckplan probe`, these replace the defaults in every prediction (labelled "measured here").'
    )


class LiveProgress:
    """Current phase, live MB/s and time left, drawn on stderr so --json output stays clean."""

    def __init__(self, total_s: float):
        self.total_s = total_s
        self.started = time.monotonic()
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("~{task.fields[left]} left"),
            console=err_console(),
            transient=True,
        )
        self.task = self.progress.add_task("starting", total=total_s, rate="", left=fmt_duration(total_s))

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def _tick(self, **fields):
        elapsed = time.monotonic() - self.started
        left = max(self.total_s - elapsed, 0)
        self.progress.update(self.task, completed=min(elapsed, self.total_s), left=fmt_duration(left), **fields)

    def phase(self, name: str, budget_s: float) -> None:
        self._tick(description=shown(name), rate="")  # rich reads a task's description as markup

    def update(self, bytes_written: int, elapsed_s: float) -> None:
        self._tick(rate=f"{fmt_rate(bytes_written / elapsed_s)}" if elapsed_s > 0 else "")


class _NoDisplay:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def phase(self, name: str, budget_s: float) -> None:
        pass

    def update(self, bytes_written: int, elapsed_s: float) -> None:
        pass


def live_progress(total_s: float):
    """A live display on a terminal; nothing when stderr is a pipe or a file."""
    return LiveProgress(total_s) if err_console().is_terminal else _NoDisplay()


def render_profiles(listing: ProfileList) -> None:
    table = Table(title="Storage profiles", title_justify="left")
    for col in ("name", "source", "class", "fs", "best write", "files/s", "fsync p99", "where"):
        table.add_column(col)
    for r in listing.profiles:
        table.add_row(
            shown(r.name),
            shown(r.source),
            shown(r.storage_class),
            shown(r.fs_type),
            fmt_rate(r.best_write_bytes_per_s),
            f"{r.files_per_s:,.0f}",
            fmt_duration(r.fsync_p99_s),
            shown(r.location),
        )
    console().print(table)
