"""The hosts backend: a directory as many hosts see it, measured by their fio servers (`ckplan agent`) at once, all
driven by one `fio --client=HOST job --client=HOST job …`. Each host's job file writes inside its own scratch
directory (fio makes a filename's directories): a first job writes the owner marker, a last stonewalled one
removes the directory (`exec_prerun=rm -rf`), sent again to every host that answers after a failure. fio's client
exits 0 even when a server drops a job, so every host must report, or the error names those that did not.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import socket
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from ckplan import children, filesystem, scratch
from ckplan.confine import confined_key
from ckplan.errors import EnvironmentProblem, InputError, MeasurementFailed, describe_errno
from ckplan.inputs import Flag, parsed
from ckplan.probe import agent_info, engine, fio, hostlist, jobfiles
from ckplan.probe.engine import PRESETS, Facts, FileToWrite, Progress, RunNote, SmallRun, TargetSpec
from ckplan.profile import TargetKind
from ckplan.schema import Model
from ckplan.units import parse_duration

CLEANUP_JOB = "ckplan-cleanup"
MARKER_JOB = "ckplan-marker"
NOT_MEASURED = ("All clients", CLEANUP_JOB, MARKER_JOB)  # client_stats entries that are no host's measurement
HANDSHAKE_JOB = "[ckplan-handshake]\nioengine=null\nsize=4k\n"
CONNECT_ATTEMPT_S = 2.0  # each attempt to reach an agent's port, at most (README)
NAMED_HOSTS = 5  # hosts an error names before it counts the rest
UNRESOLVED = "host {!r} does not resolve to an address: check ‹hosts› or ‹hosts_file›"
DROP_CACHES = "(sync && echo 3 > /proc/sys/vm/drop_caches)"  # a subshell: fio appends its own redirection


def _reads(job: fio.FioJob) -> bool:
    return job.options.get("rw") in ("read", "randread")


def _named_hosts(hosts: str | None) -> str | None:
    if hosts is not None and not hosts.strip(" ,"):
        raise InputError("‹hosts› names no hosts: give host[:port],…")
    return hosts


class HostsOptions(Model):
    """The hosts backend's own options (TargetSpec.options), with their flags: which hosts write (parsed by
    hostlist when the probe is prepared), and how long to wait for their agents."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ClassVar[TargetKind] = "hosts"
    hosts: Annotated[
        str | None,
        AfterValidator(_named_hosts),
        Flag(
            "--hosts",
            "Probe from many hosts at once, each running `ckplan agent`: host[:port],…, "
            "Slurm host lists such as gpu[001-016]:8766, or slurm (the job's nodes).",
            panel="Multi-host",
        ),
    ] = None
    hosts_file: Annotated[
        Path | None, Flag("--hosts-file", "One host[:port] or host list per line.", panel="Multi-host")
    ] = None
    agent_wait_s: Annotated[
        float | None,
        parsed(parse_duration),
        Flag(
            "--agent-wait",
            "Wait up to this long for every host's agent to answer (agents srun started a moment ago), e.g. 2m.",
            panel="Multi-host",
            type=str,
        ),
    ] = None

    agent_info_port: Annotated[
        int | None,
        Field(ge=1, le=65535),
        Flag(
            "--agent-info-port",
            "Ask each host's agent (`ckplan agent --info-port`) on this port for its node's name, kept in the "
            "profile's placement.",
            panel="Multi-host",
        ),
    ] = None
    drop_caches: Annotated[
        bool,
        Flag(
            "--drop-caches",
            "Before each read run, every host drops its whole page cache (echo 3 > /proc/sys/vm/drop_caches: root, "
            "in a container a privileged one). Default: each file's own cached pages (invalidate=1).",
            panel="Multi-host",
            type=bool,
        ),
    ] = False

    @model_validator(mode="after")
    def _wait_needs_hosts(self) -> HostsOptions:
        for name, given in (("agent_wait_s", self.agent_wait_s), ("agent_info_port", self.agent_info_port)):
            if given is not None and not self.claims(""):
                raise InputError(f"‹{name}› applies to a multi-host probe (‹hosts› or ‹hosts_file›)")
        if self.drop_caches and not self.claims(""):
            raise InputError("‹drop_caches› applies to a multi-host probe (‹hosts› or ‹hosts_file›)")
        return self

    def claims(self, path: str) -> bool:
        """Whether a probe is this backend's: hosts given."""
        return self.hosts is not None or self.hosts_file is not None


