"""Probe an S3-compatible object store with ckplan's own client (fio 3.33 has no S3 engine).

The result is the same StorageProfile a filesystem probe gives, so `recommend`
works unchanged:
- bandwidth: 1, 2, 4 … concurrent streams, each one multipart upload whose
  parts go one after another (part size stated, --part-size), time-bounded;
- small files: PUT rate and per-request latency (p50/p99/p99.9) of small
  objects from every writer; the PUT latency also stands in for fsync latency,
  since an object is durable when its PUT returns;
- replay: each file of the busiest node becomes one object, written by its
  rank's thread, multipart above the part size, as object-store writers do.
Everything goes under a unique key prefix, deleted at the end, on error and on
Ctrl-C, with every multipart upload it started aborted; `ckplan clean s3://…`
removes what a killed probe left. The prefix's first object is a marker naming
the probe's host and pid, rewritten every HEARTBEAT_S: `clean` leaves a live
probe's prefix alone, and a probe that finds another live one beside it says
that the figures were shared. Credentials come from the standard AWS chain
and never reach output, profiles or error messages: errors are rebuilt from
their codes, not passed through.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import json
import math
import os
import secrets
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ckplan.confine import confined_key
from ckplan.errors import EnvironmentProblem, InputError, MeasurementFailed, missing_extra
from ckplan.probe import replay, target
from ckplan.probe.base import (
    PRESETS,
    SCRATCH_PREFIX,
    MiB,
    PreparedTarget,
    Preset,
    Progress,
    Silent,
    concurrent_note,
    noise_notes,
    writer_counts,
)
from ckplan.profile import BandwidthPoint, Latency, Measurement, Replay, SmallFiles, Spread, StorageProfile

if TYPE_CHECKING:
    from ckplan.probe.clean import CleanResult
    from ckplan.profile import TargetKind

DEFAULT_PART_BYTES = 8 * MiB  # boto3 TransferConfig's multipart_chunksize
MIN_PART_BYTES = 5 * MiB  # S3's smallest part (all but the last)
MAX_PART_BYTES = 5 * 2**30  # S3's largest part
MAX_PARTS = 10_000  # parts of one multipart upload, at most
SMALL_OBJECT_RANGE = (4 * 1024, 256 * 1024)
MARKER = target.MARKER  # the same name as the filesystem probe's marker file
HEARTBEAT_S = 5.0  # how often a running probe rewrites its marker
# A marker older than this (by the server's clock) belongs to a probe that is gone. It must outlast a heartbeat PUT
# that takes its full retries at the default 30 s timeout, or a slow endpoint would make a live probe look dead.
STALE_AFTER_S = 120.0
# A probe killed with -9 leaves requests that the server has received and still processes: a multipart upload
# being completed leaves the upload listing before its object appears (moto here: up to 0.9 s after the kill,
# with a few hundred MB). So `clean` lists again until nothing has appeared for CLEAN_QUIET_S, giving up after
# CLEAN_WAIT_S of objects that keep appearing (something still writes there).
CLEAN_QUIET_S = 3.0
CLEAN_WAIT_S = 60.0
CLEAN_POLL_S = 0.5


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
    def safe_endpoint(self) -> str:
        """The endpoint without any user:password@ part."""
        if not self.endpoint_url:
            return "AWS default"
        parts = urlsplit(self.endpoint_url)
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def parse_url(
    url: str, endpoint_url: str | None = None, region: str | None = None, profile: str | None = None
) -> S3Location:
    if not url.startswith("s3://"):
        raise InputError(f"not an S3 URL: {url!r} (use s3://bucket/prefix)")
    rest = url[5:]
    bucket, _, prefix = rest.partition("/")
    if not (3 <= len(bucket) <= 63) or not all(c.isalnum() or c in ".-" for c in bucket) or bucket[0] in ".-":
        raise InputError(f"malformed S3 URL {url!r}: {bucket!r} is not a valid bucket name")
    if endpoint_url is not None:
        parts = urlsplit(endpoint_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(
                f"--endpoint-url must be an http(s) URL, got {S3Location(bucket, '', endpoint_url, None, None).safe_endpoint!r}"
            )
    return S3Location(bucket, prefix.strip("/"), endpoint_url, region, profile)


def client(loc: S3Location, timeout_s: float, pool: int):
    try:
        import boto3
        import botocore.config
        import botocore.exceptions
    except ImportError:
        raise missing_extra("S3 probing", "boto3", "s3") from None
    try:
        session = boto3.session.Session(profile_name=loc.profile, region_name=loc.region)
        if session.get_credentials() is None:
            raise InputError("no AWS credentials found (environment variables, ~/.aws/credentials or --profile)")
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


# the endpoint is busy or failing, not refusing the request: retrying later may succeed
BUSY_CODES = {
    "SlowDown",
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "BandwidthLimitExceeded",
    "RequestThrottled",
    "ServerBusy",
}


def describe(exc: Exception, loc: S3Location, what: str, measuring: bool = False) -> Exception:
    """One line from an S3 failure, built from its code: never the raw message, which could echo request details.

    An endpoint that cannot be reached is an environment problem (exit 3); one that drops the connection, breaks
    a response stream, throttles or fails with a server error while it is being measured is a failed measurement
    (exit 4), an environment problem otherwise; a request the endpoint refuses is bad input (exit 2). Anything
    that is neither botocore's nor a connection's comes back as it is: a bug in ckplan, not the endpoint's doing.
    """
    import botocore.exceptions as be

    failed = MeasurementFailed if measuring else EnvironmentProblem

    if isinstance(exc, be.NoCredentialsError):
        return InputError("no AWS credentials found (environment variables, ~/.aws/credentials or --profile)")
    if isinstance(exc, be.InvalidRegionError):
        region = exc.kwargs.get("region_name", loc.region)
        if loc.region is not None:
            return InputError(f"‹region› {region!r} is not a valid AWS region name (such as us-east-1)")
        return EnvironmentProblem(
            f"the AWS region {region!r} set in the environment or the AWS config is not a valid region name"
        )
    if isinstance(exc, be.PartialCredentialsError):
        return EnvironmentProblem(
            f"incomplete AWS credentials in {exc.kwargs.get('provider', 'the environment')}: "
            f"{exc.kwargs.get('cred_var', 'a part')} is missing"
        )
    if isinstance(exc, (be.CredentialRetrievalError, be.ConfigParseError, be.InvalidConfigError)):
        return EnvironmentProblem(f"cannot read the AWS credentials or config ({type(exc).__name__}) during {what}")
    if isinstance(exc, be.EndpointConnectionError):
        return EnvironmentProblem(
            f"cannot connect to the S3 endpoint {loc.safe_endpoint} during {what}: connection refused or unreachable"
        )
    if isinstance(exc, (be.ConnectTimeoutError, be.ReadTimeoutError)):
        return EnvironmentProblem(f"the S3 endpoint {loc.safe_endpoint} did not answer in time during {what}")
    if isinstance(exc, (be.ConnectionClosedError, be.ConnectionError, ConnectionError)):
        return failed(f"the S3 endpoint {loc.safe_endpoint} dropped the connection during {what}")
    if isinstance(exc, (be.HTTPClientError, be.IncompleteReadError, be.ChecksumError, be.FlexibleChecksumError)):
        return failed(
            f"a response from the S3 endpoint {loc.safe_endpoint} broke off ({type(exc).__name__}) during {what}"
        )
    if isinstance(exc, be.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", "unknown"))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in BUSY_CODES or (isinstance(status, int) and (status >= 500 or status == 429)):
            return failed(
                f"the S3 endpoint {loc.safe_endpoint} is busy or failing ({code}"
                + (f", HTTP {status}" if status else "")
                + f") during {what}: try again later"
            )
        if code in ("NoSuchBucket", "404", "NotFound"):
            return InputError(f"bucket {loc.bucket!r} does not exist at {loc.safe_endpoint}")
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"):
            return InputError(f"the S3 endpoint rejected the credentials ({code}) during {what}")
        if code in ("403", "AccessDenied", "Forbidden"):
            return InputError(
                f"the S3 endpoint refused access ({code}) during {what}: wrong credentials, or no permission on {loc.bucket!r}"
            )
        return InputError(f"S3 error {code} during {what}")
    if isinstance(exc, be.BotoCoreError):
        return InputError(f"S3 client error ({type(exc).__name__}) during {what}")
    return exc


@dataclass(frozen=True)
class Owner:
    """Who wrote a scratch prefix, from its marker; age_s is the time since its last heartbeat."""

    host: str | None
    pid: int | None
    age_s: float

    @property
    def live(self) -> bool:
        return probe_alive(self.host, self.pid, self.age_s)

    def __str__(self) -> str:
        return f"host {self.host}, pid {self.pid}, last heartbeat {self.age_s:.0f} s ago"


def probe_alive(host: str | None, pid: int | None, age_s: float, here: str | None = None) -> bool:
    """A probe is live while its heartbeat is fresh and, on this host, its pid still runs.

    The pid answers at once for a probe of this host killed a moment ago; the heartbeat's age is all there
    is for another host's, and it also catches a dead probe's pid reused by an unrelated process here.
    """
    if age_s > STALE_AFTER_S or pid is None:
        return False
    if host == (here or socket.gethostname()):
        return target._alive(pid)
    return True


def owner_of(s3, bucket: str, prefix: str) -> Owner | None:
    """The owner named by the prefix's marker; None where there is none, or it is not ckplan's."""
    import botocore.exceptions

    try:
        got = s3.get_object(Bucket=bucket, Key=prefix + MARKER)
        info = json.loads(got["Body"].read(4096))  # bounded: anyone may have written an object by that name
    except botocore.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
            return None
        raise
    except ValueError:
        return None
    if not isinstance(info, dict):
        return None
    # the age by the server's own clock (its Date header against the marker's LastModified), so that clock
    # skew between the probe's host and this one cannot make a live probe look dead or a dead one live
    try:
        now = email.utils.parsedate_to_datetime(got["ResponseMetadata"]["HTTPHeaders"]["date"])
    except (KeyError, TypeError, ValueError):
        now = dt.datetime.now(dt.UTC)
    age = max(0.0, (now - got["LastModified"]).total_seconds())
    pid = info.get("pid")
    return Owner(host=str(info.get("host")), pid=pid if isinstance(pid, int) else None, age_s=age)


def scratch_prefixes(s3, bucket: str, base: str) -> set[str]:
    """Every probe prefix directly under `base`: those holding objects, and those holding only multipart uploads."""
    found = set()
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=base + SCRATCH_PREFIX, Delimiter="/"
    ):
        found |= {p["Prefix"] for p in page.get("CommonPrefixes", [])}
    for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=base + SCRATCH_PREFIX):
        found |= {
            base + u["Key"][len(base) :].split("/", 1)[0] + "/"
            for u in page.get("Uploads", [])
            if "/" in u["Key"][len(base) :]
        }
    return found


@dataclass
class Scratch:
    """A unique key prefix; every object and multipart upload under it is removed on exit.

    Its marker is written before anything else, so that no listing ever shows the prefix without its owner,
    and rewritten every HEARTBEAT_S by a thread that also looks for other live probes beside it.
    """

    s3: Any  # a boto3 S3 client (boto3 is an optional extra, imported where the probe runs)
    loc: S3Location
    prefix: str = ""
    base: str = ""  # the user's prefix, where other probes' prefixes sit beside this one
    uploads: dict = field(default_factory=dict)  # upload id -> key
    lock: threading.Lock = field(default_factory=threading.Lock)
    others: dict = field(default_factory=dict)  # scratch prefix of another live probe -> its owner, as seen
    started: float = field(default_factory=time.time)
    stop: threading.Event = field(default_factory=threading.Event)
    beat: threading.Thread | None = None

    def __post_init__(self) -> None:
        name = f"{SCRATCH_PREFIX}{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self.base = f"{self.loc.prefix}/" if self.loc.prefix else ""
        self.prefix = self.base + name + "/"

    def __enter__(self) -> Scratch:
        try:  # until this returns, `with` will not call __exit__: a Ctrl-C in here must remove the marker itself
            self.write_marker()
            self.beat = threading.Thread(target=self._heartbeat, name="ckplan-s3-heartbeat", daemon=True)
            self.beat.start()
        except BaseException:
            # a PUT that timed out may still have landed; the marker's own error is the one to report
            with contextlib.suppress(Exception):
                self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.beat is not None:
            self.beat.join()  # a heartbeat landing after the removal would leave the marker behind
        remove_prefix(self.s3, self.loc.bucket, self.prefix)

    def write_marker(self) -> None:
        body = json.dumps(
            {"host": socket.gethostname(), "pid": os.getpid(), "started": self.started, "heartbeat": time.time()}
        )
        self.s3.put_object(Bucket=self.loc.bucket, Key=self.prefix + MARKER, Body=body.encode())

    def look_for_others(self) -> None:
        """Record every other live probe under the same prefix; a dead probe's leftovers do not count."""
        for prefix in scratch_prefixes(self.s3, self.loc.bucket, self.base) - {self.prefix}:
            owner = owner_of(self.s3, self.loc.bucket, prefix)
            if owner is not None and owner.live:
                with self.lock:
                    self.others[f"s3://{self.loc.bucket}/{prefix}"] = str(owner)

    def _heartbeat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            try:
                self.write_marker()
                self.look_for_others()
            except Exception:  # noqa: BLE001 — a failing endpoint is reported by the phase it fails, with its name
                pass


