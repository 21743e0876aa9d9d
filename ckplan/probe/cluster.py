"""Probe shared storage from many hosts at once through fio's own client/server mode.

Each host runs `fio --server` (`ckplan agent` prints and runs that command);
one `fio --client=HOST job --client=HOST job …` drives them all. Every host's
job file names its files with `filename_format` inside its own scratch
directory (fio creates the directories of a filename_format) and ends with a
stonewalled null-engine job whose `exec_prerun=rm -rf` removes it; after a
failure, the same clean-up job is sent to every host that still answers. fio
redirects a prerun command's output to `JOBNAME.prerun.txt` in the server's
working directory, so the clean-up command removes that file too. fio's client
exits 0 even when a server drops a job, so ckplan checks that every host
reported and names those that did not.

A save finishes when its slowest writer does, so the profile's per-host curve
is the slowest host's; the aggregate curve (all clients) is kept against the
number of hosts writing at once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import secrets
import shlex
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ckplan import children
from ckplan.errors import EnvironmentProblem, InputError, MeasurementFailed
from ckplan.probe import fio, hostlist, jobfiles, target
from ckplan.probe.base import (
    PRESETS,
    SCRATCH_PREFIX,
    PreparedTarget,
    Preset,
    Progress,
    Silent,
    noise_notes,
    writer_counts,
)
from ckplan.profile import BandwidthPoint, Latency, Measurement, Replay, SmallFiles, Spread, StorageProfile

if TYPE_CHECKING:
    from ckplan.probe.clean import CleanResult
    from ckplan.profile import TargetKind

DEFAULT_PORT = 8765
V6_ENTRY = re.compile(r"\[(?P<v6>[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*)\](?::(?P<port>[^:]*))?")
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*")
SLURM_VARIABLES = ("SLURM_JOB_NODELIST", "SLURM_NODELIST")
ENTRY_FORMS = "use host, host:port, [ipv6]:port, a Slurm host list such as node[01-16]:8765, or slurm"


@dataclass(frozen=True)
class Host:
    name: str
    port: int = DEFAULT_PORT

    @property
    def client_arg(self) -> str:
        family = "ip6" if ":" in self.name else "ip"
        return f"--client={family}:{self.name},{self.port}"

    def __str__(self) -> str:
        return f"[{self.name}]:{self.port}" if ":" in self.name else f"{self.name}:{self.port}"


def slurm_nodelist(environ: Mapping[str, str]) -> tuple[str, str]:
    """The job's node list as (variable, hostlist expression): SLURM_JOB_NODELIST, else SLURM_NODELIST."""
    for var in SLURM_VARIABLES:
        if environ.get(var, "").strip():
            return var, environ[var].strip()
    raise InputError(
        "‹hosts› slurm reads the job's nodes from SLURM_JOB_NODELIST or SLURM_NODELIST, and neither is set: "
        "run it inside a Slurm job (sbatch, salloc) or name the hosts"
    )


def parse_hosts(
    spec: str | None,
    hosts_file: Path | None,
    environ: Mapping[str, str] | None = None,
    notice: Callable[[str], None] | None = None,
    limit: int = hostlist.MAX_HOSTS,
) -> list[Host]:
    """The hosts of `--hosts` and `--hosts-file`: comma-separated entries, each a host, a Slurm host list
    (`gpu[001-016,020]`, `io[1-2]-ib`) or `slurm` (the job's nodes), optionally followed by :PORT, which applies to
    every host of that entry. `notice` is told which nodes `slurm` found."""
    environ = os.environ if environ is None else environ
    sources: list[tuple[str, str]] = [("‹hosts›", spec)] if spec else []
    if hosts_file:
        from ckplan.readers import read_text_file

        lines = read_text_file(hosts_file, "‹hosts_file›").splitlines()
        sources += [(f"‹hosts_file› line {i}", line.split("#")[0].strip()) for i, line in enumerate(lines, 1)]
    hosts: list[Host] = []
    for where, text in sources:
        try:
            entries = [e.strip() for e in hostlist.split_top(text)]
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
        for entry in filter(None, entries):
            hosts += _entry(entry, where, environ, notice, limit - len(hosts), len(hosts))
    if not hosts:
        raise InputError("‹hosts› or ‹hosts_file› names no hosts")
    seen: set[Host] = set()
    for h in hosts:
        if h in seen:
            raise InputError(f"host {h} is listed twice")
        seen.add(h)
    return hosts