class HostsBackend:
    kind: TargetKind = "hosts"

    def __init__(self, spec: TargetSpec):
        self.spec, self.path = spec, Path(spec.path)
        self.hosts: list[hostlist.Host] = []
        self.drop_caches = False
        self.timeout_s = 3 * PRESETS[spec.preset].measuring_s + 60  # a run that takes thrice the whole probe's has hung

    def prepare(self, spec: TargetSpec) -> Facts:
        o = spec.options if isinstance(spec.options, HostsOptions) else HostsOptions()
        self.hosts = hostlist.parse_hosts(o.hosts, o.hosts_file, notice=spec.notice)
        if not self.path.is_absolute():
            raise InputError(f"give the target as an absolute path, as the hosts see it: {self.path}")
        fio.check_ready(self.path, spec.emit_jobs)
        if spec.plan is not None:  # refused now, not after every other phase has run
            per_node: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
            for f, scaled in zip(spec.plan.manifest, engine.scaled_files(spec.plan.manifest, spec.scale), strict=True):
                per_node[f.node].append((f.path, scaled.bytes, f.rank))
            busiest = max(len(fio.file_jobs(files, "file")) for files in per_node.values())
            if busiest + 2 > fio.MAX_JOBS:  # beside the marker's job and the clean-up's
                raise InputError(
                    f"the multi-host replay writes a node's files as {busiest:,} fio jobs (one per file of 1 MiB or "
                    f"more, two where it ends in a partial MiB), and fio runs at most {fio.MAX_JOBS:,} at once: "
                    "probe without --plan"
                )
        if o.agent_wait_s is not None:
            wait_for_agents(self.hosts, o.agent_wait_s)
        placement = agent_info.placements(self.hosts, o.agent_info_port) if o.agent_info_port is not None else []
        self.drop_caches = o.drop_caches
        # the driver sees the target where it mounts it too (a login node): then its free space bounds the probe
        visible = self.path.is_dir()
        hidden = (
            f"{self.path} is not mounted on the probing host {socket.gethostname()}: its free space is unknown "
            "here, so --max-bytes and the runtime caps bound what the hosts write, and other probes of it cannot "
            "be seen"
        )
        # where the driver mounts it as well, its mount names the filesystem the hosts share (NFS, Lustre, glusterfs)
        mount = filesystem.mount_of(self.path, filesystem.parse_mounts(Path("/proc/self/mounts").read_text()))
        named = visible and mount.storage_class in filesystem.SHARED_CLASSES
        return Facts(
            target=str(self.path),
            name=f"{len(self.hosts)} hosts:{self.path}",
            fs_type=f"{mount.fs_type} (multi-host)" if named else "shared (multi-host)",
            storage_class=mount.storage_class if named else "multi-host",
            shared=True,
            tool=f"{fio.fio_version()} client/server",
            hosts=len(self.hosts),
            mount_options={"hosts": ",".join(map(str, self.hosts))},
            free_bytes=filesystem.free_bytes(self.path) if visible else None,
            notes=() if visible else (hidden,),
            placement=tuple(placement),
        )

    @contextlib.contextmanager
    def open(self, facts: Facts, progress: Progress) -> Iterator[HostsSession]:
        about = f"the probe of {self.path} from {len(self.hosts)} hosts, driven from {socket.gethostname()}"
        writer = jobfiles.JobWriter(self.spec.emit_jobs, about, facts.tool) if self.spec.emit_jobs else None
        session = HostsSession(self, scratch.scratch_name(""), progress, writer)
        try:
            session.check_direct_io()
            if self.drop_caches:
                session.check_drop_caches()
            yield session
        except BaseException:
            session.cleanup()
            raise

    def clean(self, force: bool = False):
        raise InputError(
            "clean a multi-host target from each host: `ckplan clean PATH` there (each host's scratch "
            "directory belongs to its fio server)"
        )


