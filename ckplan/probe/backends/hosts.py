"""The hosts backend: a directory as many hosts see it, measured by their fio servers at once (fio --client).

Each host runs `fio --server` (`ckplan agent`); one `fio --client=HOST job --client=HOST job …` drives them all.
Every host's job file names its files with `filename_format` inside its own scratch directory (fio creates the
directories of a filename), begins with a job writing the owner marker there and ends with a stonewalled job
whose `exec_prerun=rm -rf` removes it; after a failure, the same clean-up job is sent to every host that still
answers. fio redirects a prerun command's output to `JOBNAME.prerun.txt` in the server's working directory, so
the clean-up removes that file too. fio's client exits 0 even when a server drops a job, so every host must
report, or the error names those that did not.
"""

from __future__ import annotations

import contextlib
import errno
import re
import shlex
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from ckplan import children, scratch
from ckplan.confine import confined_key
from ckplan.errors import EnvironmentProblem, InputError, MeasurementFailed
from ckplan.probe import fio, hostlist, jobfiles, target
from ckplan.probe.engine import (
    PRESETS,
    Facts,
    FileToWrite,
    Progress,
    RunNote,
    SmallRun,
    Stream,
    StreamPath,
    TargetSpec,
)
from ckplan.profile import Latency, TargetKind

CLEANUP_JOB = "ckplan-cleanup"
MARKER_JOB = "ckplan-marker"
NOT_MEASURED = ("All clients", CLEANUP_JOB, MARKER_JOB)  # client_stats entries that are no host's measurement


class HostsBackend:
    kind: TargetKind = "hosts"

    def __init__(self, spec: TargetSpec):
        self.spec, self.path = spec, Path(spec.path)
        self.hosts: list[hostlist.Host] = []
        p = PRESETS[spec.preset]
        # a run that takes thrice the whole probe's budget has hung
        self.timeout_s = 3 * (p.bandwidth_budget_s + p.small_files_budget_s + 2 * p.latency_runtime_s) + 60

    def prepare(self, spec: TargetSpec) -> Facts:
        self.hosts = hostlist.parse_hosts(spec.hosts, spec.hosts_file, notice=spec.notice)
        fio.fio_binary()
        if not self.path.is_absolute():
            raise InputError(f"give the target as an absolute path, as the hosts see it: {self.path}")
        fio.check_job_path(self.path)
        if spec.emit_jobs is not None:
            jobfiles.check_dir(spec.emit_jobs)  # the JobWriter creates it when it writes the first job file
        if spec.agent_wait_s is not None:
            hostlist.wait_for_agents(self.hosts, spec.agent_wait_s)
        # the driver sees the target where it mounts it too (a login node): then its free space bounds the probe
        visible = self.path.is_dir()
        free = target.free_bytes(self.path) if visible else None
        notes = [] if visible else [
            f"{self.path} is not mounted on the probing host {socket.gethostname()}: its free space is unknown here, so "
            "--max-bytes and the runtime caps bound what the hosts write, and other probes of it cannot be seen"
        ]  # fmt: skip
        return Facts(
            target=str(self.path),
            name=f"{len(self.hosts)} hosts:{self.path}",
            fs_type="shared (multi-host)",
            storage_class="multi-host",
            shared=True,
            tool=f"{fio.fio_version()} client/server",
            hosts=len(self.hosts),
            mount_options={"hosts": ",".join(map(str, self.hosts))},
            free_bytes=free,
            notes=tuple(notes),
        )

    @contextlib.contextmanager
    def open(self, facts: Facts, progress: Progress) -> Iterator[HostsSession]:
        writer = None
        if self.spec.emit_jobs is not None:
            about = f"the probe of {self.path} from {len(self.hosts)} hosts, driven from {socket.gethostname()}"
            writer = jobfiles.JobWriter(self.spec.emit_jobs.absolute(), fio_version=facts.tool, about=about)
        run_id = scratch.scratch_name("")
        session = HostsSession(self, run_id, progress, writer)
        try:
            with jobfiles.emitting(writer):
                if not session.direct_io_works():
                    session.write_paths = ("buffered",)
                    session.notes.append("a host refused O_DIRECT (EINVAL): only the buffered write path was measured")
                yield session
        except BaseException:
            session.cleanup()
            raise

    def clean(self, force: bool = False):
        raise InputError(
            "clean a multi-host target from each host: `ckplan clean PATH` there (each host's scratch "
            "directory belongs to its fio server)"
        )