def _entry(
    entry: str, where: str, environ: Mapping[str, str], notice: Callable[[str], None] | None, room: int, before: int
) -> list[Host]:
    """The hosts of one entry; `room` more may be added to the `before` already named."""
    m = V6_ENTRY.fullmatch(entry)
    expr, port_text = (m["v6"], m["port"]) if m else entry.split(":", 1) if entry.count(":") == 1 else (entry, None)
    if ":" in entry and not m and entry.count(":") != 1:
        raise InputError(f"{where}: bad host entry {entry!r}: {ENTRY_FORMS}")
    port = DEFAULT_PORT
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise InputError(f"{where}: bad port in host entry {entry!r}: give a number 1-65535 after the colon")
        port = int(port_text)
    if m:
        return [Host(expr, port)]
    source = ""
    if expr == "slurm":
        var, expr = slurm_nodelist(environ)
        source = f" (slurm: {var}={expr})"
    try:
        n = hostlist.count(expr)
        if n > room:
            total = f", {before + n:,} in all" if before else ""
            raise InputError(f"{expr!r} expands to {n:,} hosts{total}; at most {room + before:,} are allowed")
        names = hostlist.expand(expr, limit=room)
    except InputError as exc:
        raise InputError(f"{where}{source}: {exc}") from None
    for name in names:
        if not HOST_NAME.fullmatch(name):
            raise InputError(f"{where}{source}: bad host name {name!r} in {entry!r}: {ENTRY_FORMS}")
    if source and notice:
        shown = ", ".join(names[:8]) + (f", … ({len(names) - 8} more)" if len(names) > 8 else "")
        notice(f"--hosts slurm: {len(names)} node{'s' if len(names) != 1 else ''} in ${var} ({expr}): {shown}")
    return [Host(name, port) for name in names]


def wait_for_agents(hosts: list[Host], timeout_s: float, poll_s: float = 0.5) -> None:
    """Return once every host accepts a TCP connection on its port (agents that srun started a moment ago), or
    raise naming those that did not within `timeout_s`. A fio server takes a connection that closes at once as
    a client that left."""
    pending = list(hosts)
    deadline = time.monotonic() + timeout_s
    while True:
        for host in list(pending):
            try:
                with socket.create_connection((host.name, host.port), timeout=min(2.0, max(0.1, timeout_s))):
                    pending.remove(host)
            except socket.gaierror:
                raise InputError(
                    f"host {host.name!r} does not resolve to an address: check ‹hosts› or ‹hosts_file›"
                ) from None
            except OSError:
                pass
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise EnvironmentProblem(
                f"no agent answered on {', '.join(map(str, pending))} within {timeout_s:g} s "
                "(start one on each host with `ckplan agent`)"
            )
        time.sleep(poll_s)


def agent_command(bind: str, port: int) -> list[str]:
    family = "ip6" if ":" in bind else "ip"
    return [fio.fio_binary(), f"--server={family}:{bind},{port}"]


def is_loopback(addr: str) -> bool:
    return addr in ("localhost", "::1") or addr.startswith("127.")


@dataclass
class ClusterRun:
    """The job text per host and the scratch directory each one writes into."""

    hosts: list[Host]
    path: Path
    run_id: str
    marker: str = field(default_factory=target.marker_text)  # this process owns every host's scratch directory

    def scratch(self, host: Host) -> str:
        label = re.sub(r"[^A-Za-z0-9.-]", "_", str(host))
        return str(self.path / f"{SCRATCH_PREFIX}{self.run_id}-{label}")

    def jobfile(self, host: Host, jobs: list[fio.FioJob]) -> str:
        scratch = self.scratch(host)
        head = fio.FioJob(
            "global", {"filename_format": f"{fio.escape_path(scratch)}/$jobname.$jobnum.$filenum", "fallocate": "none"}
        )
        # fio reports a group under its first job's name: the measuring jobs start a group of their own, or
        # group_reporting would fold them into the marker job's and no host would report the phase
        first = fio.FioJob(jobs[0].name, {**jobs[0].options, "new_group": 1})
        return (
            head.render()
            + marker_job(scratch, self.marker).render()
            + "".join(job.render() for job in [first, *jobs[1:]])
            + cleanup_job(scratch).render()
        )


