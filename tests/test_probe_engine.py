"""The probe engine's rules against a scripted backend: no I/O, so every figure is known in advance.

The real backends (fio, fio servers in namespaces, the S3 test server) are tested in test_probe_fs.py,
test_probe_cluster.py and test_probe_s3.py; these tests pin what the engine does with what a backend reports.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import pytest

from ckplan import catalog
from ckplan.errors import InputError, MeasurementFailed
from ckplan.probe import engine
from ckplan.probe.engine import Facts, FileToWrite, RunNote, SmallRun, Stream, TargetSpec
from ckplan.profile import Latency
from ckplan.sizing.plan import build_plan

MiB = 2**20


@dataclass
class Script:
    """What the fake target reports: bandwidth per run (in call order, warm-up first; reads apart, each host 1 GB/s
    unless given), small-file runs, latency."""

    streams: list[dict[str, float]]
    reads: list[dict[str, float]] = field(default_factory=list)
    small: list[tuple[float, float]] = field(default_factory=lambda: [(1000.0, 4000.0)] * 10)  # files/s, ops/s
    replay_seconds: list[float] = field(default_factory=list)
    save_seconds: list[float] | None = None  # the framework saver's runs; None: the target cannot run it
    load_seconds: list[float] | None = None  # the framework loaders' runs; None: the target cannot run them
    others: list[str] = field(default_factory=list)
    fail_in: str | None = None  # a phase that raises mid-probe


class FakeSession:
    def __init__(self, script: Script, hosts: int):
        self.script, self.hosts = script, hosts
        self.write_paths: tuple = ("buffered",)
        self.direct_io = False  # as a fio session that found O_DIRECT refused
        self.page_cache = False
        self.notes: list[str] = []
        self.raw: list[dict] = []
        self.calls: list[tuple[str, RunNote | None, tuple]] = []
        self.written: list[list[FileToWrite]] = []

    def stream(self, path, writers, hosts, size, seconds, note):
        self.calls.append(("stream", note, (path, writers, hosts, size, seconds)))
        if path != "read":
            per_host = self.script.streams.pop(0)
        elif self.script.fail_in == "read" and len([c for c in self.calls if c[2][0] == "read"]) == 3:
            raise MeasurementFailed("the read phase failed: Input/output error")
        else:
            per_host = self.script.reads.pop(0) if self.script.reads else {f"h{i}": 1e9 for i in range(hosts)}
        return Stream(per_host, sum(per_host.values()))

    def small_files(self, writers, low, high, files_per_writer, note):
        if self.script.fail_in == "small files":
            raise MeasurementFailed("the small-file phase failed: No space left on device")
        self.calls.append(("small", note, (writers, low, high, files_per_writer)))
        files_s, ops_s = self.script.small.pop(0)
        per_host = {f"h{i}": files_s for i in range(self.hosts)}
        files = files_per_writer * writers * self.hosts
        return SmallRun(per_host, {h: ops_s for h in per_host}, files, files / files_s / self.hosts)

    def latency(self, kind, seconds, file_bytes, note):
        self.calls.append(("latency", note, (kind, file_bytes)))
        return Latency.of([0.001, 0.002, 0.003]) if kind == "fsync" else None

    def write_files(self, nodes, path, run):
        self.written.append([f for fs in nodes for f in fs])
        return self.script.replay_seconds[run], sum(f.bytes for fs in nodes for f in fs)

    def save_files(self, files, framework, runs):
        return self.script.save_seconds  # None: no framework saver, the engine writes raw bytes (+ serialiser)

    def load_files(self, loads, runs):
        self.calls.append(("load", None, (loads, runs)))
        return self.script.load_seconds

    def others(self):
        return self.script.others

    def phase_ran(self, phase, why):
        pass


class FakeBackend:
    kind = "filesystem"

    def __init__(self, script: Script, hosts: int = 1, free_bytes: int | None = None):
        self.script, self.hosts, self.free_bytes = script, hosts, free_bytes
        self.closed = False
        self.session: FakeSession | None = None

    def prepare(self, spec):
        return Facts(
            target="/fake", name="fake", fs_type="ext4", storage_class="local-nvme", shared=False, tool="fake",
            hosts=self.hosts, free_bytes=self.free_bytes,
        )  # fmt: skip

    @contextlib.contextmanager
    def open(self, facts, progress):
        self.session = FakeSession(self.script, self.hosts)
        try:
            yield self.session
        finally:
            self.closed = True

    def clean(self, force=False):
        raise AssertionError("not called")


def probe(backend: FakeBackend, **spec):
    spec = {"preset": "default", "writers": 2, "calibrate": False, **spec}
    job = engine.prepare(TargetSpec("/fake", **spec), backend)
    return job, engine.run(job, backend)


def test_warm_up_is_not_counted_and_each_point_keeps_the_median_of_its_repeats():
    # default preset: 3 repeats of writers 1 and 2, after one warm-up at 2 writers
    gb = 1e9
    script = Script(streams=[{"h": 0.1 * gb}] + [{"h": v * gb} for v in (1.0, 2.0, 1.2, 2.2, 1.1, 2.1)])
    backend = FakeBackend(script)
    _, p = probe(backend)
    calls = [c for c in backend.session.calls if c[0] == "stream" and c[2][0] != "read"]
    assert calls[0][1].warm_up and calls[0][2][1] == 2  # the warm-up at the most writers
    assert not any(note.warm_up for _, note, _ in calls[1:])
    points = {b.writers: b for b in p.buffered_bandwidth}
    assert points[1].bytes_per_s == pytest.approx(1.1 * gb) and points[2].bytes_per_s == pytest.approx(2.1 * gb)
    assert (points[1].spread.min, points[1].spread.max) == pytest.approx((1.0 * gb, 1.2 * gb))
    assert p.best_write_bytes_per_s == pytest.approx(2.1 * gb)  # the slow warm-up (0.1 GB/s) appears nowhere
    # only the best point's noise is judged: 2.0…2.2 GB/s is 9.5% of its median, within NOISY_RANGE
    assert not [n for n in p.notes if "varied by" in n]


def test_a_noisy_best_point_is_flagged_and_a_steady_one_is_not():
    gb = 1e9
    steady = Script(streams=[{"h": gb}] + [{"h": v * gb} for v in (1.0, 2.0, 1.0, 2.05, 1.0, 2.1)])
    _, p = probe(FakeBackend(steady))
    assert not [n for n in p.notes if "varied by" in n]
    noisy = Script(streams=[{"h": gb}] + [{"h": v * gb} for v in (1.0, 2.0, 1.0, 3.0, 1.0, 2.5)])
    _, p = probe(FakeBackend(noisy))
    (note,) = [n for n in p.notes if "varied by" in n]
    assert "the 2-writer bandwidth varied by 40% across its 3 repeats" in note  # (3.0 − 2.0) ÷ 2.5


def test_with_many_hosts_a_point_is_the_slowest_host_and_the_aggregate_is_the_sum():
    gb = 1e9
    two = {"a": 1.0 * gb, "b": 0.6 * gb}
    # quick: 1 repeat; writers 1 and 2 on both hosts, then the host scaling runs at 1 and 2 hosts
    script = Script(streams=[two, two, two, {"a": 1.5 * gb}, {"a": 0.8 * gb, "b": 0.7 * gb}])
    _, p = probe(FakeBackend(script, hosts=2), preset="quick")
    assert [b.bytes_per_s for b in p.buffered_bandwidth] == [0.6 * gb, 0.6 * gb]
    assert [(b.hosts, b.bytes_per_s) for b in p.aggregate_bandwidth] == [(1, 1.5 * gb), (2, 1.5 * gb)]
    assert p.hosts == 2 and p.aggregate_files_per_s == pytest.approx(2 * 1000.0)


def test_small_files_are_calibrated_warmed_up_then_repeated_and_their_median_kept():
    gb = 1e9
    rates = [(500.0, 2000.0), (800.0, 3000.0)] + [(v, 4 * v) for v in (1000.0, 1300.0, 900.0, 1200.0, 1100.0)]
    script = Script(streams=[{"h": gb}] * 7, small=rates)
    backend = FakeBackend(script)
    _, p = probe(backend)
    small = [c for c in backend.session.calls if c[0] == "small"]
    assert len(small) == 2 + 5 and small[1][1].warm_up and not small[0][1].warm_up
    assert p.small_files.files_per_s == 1100.0 and p.small_files.ops_per_s == 4400.0
    assert (p.small_files.spread.min, p.small_files.spread.max) == (900.0, 1300.0)
    # the measured runs' count: the warm-up's rate × the per-run budget (12 s ÷ 5) ÷ the 2 writers, capped
    files = small[2][2][3]
    assert files == min(1024, int(800.0 * (12.0 / 5) / 2))
    assert (p.small_files.file_bytes_min, p.small_files.file_bytes_max) == engine.DEFAULT_SMALL_FILE_RANGE


def test_the_byte_budget_sizes_each_writer_and_refuses_too_little_room():
    gb = 1e9
    # free 2 × 65 MiB: half of it may be used, less the 1 MiB reserve → 64 MiB over 2 writers
    job, _ = probe(FakeBackend(Script(streams=[{"h": gb}] * 7), free_bytes=2 * 65 * MiB))
    assert job.data_bytes == 64 * MiB and job.bytes_per_writer == 32 * MiB
    with pytest.raises(InputError, match="too little free space on /fake"):
        engine.prepare(TargetSpec("/fake", writers=2, calibrate=False), FakeBackend(Script([]), free_bytes=16 * MiB))


def test_every_hosts_latency_file_together_stays_inside_the_byte_budget():
    """Each host writes its own latency file: 4 hosts in a 64 MiB budget get 16 MiB each, not 64 MiB each."""
    hosts = {f"h{i}": 1e9 for i in range(4)}
    backend = FakeBackend(Script(streams=[hosts] * 40), hosts=4, free_bytes=2 * 65 * MiB)
    job, _ = probe(backend)
    assert job.data_bytes == 64 * MiB
    assert backend.session is not None
    sizes = [args[1] for what, _, args in backend.session.calls if what == "latency"]
    assert sizes == [16 * MiB, 16 * MiB]


def test_full_scale_extrapolation_is_fixed_plus_scaled_plus_serialiser():
    # raw bytes: 0.5 s fixed + 2.0 s × 10 + 1.0 s serialising at full size
    assert engine.full_scale_seconds(2.0, 0.5, 1.0, 10.0, framework_saver=False) == pytest.approx(21.5)
    # a framework saver's run holds its fixed cost and serialisation: only the rest scales
    assert engine.full_scale_seconds(2.0, 0.5, 1.0, 10.0, framework_saver=True) == pytest.approx(0.5 + 1.5 * 10)


def test_the_replay_writes_the_plans_files_exactly_and_carries_the_serialiser_term():
    gb = 1e9
    plan = build_plan(arch=catalog.model("llama-3.1-8b"), model_name="llama-3.1-8b", gpus=4)
    scale = 0.001
    script = Script(streams=[{"h": gb}] * 7, replay_seconds=[9.0, 2.0, 2.4, 2.2])  # warm-up + 3 repeats
    backend = FakeBackend(script)
    _, p = probe(backend, plan=plan, scale=scale)
    busiest = plan.busiest_node
    expected = {(f.path, max(1, int(f.bytes * scale))) for f in plan.manifest if f.node == busiest.node}
    assert all({(f.path, f.bytes) for f in run} == expected for run in backend.session.written)
    r = p.replay
    assert r is not None and r.method == "raw bytes" and r.seconds == 2.2 and r.spread.repeats == 3
    assert r.bytes == sum(b for _, b in expected) and r.serialize_seconds > 0
    ratio = busiest.bytes / r.bytes
    assert r.full_scale_seconds == pytest.approx(r.fixed_seconds + 2.2 * ratio + r.serialize_seconds)


def test_another_live_probe_is_named_in_the_notes():
    script = Script(streams=[{"h": 1e9}] * 7, others=["/fake/.ckplan-probe-x (host h2, pid 7)"])
    _, p = probe(FakeBackend(script))
    (note,) = engine.shared_target_warnings(p.notes)
    assert "/fake/.ckplan-probe-x (host h2, pid 7)" in note


def test_a_backend_failing_mid_phase_propagates_and_the_session_is_closed():
    backend = FakeBackend(Script(streams=[{"h": 1e9}] * 7, fail_in="small files"))
    job = engine.prepare(TargetSpec("/fake", writers=2, calibrate=False), backend)
    with pytest.raises(MeasurementFailed, match="No space left on device"):
        engine.run(job, backend)
    assert backend.closed  # the backend's scratch area is removed on the way out


def test_the_read_phase_warms_up_then_keeps_each_reader_counts_median_and_spread():
    gb = 1e9
    # default preset, 2 writers: writes at 1.0 GB/s (1 writer) and 1.6 GB/s (2 writers, 0.8 GB/s each)
    writes = [{"h": gb}] + [{"h": v * gb} for v in (1.0, 1.6) * 3]
    reads = [{"h": 0.1 * gb}] + [{"h": v * gb} for v in (0.9, 1.5, 1.1, 1.9, 1.0, 1.7)]
    backend = FakeBackend(Script(streams=writes, reads=reads))
    job, p = probe(backend)
    calls = [args for what, _, args in backend.session.calls if what == "stream" and args[0] == "read"]
    notes = [note for what, note, args in backend.session.calls if what == "stream" and args[0] == "read"]
    assert notes[0].warm_up and calls[0][1] == 2 and not any(n.warm_up for n in notes[1:])
    assert [c[1] for c in calls[1:]] == [1, 2] * 3  # the writers' counts, round by round
    # each reader's file: what one writer wrote in half the run's time at that count, in whole MiB (the warm-up:
    # 0.8 GB/s × 3 s ÷ 2 = 1.2e9 bytes = 1,144.4 MiB)
    assert calls[0][3] == 1144 * MiB
    for _, n, _, size, seconds in calls[1:]:
        assert size == max(4 * MiB, int({1: 1.0, 2: 0.8}[n] * gb * seconds / 2) // MiB * MiB)
    points = {b.writers: b for b in p.read_bandwidth}
    assert points[1].bytes_per_s == pytest.approx(1.0 * gb) and points[2].bytes_per_s == pytest.approx(1.7 * gb)
    assert (points[2].spread.min, points[2].spread.max, points[2].spread.repeats) == (1.5 * gb, 1.9 * gb, 3)
    assert p.aggregate_read_bandwidth == [] and p.buffered_bandwidth[1].bytes_per_s == pytest.approx(1.6 * gb)
    # the best read point's repeats span 0.4 ÷ 1.7 = 24%: flagged like a write figure's
    assert any("the 2-reader read bandwidth varied by 24% across its 3 repeats" in n for n in p.notes)


def test_with_many_hosts_a_read_point_is_the_slowest_host_and_the_aggregate_the_sum():
    gb = 1e9
    two = {"a": 1.0 * gb, "b": 0.6 * gb}
    writes = [two, two, two, {"a": 1.5 * gb}, {"a": 0.8 * gb, "b": 0.7 * gb}]
    reads = [
        two,
        {"a": 0.9 * gb, "b": 0.5 * gb},
        {"a": 1.2 * gb, "b": 0.7 * gb},
        {"a": 1.4 * gb},
        {"a": gb, "b": 0.9 * gb},
    ]
    _, p = probe(FakeBackend(Script(streams=writes, reads=reads), hosts=2), preset="quick")
    assert [(b.writers, b.bytes_per_s) for b in p.read_bandwidth] == [(1, 0.5 * gb), (2, 0.7 * gb)]
    assert [(b.hosts, b.bytes_per_s) for b in p.aggregate_read_bandwidth] == [(1, 1.4 * gb), (2, 1.9 * gb)]


def test_a_backend_failing_mid_read_phase_propagates_and_no_later_phase_runs():
    backend = FakeBackend(Script(streams=[{"h": 1e9}] * 7, fail_in="read"))
    job = engine.prepare(TargetSpec("/fake", writers=2, calibrate=False), backend)
    with pytest.raises(MeasurementFailed, match="Input/output error"):
        engine.run(job, backend)
    assert backend.closed and not [c for c in backend.session.calls if c[0] in ("small", "latency")]


def _zero3_plan():
    return build_plan(
        arch=catalog.model("llama-3.1-8b"), model_name="llama-3.1-8b", gpus=4, framework="deepspeed", zero=3
    )


def test_the_read_replay_warms_up_repeats_and_extrapolates_to_the_nodes_restore_bytes(monkeypatch):
    from ckplan.savers import calibrate

    monkeypatch.setattr(calibrate, "torch_available", lambda: True)  # the replay takes the framework saver's path
    plan, scale = _zero3_plan(), 0.001
    # a slow warm-up load (5 s, not counted), then 3 loads: median 1.1 s, 1.0…1.4 s is 36% of it: noisy
    script = Script(streams=[{"h": 1e9}] * 7, save_seconds=[4.0, 2.0, 2.1, 2.2], load_seconds=[5.0, 1.0, 1.4, 1.1])
    backend = FakeBackend(script)
    _, p = probe(backend, plan=plan, scale=scale)
    ((_, _, (loads, runs)),) = [c for c in backend.session.calls if c[0] == "load"]
    assert runs == 4  # the warm-up and the default preset's 3 repeats
    r = p.read_replay
    assert r is not None and r.method == "framework loader" and r.plan_fingerprint == plan.fingerprint
    assert (r.seconds, r.spread.min, r.spread.max, r.spread.repeats) == (1.1, 1.0, 1.4, 3)
    # ZeRO-3 on one node of 4: its ranks read every file but the two conversion scripts, each its own shards
    read = [f for f in plan.manifest if not f.path.endswith(".py")]
    assert r.bytes == sum(max(1, int(f.bytes * scale)) for f in read) and r.files == len(read)
    assert r.readers == 4 == loads.readers
    assert r.full_scale_seconds == pytest.approx(1.1 * sum(f.bytes for f in read) / r.bytes)
    assert any(n.startswith("the read replay's load time varied by 36%") for n in p.notes)


def test_a_backend_that_cannot_load_gives_one_note_and_no_read_replay(monkeypatch):
    from ckplan.savers import calibrate

    monkeypatch.setattr(calibrate, "torch_available", lambda: True)
    script = Script(streams=[{"h": 1e9}] * 7, save_seconds=[4.0, 2.0, 2.1, 2.2], load_seconds=None)
    _, p = probe(FakeBackend(script), plan=_zero3_plan(), scale=0.001)
    assert p.replay is not None and p.replay.method == "framework saver" and p.read_replay is None
    assert [n for n in p.notes if "read replay" in n] == [
        "no read replay: this target's backend cannot run the framework's loaders"
    ]


def test_a_raw_bytes_replay_has_no_read_replay_and_says_why():
    script = Script(streams=[{"h": 1e9}] * 7, replay_seconds=[9.0, 2.0, 2.4, 2.2], load_seconds=[1.0] * 4)
    backend = FakeBackend(script)
    _, p = probe(backend, plan=_zero3_plan(), scale=0.001)
    assert p.replay is not None and p.replay.method == "raw bytes" and p.read_replay is None
    assert not [c for c in backend.session.calls if c[0] == "load"]
    (note,) = [n for n in p.notes if "read replay" in n]
    assert "wrote raw bytes" in note