class HostsSession(fio.FioSession):
    on = "every host at once: "
    hosts_in_name = True
    stats = "client_stats[] per hostname"

    def __init__(self, backend: HostsBackend, run_id: str, progress: Progress, writer: jobfiles.JobWriter | None):
        super().__init__(writer)
        self.backend, self.run_id, self.progress = backend, run_id, progress
        self.all = backend.hosts
        self.hosts = len(self.all)
        self.marker = scratch.marker_text()  # this process owns every host's scratch directory
        self.prerun_jobs: dict[str, None] = {}  # jobs that ran a command on the hosts, whose output files go too
        self.notes.append("buffered writes with a final fsync (end_fsync) on every host")
        self.notes.append(
            "reads made cold on every host by dropping its whole page cache before each read run (--drop-caches: "
            f"{DROP_CACHES}) and each file's cached pages (invalidate=1)"
            if backend.drop_caches
            else "reads made cold by dropping each file's cached pages (invalidate=1, posix_fadvise DONTNEED), without "
            "privilege; other cached data on the hosts stays (--drop-caches drops it all)"
        )

    def scratch(self, host: hostlist.Host) -> str:
        label = re.sub(r"[^A-Za-z0-9.-]", "_", str(host))
        return str(self.backend.path / f"{scratch.SCRATCH_PREFIX}{self.run_id}-{label}")

    def jobfile(self, host: hostlist.Host, jobs: list[fio.FioJob]) -> str:
        where = self.scratch(host)
        if self.backend.drop_caches:  # a failed drop skips the job's reads, silently: check_drop_caches finds it first
            jobs = [fio.FioJob(j.name, {**j.options, "exec_prerun": DROP_CACHES}) if _reads(j) else j for j in jobs]
        head = fio.FioJob("global", {"filename_format": f"{fio.escape_path(where)}/$jobname.$jobnum.$filenum"})
        # fio reports a group under its first job's name: the measuring jobs start a group of their own, or
        # group_reporting would fold them into the marker job's and no host would report the phase
        first = fio.FioJob(jobs[0].name, {**jobs[0].options, "new_group": 1})
        quoted = shlex.quote(where)
        # in a subshell: fio appends `> MARKER_JOB.prerun.txt 2>&1` to the command, which would take echo's output
        mark = f"(mkdir -p {quoted} && echo {shlex.quote(self.marker)} > {quoted}/{scratch.MARKER})"
        marker = fio.FioJob(MARKER_JOB, {"ioengine": "null", "size": "4k", "exec_prerun": mark})
        ran = tuple(dict.fromkeys(j.name for j in jobs if "exec_prerun" in j.options))
        self.prerun_jobs.update(dict.fromkeys(ran))
        return "".join(j.render() for j in [head, marker, first, *jobs[1:], cleanup_job(where, ran)])

    def check_drop_caches(self) -> None:
        """Every host can drop its page cache: fio 3.33 runs no I/O of a job whose exec_prerun fails, yet reports
        no error, so a 4 KiB null read that reads nothing names a host where --drop-caches would fail unseen."""
        job = fio.FioJob("drop-check", {"ioengine": "null", "rw": "read", "size": "4k"})
        note = RunNote(
            "page cache drop check",
            "refused unless every host read its 4 KiB; not kept in raw_fio",
            measures=self.on + f"whether {DROP_CACHES} succeeds, before a null 4 KiB read",
            read=f"{self.stats} named drop-check: read.io_bytes (0: the command failed and fio skipped the job)",
        )
        doc = self.run_job(job, "the page cache drop check", note)
        del self.raw[-1]
        failed = [host for host, c in self.entries(doc, job.name) if not c.get("read", {}).get("io_bytes")]
        if failed:
            raise EnvironmentProblem(
                f"--drop-caches: {', '.join(failed[:NAMED_HOSTS])} cannot drop the page cache "
                "(/proc/sys/vm/drop_caches takes root; in a pod, a privileged container)"
            )

    def run_job(self, job: fio.FioJob, what: str, note: RunNote, hosts: int = 0) -> dict:
        return self.clients({h: [job] for h in self.all[: hosts or None]}, what, note)

    def entries(self, doc: dict, jobname: str) -> list[tuple[str, dict]]:
        return [(c["hostname"], c) for c in doc.get("client_stats", []) if c.get("jobname") == jobname]

    def clients(self, jobs_by_host: dict[hostlist.Host, list[fio.FioJob]], what: str, note: RunNote) -> dict:
        """One fio client run, every named host at once; every host must report, or the error names those that did not."""
        texts = {host: self.jobfile(host, jobs) for host, jobs in jobs_by_host.items()}
        with job_files(texts) as paths:
            args = [fio.fio_binary(), "--output-format=json", *(a for h, p in paths.items() for a in (h.client_arg, p))]
            if self.writer is not None:
                self.writer.record(args, {paths[host]: text for host, text in texts.items()}, note)
            try:
                proc = subprocess.run(
                    args, capture_output=True, text=True, timeout=self.backend.timeout_s, preexec_fn=children.preexec()
                )
            except subprocess.TimeoutExpired:
                raise MeasurementFailed(
                    f"fio's client did not finish {what} within {self.backend.timeout_s:.0f} s (a host may have hung)"
                ) from None
        doc = client_report(proc.stdout, proc.stderr, list(jobs_by_host), what)
        self.raw.append(doc)
        return doc

    def small_files(self, writers: int, low: int, high: int, files_per_writer: int, note: RunNote) -> SmallRun:
        job, measures = fio.small_files_job(writers, low, high, files_per_writer)
        job.options["unlink"] = 1
        read = (
            f"files/s per host = {files_per_writer} × {writers} × 1000 ÷ the longest client_stats[jobname smallfiles]"
            ".write.runtime (ms) of that host (every file completes); ops/s adds 3 per file to the write calls"
        )
        doc = self.run_job(job, "the small-file phase", self.note(note, measures, read, name="small"))
        return self.small_run(doc, job.name, {h: files_per_writer * writers for h, _ in self.entries(doc, job.name)})

    def write_files(self, nodes: list[list[FileToWrite]], path: str, run: int) -> tuple[float, int]:
        """Host k writes node k's files exactly (`fio.file_jobs`), each rank's one after another, the ranks at once."""
        jobs_by_host = {}
        for host, files in zip(self.all, nodes, strict=False):
            root = f"{self.scratch(host)}/replay-{run}/"
            jobs = fio.file_jobs([(confined_key(root, f.path), f.bytes, f.rank) for f in files], "file")
            if path == "direct":  # whole blocks with O_DIRECT; the partial last block of a file cannot take it
                for j in jobs:
                    j.options["direct"] = int(j.options["bs"] == "1M")
            jobs_by_host[host] = jobs
        note = RunNote("replay", "replay.seconds (the slowest host's), replay.bytes (the sum of write.io_bytes)")
        read = (
            "seconds = the longest sum over a rank's jobs (client_stats[jobname fileRANK-K].write.runtime, ms) per host"
        )
        doc = self.clients(
            jobs_by_host, "the replay", self.note(note, "each host writes its node's files", read, name="replay")
        )
        parts = [c for c in doc["client_stats"] if str(c.get("jobname", "")).startswith("file")]
        runtimes: dict[tuple[str, str], float] = defaultdict(float)  # (host, rank) → its files' write time, in turn
        for c in parts:
            runtimes[c["hostname"], c["jobname"].removeprefix("file").split("-")[0]] += (
                int(c["write"]["runtime"]) / 1000
            )
        return max(max(runtimes.values()), 1e-3), sum(int(c["write"]["io_bytes"]) for c in parts)

    def save_files(self, files: list[FileToWrite], framework: str, runs: int) -> None:
        return None  # the framework's saver runs in this host's processes, not on the hosts

    def load_files(self, loads: object, runs: int) -> None:
        return None  # the framework's loaders run in this host's processes, not on the hosts

    def others(self) -> list[str]:
        root, mine = self.backend.path, f"{scratch.SCRATCH_PREFIX}{self.run_id}-"
        return self.others_in(root, lambda path: path.name.startswith(mine)) if root.is_dir() else []

    def cleanup(self) -> None:
        """Send the clean-up job to every host that still answers; those that do not are named by the caller's error."""
        ran = tuple(self.prerun_jobs)
        each_host({host: cleanup_job(self.scratch(host), ran).render() for host in self.all}, time.monotonic() + 20)


