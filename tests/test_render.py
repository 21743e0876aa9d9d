"""Every renderer in ckplan/render/: each draws its result model as text without error and shows its key figures.

The CLI's `_emit` calls `render_X(model)` from the command's render module, which prints through
`ckplan.render.console.console()`. Here every render module's `console` is swapped for a recording rich Console
(no colour, 200 columns), and the text it recorded is searched for the figures, written out by hand where the
model was built by hand.
"""

from __future__ import annotations

import base64
import importlib
import io
import json
import pkgutil
import re
import struct
import zlib

import pytest
from rich.console import Console

import ckplan.render
from ckplan import catalog
from ckplan.compressibility import CodecResult, CompressReport
from ckplan.diagnose.device import Figure, Sample, WatchResult
from ckplan.diagnose.logs import Save
from ckplan.diagnose.trend import diagnose
from ckplan.planning.policy import Policy
from ckplan.planning.provision import provision_sweep
from ckplan.planning.recommend import compare, recommend
from ckplan.probe.engine import CleanResult
from ckplan.profile import BandwidthPoint, Replay, Spread
from ckplan.profile_store import ProfileList, ProfileRow
from ckplan.render import document
from ckplan.render.formats import document_formats, html, markdown
from ckplan.report import ReportFiles
from ckplan.sizing.plan import build_plan, interval_demand
from ckplan.validate.model import Validation, scaled_prediction
from tests.handmade import DATA, PLAN, POLICY, TARGET, hand_calibration, hand_plan, hand_profile

GB = 10**9
RENDER_MODULES = [
    importlib.import_module(f"ckplan.render.{m.name}") for m in pkgutil.iter_modules(ckplan.render.__path__)
]


@pytest.fixture
def screen(monkeypatch):
    """The text every renderer prints, as a user would read it with NO_COLOR."""
    rec = Console(record=True, file=io.StringIO(), width=200, color_system=None, highlight=False, soft_wrap=False)
    for module in RENDER_MODULES:
        if hasattr(module, "console"):
            monkeypatch.setattr(module, "console", lambda: rec)

    def text(clear: bool = False) -> str:
        """Everything printed so far; with clear=True, also forget it, so the next call shows only what follows."""
        return rec.export_text(clear=clear)

    return text


def test_every_render_module_is_covered():
    """A renderer added beside its siblings must get a test here too."""
    tested = {
        "catalog",
        "charts",
        "clean",
        "compress",
        "console",
        "diagnose",
        "document",
        "formats",
        "k8s",
        "plan",
        "profile",
        "provision",
        "recommend",
        "validate",
        "watch",
    }
    assert {m.__name__.rsplit(".", 1)[1] for m in RENDER_MODULES} == tested


def test_render_manifests_writes_only_the_yaml_stream(capsys):
    """The table format of `ckplan k8s` is the YAML kubectl reads: the objects in order, nothing else on stdout."""
    import yaml

    from ckplan.k8s.manifests import manifests
    from ckplan.k8s.request import ManifestRequest
    from ckplan.render import emit

    result = manifests(ManifestRequest(nodes=2, claim="c", node_selector={"pool": "gpu"}))
    emit(result, False)
    out = capsys.readouterr().out
    assert out.startswith("---\napiVersion: v1\nkind: Service\n") and "\x1b" not in out
    assert [d for d in yaml.safe_load_all(out) if d is not None] == result.objects


def test_render_models(screen):
    from ckplan.catalog import ModelCatalog
    from ckplan.render.catalog import render_models

    render_models(ModelCatalog.from_catalog(catalog.models()))
    out = screen()
    # Llama 3.1 8B: 8,030,261,248 parameters derived from its config (tests/test_sizing.py's N8)
    assert "llama-3.1-8b" in out and "8,030,261,248" in out and "128,256" in out