class HostsSession:
    page_cache = True

    def __init__(self, backend: HostsBackend, run_id: str, progress: Progress, writer: jobfiles.JobWriter | None):
        self.backend, self.run_id, self.progress = backend, run_id, progress
        self.all = backend.hosts
        self.hosts = len(self.all)
        self.marker = scratch.marker_text()  # this process owns every host's scratch directory
        self.raw: list[dict[str, Any]] = []
        self.jobs = writer.jobs if writer else []
        self.notes = ["buffered writes with a final fsync (end_fsync) on every host"]
        self.write_paths: tuple[Literal["buffered", "direct"], ...] = ("buffered", "direct")

    def scratch(self, host: hostlist.Host) -> str:
        label = re.sub(r"[^A-Za-z0-9.-]", "_", str(host))
        return str(self.backend.path / f"{scratch.SCRATCH_PREFIX}{self.run_id}-{label}")

    def jobfile(self, host: hostlist.Host, jobs: list[fio.FioJob]) -> str:
        where = self.scratch(host)
        head = fio.FioJob("global", {"filename_format": f"{fio.escape_path(where)}/$jobname.$jobnum.$filenum"})
        # fio reports a group under its first job's name: the measuring jobs start a group of their own, or
        # group_reporting would fold them into the marker job's and no host would report the phase
        first = fio.FioJob(jobs[0].name, {**jobs[0].options, "new_group": 1})
        quoted = shlex.quote(where)
        # in a subshell: fio appends `> MARKER_JOB.prerun.txt 2>&1` to the command, which would take echo's output
        mark = f"(mkdir -p {quoted} && echo {shlex.quote(self.marker)} > {quoted}/{scratch.MARKER})"
        marker = fio.FioJob(MARKER_JOB, {"ioengine": "null", "size": "4k", "exec_prerun": mark})
        return (
            head.render()
            + marker.render()
            + "".join(j.render() for j in [first, *jobs[1:]])
            + (cleanup_job(where).render())
        )

    def clients(self, jobs_by_host: dict[hostlist.Host, list[fio.FioJob]], what: str, note: jobfiles.Note) -> dict:
        doc = run_clients(self, jobs_by_host, what, self.backend.timeout_s, note)
        self.raw.append(doc)
        return doc

    def _note(self, note: RunNote, measures: str, read: str, name: str) -> jobfiles.Note:
        return jobfiles.Note(
            note.phase, f"every host at once: {measures}", note.figure, read, raw_fio=len(self.raw), name=name,
            group=note.group, warm_up=note.warm_up,
        )  # fmt: skip

    def direct_io_works(self) -> bool:
        job, _ = fio.bandwidth_job("direct", 1, 2**20, 0)
        job = fio.FioJob("direct-check", {**job.options, "runtime": "5s"})
        note = jobfiles.Note("direct-I/O check", "one 1 MiB write with direct=1 on every host", "direct_io", "error")
        try:
            run_clients(self, {h: [job] for h in self.all}, "the direct I/O check", self.backend.timeout_s, note)
        except fio.FioError as exc:
            if exc.errno == errno.EINVAL:
                return False
            raise
        return True

    def stream(self, path: StreamPath, writers: int, hosts: int, size: int, seconds: float, note: RunNote) -> Stream:
        job, measures = fio.bandwidth_job(path, writers, size, seconds, note.warm_up)
        read = f"client_stats[] with jobname {job.name}: write.bw_bytes per hostname; 'All clients' for the total"
        doc = self.clients({h: [job] for h in self.all[:hosts]}, f"the bandwidth phase ({path}, {writers} writers)",
                           self._note(note, measures, read, f"{job.name}-{hosts}h"))  # fmt: skip
        rates = per_host(doc, "bw_bytes", job.name)
        agg = [c for c in doc.get("client_stats", []) if c.get("jobname") == "All clients"]
        return Stream(rates, float(agg[0]["write"]["bw_bytes"]) if agg else sum(rates.values()))

    def small_files(self, writers: int, low: int, high: int, files_per_writer: int, note: RunNote) -> SmallRun:
        job, measures = fio.small_files_job(writers, low, high, files_per_writer)
        job.options["unlink"] = 1
        read = (
            f"files/s per host = {files_per_writer} × {writers} × 1000 ÷ the longest client_stats[jobname smallfiles]"
            ".write.runtime (ms) of that host (every file completes); ops/s adds 3 per file to the write calls"
        )
        doc = self.clients(
            {h: [job] for h in self.all}, "the small-file phase", self._note(note, measures, read, "small")
        )
        seconds = per_host(doc, "runtime", job.name, max)
        calls = per_host(doc, "total_ios", job.name)
        files = files_per_writer * writers
        rates = {h: files / max(t / 1000, 1e-3) for h, t in seconds.items()}
        ops = {h: (3 * files + calls[h]) / max(t / 1000, 1e-3) for h, t in seconds.items()}
        return SmallRun(rates, ops, files * len(seconds), max(seconds.values()) / 1000)

    def latency(self, kind: Literal["fsync", "o_sync"], seconds: float, size: int, note: RunNote) -> Latency:
        job, measures, section = fio.latency_job(kind, size, seconds)
        read = f"client_stats[jobname {job.name}].{section} percentiles per host, in ns: the worst p99's host"
        doc = self.clients({h: [job] for h in self.all}, f"the {kind} latency phase",
                           self._note(note, measures, read, f"{kind}-lat"))  # fmt: skip
        part, key = section.split(".")
        worst = max(
            (fio.percentiles_s(c[part], key) for c in doc["client_stats"] if c.get("jobname") == job.name),
            key=lambda p: p[1],
        )
        p50, p99, p999, mean, n = worst
        return Latency(p50_s=p50, p99_s=p99, p999_s=p999, mean_s=mean, samples=n)

    def write_files(self, nodes: list[list[FileToWrite]], path: str, run: int) -> tuple[float, int]:
        """Host k writes node k's files exactly: one fio job per file (two where it ends in a partial MiB), each
        rank's one after another, the ranks at once."""
        jobs_by_host = {}
        for host, files in zip(self.all, nodes, strict=False):
            root = f"{self.scratch(host)}/replay-{run}/"
            listed = [(confined_key(root, f.path), f.bytes, f.rank) for f in files]
            jobs = fio.file_jobs(listed, "file")
            if path == "direct":  # whole blocks with O_DIRECT; the partial last block of a file cannot take it
                for j in jobs:
                    j.options["direct"] = int(j.options["bs"] == "1M")
            jobs_by_host[host] = jobs
        note = RunNote("replay", "replay.seconds (the slowest host's), replay.bytes (the sum of write.io_bytes)")
        read = "seconds = the longest client_stats[jobname fileN-K].write.runtime (ms) per host, summed over a rank's files"
        doc = self.clients(
            jobs_by_host, "the replay", self._note(note, "each host writes its node's files", read, "replay")
        )
        writer_of = {(h.name, f"file{i}"): f.rank for h, files in zip(self.all, nodes, strict=False)
                     for i, f in enumerate(files)}  # fmt: skip
        runtimes: dict[tuple[str, int], float] = {}  # (host, rank) → its files' write time, one after another
        written = 0
        for c in doc["client_stats"]:
            name = str(c.get("jobname", ""))
            if name.startswith("file"):
                key = (c["hostname"], writer_of[c["hostname"], name.rsplit("-", 1)[0]])
                runtimes[key] = runtimes.get(key, 0.0) + int(c["write"]["runtime"]) / 1000
                written += int(c["write"]["io_bytes"])
        return max(max(runtimes.values()), 1e-3), written

    def save_files(self, files: list[FileToWrite], framework: str, runs: int) -> None:
        return None  # the framework's saver runs in this host's processes, not on the hosts

    def others(self) -> list[str]:
        root = self.backend.path
        if not root.is_dir():
            return []
        mine = f"{scratch.SCRATCH_PREFIX}{self.run_id}-"
        return [
            f"{s.path} (host {s.host}, pid {s.pid})"
            for s in scratch.scratch_dirs(root, (scratch.SCRATCH_PREFIX,))
            if s.live and not s.path.name.startswith(mine)
        ]

    def phase_ran(self, phase: str, why: str) -> None:
        jobfiles.other(phase, why)

    def cleanup(self) -> None:
        """Send the clean-up job to every host that still answers; those that do not are named by the caller's error."""
        for host in self.all:
            with tempfile.NamedTemporaryFile("w", suffix=".fio") as job:
                job.write(cleanup_job(self.scratch(host)).render())
                job.flush()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    subprocess.run(
                        [fio.fio_binary(), host.client_arg, job.name],
                        capture_output=True,
                        timeout=20,
                        preexec_fn=children.preexec(),
                    )


