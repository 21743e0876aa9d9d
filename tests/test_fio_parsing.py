"""fio output quirks and mount-line parsing, on captured fio 3.33 outputs."""

import errno
import os

import pytest

from ckplan import filesystem
from ckplan.errors import describe_errno
from ckplan.probe import fio
from tests.conftest import FIXTURES

FIO = FIXTURES / "fio"


def test_text_before_json_and_enospc_error():
    docs = fio.json_documents((FIO / "enospc.stdout.txt").read_text())
    assert len(docs) == 1
    assert fio.job_errors(docs[0]) == [errno.ENOSPC]
    assert "ENOSPC" in describe_errno(errno.ENOSPC, "x")


def test_readonly_error():
    doc = fio.json_documents((FIO / "readonly.stdout.txt").read_text())[-1]
    assert fio.job_errors(doc) == [errno.EROFS]


def test_status_interval_gives_several_documents_last_is_final():
    docs = fio.json_documents((FIO / "status-interval-multi-docs.txt").read_text())
    assert len(docs) >= 3
    written = [fio.write_bytes(d) for d in docs]
    assert written == sorted(written) and written[-1] > written[0]


def test_client_mode_banner_lines_before_json():
    docs = fio.json_documents((FIO / "client-mode-2hosts.txt").read_text())
    doc = docs[-1]
    hosts = {c["hostname"] for c in doc["client_stats"] if c["jobname"] != "All clients"}
    assert len(hosts) == 2


def test_group_reporting_bandwidth_and_fsync_percentiles():
    import json

    group = json.loads((FIO / "seqwrite-2jobs-group.json").read_text())
    assert len(group["jobs"]) == 1 and group["jobs"][0]["write"]["bw_bytes"] > 0
    direct = json.loads((FIO / "seqwrite-2jobs-direct.json").read_text())
    assert len(direct["jobs"]) == 2
    fsync = json.loads((FIO / "fsync-every-write.json").read_text())
    p50, p99, p999, mean, n = fio.percentiles_s(fsync["jobs"][0]["sync"], "lat_ns")
    assert 0 < p50 <= p99 <= p999 and n > 0


def test_escape_path_colons():
    assert fio.escape_path("/mnt/a:b c,d") == "/mnt/a\\:b c,d"


def test_job_file_render():
    job = fio.FioJob("bw", {"rw": "write", "numjobs": 2})
    assert job.render() == "[bw]\nrw=write\nnumjobs=2\n"


MOUNTS = filesystem.parse_mounts((FIXTURES / "mounts" / "proc-mounts-samples.txt").read_text())


@pytest.mark.parametrize(
    "path,fs_type,cls",
    [
        ("/mnt/nfs/run1", "nfs4", "nfs"),
        ("/mnt/nfs3", "nfs", "nfs"),
        ("/mnt/lustre/ckpt", "lustre", "lustre"),
        ("/gpfs/fs0/x", "gpfs", "gpfs"),
        ("/mnt/beegfs", "beegfs", "beegfs"),
        ("/mnt/cephfs/a", "ceph", "cephfs"),
        ("/mnt/weka", "wekafs", "weka"),
        ("/local/nvme/ckpt", "xfs", "local-nvme"),
        ("/raid/x", "ext4", "local-disk"),
        ("/dev/shm", "tmpfs", "tmpfs"),
        ("/mnt/jfs", "fuse.juicefs", "fuse"),
        ("/mnt/sshfs/d", "fuse.sshfs", "fuse"),
        ("/mnt/with space/y", "xfs", "local-disk"),
    ],
)
def test_mount_detection_from_captured_lines(path, fs_type, cls):
    from pathlib import PurePosixPath

    class P(PurePosixPath):
        def resolve(self):
            return self

    mount = filesystem.mount_of(P(path), MOUNTS)
    assert (mount.fs_type, mount.storage_class) == (fs_type, cls)


def test_nfs_options_and_secret_redaction():
    nfs = next(m for m in MOUNTS if m.mount_point == "/mnt/nfs")
    assert nfs.options["nconnect"] == "16" and nfs.options["rsize"] == "1048576" and nfs.options["wsize"] == "1048576"
    ceph = next(m for m in MOUNTS if m.fs_type == "ceph")
    assert ceph.options["secret"] == "<redacted>"


def test_noisy_repeats_are_flagged_and_steady_ones_are_not():
    from ckplan.probe.engine import noise_notes
    from ckplan.profile import BandwidthPoint, SmallFiles, Spread

    steady = [
        BandwidthPoint(writers=1, bytes_per_s=1e9, spread=Spread.of([0.98e9, 1e9, 1.05e9])),
        BandwidthPoint(writers=2, bytes_per_s=2e9, spread=Spread.of([1.95e9, 2e9, 2.09e9])),
    ]
    files = SmallFiles(
        files_per_s=1000,
        ops_per_s=4000,
        file_bytes_min=4096,
        file_bytes_max=4096,
        writers=2,
        spread=Spread.of([800, 1000, 1100]),
    )
    assert noise_notes(steady) == []  # 7% on the best point
    notes = noise_notes(steady, files)
    assert len(notes) == 1 and "small-file rate varied by 30% across its 3 repeats" in notes[0]
    # the best point decides, not a noisy point that does not set the figure
    noisy_low = [steady[0].model_copy(update={"spread": Spread.of([0.5e9, 1e9, 1.2e9])}), steady[1]]
    assert noise_notes(noisy_low) == []
    noisy_best = [steady[0], steady[1].model_copy(update={"spread": Spread.of([1.6e9, 2e9, 2.1e9])})]
    assert "2-writer bandwidth varied by 25%" in noise_notes(noisy_best)[0]