def test_render_clean(screen):
    from ckplan.render.clean import render_clean

    render_clean(CleanResult(target="/t", removed=["/t/.ckplan-probe-a"], kept=["/t/.ckplan-probe-b"]))
    render_clean(CleanResult(target="/empty", removed=[], kept=[]))
    out = screen()
    assert (
        "removed /t/.ckplan-probe-a" in out
        and "kept /t/.ckplan-probe-b" in out
        and "nothing to clean under /empty" in out
    )


def test_render_compress(screen):
    from ckplan.render.compress import render_compress

    render_compress(
        CompressReport(
            source="generated",
            sample_bytes=64 * 10**6,
            results=[CodecResult(codec="zstd-1", data="bf16 weights", ratio=1.25, bytes_per_s_per_core=350e6)],
            mix_ratio={"zstd-1": 1.4},
            mix_bytes_per_s_per_core={"zstd-1": 420e6},
            recommended="zstd-1",
        )
    )
    out = screen()
    assert "(64 MB)" in out and "1.250×" in out and "350" in out and "1.400×" in out and "420" in out
    assert "Best ratio at ≥ 200 MB/s per core: zstd-1" in out


def test_render_diagnosis(screen):
    from ckplan.render.diagnose import render_diagnosis

    saves = [Save(seconds=10.0 + 2 * i, at=1000.0 + 600 * i, label=f"step {i}", source="deepspeed") for i in range(6)]
    d = diagnose(saves, ["train.log"], 12_345_678, predicted_s=10.0)
    render_diagnosis(d)
    out = screen()
    # 10, 12, … 20 s: slope +2 s per save, median 15 s, max 20 s, every 10 min; chart: one row per save, 20 s the longest
    assert d.verdict == "growing" and "growing: storage is falling behind" in out
    assert "+2 s/save" in out and "15.0 s / 20.0 s / 20.0 s" in out and "10.0 min" in out and "12.3 MB read" in out
    assert "ckplan's prediction" in out and "1 save(s) per row" in out and "█" * 50 + " 20.0 s" in out


def test_render_plan(screen):
    from ckplan.render.plan import render_plan

    plan = build_plan(arch=catalog.model("llama-3.1-8b"), model_name="llama-3.1-8b", gpus=8, zero=1)
    plan = plan.model_copy(update={"interval": interval_demand(plan, 600, 0.05)})
    render_plan(plan)
    out = screen()
    # 8,030,261,248 × 14 B = 112.42 GB of state, 8 optimizer shards + model states + latest + zero_to_fp32.py and
    # zero_to_torch.py
    assert "12 files from 8 writer(s) on 1 node(s)" in out and "14.00 bytes/param" in out and "112.4" in out
    assert "exp_avg_sq" in out and "Demand for a save every 10.0 min" in out and "Assumptions" in out