def remove_prefix(s3, bucket: str, prefix: str) -> int:
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
                if exc.response.get("Error", {}).get("Code") != "NoSuchUpload":
                    raise
            removed += 1
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [o["Key"] for o in page.get("Contents", [])]
        for i in range(0, len(keys), 1000):
            removed += _delete_keys(s3, bucket, prefix, keys[i : i + 1000])
    return removed


DELETE_ATTEMPTS = 4
DELETE_RETRY_S = 0.25  # doubled after each failed attempt


def _delete_keys(s3, bucket: str, prefix: str, keys: list[str]) -> int:
    """Delete `keys` (at most 1000), retrying those the endpoint reports as not deleted; the count deleted.

    DeleteObjects answers HTTP 200 and lists each key it did not delete under Errors; a key that is already
    gone (NoSuchKey) is deleted as far as the caller cares.
    """
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
    at = prefix.find(SCRATCH_PREFIX)
    base = prefix[:at].rstrip("/") if at >= 0 else prefix.rstrip("/")
    target_url = f"s3://{bucket}/{base}".rstrip("/")  # where `ckplan clean` finds this scratch prefix
    raise EnvironmentProblem(
        f"the S3 endpoint did not delete {len(pending)} object(s) under s3://{bucket}/{prefix} "
        f"({', '.join(sorted(codes))}) after {DELETE_ATTEMPTS} attempts: remove them with "
        f"`ckplan clean {target_url}`"
    )


