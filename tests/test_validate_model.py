"""validate's prediction (validate/model.py, no PyTorch needed): the model's time for the busiest node's share of a plan
at a scale, written by that node alone, against a hand-computed figure; and the diagnosis of an error.

Deliberate break this catches: validate's prediction made on half the bytes
(scaled_prediction's node_bytes halved): test_scaled_prediction_of_the_busiest_node.
"""

from __future__ import annotations

import pytest

from ckplan.profile import Spread
from ckplan.validate.model import diagnose, scaled_prediction
from tests.handmade import hand_calibration, hand_plan, hand_profile

GB = 10**9
# node 0: two writers of 2 GB each (the busiest node); node 1: one writer of 1 GB
PLAN = hand_plan([("r0.pt", 2 * GB, 0, 0), ("r1.pt", 2 * GB, 1, 0), ("r2.pt", GB, 2, 1)])
# 100 MB/s per host whatever the writers, 100 files/s, fsync p99 10 ms; torch.save measured here at 1 GB/s
PROFILE = hand_profile(
    {1: 100e6, 2: 100e6}, files_per_s=100, p99_s=0.01, shared=True, calibration=hand_calibration({"torch.save": 1e9})
)


def test_scaled_prediction_of_the_busiest_node():
    node, files, t = scaled_prediction(PLAN, PROFILE, 0.01)
    assert node == 0 and [f.path for f in files] == ["r0.pt", "r1.pt"]
    # at 1%: two writers of 20 MB, 40 MB on the node, written by that node alone (nodes = 1)
    # serialise 20 MB ÷ 1 GB/s = 0.02 s; single = 0.02 + 20 MB ÷ 100 MB/s = 0.22 s; node = 0.02 + 40 MB ÷ 100 MB/s = 0.42 s;
    # aggregate = 40 MB ÷ (100 MB/s × 1 node) = 0.4 s → 0.42 s; files 2 ÷ 100 = 0.02 s; fsync p99 0.01 s → 0.45 s
    assert (t.nodes, t.writers_per_node) == (1, 2)
    assert t.bandwidth_seconds == pytest.approx(0.42)
    assert t.metadata_seconds == pytest.approx(0.02)
    assert t.seconds == pytest.approx(0.45)
    # the whole node at full size: 0.02 × 100 = 2 s serialise + 4 GB ÷ 100 MB/s = 42 s, + 0.03 s
    assert scaled_prediction(PLAN, PROFILE, 1.0)[2].seconds == pytest.approx(42.03)


def test_diagnosis_names_the_term_that_was_off():
    _, files, t = scaled_prediction(PLAN, PROFILE, 0.01)
    # measured 0.46 ± a little: inside the spread
    assert "inside the measured spread" in diagnose(t, Spread.of([0.44, 0.46, 0.47]), 40 * 10**6, len(files))
    assert "within ±15%" in diagnose(t, Spread.of([0.5]), 40 * 10**6, len(files))
    # measured 1.03 s: 0.03 s fixed, so the 40 MB moved at 40 MB ÷ 1 s = 0.04 GB/s, 0.40× the probe's 100 MB/s
    assert diagnose(t, Spread.of([1.03]), 40 * 10**6, len(files)) == (
        "bandwidth: the save's bytes moved at 0.04 GB/s, 0.40× the probe's 0.10 GB/s at 2 writers"
    )
    # measured faster than the per-file terms alone
    assert "per-file overhead" in diagnose(t, Spread.of([0.02]), 40 * 10**6, len(files))


def test_async_note_names_the_default_snapshot_bandwidth():
    """`ckplan validate` has no --snapshot-bandwidth: its note names the default figure itself, 20 GB/s per GPU."""
    from ckplan.validate.run import async_note

    note = async_note(coordinated_save=True)
    assert "at the default snapshot bandwidth (20.00 GB/s per GPU)" in note
    assert "--snapshot-bandwidth" not in note and "async_save's staging copy" in note
    assert "background thread" in async_note(coordinated_save=False)
