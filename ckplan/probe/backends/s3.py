"""The S3 backend: an object-store prefix, measured with ckplan's own boto3 client (fio 3.33 has no S3 engine).
A stream is one multipart upload, its parts one after another (--part-size); a small file is one PUT, the only
operation the store serves for it; the durable small write is a 4 KiB PUT; the replay writes each file of the plan
as one object by its rank's thread (no framework saver here: the engine adds the serialiser term). Everything goes
under one scratch prefix whose first object is the owner marker (scratch.py), deleted with every multipart upload
it started at the end, on error and on Ctrl-C. Credentials come from the AWS chain and never reach any output.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import ConfigDict

from ckplan import scratch
from ckplan.confine import confined_key
from ckplan.errors import EnvironmentProblem, InputError, MeasurementFailed, missing_extra
from ckplan.inputs import Flag, parsed
from ckplan.probe.engine import Facts, FileToWrite, MiB, Progress, RunNote, SmallRun, Stream, StreamPath, TargetSpec
from ckplan.probe.s3_errors import NO_CREDENTIALS, describe, error_code
from ckplan.profile import Latency, TargetKind
from ckplan.savers import raw
from ckplan.schema import Model
from ckplan.units import parse_bytes, parse_duration

if TYPE_CHECKING:
    from ckplan.probe.engine import CleanResult

DEFAULT_PART_BYTES = 8 * MiB  # boto3 TransferConfig's multipart_chunksize
MIN_PART_BYTES = 5 * MiB  # S3's smallest part (all but the last)
MAX_PART_BYTES = 5 * 2**30  # S3's largest part
MAX_PARTS = 10_000  # parts of one multipart upload, at most
LATENCY_PUT_BYTES = 4096
# streams of one S3 probe at once: each is a thread and a connection of this process, with a part in flight; past
# this many one client host measures its own threads and sockets rather than the store
MAX_STREAMS = 1024
# A probe killed with -9 leaves requests that the server has received and still processes: a multipart upload
# being completed leaves the upload listing before its object appears (moto here: up to 0.9 s after the kill,
# with a few hundred MB). So `clean` lists again until nothing has appeared for CLEAN_QUIET_S, giving up after
# CLEAN_WAIT_S of objects that keep appearing (something still writes there).
CLEAN_QUIET_S = 3.0
CLEAN_WAIT_S = 60.0
CLEAN_POLL_S = 0.5
DELETE_ATTEMPTS = 4
DELETE_RETRY_S = 0.25  # doubled after each failed attempt


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str
    endpoint_url: str | None
    region: str | None
    profile: str | None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    @property
    def base(self) -> str:
        """The user's prefix as a key prefix: where probes' scratch prefixes sit."""
        return f"{self.prefix}/" if self.prefix else ""

    @property
    def safe_endpoint(self) -> str:
        """The endpoint without any user:password@ part."""
        if not self.endpoint_url:
            return "AWS default"
        parts = urlsplit(self.endpoint_url)
        netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def parse_url(
    url: str, endpoint_url: str | None = None, region: str | None = None, profile: str | None = None
) -> S3Location:
    if not url.startswith("s3://"):
        raise InputError(f"not an S3 URL: {url!r} (use s3://bucket/prefix)")
    bucket, _, prefix = url[5:].partition("/")
    if not (3 <= len(bucket) <= 63) or not all(c.isalnum() or c in ".-" for c in bucket) or bucket[0] in ".-":
        raise InputError(f"malformed S3 URL {url!r}: {bucket!r} is not a valid bucket name")
    loc = S3Location(bucket, prefix.strip("/"), endpoint_url, region, profile)
    if endpoint_url is not None:
        parts = urlsplit(endpoint_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"--endpoint-url must be an http(s) URL, got {loc.safe_endpoint!r}")
    return loc


def client(loc: S3Location, timeout_s: float, pool: int) -> Any:
    try:
        import boto3
        import botocore.config
        import botocore.exceptions
    except ImportError:
        raise missing_extra("S3 probing", "boto3", "s3") from None
    try:
        session = boto3.session.Session(profile_name=loc.profile, region_name=loc.region)
        if session.get_credentials() is None:
            raise InputError(NO_CREDENTIALS)
        config = botocore.config.Config(
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            max_pool_connections=pool,
            retries={"max_attempts": 2, "mode": "standard"},
            region_name=loc.region or session.region_name or "us-east-1",
        )
        return session.client("s3", endpoint_url=loc.endpoint_url, config=config)
    except botocore.exceptions.ProfileNotFound:
        raise InputError(f"AWS profile {loc.profile!r} is not configured") from None
    except botocore.exceptions.BotoCoreError as exc:  # a bad region name, half a key pair, an unreadable config
        raise describe(exc, loc, "the S3 client's set-up") from None


def live_owner(s3: Any, bucket: str, prefix: str) -> str | None:
    """The live probe that owns the prefix, by its marker (host, pid, the age of its last heartbeat); None where
    there is no marker, it is not ckplan's or its owner is gone."""
    import botocore.exceptions

    try:
        got = s3.get_object(Bucket=bucket, Key=prefix + scratch.MARKER)
        info = json.loads(got["Body"].read(4096))  # bounded: anyone may have written an object by that name
    except botocore.exceptions.ClientError as exc:
        if error_code(exc) in ("NoSuchKey", "404", "NotFound"):
            return None
        raise
    except (ValueError, RecursionError):
        return None
    host, pid = scratch.owner(info)
    # the age by the server's own clock (its Date header against the marker's LastModified), so that clock
    # skew between the probe's host and this one cannot make a live probe look dead or a dead one live
    try:
        now = email.utils.parsedate_to_datetime(got["ResponseMetadata"]["HTTPHeaders"]["date"])
    except (KeyError, TypeError, ValueError):
        now = dt.datetime.now(dt.UTC)
    age = max(0.0, (now - got["LastModified"]).total_seconds())
    return f"host {host}, pid {pid}, last heartbeat {age:.0f} s ago" if scratch.probe_alive(host, pid, age) else None