class Writer:
    """Uploads from one shared random buffer (incompressible, like weights), tracking multipart uploads."""

    def __init__(self, s3, scratch: Scratch, part_bytes: int, cancel: threading.Event, on_bytes):
        self.s3, self.scratch, self.part_bytes, self.cancel, self.on_bytes = s3, scratch, part_bytes, cancel, on_bytes
        self.block = os.urandom(part_bytes)

    def put(self, key: str, size: int) -> float:
        """One PUT of `size` bytes; returns its latency."""
        body = self.block[:size] if size <= len(self.block) else os.urandom(size)
        start = time.perf_counter()
        self.s3.put_object(Bucket=self.scratch.loc.bucket, Key=key, Body=body)
        self.on_bytes(size)
        return time.perf_counter() - start

    def multipart(self, key: str, size: int | None, deadline: float | None = None) -> int:
        """Upload parts one after another until `size` bytes or the deadline; returns the bytes uploaded."""
        bucket = self.scratch.loc.bucket
        up = self.s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        with self.scratch.lock:
            self.scratch.uploads[up] = key
        parts, sent, number = [], 0, 1
        part = part_size(size, self.part_bytes)
        while size is None or sent < size:
            if self.cancel.is_set():
                raise replay.Cancelled()
            n = part if size is None else min(part, size - sent)
            body = self.block[:n] if n <= len(self.block) else (self.block * -(-n // len(self.block)))[:n]
            etag = self.s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=number, Body=body)["ETag"]
            parts.append({"ETag": etag, "PartNumber": number})
            sent += n
            number += 1
            self.on_bytes(n)
            if deadline is not None and time.perf_counter() >= deadline:
                break
        self.s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts})
        with self.scratch.lock:
            del self.scratch.uploads[up]
        return sent