CLEANUP_JOB = "ckplan-cleanup"
MARKER_JOB = "ckplan-marker"
NOT_MEASURED = ("All clients", CLEANUP_JOB, MARKER_JOB)  # client_stats entries that are no host's measurement


def marker_job(scratch: str, marker: str) -> fio.FioJob:
    """Writes the owner marker of probe/target.py into the scratch directory, as a filesystem probe does, so that
    `ckplan clean` keeps a running multi-host probe's directory and other probes see it. In a subshell: fio
    appends `> MARKER_JOB.prerun.txt 2>&1` to the command, which would otherwise take echo's output."""
    quoted = shlex.quote(scratch)
    return fio.FioJob(
        MARKER_JOB,
        {
            "ioengine": "null",
            "size": "4k",
            "exec_prerun": f"(mkdir -p {quoted} && echo {shlex.quote(marker)} > {quoted}/{target.MARKER})",
        },
    )


def cleanup_job(scratch: str) -> fio.FioJob:
    # the shell opens the redirect to CLEANUP_JOB.prerun.txt before rm runs, so rm removes it as well, with
    # MARKER_JOB's; fio cuts option values at ';' and '#', hence one command and not a list
    return fio.FioJob(
        CLEANUP_JOB,
        {
            "stonewall": 1,
            "ioengine": "null",
            "size": "1M",
            "exec_prerun": f"rm -rf {shlex.quote(scratch)} {CLEANUP_JOB}.prerun.txt {MARKER_JOB}.prerun.txt",
        },
    )


def run_clients(
    run: ClusterRun,
    jobs_by_host: dict[Host, list[fio.FioJob]],
    what: str,
    timeout_s: float,
    note: jobfiles.Note | None = None,
) -> dict:
    """One fio client run, every host at once; every host must report, or the error names the ones that did not."""
    hosts = list(jobs_by_host)
    with tempfile.TemporaryDirectory(prefix="ckplan-cluster-") as tmp:
        args = [fio.fio_binary(), "--output-format=json"]
        texts = {}
        for i, (host, jobs) in enumerate(jobs_by_host.items()):
            job = Path(tmp) / f"host{i}.fio"
            texts[str(job)] = run.jobfile(host, jobs)
            job.write_text(texts[str(job)])
            args += [host.client_arg, str(job)]
        if note is not None:
            jobfiles.record(args, texts, note)
        try:
            proc = subprocess.run(
                args, capture_output=True, text=True, timeout=timeout_s, preexec_fn=children.preexec()
            )
        except subprocess.TimeoutExpired:
            raise MeasurementFailed(
                f"fio's client did not finish {what} within {timeout_s:.0f} s (a host may have hung)"
            ) from None
    out, err = proc.stdout, proc.stderr
    # Exit codes: a name that does not resolve is a typo in --hosts (2); a host nobody answers on, or a
    # server of another fio version, is the environment (3); a server that answered and then went away,
    # or a job that failed, is a failed measurement (4).
    for line in (err + out).splitlines():
        m = re.search(r"failed to resolve <(.*?)>", line)
        if m:
            raise InputError(f"host {m.group(1)!r} does not resolve to an address: check ‹hosts› or ‹hosts_file›")
        m = re.search(r"failed to connect to (\S+?):(\d+)", line)
        if m:
            raise EnvironmentProblem(
                f"host {m.group(1)}:{m.group(2)} is unreachable during {what}: no fio server answers "
                f"there (start one with `ckplan agent`)"
            )
        m = re.search(r"host=(\S+) (disconnected|timed out)", line)
        if m:
            raise MeasurementFailed(
                f"host {m.group(1)} {m.group(2)} during {what}: its fio server is unreachable, died, "
                "or runs another fio version"
            )
        if "version" in line.lower() and "mismatch" in line.lower():
            raise EnvironmentProblem(
                f"fio version mismatch between this client and a server during {what}: {line.strip()}"
            )
    docs = fio.json_documents(out)
    stats = docs[-1].get("client_stats", []) if docs else []
    reported = {c.get("hostname") for c in stats if c.get("jobname") not in NOT_MEASURED}
    missing = [h for h in hosts if h.name not in reported]
    if missing:
        dropped = next((ln.split("> ", 1)[-1] for ln in out.splitlines() if ln.startswith("<") and "fio:" in ln), "")
        raise MeasurementFailed(
            f"host(s) {', '.join(map(str, missing))} did not report {what}"
            + (f": {dropped.strip()}" if dropped else " (a server died or dropped the job)")
        )
    for c in stats:
        if int(c.get("error", 0)):
            raise MeasurementFailed(f"host {c.get('hostname')}: {fio.describe_errno(int(c['error']), what)}")
    return docs[-1]