def test_render_profile_filesystem_s3_hosts_and_calibration(screen):
    from ckplan.render.profile import render_calibration, render_profile

    plan = hand_plan([("a.pt", GB, 0, 0)])
    fs = hand_profile(
        {1: 1.5e9, 2: 2.5e9},
        name="disk",
        files_per_s=1399,
        p99_s=0.004,
        calibration=hand_calibration({"torch.save": 1.2e9}, dcp_fixed_s=0.02),
        replay=Replay(
            seconds=2.0,
            bytes=GB,
            files=1,
            writers=1,
            scale=0.01,
            plan_fingerprint=plan.fingerprint,
            full_scale_seconds=200.0,
        ),
    )
    fs.buffered_bandwidth[1].spread = Spread.of([2.4e9, 2.5e9, 2.7e9])
    render_profile(fs)
    out = screen(clear=True)
    assert "1.50 GB/s" in out and "2.50 GB/s" in out and "2.40 GB/s … 2.70 GB/s (n=3, range 12.0%)" in out
    assert "1,399 files/s" in out and "4.0 ms" in out  # fsync p99 4 ms
    assert "at full size ≈ 3.3 min" in out and "torch.save 1.20 GB/s" in out and "20.0 ms (2 ranks)" in out
    s3 = fs.model_copy(
        update={
            "target_kind": "s3",
            "fs_type": "s3",
            "storage_class": "s3",
            "mount_options": {"endpoint": "http://127.0.0.1:9", "region": "us-east-1"},
            "replay": None,
            "calibration": None,
        }
    )
    render_profile(s3)
    out = screen(clear=True)
    assert "endpoint http://127.0.0.1:9, region us-east-1" in out and "small-object PUT" in out
    hosts = fs.model_copy(
        update={
            "target_kind": "hosts",
            "hosts": 4,
            "mount_options": {"hosts": "a,b,c,d"},
            "replay": None,
            "aggregate_bandwidth": [
                BandwidthPoint(writers=2, hosts=1, bytes_per_s=2e9),
                BandwidthPoint(writers=2, hosts=4, bytes_per_s=7e9),
            ],
        }
    )
    render_profile(hosts)
    out = screen(clear=True)
    assert "4 hosts (a,b,c,d)" in out
    # rows: hosts, all clients, per host; 7 GB/s over 4 hosts is 1.75 GB/s each, 2 GB/s on one host is 2 per host
    assert re.search(r"│ +4 │ +7\.00 GB/s │ +1\.75 GB/s │", out), out
    assert re.search(r"│ +1 │ +2\.00 GB/s │ +2\.00 GB/s │", out), out
    render_calibration(hand_calibration({"torch.save": 1.2e9, "dcp": 0.9e9}, dcp_fixed_s=0.02))
    out = screen()
    assert "900.0 MB/s" in out and "DCP fixed cost per save (2 ranks" in out


def test_render_profiles(screen):
    from ckplan.render.profile import render_profiles

    render_profiles(
        ProfileList(
            profiles=[
                ProfileRow(
                    name="mine",
                    source="measured",
                    storage_class="nfs",
                    fs_type="nfs4",
                    best_write_bytes_per_s=1.25e9,
                    files_per_s=812,
                    fsync_p99_s=0.0032,
                    location="/home/u/.config/ckplan/mine.json",
                )
            ]
        )
    )
    out = screen()
    assert "mine" in out and "1.25 GB/s" in out and "812" in out and "3.2 ms" in out and "mine.json" in out


def test_render_recommendation_and_comparison(screen):
    from ckplan.render.recommend import render_comparison, render_recommendation

    rec = recommend(PLAN, TARGET, POLICY, DATA)
    render_recommendation(rec)
    out = screen()
    # tests/test_mitigations.py: the sync save is 12 s; MTBF 1 h (given); what-ifs down to the best combination
    assert "12.0 s" in out and "60.0 min" in out and "given (--mtbf)" in out and "◀ binds" in out
    assert "stall 12 s ÷ budget 5.0%" in out and "4.0 min" in out  # the budget's bound: 12 s ÷ 0.05 = 240 s
    assert "best combination: async save + compression + merged shards" in out and "5.5 s" in out
    bad = recommend(PLAN, TARGET, POLICY.model_copy(update={"max_loss_s": 100}))
    render_recommendation(bad)
    out = screen()
    # a 100 s window with a 5% budget allows a save of 100 × 0.05 / 1.05 = 4.76 s
    assert "INFEASIBLE" in out and "needed: save_seconds" in out and "4.8 s" in out
    screen(clear=True)  # the comparison alone below: its figures also appear in the recommendations above
    render_comparison(compare(PLAN, POLICY, [TARGET, DATA.storage_classes["fast"]]))
    out = screen(clear=True)
    # storage, save, stall, shortest safe τ (save ÷ 5% budget), binds, Daly τ (MTBF 1 h, with Daly's higher-order
    # terms: 12 s -> 286 s, 3.6 s -> 158 s), recommended τ, overhead (save ÷ τ: 12/286 = 4.20%, 3.6/158 = 2.27%)
    assert "Recommendation by storage class" in out
    row = r"│ {} +│ +{} │ +{} │ +{} │ overhead budget │ +{} │ +{} │ +{} │"
    assert re.search(
        row.format("target", r"12\.0 s", r"12\.0 s", r"4\.0 min", r"4\.8 min", r"4\.8 min", r"4\.20%"), out
    )
    assert re.search(row.format("fast", r"3\.6 s", r"3\.6 s", r"72\.0 s", r"2\.6 min", r"2\.6 min", r"2\.27%"), out)
    render_comparison(compare(PLAN, POLICY.model_copy(update={"save_time_s": 300.0}), [TARGET]))
    out = screen(clear=True)
    # the given 300 s save on every column that is the save, and 300 s ÷ 5% = 100 min as the shortest safe τ
    assert "Save time given (--save-time)" in out
    assert re.search(r"│ measured \(--save-time\) │ +5\.0 min │ +5\.0 min │ +100\.0 min │", out), out