def part_size(size: int | None, part_bytes: int) -> int:
    """The part size for an object of `size` bytes: the chosen one, or larger where that many parts would pass S3's
    MAX_PARTS (as boto3's transfer manager grows its chunks), in whole MiB."""
    if size is None or size <= part_bytes * MAX_PARTS:
        return part_bytes
    return -(-size // MAX_PARTS // MiB) * MiB + MiB


@dataclass(frozen=True)
class S3ProbeJob:
    loc: S3Location
    preset: Preset
    writers: int
    part_bytes: int
    stream_bytes: int  # what one stream uploads in one bandwidth run, at most: the byte budget shared by the streams
    small_objects: int | None  # small objects per writer and run, at most (None: until the run's time is up)
    timeout_s: float
    plan: object | None
    replay_files: tuple
    scale: float
    name: str | None

    @property
    def estimated_seconds(self) -> float:
        return self.preset.bandwidth_budget_s + self.preset.small_files_budget_s + 2.0


def prepare_s3_probe(
    url: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    preset: str = "default",
    writers: int | None = None,
    plan=None,
    scale: float = 1.0,
    part_bytes: int = DEFAULT_PART_BYTES,
    timeout_s: float = 30.0,
    name: str | None = None,
    max_bytes: int | None = None,
) -> S3ProbeJob:
    """Every check that can fail before an object is written: URL, credentials, endpoint, bucket, the byte budget.

    `max_bytes` bounds what the probe keeps under its prefix at once, as it bounds a filesystem probe's files: a
    bandwidth run's streams share it (each run's objects are deleted before the next), the small objects of a
    run fit in it, and so must the replay's files."""
    loc = parse_url(url, endpoint_url, region, profile)
    if not MIN_PART_BYTES <= part_bytes <= MAX_PART_BYTES:
        raise InputError(
            f"‹part_bytes› must be 5 MiB to 5 GiB (S3's smallest and largest part), got {part_bytes:,} bytes"
        )
    max_writers = writers or (plan.max_writers_per_node if plan else os.cpu_count() or 1)
    settings = PRESETS[preset]
    files = tuple(replay.scaled_files(replay.node_share(plan.manifest)[1], scale)) if plan is not None else ()
    stream_bytes, small_objects = settings.bytes_per_writer, None
    if max_bytes is not None:
        stream_bytes = min(stream_bytes, max_bytes // max_writers)
        need = max_writers * MiB
        if stream_bytes < MiB:
            raise InputError(
                f"‹max_bytes› {max_bytes:,} bytes is too little for {max_writers} upload streams: the probe needs at "
                f"least {need:,} bytes (1 MiB per stream)"
            )
        small_objects = max(1, max_bytes // (max_writers * _small_sizes(plan)[-1]))
        replayed = sum(f.bytes for f in files)
        if replayed > max_bytes:
            fit = max_bytes / replayed * scale
            raise InputError(
                f"replaying the plan at ‹scale› {scale:g} uploads {replayed:,} bytes, more than ‹max_bytes› "
                f"{max_bytes:,}; try ‹scale› {fit * 0.9:.2g}"
            )
    s3 = client(loc, timeout_s, 2 * max_writers + 4)
    try:
        s3.head_bucket(Bucket=loc.bucket)
    except Exception as exc:  # noqa: BLE001 — every failure becomes one line
        raise describe(exc, loc, "the bucket check") from None
    return S3ProbeJob(
        loc=loc,
        preset=settings,
        writers=max_writers,
        part_bytes=part_bytes,
        stream_bytes=stream_bytes,
        small_objects=small_objects,
        timeout_s=timeout_s,
        plan=plan,
        replay_files=files,
        scale=scale,
        name=name,
    )


def run_s3_probe(job: S3ProbeJob, progress: Progress | None = None) -> StorageProfile:
    progress = progress or Silent()
    s3 = client(job.loc, job.timeout_s, 2 * job.writers + 4)
    cancel = threading.Event()
    started = time.monotonic()
    counter = {"bytes": 0, "t0": time.perf_counter()}
    lock = threading.Lock()

    def on_bytes(n: int) -> None:
        with lock:
            counter["bytes"] += n
            progress.update(int(counter["bytes"]), time.perf_counter() - counter["t0"])

    def phase(label: str, budget: float) -> None:
        counter.update(bytes=0, t0=time.perf_counter())
        progress.phase(label, budget)

    what = "the S3 probe"
    try:
        with Scratch(s3, job.loc) as scratch, ThreadPoolExecutor(max_workers=job.writers) as pool:
            writer = Writer(s3, scratch, job.part_bytes, cancel, on_bytes)
            try:
                what = "the check for other probes"
                scratch.look_for_others()  # at the start, at every heartbeat and at the end
                what = "the bandwidth phase"
                bandwidth = _bandwidth(job, writer, scratch, pool, phase)
                what = "the small-object phase"
                small, latency = _small_objects(job, writer, scratch, pool, phase)
                what = "the replay"
                replayed = _replay(job, writer, scratch, pool, phase) if job.plan is not None else None
                what = "the check for other probes"
                scratch.look_for_others()
                others = [f"{p}: {who}" for p, who in sorted(scratch.others.items())]
            except BaseException:
                cancel.set()
                raise
    except (InputError, EnvironmentProblem, MeasurementFailed):
        raise
    except replay.Cancelled:
        raise KeyboardInterrupt from None
    except Exception as exc:  # noqa: BLE001
        raise describe(exc, job.loc, what, measuring=True) from None
    import boto3
    import botocore

    return StorageProfile(
        target_kind="s3",
        name=job.name or job.loc.url,
        target=job.loc.url,
        fs_type="s3",
        storage_class="s3",
        mount_point=None,
        mount_options={
            "endpoint": job.loc.safe_endpoint,
            "region": s3.meta.region_name,
            "part_size": str(job.part_bytes),
        },
        shared=True,
        direct_io=None,
        buffered_bandwidth=bandwidth,
        best_write_bytes_per_s=max(b.bytes_per_s for b in bandwidth),
        small_files=small,
        fsync_latency=latency,
        replay=replayed,
        notes=[
            f"object store: one multipart upload per stream, parts of {job.part_bytes // MiB} MiB one after another; "
            "fsync latency is the small-object PUT latency (an object is durable when PUT returns)"
        ]
        + noise_notes(bandwidth, small)
        + ([concurrent_note(others)] if others else []),
        measurement=Measurement(
            tool=f"ckplan-s3 (boto3 {boto3.__version__}, botocore {botocore.__version__})",
            date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            host=socket.gethostname(),
            preset=job.preset.name,
            duration_s=time.monotonic() - started,
            bandwidth_bytes_per_writer=job.preset.bytes_per_writer,
            runtime_cap_s=job.preset.point_runtime_s(job.writers),
            repeats=job.preset.repeats,
        ),
    )


def _bandwidth(job, writer, scratch, pool, phase) -> list[BandwidthPoint]:
    points = []
    runtime = job.preset.point_runtime_s(job.writers)
    for streams in writer_counts(job.writers):
        values = []
        for r in range(job.preset.repeats):
            phase(f"bandwidth: {streams} multipart stream(s), run {r + 1}/{job.preset.repeats}", runtime)
            start = time.perf_counter()
            deadline = start + runtime
            root = f"{scratch.prefix}bw-{streams}-{r}/"
            futures = [pool.submit(writer.multipart, f"{root}{i}", job.stream_bytes, deadline) for i in range(streams)]
            sent = sum(f.result() for f in futures)
            values.append(sent / (time.perf_counter() - start))
            remove_prefix(writer.s3, job.loc.bucket, root)  # so that no more than the byte budget is kept at once
        spread = Spread.of(values)
        points.append(BandwidthPoint(writers=streams, bytes_per_s=spread.median, spread=spread))
    return points


def _small_sizes(plan) -> list[int]:
    low, high = SMALL_OBJECT_RANGE
    if plan is not None:
        sizes = [f.bytes for f in plan.manifest if f.kind == "small"]
        if sizes:
            low, high = max(1, min(sizes)), max(1, min(max(sizes), 4 * MiB))
    return sorted({int(low * (high / low) ** (i / 3)) for i in range(4)})


def _small_objects(job, writer, scratch, pool, phase) -> tuple[SmallFiles, Latency]:
    sizes = _small_sizes(job.plan)
    runtime = job.preset.small_files_runtime_s
    rates, latencies = [], []
    repeats = job.preset.small_files_repeats
    for r in range(repeats):
        phase(f"small objects: PUT from {job.writers} writers, run {r + 1}/{repeats}", runtime)
        start = time.perf_counter()
        deadline = start + runtime

        def loop(w: int) -> list[float]:
            out, i = [], 0
            limit = job.small_objects if job.small_objects is not None else math.inf
            while i < limit and time.perf_counter() < deadline and not writer.cancel.is_set():
                out.append(writer.put(f"{scratch.prefix}small-{r}-{w}-{i}", sizes[i % len(sizes)]))
                i += 1
            return out

        per = [f.result() for f in [pool.submit(loop, w) for w in range(job.writers)]]
        done = [x for p in per for x in p]
        rates.append(len(done) / (time.perf_counter() - start))
        latencies += done
        remove_prefix(writer.s3, job.loc.bucket, f"{scratch.prefix}small-{r}-")
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))]

    spread = Spread.of(rates)
    small = SmallFiles(
        files_per_s=spread.median,
        ops_per_s=spread.median,
        file_bytes_min=sizes[0],
        file_bytes_max=sizes[-1],
        writers=job.writers,
        spread=spread,
    )
    return small, Latency(
        p50_s=pct(50), p99_s=pct(99), p999_s=pct(99.9), mean_s=sum(latencies) / len(latencies), samples=len(latencies)
    )