def cleanup_job(where: str, prerun_jobs: tuple[str, ...] = ()) -> fio.FioJob:
    # the shell opens the redirect to CLEANUP_JOB.prerun.txt before rm runs, so rm removes it as well, with
    # MARKER_JOB's and those of the other jobs that ran a command; fio cuts option values at ';' and '#', hence
    # one command and not a list
    outputs = " ".join(shlex.quote(f"{name}.prerun.txt") for name in (CLEANUP_JOB, MARKER_JOB, *prerun_jobs))
    rm = f"rm -rf {shlex.quote(where)} {outputs}"
    return fio.FioJob(CLEANUP_JOB, {"stonewall": 1, "ioengine": "null", "size": "1M", "exec_prerun": rm})


def client_report(out: str, err: str, hosts: list[hostlist.Host], what: str) -> dict:
    """fio's client's final report, once every host has reported without an error."""
    # Exit codes: a name that does not resolve is a typo in --hosts (2); a host nobody answers on, or a server of
    # another fio version, is the environment (3); a server that answered and then went away, or a job that
    # failed, is a failed measurement (4).
    for line in (err + out).splitlines():
        if m := re.search(r"failed to resolve <(.*?)>", line):
            raise InputError(UNRESOLVED.format(m.group(1)))
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
    if missing := [h for h in hosts if h.name not in reported]:
        dropped = next((ln.split("> ", 1)[-1] for ln in out.splitlines() if ln.startswith("<") and "fio:" in ln), "")
        raise MeasurementFailed(
            f"host(s) {', '.join(map(str, missing))} did not report {what}"
            + (f": {dropped.strip()}" if dropped else " (a server died or dropped the job)")
        )
    for c in stats:
        if code := int(c.get("error", 0)):
            raise fio.FioError(f"host {c.get('hostname')}: {describe_errno(code, what)}", code)
    return docs[-1]