def scratch_prefixes(s3: Any, bucket: str, base: str) -> set[str]:
    """Every probe prefix directly under `base`: those holding objects, and those holding only multipart uploads."""
    found = set()
    start = base + scratch.SCRATCH_PREFIX
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=start, Delimiter="/"):
        found |= {p["Prefix"] for p in page.get("CommonPrefixes", [])}
    for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=start):
        rests = (u["Key"][len(base) :] for u in page.get("Uploads", []))
        found |= {base + rest.split("/", 1)[0] + "/" for rest in rests if "/" in rest}
    return found


def remove_prefix(s3: Any, bucket: str, prefix: str) -> int:
    """Abort every multipart upload and delete every object under `prefix`, in one pass; the count removed.

    An upload that is gone by the time it is aborted (NoSuchUpload) was completed or aborted by its writer in
    the meantime: done here, and an object it completed into is deleted below or by the caller's next pass.
    """
    import botocore.exceptions

    removed = 0
    for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=prefix):
        for up in page.get("Uploads", []):
            try:
                s3.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
            except botocore.exceptions.ClientError as exc:
                if error_code(exc) != "NoSuchUpload":
                    raise
            removed += 1
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [o["Key"] for o in page.get("Contents", [])]
        for i in range(0, len(keys), 1000):
            removed += _delete_keys(s3, bucket, prefix, keys[i : i + 1000])
    return removed


def _delete_keys(s3: Any, bucket: str, prefix: str, keys: list[str]) -> int:
    """Delete `keys` (at most 1000), retrying those the endpoint reports as not deleted: DeleteObjects answers
    HTTP 200 and lists each key it did not delete under Errors; one already gone (NoSuchKey) is deleted."""
    pending, codes = list(keys), set()
    for attempt in range(DELETE_ATTEMPTS):
        if attempt:
            time.sleep(DELETE_RETRY_S * 2 ** (attempt - 1))
        resp = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in pending], "Quiet": True})
        errors = [e for e in resp.get("Errors", []) if e.get("Code") != "NoSuchKey"]
        codes = {str(e.get("Code", "unknown")) for e in errors}
        failed = {e.get("Key") for e in errors}
        pending = [k for k in pending if k in failed]
        if not pending:
            return len(keys)
    base = prefix.split(scratch.SCRATCH_PREFIX)[0].rstrip("/")
    raise EnvironmentProblem(
        f"the S3 endpoint did not delete {len(pending)} object(s) under s3://{bucket}/{prefix} "
        f"({', '.join(sorted(codes))}) after {DELETE_ATTEMPTS} attempts: remove them with "
        f"`ckplan clean {f's3://{bucket}/{base}'.rstrip('/')}`"
    )