def _replay(job, writer, scratch, pool, phase) -> Replay:
    files = list(job.replay_files)
    by_writer: dict[int, list] = {}
    for f in files:
        by_writer.setdefault(f.writer, []).append(f)
    times = []
    for r in range(job.preset.repeats):
        phase(
            f"replay: {len(files)} objects, {len(by_writer)} writers, scale {job.scale:g}, run {r + 1}/{job.preset.repeats}",
            0,
        )
        root = f"{scratch.prefix}replay-{r}/"

        def run(fs) -> None:
            for f in fs:
                key = confined_key(root, f.path)
                if f.bytes > job.part_bytes:
                    writer.multipart(key, f.bytes)
                else:
                    writer.put(key, f.bytes)

        start = time.perf_counter()
        for fut in [pool.submit(run, fs) for fs in by_writer.values()]:
            fut.result()
        times.append(time.perf_counter() - start)
        remove_prefix(writer.s3, job.loc.bucket, root)
    spread = Spread.of(times)
    total = sum(f.bytes for f in files)
    full = sum(f.bytes for f in replay.node_share(job.plan.manifest)[1])
    return Replay(
        seconds=spread.median,
        bytes=total,
        files=len(files),
        writers=len(by_writer),
        scale=job.scale,
        plan_fingerprint=job.plan.fingerprint,
        full_scale_seconds=spread.median * full / total,
        spread=spread,
    )