def wait_for_agents(hosts: list[hostlist.Host], timeout_s: float, poll_s: float = 0.5) -> None:
    """Return once every host's agent has run fio's handshake for us, a null job that writes nothing (agents that
    srun started a moment ago refuse connections at first, so it is tried again), or raise naming those that did
    not within `timeout_s`. A port that takes the connection and never answers (not a fio server, or one stopped
    with SIGSTOP) would otherwise hold the probe until its first phase's deadline. Every host is tried at once
    against one deadline, and only a host whose port takes a connection costs a fio client: starting one per host
    took 174 s of a 2 s wait for 2,000 hosts that refused."""
    addresses = {}
    for host in hosts:  # a name that does not resolve is a typo, not an agent still starting
        try:
            family, _, _, _, sockaddr = socket.getaddrinfo(host.name, host.port, type=socket.SOCK_STREAM)[0]
        except socket.gaierror:
            raise InputError(UNRESOLVED.format(host.name)) from None
        addresses[host] = (family, sockaddr)
    deadline = time.monotonic() + timeout_s
    pending = list(hosts)
    while True:
        taking = taking_connections({host: addresses[host] for host in pending}, deadline)
        answered = set(taking) - set(each_host(dict.fromkeys(taking, HANDSHAKE_JOB), deadline)) if taking else set()
        pending = [host for host in pending if host not in answered]
        if not pending:
            return
        if time.monotonic() >= deadline:
            named = ", ".join(map(str, pending[:NAMED_HOSTS]))
            more = f" and {len(pending) - NAMED_HOSTS:,} more" if len(pending) > NAMED_HOSTS else ""
            raise EnvironmentProblem(
                f"no agent ran fio's handshake (a null job) on {named}{more} within {timeout_s:g} s "
                "(start one on each host with `ckplan agent`)"
            )
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def taking_connections(addresses: dict[hostlist.Host, tuple[int, Any]], deadline: float) -> list[hostlist.Host]:
    """The hosts whose port takes a TCP connection: one attempt each, all at once (in batches that leave half the
    open-file limit free), each at most CONNECT_ATTEMPT_S and none past `deadline`."""
    import resource

    batch = max(1, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2)
    hosts = list(addresses)
    taking: list[hostlist.Host] = []
    for start in range(0, len(hosts), batch):
        if time.monotonic() >= deadline:
            break
        taking += _connect_all({host: addresses[host] for host in hosts[start : start + batch]}, deadline)
    return taking