class Scratch:
    """A unique key prefix; every object and multipart upload under it is removed on exit. Its marker is written
    before anything else, so that no listing ever shows the prefix without its owner, and rewritten every
    HEARTBEAT_S by a thread that also looks for other live probes beside it."""

    def __init__(self, s3: Any, loc: S3Location):
        self.s3, self.loc = s3, loc
        self.prefix = loc.base + scratch.scratch_name() + "/"
        self.lock = threading.Lock()
        self.others: dict[str, str] = {}  # scratch URL of another live probe -> its owner, as seen
        self.heartbeat = scratch.Heartbeat(self._beat, "ckplan-s3-heartbeat")

    def __enter__(self) -> Scratch:
        try:  # until this returns, `with` will not call __exit__: a Ctrl-C in here must remove the marker itself
            self.write_marker()
            self.heartbeat.start()
        except BaseException:
            with contextlib.suppress(Exception):  # a PUT that timed out may still have landed
                self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.heartbeat.thread.is_alive():
            self.heartbeat.stop.set()
            self.heartbeat.thread.join()  # a heartbeat landing after the removal would leave the marker behind
        remove_prefix(self.s3, self.loc.bucket, self.prefix)

    def write_marker(self) -> None:
        self.s3.put_object(
            Bucket=self.loc.bucket, Key=self.prefix + scratch.MARKER, Body=scratch.marker_text().encode()
        )

    def look_for_others(self) -> None:
        """Record every other live probe under the same prefix; a dead probe's leftovers do not count."""
        for prefix in scratch_prefixes(self.s3, self.loc.bucket, self.loc.base) - {self.prefix}:
            owner = live_owner(self.s3, self.loc.bucket, prefix)
            if owner is not None:
                with self.lock:
                    self.others[f"s3://{self.loc.bucket}/{prefix}"] = owner

    def _beat(self) -> None:
        self.write_marker()
        self.look_for_others()


