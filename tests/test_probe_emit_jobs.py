"""`ckplan probe --emit-jobs DIR`: the job files a probe writes are the jobs it ran, and run by hand they give its figures."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import pytest

from ckplan.probe.engine import NOISY_RANGE
from ckplan.probe.fio import json_documents
from tests.conftest import assert_one_line_error, run_cli, run_json
from tests.netns import fio_hosts

pytestmark = pytest.mark.fio

# How far the hand runs' median may sit from the profile's figure: this factor × the target's noise, which is
# the farthest of the profile's repeats from their median plus the farthest of the hand runs from theirs (two
# samples, each with its own scatter), and never less than ckplan's own 10% bar for repeats that agree.
# The factor: this 2-core VM is shared with other sessions' tests and benchmarks, so runs half a minute apart
# differ by more than runs side by side. In 7 runs of this test here the gap was 0.27-1.18 of that noise;
# against the profile's spread alone it reached 3.1 once (the probe ran under another session's load: figure
# 0.74 GB/s within 0.74…1.14, hand runs 1.98-2.29 GB/s).
SPREAD_FACTOR = 3.0


def job_file(path: Path) -> dict[str, dict[str, str]]:
    """A job file's sections, as fio reads it: comment lines ('#', ';') skipped."""
    sections: dict[str, dict[str, str]] = {}
    current = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line[1:-1], {})
        else:
            key, _, value = line.partition("=")
            current[key] = value
    return sections


def comment(path: Path) -> str:
    return "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))


def final_doc(path: Path) -> dict:
    docs = json_documents(path.read_text())
    assert docs, f"no fio JSON in {path}"
    return docs[-1]  # --status-interval=1 prints one a second: the last one is final


def ckplan_options(doc: dict) -> dict:
    """The options fio reports it ran a single-host job with, the directory left out (it differs by design)."""
    return {k: v for k, v in doc["jobs"][0]["job options"].items() if k != "directory"}