def cleanup(run: ClusterRun) -> None:
    """Send the clean-up job to every host that still answers; those that do not are named by the caller's error."""
    for host in run.hosts:
        with tempfile.NamedTemporaryFile("w", suffix=".fio") as job:
            job.write(cleanup_job(run.scratch(host)).render())
            job.flush()
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(
                    [fio.fio_binary(), host.client_arg, job.name],
                    capture_output=True,
                    timeout=20,
                    preexec_fn=children.preexec(),
                )


def per_host(doc: dict, field: str = "bw_bytes", jobname: str | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in doc.get("client_stats", []):
        if c.get("jobname") in NOT_MEASURED or (jobname and c.get("jobname") != jobname):
            continue
        out[c["hostname"]] = out.get(c["hostname"], 0.0) + float(c["write"][field])
    return out


def all_clients(doc: dict) -> float:
    agg = [c for c in doc.get("client_stats", []) if c.get("jobname") == "All clients"]
    return float(agg[0]["write"]["bw_bytes"]) if agg else sum(per_host(doc).values())


@dataclass(frozen=True)
class ClusterJob:
    path: Path
    hosts: list[Host]
    preset: Preset
    writers: int
    bytes_per_writer: int
    plan: object | None
    scale: float
    name: str | None
    emit_jobs: Path | None = None  # write every fio run's job files and run.sh here (ckplan.probe.jobfiles)

    @property
    def estimated_seconds(self) -> float:
        points = len(writer_counts(self.writers)) + len(writer_counts(len(self.hosts)))
        return (
            points * self.preset.repeats * self.preset.point_runtime_s(self.writers)
            + self.preset.small_files_budget_s
            + 5
        )


def prepare_cluster_probe(
    path: Path,
    hosts: list[Host],
    *,
    preset: str = "default",
    writers: int | None = None,
    plan=None,
    scale: float = 1.0,
    name: str | None = None,
    emit_jobs: Path | None = None,
) -> ClusterJob:
    fio.fio_binary()
    if not path.is_absolute():
        raise InputError(f"give the target as an absolute path, as the hosts see it: {path}")
    fio.check_job_path(path)
    w = writers or (plan.max_writers_per_node if plan else 1)
    if emit_jobs is not None:
        emit_jobs = jobfiles.check_dir(emit_jobs)  # JobWriter creates it when it writes the first job file
    # many hosts write to one target at once: a quarter of the single-host size per writer keeps the
    # space the probe takes on shared storage bounded; the runtime cap still ends most points first
    return ClusterJob(
        path=path,
        hosts=hosts,
        preset=PRESETS[preset],
        writers=w,
        bytes_per_writer=PRESETS[preset].bytes_per_writer // 4,
        plan=plan,
        scale=scale,
        name=name,
        emit_jobs=emit_jobs,
    )


def run_cluster_probe(job: ClusterJob, progress: Progress | None = None) -> StorageProfile:
    progress = progress or Silent()
    run = ClusterRun(job.hosts, job.path, f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}")
    started = time.monotonic()
    runtime = job.preset.point_runtime_s(job.writers)
    timeout = 3 * job.estimated_seconds + 60
    raw: list[dict] = []
    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    tool = fio.fio_version()
    writer = None
    if job.emit_jobs is not None:
        writer = jobfiles.JobWriter(
            job.emit_jobs,
            fio_version=tool,
            about=f"the probe of {job.path} from {len(job.hosts)} hosts, driven from {socket.gethostname()} at {date}",
        )
    try:
        with jobfiles.emitting(writer):
            bandwidth, spread_note = _sweep_writers(job, run, runtime, timeout, progress, raw)
            aggregate = _sweep_hosts(job, run, runtime, timeout, progress, raw)
            small, aggregate_files, latency = _small_files(job, run, timeout, progress, raw)
            replayed = _replay(job, run, timeout, progress, raw) if job.plan is not None else None
    except BaseException:
        cleanup(run)
        raise
    return StorageProfile(
        target_kind="hosts",
        name=job.name or f"{len(job.hosts)} hosts:{job.path}",
        target=str(job.path),
        fs_type="shared (multi-host)",
        storage_class="multi-host",
        shared=True,
        hosts=len(job.hosts),
        direct_io=None,
        buffered_bandwidth=bandwidth,
        aggregate_bandwidth=aggregate,
        best_write_bytes_per_s=max(b.bytes_per_s for b in bandwidth),
        small_files=small,
        aggregate_files_per_s=aggregate_files,
        fsync_latency=latency,
        replay=replayed,
        mount_options={"hosts": ",".join(map(str, job.hosts))},
        # the small-file spread here is across hosts, not repeats, so only bandwidth is checked for noise
        notes=[spread_note, "buffered writes with a final fsync (end_fsync) on every host"] + noise_notes(bandwidth),
        raw_fio=raw,
        measurement=Measurement(
            tool=f"{tool} client/server",
            date=date,
            host=socket.gethostname(),
            preset=job.preset.name,
            duration_s=time.monotonic() - started,
            bandwidth_bytes_per_writer=job.bytes_per_writer,
            runtime_cap_s=runtime,
            repeats=job.preset.repeats,
            jobs_dir=str(job.emit_jobs) if writer else None,
            jobs=writer.jobs if writer else [],
        ),
    )


def _bw_job(w: int, size: int, runtime: float) -> fio.FioJob:
    return fio.FioJob(
        "bw",
        {
            "rw": "write",
            "bs": "1M",
            "size": size,
            "numjobs": w,
            "ioengine": "psync",
            "end_fsync": 1,
            "runtime": f"{runtime}s",
            "group_reporting": 1,
            "unlink": 1,
        },
    )


def _sweep_writers(job, run, runtime, timeout, progress, raw) -> tuple[list[BandwidthPoint], str]:
    """All hosts at once at 1, 2, 4 … writers each; the curve is the slowest host's (a save waits for it)."""
    points, straggler = [], ""
    for w in writer_counts(job.writers):
        slowest = []
        for r in range(job.preset.repeats):
            progress.phase(f"{len(job.hosts)} hosts × {w} writer(s), run {r + 1}/{job.preset.repeats}", runtime)
            note = jobfiles.Note(
                f"bandwidth, {w} writer(s) on every host",
                f"every host at once: sequential 1 MiB writes through the page "
                f"cache by {w} writer(s) per host, one file each, ending with an fsync (end_fsync=1) inside the runtime cap",
                f"buffered_bandwidth (writers={w}).bytes_per_s: the slowest host's figure, run {r + 1} of "
                f"{job.preset.repeats}; the profile keeps the median of the runs, with their min…max (spread)",
                "client_stats[] with jobname bw: write.bw_bytes per hostname (bytes/s), the smallest of them",
                raw_fio=len(raw),
                name=f"bw-{w}w",
            )
            doc = run_clients(
                run,
                {h: [_bw_job(w, job.bytes_per_writer, runtime)] for h in job.hosts},
                f"the bandwidth phase ({w} writers)",
                timeout,
                note,
            )
            raw.append(doc)
            hosts = per_host(doc, jobname="bw")
            slowest.append(min(hosts.values()))
            if w == job.writers and r == 0:
                fast, slow = max(hosts, key=lambda h: hosts[h]), min(hosts, key=lambda h: hosts[h])
                straggler = (
                    f"per host at {w} writers: "
                    + ", ".join(f"{h} {v / 1e6:.0f} MB/s" for h, v in sorted(hosts.items()))
                    + f"; straggler {slow} at {hosts[slow] / hosts[fast]:.0%} of {fast}; "
                    f"all clients {all_clients(doc) / 1e6:.0f} MB/s"
                )
        spread = Spread.of(slowest)
        points.append(BandwidthPoint(writers=w, hosts=1, bytes_per_s=spread.median, spread=spread))
    return points, straggler


def _sweep_hosts(job, run, runtime, timeout, progress, raw) -> list[BandwidthPoint]:
    """1, 2, 4 … hosts writing at once: where the aggregate stops growing."""
    points = []
    for h in writer_counts(len(job.hosts)):
        values = []
        for r in range(job.preset.repeats):
            progress.phase(f"scaling: {h} host(s) × {job.writers} writer(s), run {r + 1}/{job.preset.repeats}", runtime)
            note = jobfiles.Note(
                f"host scaling, {h} host(s) at once",
                f"the first {h} host(s) at once, {job.writers} writer(s) each: "
                "sequential 1 MiB writes through the page cache, one file per writer, ending with an fsync (end_fsync=1)",
                f"aggregate_bandwidth (hosts={h}).bytes_per_s: run {r + 1} of {job.preset.repeats}; the profile keeps "
                "the median of the runs, with their min…max (spread)",
                "client_stats[] with jobname 'All clients': write.bw_bytes (bytes/s)",
                raw_fio=len(raw),
                name=f"scaling-{h}h",
            )
            doc = run_clients(
                run,
                {host: [_bw_job(job.writers, job.bytes_per_writer, runtime)] for host in job.hosts[:h]},
                f"the host-scaling phase ({h} hosts)",
                timeout,
                note,
            )
            raw.append(doc)
            values.append(all_clients(doc))
        spread = Spread.of(values)
        points.append(BandwidthPoint(writers=job.writers, hosts=h, bytes_per_s=spread.median, spread=spread))
    return points


SMALL_FILES_PER_WRITER = {"quick": 32, "default": 128, "thorough": 512}


def _small_files(job, run, timeout, progress, raw) -> tuple[SmallFiles, float, Latency]:
    """Create+write+fsync+close of 16 KiB files from every writer on every host, then fsync latency."""
    nrfiles = SMALL_FILES_PER_WRITER[job.preset.name]
    progress.phase(
        f"small files and fsync latency: {len(job.hosts)} hosts × {job.writers} writers",
        job.preset.small_files_runtime_s,
    )
    small = fio.FioJob(
        "small",
        {
            "rw": "write",
            "bs": "16k",
            "filesize": "16k",
            "nrfiles": nrfiles,
            "openfiles": 1,
            "create_on_open": 1,
            "fsync_on_close": 1,
            "file_service_type": "sequential",
            "ioengine": "psync",
            "numjobs": job.writers,
            "unlink": 1,
        },
    )
    lat = fio.FioJob(
        "fsync",
        {
            "stonewall": 1,
            "rw": "write",
            "bs": "4k",
            "size": "4M",
            "ioengine": "psync",
            "fsync": 1,
            "runtime": "2s",
            "percentile_list": "50:99:99.9",
            "unlink": 1,
        },
    )
    note = jobfiles.Note(
        "small files, then fsync latency",
        f"every host at once: {job.writers} writer(s) each creating, writing, fsyncing "
        f"and closing {nrfiles} files of 16 KiB (unlinked after); then (stonewall) 4 KiB writes each followed by an fsync",
        "small_files.files_per_s (the slowest host's), aggregate_files_per_s (all hosts' sum), fsync_latency (the "
        "host with the worst p99)",
        f"files/s per host = {nrfiles} × {job.writers} × 1000 ÷ the longest client_stats[jobname small].write.runtime (ms) "
        "of that host (every file completes, so fio's nrfiles is the count); fsync latency: client_stats[jobname fsync]"
        ".sync.lat_ns percentiles, in ns",
        raw_fio=len(raw),
    )
    doc = run_clients(run, {h: [small, lat] for h in job.hosts}, "the small-file phase", timeout, note)
    raw.append(doc)
    longest: dict[str, float] = {}
    for c in doc["client_stats"]:
        if c.get("jobname") == "small":
            longest[c["hostname"]] = max(longest.get(c["hostname"], 0.0), int(c["write"]["runtime"]) / 1000)
    rates = [nrfiles * job.writers / max(t, 1e-3) for t in longest.values()]
    files = SmallFiles(
        files_per_s=min(rates),
        ops_per_s=4 * min(rates),
        file_bytes_min=16384,
        file_bytes_max=16384,
        writers=job.writers,
        spread=Spread.of(rates),
    )
    worst = Latency(p50_s=0, p99_s=0, p999_s=0)
    for c in doc["client_stats"]:
        if c.get("jobname") == "fsync":
            p50, p99, p999, mean, n = fio.percentiles_s(c["sync"], "lat_ns")
            if p99 > worst.p99_s:
                worst = Latency(p50_s=p50, p99_s=p99, p999_s=p999, mean_s=mean, samples=n)
    return files, sum(rates), worst


def _replay(job, run, timeout, progress, raw) -> Replay:
    """Host k writes node k's share: one fio job per rank, writing that rank's files one after another,
    each fsynced on close. fio draws each file's size within the rank's smallest…largest file, so a rank
    with files of mixed sizes is approximated; the bytes written are reported as fio counted them."""

    nodes = sorted({f.node for f in job.plan.manifest})[: len(job.hosts)]
    hosts = job.hosts[: len(nodes)]
    progress.phase(f"replay: {len(nodes)} node(s) on {len(hosts)} host(s), scale {job.scale:g}", 0)
    jobs_by_host: dict[Host, list[fio.FioJob]] = {}
    for host, node in zip(hosts, nodes, strict=False):
        ranks: dict[int, list[int]] = {}
        for f in job.plan.manifest:
            if f.node == node:
                ranks.setdefault(f.rank, []).append(max(4096, int(f.bytes * job.scale)))
        jobs_by_host[host] = [
            fio.FioJob(
                f"rank{rank}",
                {
                    "rw": "write",
                    "bs": "1M",
                    "nrfiles": len(sizes),
                    "filesize": f"{min(sizes)}-{max(sizes)}" if len(set(sizes)) > 1 else sizes[0],
                    "file_service_type": "sequential",
                    "openfiles": 1,
                    "create_on_open": 1,
                    "fsync_on_close": 1,
                    "ioengine": "psync",
                    "unlink": 1,
                },
            )
            for rank, sizes in ranks.items()
        ]
    note = jobfiles.Note(
        "replay",
        f"host k writes node k's share of the plan at scale {job.scale:g}: one job per rank writing its files "
        "one after another, each fsynced on close",
        "replay.seconds, replay.bytes, replay.files",
        "seconds = the longest client_stats[jobname rankN].write.runtime (ms) ÷ 1000; bytes = the sum of their "
        "write.io_bytes",
        raw_fio=len(raw),
        name="replay",
    )
    doc = run_clients(run, jobs_by_host, "the replay", timeout, note)
    raw.append(doc)
    ranks_stats = [c for c in doc["client_stats"] if str(c.get("jobname", "")).startswith("rank")]
    seconds = max(max(int(c["write"]["runtime"]) for c in ranks_stats) / 1000, 1e-3)
    written = sum(int(c["write"]["io_bytes"]) for c in ranks_stats)
    files = sum(int(j.options["nrfiles"]) for jobs in jobs_by_host.values() for j in jobs)
    full = sum(f.bytes for f in job.plan.manifest if f.node in nodes)
    return Replay(
        seconds=seconds,
        bytes=written,
        files=files,
        writers=max(len(j) for j in jobs_by_host.values()),
        nodes=len(nodes),
        scale=job.scale,
        plan_fingerprint=job.plan.fingerprint,
        full_scale_seconds=seconds * full / written,
    )


class HostsTarget(PreparedTarget):
    """A directory as many hosts see it, measured by their fio servers at once (probe/interface.py's ProbeTarget)."""

    kind: TargetKind = "hosts"

    def _prepare(self) -> ClusterJob:
        s = self.spec
        hosts = parse_hosts(s.hosts, s.hosts_file, notice=s.notice)
        job = prepare_cluster_probe(
            Path(s.path),
            hosts,
            preset=s.preset,
            writers=s.writers,
            plan=s.plan,
            scale=s.scale,
            name=s.name,
            emit_jobs=s.emit_jobs,
        )
        if s.agent_wait_s is not None:
            wait_for_agents(hosts, s.agent_wait_s)
        return job

    def _run(self, job: ClusterJob, progress: Progress | None) -> StorageProfile:
        return run_cluster_probe(job, progress)

    def clean(self, force: bool = False) -> CleanResult:
        raise InputError(
            "clean a multi-host target from each host: `ckplan clean PATH` there (each host's scratch "
            "directory belongs to its fio server)"
        )