def cleanup_job(where: str) -> fio.FioJob:
    # the shell opens the redirect to CLEANUP_JOB.prerun.txt before rm runs, so rm removes it as well, with
    # MARKER_JOB's; fio cuts option values at ';' and '#', hence one command and not a list
    return fio.FioJob(
        CLEANUP_JOB,
        {
            "stonewall": 1,
            "ioengine": "null",
            "size": "1M",
            "exec_prerun": f"rm -rf {shlex.quote(where)} {CLEANUP_JOB}.prerun.txt {MARKER_JOB}.prerun.txt",
        },
    )


def run_clients(
    session: HostsSession,
    jobs_by_host: dict[hostlist.Host, list[fio.FioJob]],
    what: str,
    timeout_s: float,
    note: jobfiles.Note | None = None,
) -> dict:
    """One fio client run, every named host at once; every host must report, or the error names those that did not."""
    hosts = list(jobs_by_host)
    with tempfile.TemporaryDirectory(prefix="ckplan-cluster-") as tmp:
        args = [fio.fio_binary(), "--output-format=json"]
        texts = {}
        for i, (host, jobs) in enumerate(jobs_by_host.items()):
            job = Path(tmp) / f"host{i}.fio"
            texts[str(job)] = session.jobfile(host, jobs)
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
    # Exit codes: a name that does not resolve is a typo in --hosts (2); a host nobody answers on, or a server of
    # another fio version, is the environment (3); a server that answered and then went away, or a job that
    # failed, is a failed measurement (4).
    for line in (err + out).splitlines():
        if m := re.search(r"failed to resolve <(.*?)>", line):
            raise InputError(f"host {m.group(1)!r} does not resolve to an address: check ‹hosts› or ‹hosts_file›")
        if m := re.search(r"failed to connect to (\S+?):(\d+)", line):
            raise EnvironmentProblem(
                f"host {m.group(1)}:{m.group(2)} is unreachable during {what}: no fio server answers "
                f"there (start one with `ckplan agent`)"
            )
        if m := re.search(r"host=(\S+) (disconnected|timed out)", line):
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
            code = int(c["error"])
            raise fio.FioError(f"host {c.get('hostname')}: {fio.describe_errno(code, what)}", code)
    return docs[-1]


def per_host(doc: dict, field: str, jobname: str, combine=lambda a, b: a + b) -> dict[str, float]:
    """One figure of a job per host, from fio's client_stats (a host's jobs combined: summed, or the max)."""
    out: dict[str, float] = {}
    for c in doc.get("client_stats", []):
        if c.get("jobname") == jobname:
            value = float(c["write"][field])
            out[c["hostname"]] = combine(out[c["hostname"]], value) if c["hostname"] in out else value
    return out