def _connect_all(addresses: dict[hostlist.Host, tuple[int, Any]], deadline: float) -> list[hostlist.Host]:
    import errno
    import selectors

    taking: list[hostlist.Host] = []
    attempts = selectors.DefaultSelector()
    try:
        for host, (family, sockaddr) in addresses.items():
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            if sock.connect_ex(sockaddr) in (0, errno.EINPROGRESS):
                attempts.register(sock, selectors.EVENT_WRITE, (host, sock))
            else:
                sock.close()
        end = min(deadline, time.monotonic() + CONNECT_ATTEMPT_S)
        while attempts.get_map() and (left := end - time.monotonic()) > 0:
            for key, _ in attempts.select(left):
                host, connected = key.data
                if connected.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    taking.append(host)
                attempts.unregister(connected)
                connected.close()
    finally:
        for key in list(attempts.get_map().values()):
            key.data[1].close()
        attempts.close()
    return taking


def each_host(jobs: dict[hostlist.Host, str], deadline: float) -> list[hostlist.Host]:
    """Run each host's job text with a client of its own, all at once; the hosts whose run did not succeed by
    `deadline`, when every client is stopped."""
    with job_files(jobs) as paths:
        procs = {}
        for host, path in paths.items():
            if time.monotonic() >= deadline:  # starting a client costs ~30 ms of CPU: thousands would pass it
                break
            cmd = [fio.fio_binary(), host.client_arg, path]
            procs[host] = subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=children.preexec()
            )
        try:
            for proc in procs.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()  # a client waiting on a silent server holds nothing to flush
                    proc.wait()
    return [host for host in jobs if host not in procs or procs[host].returncode != 0]


@contextlib.contextmanager
def job_files(texts: dict[hostlist.Host, str]) -> Iterator[dict[hostlist.Host, str]]:
    """Each host's job text in a file of a temporary directory, removed after: the files' paths by host."""
    with tempfile.TemporaryDirectory(prefix="ckplan-cluster-") as tmp:
        paths = {host: str(Path(tmp) / f"host{i}.fio") for i, host in enumerate(texts)}
        for host, path in paths.items():
            Path(path).write_text(texts[host])
        yield paths