def test_latency_percentiles_in_seconds():
    """fio reports latencies in nanoseconds: fsync-every-write.json's sync.lat_ns has p50 187,392 ns, p99 288,768 ns,
    p99.9 366,592 ns, mean 197,165.04 ns over 1,023 fsyncs; in seconds, 1.87392e-4 … (read off the document by hand).
    Independently, 1,023 fsyncs of that mean take 0.2017 s, which must fit in the job's own runtime (205 ms, fio's clock
    for the whole job, writes included).

    Deliberate break this catches: latency read 1000× too large (÷ 1e6 instead of ÷ 1e9)."""
    import json

    doc = json.loads((FIO / "fsync-every-write.json").read_text())
    job = doc["jobs"][0]
    p50, p99, p999, mean, n = fio.percentiles_s(job["sync"], "lat_ns")
    assert (p50, p99, p999) == pytest.approx((187_392e-9, 288_768e-9, 366_592e-9), rel=1e-12)
    assert mean == pytest.approx(197_165.036168e-9) and n == 1023
    assert mean * n <= job["write"]["runtime"] / 1000 == 0.205
    # the O_SYNC-style write completion latency: clat_ns p50 2,192 ns
    assert fio.percentiles_s(job["write"])[0] == pytest.approx(2.192e-6)


@pytest.mark.fio
def test_run_fio_returns_the_final_status_interval_document(tmp_path):
    """A real fio run, rate-limited to 2 MiB/s for 6 MiB (~3 s), prints a JSON document every second
    (--status-interval=1). run_fio must return the last, whole-run one: its write figures equal what is on disk
    (6 MiB in one file, 6 writes of 1 MiB). The first document holds only the first second's ~2 MiB.

    Deliberate break this catches: fio's first status-interval document used instead of the final one."""
    seen: list[tuple[int, float]] = []
    job = fio.FioJob(
        "paced",
        {
            "directory": fio.escape_path(tmp_path),
            "filename": "paced.bin",
            "rw": "write",
            "bs": "1M",
            "size": "6M",
            "rate": "2m",
            "ioengine": "psync",
        },
    )
    doc = fio.run_fio([job], tmp_path, "a paced write", on_status=lambda b, t: seen.append((b, t)))
    on_disk = (tmp_path / "paced.bin").stat().st_size
    assert on_disk == 6 * 2**20
    write = doc["jobs"][0]["write"]
    assert (write["io_bytes"], write["total_ios"]) == (on_disk, 6)
    assert write["runtime"] >= 2000  # 6 MiB at 2 MiB/s: the first MiB at once, then one every 0.5 s
    # the live figures came from the earlier documents: at least one, and never more than the final count
    assert seen and all(b <= on_disk for b, _ in seen)


def test_file_jobs_write_every_file_exactly_and_group_a_writers_small_files(tmp_path):
    """Run by fio itself: every file comes out at its size; a writer's run of small files of one size is one job
    (split where the filename list would pass fio's 4,096-character limit), a file of 1 MiB or more a job per part,
    and a writer's jobs are chained in order while the writers run at once."""
    import json
    import subprocess

    files = [(str(tmp_path / "a" / f"big{w}.pt"), 3 * fio.MiB + 123, w) for w in range(2)]
    files += [(str(tmp_path / "b" / f"layer_{i:04d}-model_00-model_states.pt"), 47_884, i % 2) for i in range(300)]
    files += [(str(tmp_path / "c:x" / f"small{i}.pt"), 4000 + i % 2, 0) for i in range(4)]
    files += [(str(tmp_path / "d:e" / f"exact{w}.pt"), fio.MiB, w) for w in range(2)]
    jobs = fio.file_jobs(files, "file")
    per_path = len(files[2][0]) + 1
    chunks = -(-150 * per_path // fio.MAX_OPTION_CHARS)  # each writer's 150 layer files, in lists under the limit
    assert len(jobs) == 2 * 2 + 2 * chunks + 4 + 2, [j.name for j in jobs]
    for job in jobs:
        assert len(str(job.options["filename"])) < fio.MAX_OPTION_CHARS
    writer0 = [j for j in jobs if j.name.startswith("file0-")]
    assert "wait_for" not in writer0[0].options
    assert [j.options["wait_for"] for j in writer0[1:]] == [j.name for j in writer0[:-1]]
    assert all(j.options["fsync_on_close"] == 1 for j in writer0[1:]) and "fsync_on_close" not in writer0[0].options

    job_file = tmp_path / "files.fio"
    job_file.write_text("\n".join(j.render() for j in jobs))
    doc = json.loads(
        subprocess.run(
            ["fio", "--output-format=json", str(job_file)], capture_output=True, text=True, check=True
        ).stdout
    )
    assert sum(j["write"]["io_bytes"] for j in doc["jobs"]) == sum(size for _, size, _ in files)
    assert {path: os.path.getsize(path) for path, _, _ in files} == {path: size for path, size, _ in files}