def part_size(size: int | None, part_bytes: int) -> int:
    """The part size for an object of `size` bytes: the chosen one, or larger where that many parts would pass S3's
    MAX_PARTS (as boto3's transfer manager grows its chunks), in whole MiB."""
    if size is None or size <= part_bytes * MAX_PARTS:
        return part_bytes
    return -(-size // MAX_PARTS // MiB) * MiB + MiB


class Writer:
    """Uploads from one shared random buffer (incompressible, like weights); `on_bytes` is told each part's bytes."""

    def __init__(
        self, s3: Any, area: Scratch, part_bytes: int, cancel: threading.Event, on_bytes: Callable[[int], None]
    ):
        self.s3, self.area, self.part_bytes, self.cancel, self.on_bytes = s3, area, part_bytes, cancel, on_bytes
        self.bucket = area.loc.bucket
        self.block = os.urandom(part_bytes)

    def body(self, n: int) -> bytes:
        if self.cancel.is_set():
            raise raw.Cancelled()
        self.on_bytes(n)
        return self.block[:n] if n <= len(self.block) else (self.block * -(-n // len(self.block)))[:n]

    def put(self, key: str, size: int) -> float:
        """One PUT of `size` bytes; returns its latency."""
        body = self.body(size)
        start = time.perf_counter()
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body)
        return time.perf_counter() - start

    def multipart(self, key: str, size: int, deadline: float | None = None) -> int:
        """Upload parts one after another until `size` bytes or the deadline; returns the bytes uploaded."""
        if self.cancel.is_set():  # a stream that starts after the cancel must not open an upload only to abandon it
            raise raw.Cancelled()
        up = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        parts: list[dict[str, Any]] = []
        sent, part = 0, part_size(size, self.part_bytes)
        while sent < size:
            n = min(part, size - sent)
            number = len(parts) + 1
            etag = self.s3.upload_part(Bucket=self.bucket, Key=key, UploadId=up, PartNumber=number, Body=self.body(n))
            parts.append({"ETag": etag["ETag"], "PartNumber": number})
            sent += n
            if deadline is not None and time.perf_counter() >= deadline:
                break
        self.s3.complete_multipart_upload(Bucket=self.bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts})
        return sent

    def get(self, key: str, size: int, deadline: float) -> int:
        """One plain GET, read 1 MiB at a time until its end or the deadline; returns the bytes read."""
        body, got = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"], 0
        with contextlib.closing(body):
            while got < size and time.perf_counter() < deadline and (piece := body.read(MiB)):
                if self.cancel.is_set():
                    raise raw.Cancelled()
                got += len(piece)
                self.on_bytes(len(piece))
        return got


def _part_bytes(value: Any, what: str) -> int:
    part = parse_bytes(value, what)
    if not MIN_PART_BYTES <= part <= MAX_PART_BYTES:
        raise InputError(f"{what} must be 5 MiB to 5 GiB (S3's smallest and largest part), got {part:,} bytes")
    return part


class S3Options(Model):
    """The S3 backend's own options (TargetSpec.options), with their flags: where the endpoint is, whose
    credentials, the part size and the requests' timeout. Given with a directory, they are read and bounded, and
    name no other backend."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ClassVar[TargetKind] = "s3"
    endpoint_url: Annotated[
        str | None, Flag("--endpoint-url", "S3: endpoint of an S3-compatible store.", panel="S3")
    ] = None
    region: Annotated[str | None, Flag("--region", "S3: region.", panel="S3")] = None
    profile: Annotated[str | None, Flag("--profile", "S3: AWS profile from ~/.aws/config.", panel="S3")] = None
    part_bytes: Annotated[
        int, parsed(_part_bytes), Flag("--part-size", "S3: multipart part size.", "8MiB", "S3", type=str)
    ] = DEFAULT_PART_BYTES
    timeout_s: Annotated[
        float,
        parsed(parse_duration),
        Flag("--timeout", "S3: connect and read timeout per request.", "30s", "S3", type=str),
    ] = 30.0

    def claims(self, path: str) -> bool:
        """Whether a probe of `path` is this backend's: an s3:// URL."""
        return path.startswith("s3:")


class S3Backend:
    kind: TargetKind = "s3"

    def __init__(self, spec: TargetSpec):
        o = spec.options if isinstance(spec.options, S3Options) else S3Options()
        self.timeout_s = o.timeout_s
        self.spec = spec
        self.loc = parse_url(spec.path, o.endpoint_url, o.region, o.profile)
        self.part_bytes = o.part_bytes
        self.s3: Any = None
        self.threads = 1

    def prepare(self, spec: TargetSpec) -> Facts:
        if spec.emit_jobs is not None:
            raise InputError("‹emit_jobs› writes fio job files; the S3 probe runs ckplan's own client, not fio")
        # the streams' writers, or every rank of the busiest node at once in the replay, as the other backends run them
        self.threads = max(spec.writers_per_host, spec.plan.max_writers_per_node if spec.plan else 1)
        if self.threads > MAX_STREAMS:  # each stream is concurrent by definition: a capped pool would measure fewer
            which = "‹writers›" if spec.writers_per_host >= self.threads else "the plan's writers per node"
            raise InputError(
                f"an S3 probe runs at most {MAX_STREAMS:,} concurrent streams (a thread and a connection each), "
                f"and {which} asks for {self.threads:,}"
            )
        self.s3 = client(self.loc, self.timeout_s, 2 * self.threads + 4)
        try:
            self.s3.head_bucket(Bucket=self.loc.bucket)
        except Exception as exc:  # noqa: BLE001 — every failure becomes one line
            raise describe(exc, self.loc, "the bucket check") from None
        import boto3
        import botocore

        return Facts(
            target=self.loc.url,
            name=self.loc.url,
            fs_type="s3",
            storage_class="s3",
            shared=True,
            tool=f"ckplan-s3 (boto3 {boto3.__version__}, botocore {botocore.__version__})",
            mount_options={
                "endpoint": self.loc.safe_endpoint,
                "region": self.s3.meta.region_name,
                "part_size": str(self.part_bytes),
            },
            free_bytes=None,
            notes=(
                f"object store: one multipart upload per stream, parts of {self.part_bytes // MiB} MiB one after "
                "another; fsync latency is one writer's 4 KiB PUT latency (an object is durable when PUT returns); "
                "a small file is one PUT, its only operation (ops_per_s = files_per_s); reads are plain GETs of objects "
                "uploaded first, one stream per reader",
            ),
        )

    @contextlib.contextmanager
    def open(self, facts: Facts, progress: Progress) -> Iterator[S3Session]:
        try:
            with Scratch(self.s3, self.loc) as area, ThreadPoolExecutor(self.threads) as pool:
                session = S3Session(self.s3, area, self.part_bytes, pool, progress)
                try:
                    yield session
                except BaseException:
                    # the streams still queued never start, and those running stop after their request in flight,
                    # so that the prefix's removal below finds every upload this probe opened
                    session.cancel.set()
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise
        except (InputError, EnvironmentProblem, MeasurementFailed):
            raise
        except raw.Cancelled:
            raise KeyboardInterrupt from None
        except Exception as exc:  # noqa: BLE001 — every endpoint failure becomes one line
            raise describe(exc, self.loc, "the S3 probe", measuring=True) from None

    def clean(self, force: bool = False) -> CleanResult:
        """Remove every scratch prefix (objects and multipart uploads) under the URL whose probe is gone; a live
        probe's is kept unless `force`. After removing anything it lists again, as CLEAN_QUIET_S says."""
        from ckplan.probe.engine import CleanResult

        loc, s3 = self.loc, client(self.loc, self.timeout_s, 4)
        removed: set[str] = set()
        kept: dict[str, str] = {}
        deadline, quiet_from = time.monotonic() + CLEAN_WAIT_S, 0.0
        try:
            while True:
                doomed = []
                for prefix in sorted(scratch_prefixes(s3, loc.bucket, loc.base) - set(kept)):
                    if prefix not in removed and not force:  # judged once: a dead probe's marker may land again
                        owner = live_owner(s3, loc.bucket, prefix)
                        if owner is not None:
                            kept[prefix] = f"a live probe owns it ({owner})"
                            continue
                    doomed.append(prefix)
                for prefix in doomed:
                    remove_prefix(s3, loc.bucket, prefix)
                removed |= set(doomed)
                if doomed:
                    quiet_from = time.monotonic()
                elif not removed or time.monotonic() - quiet_from >= CLEAN_QUIET_S:
                    break  # a dead probe's prefix always holds its marker, so finding none at all needs no wait
                if doomed and time.monotonic() > deadline:
                    raise EnvironmentProblem(
                        f"objects or multipart uploads kept appearing under "
                        f"{', '.join(f's3://{loc.bucket}/{p}' for p in doomed)} for {CLEAN_WAIT_S:.0f} s of "
                        "clean-up: a probe may still be writing there; stop it and rerun clean"
                    )
                time.sleep(CLEAN_POLL_S)
        except (InputError, EnvironmentProblem):
            raise
        except Exception as exc:  # noqa: BLE001
            raise describe(exc, loc, "the clean-up") from None
        url = {p: f"s3://{loc.bucket}/{p}" for p in removed | set(kept)}
        why = {url[p]: w for p, w in kept.items()}
        return CleanResult(target=loc.url, removed=sorted(url[p] for p in removed), kept=sorted(why), why=why)


class S3Session:
    """Each writer a thread of the pool; each run under a prefix of its own, removed when the run ends (so that no
    more than the byte budget is kept)."""

    hosts = 1
    page_cache = False  # no page cache between the client and the store
    write_paths: tuple[Literal["buffered", "direct"], ...] = ("buffered",)
    direct_io = None  # an object store has no O_DIRECT

    def __init__(self, s3: Any, area: Scratch, part_bytes: int, pool: ThreadPoolExecutor, progress: Progress):
        self.area, self.pool, self.progress, self.cancel = area, pool, progress, threading.Event()
        self.writer = Writer(s3, area, part_bytes, self.cancel, self._count)
        self.host = socket.gethostname()
        self.notes: list[str] = []
        self.raw: list[dict[str, Any]] = []
        self.runs, self.sent, self.t0, self.lock = 0, 0, time.perf_counter(), threading.Lock()

    def _count(self, n: int) -> None:
        """The bytes sent since the run began, for the progress bar, from every writer thread."""
        with self.lock:
            self.sent += n
            self.progress.update(self.sent, time.perf_counter() - self.t0)

    @contextlib.contextmanager
    def _run(self, what: str) -> Iterator[str]:
        """The prefix of one run, the progress counted from zero; removed once the run has measured."""
        self.runs += 1
        self.sent, self.t0 = 0, time.perf_counter()
        root = f"{self.area.prefix}{what}-{self.runs}/"
        yield root
        remove_prefix(self.writer.s3, self.writer.bucket, root)

    def _each(self, work: Callable[[int], Any], writers: int) -> list[Any]:
        return [f.result() for f in [self.pool.submit(work, w) for w in range(writers)]]

    def stream(self, path: StreamPath, writers: int, hosts: int, size: int, seconds: float, note: RunNote) -> Stream:
        with self._run("bw") as root:
            move: Callable[[str, int, float], int] = self.writer.multipart
            if path == "read":  # plain GETs of objects uploaded first, untimed: no cache sits between client and store
                self._each(lambda w: self.writer.multipart(f"{root}{w}", size), writers)
                self.sent, self.t0, move = 0, time.perf_counter(), self.writer.get
            start = time.perf_counter()
            deadline = start + seconds
            sent = sum(self._each(lambda w: move(f"{root}{w}", size, deadline), writers))
            rate = sent / (time.perf_counter() - start)
        return Stream({self.host: rate}, rate)

    def small_files(self, writers: int, low: int, high: int, files_per_writer: int, note: RunNote) -> SmallRun:
        with self._run("small") as root:
            draw = random.Random(self.runs)  # sizes drawn uniformly from [low, high], as fio's filesize=low-high does
            sizes = [[draw.randint(low, high) for _ in range(files_per_writer)] for _ in range(writers)]

            def loop(w: int) -> None:
                for i, size in enumerate(sizes[w]):
                    self.writer.put(f"{root}{w}-{i}", size)

            start = time.perf_counter()
            self._each(loop, writers)
            seconds = max(time.perf_counter() - start, 1e-3)
        files = writers * files_per_writer
        return SmallRun({self.host: files / seconds}, {self.host: files / seconds}, files, seconds)

    def latency(
        self, kind: Literal["fsync", "o_sync"], seconds: float, file_bytes: int, note: RunNote
    ) -> Latency | None:
        if kind == "o_sync":
            return None  # no O_SYNC on an object store: every PUT is durable
        samples: list[float] = []
        with self._run("latency") as root:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end and len(samples) * LATENCY_PUT_BYTES < file_bytes:
                samples.append(self.writer.put(f"{root}{len(samples)}", LATENCY_PUT_BYTES))
        return Latency.of(samples)

    def write_files(self, nodes: list[list[FileToWrite]], path: str, run: int) -> tuple[float, int]:
        by_writer: dict[int, list[FileToWrite]] = {}
        for f in nodes[0]:
            by_writer.setdefault(f.rank, []).append(f)
        groups = list(by_writer.values())
        with self._run("replay") as root:
            keys = {id(f): confined_key(root, f.path) for f in nodes[0]}  # refused before an object is written
            start = time.perf_counter()

            def write(w: int) -> None:  # one PUT up to the part size, a multipart upload above, as savers write
                for f in groups[w]:
                    if f.bytes > self.writer.part_bytes:
                        self.writer.multipart(keys[id(f)], f.bytes)
                    else:
                        self.writer.put(keys[id(f)], f.bytes)

            self._each(write, len(groups))
            seconds = time.perf_counter() - start
        return seconds, sum(f.bytes for f in nodes[0])

    def save_files(self, files: list[FileToWrite], framework: str, runs: int) -> None:
        return None  # no framework saver writes to an object store here: the engine adds the serialiser term

    def load_files(self, loads: object, runs: int) -> None:
        return None  # the framework's loaders read files on this host, not objects

    def others(self) -> list[str]:
        self.area.look_for_others()
        with self.area.lock:
            return [f"{p}: {who}" for p, who in sorted(self.area.others.items())]

    def phase_ran(self, phase: str, why: str) -> None:
        pass
