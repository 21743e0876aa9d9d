"""`ckplan report`: a capacity-review document (Markdown and HTML) with PNG charts beside it.

The Markdown links the PNGs; the HTML embeds them, so report.html alone is the whole report."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from ckplan.errors import InputError
from ckplan.planning.recommend import Recommendation
from ckplan.profile import StorageProfile
from ckplan.render.document import Bullets, Decision, Document, Heading, Image, Para, TableBlock
from ckplan.render.formats import document_formats
from ckplan.schema import Model
from ckplan.sizing.plan import CheckpointPlan
from ckplan.units import fmt_bytes, fmt_duration, fmt_named, fmt_percent, fmt_rate


class ReportFiles(Model):
    markdown: str
    html: str
    charts: list[str]
    recommendation: Recommendation


_d = fmt_duration


def build_document(
    plan: CheckpointPlan, profile: StorageProfile, rec: Recommendation, charts: dict[str, bytes]
) -> Document:
    """The report; `charts` holds the PNG bytes by file name (waste.png, bandwidth.png)."""
    doc = Document(f"Checkpoint plan: {rec.plan}")
    doc.add(Decision(rec.verdict, rec.summary, rec.verdict_reason))
    if rec.machine_defaults is not None:  # beside the decision it qualifies: the default can move the save by its share
        doc.add(Para(rec.machine_defaults.note))
    doc.add(
        Para(
            f"Generated {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC by ckplan {rec.ckplan_version}.",
            quiet=True,
        ),
    )
    doc.add(*_save_blocks(plan))
    doc.add(*_storage_blocks(profile), Image("bandwidth.png", "bandwidth against writers", charts["bandwidth.png"]))
    doc.add(
        Heading("Constraints and intervals"),
        TableBlock(["figure", "value"], _interval_rows(rec)),
        Image("waste.png", "waste against interval", charts["waste.png"]),
    )
    if rec.what_if:
        doc.add(Heading("What-ifs"), _what_if_table(rec))
    if rec.warnings:
        doc.add(Heading("Warnings"), Bullets(rec.warnings))
    doc.add(Heading("Assumptions"), Bullets(plan.assumptions + rec.assumptions))
    return doc


def _save_blocks(plan: CheckpointPlan) -> list:
    per_param = f"{plan.bytes_per_parameter:.2f}" if plan.bytes_per_parameter is not None else "unknown"
    return [
        Heading("What one save writes"),
        Para(
            f"{fmt_bytes(plan.total_bytes)} in {plan.file_count:,} files from {plan.writers:,} writers on "
            f"{plan.nodes_writing} node(s); {per_param} bytes/parameter; busiest node "
            f"{fmt_bytes(plan.bytes_per_node_max)}, busiest rank {fmt_bytes(plan.bytes_per_rank_max)}."
        ),
        TableBlock(
            ["state", "dtype", "bytes/param", "bytes"],
            [
                [s.name, s.dtype, f"{s.bytes / plan.parameters:.3f}" if plan.parameters else "–", fmt_bytes(s.bytes)]
                for s in plan.breakdown
            ]
            + [["small files + overhead", "", "", fmt_bytes(plan.small_file_bytes)]],
        ),
    ]


def _storage_blocks(profile: StorageProfile) -> list:
    m = profile.measurement
    return [
        Heading("Storage"),
        Para(
            f"{profile.name}: {profile.target}, {profile.fs_type} ({profile.storage_class}), "
            + (
                f"measured with {m.tool} on {m.host} at {m.date}, preset {m.preset}."
                if profile.source == "measured"
                else "built-in typical figures, not a measurement."
            )
        ),
        TableBlock(
            ["write path", "writers", "bandwidth (median)", "min … max"],
            [
                [
                    path,
                    str(b.writers),
                    fmt_rate(b.bytes_per_s),
                    f"{fmt_rate(b.spread.min)} … {fmt_rate(b.spread.max)}" if b.spread and b.spread.repeats > 1 else "",
                ]
                for path, curve in (("buffered", profile.buffered_bandwidth), ("direct", profile.direct_bandwidth))
                for b in curve
            ],
        ),
        Para(
            f"Small files: {profile.small_files.files_per_s:,.0f} files/s; fsync p50 {_d(profile.fsync_latency.p50_s)}, "
            f"p99 {_d(profile.fsync_latency.p99_s)}."
        ),
        *(
            Para(f"Incomplete probe: the {f.phase} failed ({f.error}); the profile lacks {f.missing}.")
            for f in profile.failed_phases
        ),
    ]


def _interval_rows(rec: Recommendation) -> list[list[str]]:
    rows = [["save (persist) time", rec.save_span()]]
    if rec.machine_defaults is not None:
        d = rec.machine_defaults
        rows.append(
            ["serialisers: NOT MEASURED", f"named defaults, {_d(d.save_seconds)} of the save ({d.save_share:.0%})"]
        )
    rows.append(["stall per save", _d(rec.stall_seconds)])
    model = rec.save_model
    if model is not None and model.nodes > 1:
        # the figure the save time rests on for a plan of many nodes, labelled "extrapolated" beyond the measured hosts
        rows.append(
            [
                f"aggregate bandwidth, {model.nodes:,} nodes",
                f"{fmt_rate(model.aggregate.bytes_per_s)} ({model.aggregate.label})",
            ]
        )
    rows += [
        [
            f"{'shortest' if c.bound == 'min' else 'longest'} τ: {c.name}"
            + (" (binds)" if c.name == rec.binding_constraint else ""),
            _d(c.seconds),
        ]
        for c in rec.constraints
    ]
    rows += [
        ["job MTBF", f"{_d(rec.mtbf_s)} ({rec.mtbf_source})"],
        ["restart cost R", rec.restart.describe()],
        ["Young optimum", _d(rec.young_interval_s)],
        ["Daly optimum", _d(rec.optimal_interval_s)],
        ["recommended", _d(rec.recommended_interval_s)],
        ["expected waste / ETTR", f"{fmt_percent(rec.expected_waste_fraction)} / {fmt_percent(rec.ettr)}"],
    ]
    return rows + [[f"needed: {k}", fmt_named(k, v)] for k, v in rec.needed.items()]


def _what_if_table(rec: Recommendation) -> TableBlock:
    return TableBlock(
        ["mitigation", "save", "stall", "shortest safe τ", "recommended τ", "verdict", "waste"],
        [
            [
                w.mitigation,
                _d(w.save_seconds),
                _d(w.stall_seconds),
                _d(w.shortest_safe_interval_s),
                _d(w.recommended_interval_s),
                w.verdict,
                fmt_percent(w.expected_waste_fraction),
            ]
            for w in rec.what_if
        ],
    )


def write_report(plan: CheckpointPlan, profile: StorageProfile, rec: Recommendation, out: Path) -> ReportFiles:
    from ckplan.render.charts import pyplot, report_charts

    plt = pyplot("report's charts")  # before the directory is made: a missing extra leaves nothing behind
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {out}: {exc.strerror}") from None
    charts = report_charts(rec, profile, out, plt)
    doc = build_document(plan, profile, rec, {path.name: data for path, data in charts.items()})
    written = {}
    for name, document_format in document_formats().items():
        path = out / f"report{document_format.suffix}"
        path.write_text(document_format.render(doc), encoding="utf-8")
        written[name] = str(path)
    return ReportFiles(**written, charts=[str(c) for c in charts], recommendation=rec)