def test_render_report_files(screen):
    from ckplan.render.recommend import render_report_files

    render_report_files(
        ReportFiles(
            markdown="r/report.md",
            html="r/report.html",
            charts=["r/waste.png"],
            recommendation=recommend(PLAN, TARGET, POLICY),
        )
    )
    assert "wrote r/report.md, r/report.html and r/waste.png" in screen()


def test_render_provision_and_chart(screen, tmp_path):
    from ckplan.render.charts import provision_chart
    from ckplan.render.provision import render_provision

    plans = [
        build_plan(
            arch=catalog.model("llama-3.1-70b"), model_name="llama-3.1-70b", gpus=g, tp=8, zero=1, framework="megatron"
        )
        for g in (1024, 65536)
    ]
    # failure rates pinned (not the defaults): 1,024 GPUs feasible at 90%, 65,536 GPUs not, whatever the defaults become
    policy = Policy(restart_s=3600, node_failures_per_1000_days=5, job_failures_per_day=1)
    sweep = provision_sweep(plans, policy, "sync", 0.9, 2, catalog.planning_data(), TARGET)
    render_provision(sweep)
    out = screen()
    ok, bad = sweep.rows
    assert ok.feasible and not bad.feasible
    assert "1,024" in out and f"{ok.headroom:.2f}×" in out and "not possible: restart cost" in out
    assert "Provisioning by cluster size" in out and "keep 2 checkpoints" in out and "target_goodput 90.00%" in out
    chart = tmp_path / "p.png"
    provision_chart([sweep], chart)
    assert chart.read_bytes()[:4] == b"\x89PNG"


def test_render_validation(screen):
    from ckplan.render.validate import render_validation

    plan = hand_plan([("r0.pt", 2 * GB, 0, 0), ("r1.pt", 2 * GB, 1, 0)])
    node, files, prediction = scaled_prediction(plan, hand_profile({1: 1e9}), 0.001)
    measured = Spread.of([5.0, 6.0, 8.0])
    v = Validation(
        target="/t",
        storage="disk",
        framework="deepspeed",
        saver="torch.save",
        mode="async",
        node=node,
        writers=2,
        files=len(files),
        bytes=4 * 10**6,
        scale=0.001,
        repeats=3,
        predicted_seconds=prediction.seconds,
        predicted_stall_seconds=0.001,
        prediction=prediction,
        measured_seconds=6.0,
        measured=measured,
        measured_stall_seconds=0.5,
        error_percent=-50.0,
        measured_range_percent=50.0,
        within_measured_range=False,
        stall_error_percent=-99.8,
        effective_bytes_per_s=4e6 / 6,
        diagnosis="bandwidth: by hand",
        notes=["a note"],
    )
    render_validation(v)
    out = screen()
    assert "6.0 s" in out and "min 5.0 s … max 8.0 s (spread 50% of the median)" in out and "-50.0%" in out
    assert "666.7 KB/s effective" in out and "diagnosis: bandwidth: by hand" in out and "note: a note" in out
    assert "measured blocking (async)" in out and "-100% against the blocking part" in out