def run_sh(jobs: Path, *numbers: str, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        ["sh", "run.sh", *numbers],
        cwd=jobs,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_emitted_buffered_job_reproduces_the_bandwidth_figure():
    """The default preset (3 repeats, so the figure has a spread), 1 writer, on tmpfs; then the emitted job of
    that figure's first run, run three times as run.sh runs it, after the warm-up its comment says to run first.

    tmpfs and not /var/tmp: on this VM's ext4 (mounted with discard) the probe's own three runs of a point fell
    run over run (0.92, 0.74, 0.60 GB/s; the probe writes and unlinks ~10 GB in the phase), so a figure there
    depends on when in the phase it was measured, and hand runs a minute later came out 0.6-1.75× of it."""
    base = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="ckplan-emit-test-"))
    try:
        target, jobs = base / "target", base / "jobs"
        target.mkdir()
        p = run_json("probe", str(target), "--writers", "1", "--no-calibrate", "--emit-jobs", str(jobs))
        m = p["measurement"]
        assert m["jobs_dir"] == str(jobs)
        point = next(b for b in p["buffered_bandwidth"] if b["writers"] == 1)
        spread = point["spread"]
        assert spread["repeats"] == 3
        runs = [j for j in m["jobs"] if j["figure"].startswith("buffered_bandwidth (writers=1)")]
        assert [re.search(r"run (\d) of 3", j["figure"])[1] for j in runs] == ["1", "2", "3"]
        # the profile's figure is the median of exactly these runs' outputs
        outputs = [p["raw_fio"][j["raw_fio"]]["jobs"][0]["write"]["bw_bytes"] for j in runs]
        assert point["bytes_per_s"] == statistics.median(outputs)

        first = runs[0]
        number = f"{first['number']:03d}"
        fio_file = jobs / first["files"][0]
        ran = p["raw_fio"][first["raw_fio"]]
        sections = job_file(fio_file)
        # the job file is the job ckplan ran: the same options, the scratch directory a placeholder
        assert sections["global"] == ran["global options"]
        ((name, options),) = [(k, v) for k, v in sections.items() if k != "global"]
        assert name == ran["jobs"][0]["jobname"] == "bw-buffered-1"
        assert options["directory"] == "${CKPLAN_JOB_DIR}"
        assert {k: v for k, v in options.items() if k != "directory"} == ckplan_options(ran)
        assert (options["rw"], options["numjobs"], options["direct"], options["end_fsync"]) == ("write", "1", "0", "1")

        # the warm-up its comment names: the probe's unrecorded first run of the phase
        warm_up = re.search(r"^# run first: the warm-up, run (\d+), .*`sh run\.sh \1 (\d+)`$", comment(fio_file), re.M)
        assert warm_up and warm_up[2] == number
        assert m["jobs"][int(warm_up[1]) - 1]["figure"].startswith("none: a warm-up")
        run_sh(jobs, warm_up[1])
        hand = []
        for _ in range(3):
            run_sh(jobs, number)
            doc = final_doc(fio_file.with_suffix(".json"))
            assert ckplan_options(doc) == ckplan_options(ran)
            written = doc["jobs"][0]["job options"]["directory"]
            assert written.startswith(str(target / "ckplan-jobs.")), written  # a fresh directory on the probed target
            hand.append(doc["jobs"][0]["write"]["bw_bytes"])
        assert list(target.iterdir()) == [], "run.sh left its directory behind"

        median, got = point["bytes_per_s"], statistics.median(hand)
        noise = max(spread["max"] - median, median - spread["min"]) + max(max(hand) - got, got - min(hand))
        # at least ckplan's own bar for repeats that agree (10%): three repeats can land close together by chance
        allowed = max(SPREAD_FACTOR * noise, NOISY_RANGE * median)
        summary = (
            f"profile {median / 1e9:.3f} GB/s (runs {spread['min'] / 1e9:.3f}…{spread['max'] / 1e9:.3f}), "
            f"hand runs {[round(h / 1e9, 3) for h in hand]}, median {got / 1e9:.3f} GB/s "
            f"({got / median:.2f}×), allowed ±{allowed / 1e9:.3f} GB/s (noise {noise / 1e9:.3f} GB/s)"
        )
        print(summary)
        assert abs(got - median) <= allowed, summary
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_every_phase_has_a_job_file_naming_its_figure(tmp_path):
    target, jobs = tmp_path / "target", tmp_path / "jobs"
    target.mkdir()
    p = run_json("probe", str(target), "--quick", "--writers", "2", "--no-calibrate", "--emit-jobs", str(jobs))
    m = p["measurement"]
    entries = m["jobs"]
    assert [j["number"] for j in entries] == list(range(1, len(entries) + 1))
    # every fio output the profile keeps has exactly one job file, and the job files follow the order the runs had
    kept = [j["raw_fio"] for j in entries if j["raw_fio"] is not None]
    assert kept == list(range(len(p["raw_fio"])))
    for j in entries:
        assert j["files"] == [f"{j['number']:03d}-{Path(j['files'][0]).name[4:]}"]
        assert (jobs / j["files"][0]).is_file()
        if j["raw_fio"] is not None:
            name = p["raw_fio"][j["raw_fio"]]["jobs"][0]["jobname"]
            assert j["files"][0] == f"{j['number']:03d}-{name}.fio"
    phases = [j["phase"] for j in entries]
    paths = ["buffered", "direct"] if p["direct_io"] else ["buffered"]
    assert phases == (
        ["direct-I/O check", "bandwidth, buffered"]
        + [f"bandwidth, {path}" for path in paths for _ in (1, 2)]
        + ["bandwidth, page-cache"]
        + ["bandwidth, read"] * 3  # the warm-up, then 1 and 2 readers
        + ["small files"] * 3
        + ["latency, fsync", "latency, O_SYNC writes"]
    )
    # each comment names the profile figure its run produced, and that figure is in the profile
    figures = {f"{path}_bandwidth (writers={w})" for path in paths + ["read"] for w in (1, 2)} | {
        "page_cache_write",
        "small_files.files_per_s",
        "fsync_latency",
        "sync_write_latency",
    }
    named = set()
    for j in entries:
        text = comment(jobs / j["files"][0])
        assert f"# figure:   {j['figure']}" in text and "# measures: " in text and "# read:     " in text
        assert "ckplan ran: " in text and "fio --output-format=json --status-interval=1" in text
        named |= {f for f in figures if f in j["figure"]}
        field = re.match(r"(\w+)", j["figure"])[1]
        assert field == "none" or field in p, j["figure"]
    assert named == figures
    assert "none: a warm-up" in entries[1]["figure"]
    small = [j for j in entries if j["phase"] == "small files"]
    assert "ckplan counts the files" in comment(jobs / small[-1]["files"][0])

    # run.sh names every job file once, in order; run as a whole, every job runs and leaves nothing behind
    script = (jobs / "run.sh").read_text()
    order = [m.group(1) for m in re.finditer(r"^  fio .* (\S+\.fio) > ", script, re.M)]
    assert order == [j["files"][0] for j in entries]
    proc = run_sh(jobs)
    assert [line.split()[0] for line in proc.stderr.splitlines()] == [f"{j['number']:03d}" for j in entries]
    assert list(target.iterdir()) == []
    for j in entries:
        doc = final_doc(jobs / j["files"][0].replace(".fio", ".json"))
        assert all(int(job["error"]) == 0 for job in doc["jobs"])
    # the small-file phase's figure, read the way its comment says: every file completes, so the count ckplan
    # and run.sh make is nrfiles × writers
    for j in small:
        stem = j["files"][0][:-4]
        doc = final_doc(jobs / f"{stem}.json")
        files = int((jobs / f"{stem}.files").read_text())
        nrfiles = int(doc["jobs"][0]["job options"]["nrfiles"])
        assert files == nrfiles * 2
        rate = files * 1000 / max(int(job["write"]["runtime"]) for job in doc["jobs"])
        assert 10 < rate < 1e6

    # without run.sh and without CKPLAN_JOB_DIR fio refuses the job rather than write somewhere unintended
    env = {k: v for k, v in os.environ.items() if k != "CKPLAN_JOB_DIR"}
    bare = subprocess.run(
        ["fio", "--output-format=json", entries[2]["files"][0]],
        cwd=jobs,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bare.returncode != 0 and "failed parsing directory=${CKPLAN_JOB_DIR}" in bare.stderr + bare.stdout


@pytest.fixture
def fio_log(tmp_path):
    """A `fio` first on PATH that logs every call, then runs the real one: proof that no fio ran."""
    shim = tmp_path / "shim"
    shim.mkdir()
    log = tmp_path / "fio-calls.log"
    (shim / "fio").write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {shutil.which("fio")} "$@"\n')
    (shim / "fio").chmod(0o755)
    return log, {"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize("kind", ["file", "non-empty directory"])
def test_a_bad_emit_directory_is_refused_before_fio_runs(tmp_path, fio_log, kind):
    log, env = fio_log
    target = tmp_path / "target"
    target.mkdir()
    out = tmp_path / "jobs"
    if kind == "file":
        out.write_text("not a directory\n")
    else:
        out.mkdir()
        (out / "001-old.fio").write_text("[old]\n")
    proc = run_cli("probe", str(target), "--quick", "--no-calibrate", "--emit-jobs", str(out), env=env)
    assert_one_line_error(proc, "--emit-jobs")
    assert "not a directory" in proc.stderr if kind == "file" else "not empty" in proc.stderr
    assert not log.exists(), log.read_text()
    assert list(target.iterdir()) == []


def test_an_emit_directory_that_cannot_be_created_is_refused_before_fio_runs(tmp_path, fio_log):
    log, env = fio_log
    target, blocker = tmp_path / "target", tmp_path / "a-file"
    target.mkdir()
    blocker.write_text("not a directory\n")
    proc = run_cli("probe", str(target), "--quick", "--no-calibrate", "--emit-jobs", str(blocker / "jobs"), env=env)
    assert_one_line_error(proc, "cannot create the --emit-jobs directory")
    assert not log.exists() and list(target.iterdir()) == []


def test_a_refused_multi_host_probe_leaves_no_emit_directory(tmp_path):
    import socket

    with socket.socket() as s:  # a port on this machine with no agent behind it
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    target, jobs = tmp_path / "shared", tmp_path / "out" / "jobs"
    target.mkdir()
    args = ["--hosts", dead, "--quick", "--emit-jobs", str(jobs), "--agent-wait", "1s"]
    proc = run_cli("probe", str(target), *args, timeout=60)  # no agent answers: refused before fio runs
    assert_one_line_error(proc, "127.0.0.1", code=3)
    assert not (tmp_path / "out").exists() and list(target.iterdir()) == []


def test_s3_refuses_emit_jobs(tmp_path, fio_log):
    log, env = fio_log
    # an endpoint nobody listens on: had the probe started, it would fail there with exit code 3, not 2
    proc = run_cli(
        "probe",
        "s3://bucket/prefix",
        "--endpoint-url",
        "http://127.0.0.1:9",
        "--emit-jobs",
        str(tmp_path / "jobs"),
        env=env,
    )
    assert_one_line_error(proc, "--emit-jobs")
    assert "S3" in proc.stderr
    assert not log.exists() and not (tmp_path / "jobs").exists()


def test_multi_host_client_jobs_are_emitted_and_rerun(tmp_path):
    target, jobs, server_cwd = tmp_path / "shared", tmp_path / "jobs", tmp_path / "server-cwd"
    target.mkdir()
    server_cwd.mkdir()
    with fio_hosts(2, workdir=server_cwd) as servers:
        addrs = [addr for addr, _ in servers]
        p = run_json(
            "probe", str(target), "--hosts", ",".join(addrs), "--quick", "--writers", "1", "--emit-jobs", str(jobs)
        )
        entries = p["measurement"]["jobs"]
        # the direct-I/O check keeps no fio output; every other run's output is kept, in order
        assert [j["raw_fio"] for j in entries] == [None] + list(range(len(p["raw_fio"])))
        assert [j["phase"] for j in entries] == [
            "direct-I/O check",
            "bandwidth, buffered",  # the warm-up
            "bandwidth, buffered",
            "bandwidth, direct",
            "bandwidth, page-cache",
            "host scaling, 1 host(s)",
            "host scaling, 2 host(s)",
            "bandwidth, read",  # the warm-up
            "bandwidth, read",
            "read host scaling, 1 host(s)",
            "read host scaling, 2 host(s)",
            "small files",
            "small files",
            "small files",
            "latency, fsync",
            "latency, O_SYNC writes",
        ]
        first = entries[2]
        assert entries[1]["files"] == ["002-warm-up-buffered-1-2h.host0.fio", "002-warm-up-buffered-1-2h.host1.fio"]
        assert first["files"] == ["003-bw-buffered-1-2h.host0.fio", "003-bw-buffered-1-2h.host1.fio"]
        assert entries[5]["files"] == ["006-bw-buffered-1-1h.host0.fio"]  # one host in that run
        script = (jobs / "run.sh").read_text()
        assert (
            f"fio --output-format=json --client=ip:{addrs[0]},8765 003-bw-buffered-1-2h.host0.fio "
            f"--client=ip:{addrs[1]},8765 003-bw-buffered-1-2h.host1.fio > 003-bw-buffered-1-2h.json"
        ) in script
        for name in first["files"]:
            assert "buffered_bandwidth (writers=1)" in comment(jobs / name) and "ckplan agent" in comment(jobs / name)
            sections = job_file(jobs / name)
            # emitted as sent: each host's own directory under the target, made by fio and removed by the last section
            assert sections["global"]["filename_format"].startswith(f"{target}/.ckplan-probe-")
            assert "ckplan-cleanup" in sections and "${CKPLAN_JOB_DIR}" not in str(sections)
        # rerun by hand against the same fio servers: both hosts report, and nothing is left on the target
        run_sh(jobs, "003")
        doc = final_doc(jobs / "003-bw-buffered-1-2h.json")
        hosts = {c["hostname"] for c in doc["client_stats"] if c["jobname"] == "bw-buffered-1"}
        assert hosts == set(addrs)
        assert all(c["write"]["bw_bytes"] > 10e6 for c in doc["client_stats"] if c["jobname"] == "bw-buffered-1")
    assert list(target.iterdir()) == []
    assert list(server_cwd.iterdir()) == []


def test_a_multi_host_job_file_is_named_after_its_first_measuring_job(tmp_path):
    from ckplan.probe import fio, hostlist, jobfiles
    from ckplan.probe.engine import RunNote
    from tests.test_probe_cluster import hosts_session

    run = hosts_session(Path("/shared"), [hostlist.Host("10.0.0.2")], "drv-1-abc")
    text = run.jobfile(run.all[0], [fio.FioJob("small", {"rw": "write"}), fio.FioJob("fsync", {"rw": "write"})])
    sections = [line[1:-1] for line in text.splitlines() if line.startswith("[")]
    assert sections == ["global", "ckplan-marker", "small", "fsync", "ckplan-cleanup"]
    writer = jobfiles.JobWriter(tmp_path / "jobs", about="a test", fio_version="fio-3")
    note = RunNote("small files", "small_files.files_per_s", measures="writes small files", read="client_stats[]")
    writer.record(["fio", "--client=ip:10.0.0.2,8765", "/tmp/host0.fio"], {"/tmp/host0.fio": text}, note)
    assert writer.jobs[0].files == ["001-small.host0.fio"] and (tmp_path / "jobs" / "001-small.host0.fio").exists()