def clean_s3(
    url: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    timeout_s: float = 30.0,
    force: bool = False,
    quiet_s: float = CLEAN_QUIET_S,
    wait_s: float = CLEAN_WAIT_S,
):
    """Remove every `.ckplan-probe-*` prefix (objects and multipart uploads) under the URL whose probe is gone.

    A live probe's prefix is kept unless `force`. After removing anything, it lists again until nothing new has
    appeared for `quiet_s` (a killed probe's last requests land late), and gives up after `wait_s`.
    """
    from ckplan.probe.clean import CleanResult

    loc = parse_url(url, endpoint_url, region, profile)
    s3 = client(loc, timeout_s, 4)
    base = f"{loc.prefix}/" if loc.prefix else ""
    removed: set[str] = set()
    kept: dict[str, str] = {}
    deadline = time.monotonic() + wait_s
    quiet_from = 0.0
    try:
        while True:
            doomed = []
            for prefix in sorted(scratch_prefixes(s3, loc.bucket, base) - set(kept)):
                if prefix not in removed and not force:  # judged once: a dead probe's marker may land again
                    owner = owner_of(s3, loc.bucket, prefix)
                    if owner is not None and owner.live:
                        kept[prefix] = f"a live probe owns it ({owner})"
                        continue
                doomed.append(prefix)
            if doomed:
                for prefix in doomed:
                    remove_prefix(s3, loc.bucket, prefix)
                removed |= set(doomed)
                quiet_from = time.monotonic()
            elif not removed or time.monotonic() - quiet_from >= quiet_s:
                break  # a dead probe's prefix always holds its marker, so finding none at all needs no wait
            if doomed and time.monotonic() > deadline:
                left = ", ".join(f"s3://{loc.bucket}/{p}" for p in doomed)
                raise EnvironmentProblem(
                    f"objects or multipart uploads kept appearing under {left} for {wait_s:.0f} s "
                    "of clean-up: a probe may still be writing there; stop it and rerun clean"
                )
            time.sleep(CLEAN_POLL_S)
    except (InputError, EnvironmentProblem):
        raise
    except Exception as exc:  # noqa: BLE001
        raise describe(exc, loc, "the clean-up") from None
    url_of = {p: f"s3://{loc.bucket}/{p}" for p in removed | set(kept)}
    return CleanResult(
        target=loc.url,
        removed=sorted(url_of[p] for p in removed),
        kept=sorted(url_of[p] for p in kept),
        why={url_of[p]: w for p, w in kept.items()},
    )


class S3Target(PreparedTarget):
    """An object-store prefix, measured with ckplan's own client (probe/interface.py's ProbeTarget)."""

    kind: TargetKind = "s3"

    def _prepare(self) -> S3ProbeJob:
        s, o = self.spec, self.spec.s3
        return prepare_s3_probe(
            s.path,
            endpoint_url=o.endpoint_url,
            region=o.region,
            profile=o.profile,
            preset=s.preset,
            writers=s.writers,
            plan=s.plan,
            scale=s.scale,
            part_bytes=o.part_bytes or DEFAULT_PART_BYTES,
            timeout_s=o.timeout_s,
            name=s.name,
            max_bytes=s.max_bytes,
        )

    def _run(self, job: S3ProbeJob, progress: Progress | None) -> StorageProfile:
        return run_s3_probe(job, progress)

    def clean(self, force: bool = False) -> CleanResult:
        o = self.spec.s3
        return clean_s3(
            self.spec.path,
            endpoint_url=o.endpoint_url,
            region=o.region,
            profile=o.profile,
            timeout_s=o.timeout_s,
            force=force,
        )