def test_render_watch_and_samples(screen):
    from ckplan.render.watch import print_sample, render_watch

    sample = Sample(
        t=1.0, write_bytes_per_s=250e6, write_iops=1200, util_percent=99, w_await_ms=3.5, gpu_util_percent=80
    )
    print_sample(sample)
    out = screen(clear=True)
    assert "write     250.0 MB/s" in out and "1200 IOPS" in out and "util 99%" in out and "GPU 80%" in out
    render_watch(
        WatchResult(
            device="/dev/vda",
            target="/data",
            interval_s=1,
            duration_s=3.0,
            samples=[sample] * 3,
            write_bytes_per_s=Figure(peak=312.5e6, p99=250e6, median=187.5e6),
            write_iops=Figure(peak=1500, p99=1200, median=900),
            util_percent=Figure(peak=99, p99=95, median=60),
            w_await_ms=Figure(peak=12.5, p99=3.5, median=1.5),
            gpu_util_percent=Figure(peak=90, p99=80, median=70),
            saturated_s=1.0,
            slow_await_s=0.0,
        )
    )
    out = screen(clear=True)
    assert "/dev/vda behind /data: 3 samples over 3.0 s\n" in out  # the title on one line, not wrapped
    # each metric's peak, p99 and median, in that order
    assert re.search(r"│ write MB/s +│ +312\.5 │ +250\.0 │ +187\.5 │", out), out
    assert re.search(r"│ write IOPS +│ +1,500 │ +1,200 │ +900 │", out), out
    assert re.search(r"│ %util +│ +99% │ +95% │ +60% │", out), out
    assert re.search(r"│ w_await +│ +12\.5 ms │ +3\.5 ms │ +1\.5 ms │", out), out
    assert re.search(r"│ GPU util +│ +90% │ +80% │ +70% │", out), out
    assert "saturated (%util ≥ 90%) for 1.0 s; w_await ≥ 300 ms for 0.0 s" in out


def _png(width: int, height: int) -> bytes:
    """A valid white PNG of this size (signature, IHDR, one IDAT, IEND)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff" * 3 * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PNG_3X2 = _png(3, 2)


def test_document_markdown_and_html():
    doc = document.Document("Title <1>").add(
        document.Heading("Head"),
        document.Para("a | b"),
        document.Bullets(["x"]),
        document.TableBlock(["k", "v"], [["save", "12.0 s"]]),
        document.Image("w.png", "waste", PNG_3X2),
    )
    md = markdown.render(doc)
    assert md.startswith("# Title <1>") and "## Head" in md and "- x" in md and "| save | 12.0 s |" in md
    assert "![waste](w.png)" in md
    page = html.render(doc)
    assert "<title>Title &lt;1&gt;</title>" in page and "<td>12.0 s</td>" in page
    assert f'src="data:image/png;base64,{base64.b64encode(PNG_3X2).decode()}"' in page
    assert 'width="3" height="2" alt="waste"' in page  # the PNG's own size, read from its header


def test_charts_module_gives_pyplot_on_agg():
    from ckplan.render.charts import pyplot

    plt = pyplot("a test")
    import matplotlib

    assert matplotlib.get_backend().lower() == "agg" and hasattr(plt, "subplots")


def test_the_formats_are_chosen_in_one_place_and_each_fills_its_own_field(capsys):
    from ckplan.render import emit

    plan = hand_plan([("a.pt", GB, 0, 0)])
    emit(plan, as_json=True)
    assert capsys.readouterr().out == plan.model_dump_json(indent=2) + "\n"
    formats = document_formats()
    assert list(formats) == ["markdown", "html"]
    assert [f.suffix for f in formats.values()] == [".md", ".html"]
    assert set(formats) <= set(ReportFiles.model_fields)  # write_report fills the field each format is named by


def test_json_in_an_ascii_terminal_is_the_same_document_in_escapes():
    from ckplan.render.formats.json import _ascii_json

    text = '{"a": "10 s … 20 s", "b": "\U0001f600"}'
    assert _ascii_json(text) == '{"a": "10 s \\u2026 20 s", "b": "\\ud83d\\ude00"}'
    assert json.loads(_ascii_json(text)) == json.loads(text)
