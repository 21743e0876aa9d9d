"""The probe-target interface (issue 16): open_target picks the target from the spec, every target has the
same methods, and the profile records which kind of target measured it."""

from __future__ import annotations

import json

import pytest

from ckplan import catalog
from ckplan.probe.backends import ProbeTarget, open_target
from ckplan.probe.backends.hosts import HostsBackend
from ckplan.probe.backends.local import LocalBackend
from ckplan.probe.backends.s3 import S3Backend
from ckplan.probe.engine import TargetSpec
from ckplan.profile import StorageProfile
from tests.conftest import run_json


@pytest.mark.parametrize(
    "spec,cls,kind",
    [
        (TargetSpec("/var/tmp/x"), LocalBackend, "filesystem"),
        (TargetSpec("s3://bucket/prefix"), S3Backend, "s3"),
        (TargetSpec("/mnt/lustre/x", hosts="h1,h2:8766"), HostsBackend, "hosts"),
    ],
)
def test_open_target_picks_the_backend_and_prepares_nothing(spec, cls, kind):
    target: ProbeTarget = open_target(spec)
    assert type(target.backend) is cls and target.kind == kind
    assert target.plan is None
    for method in ("run", "clean"):
        assert callable(getattr(target, method))
    assert target._job is None  # nothing checked, nothing written until estimated_seconds or run asks


def test_a_probe_records_its_target_kind(tmp_path):
    profile = run_json("probe", str(tmp_path), "--quick", "--no-calibrate", "--writers", "1", "--max-bytes", "64MB")
    assert profile["target_kind"] == "filesystem"
    assert not list(tmp_path.iterdir())


def test_older_profiles_get_the_kind_their_fields_imply(tmp_path):
    """Profiles saved before target_kind existed: the kind is decided once, where the profile is read."""
    base = json.loads(StorageProfile.model_validate(catalog.storage_classes()["nfs"].model_dump()).model_dump_json())
    del base["target_kind"]
    assert StorageProfile.model_validate(base).target_kind == "builtin"
    measured = {**base, "source": "measured"}
    assert StorageProfile.model_validate(measured).target_kind == "filesystem"
    assert StorageProfile.model_validate({**measured, "fs_type": "s3"}).target_kind == "s3"
    assert StorageProfile.model_validate({**measured, "hosts": 3}).target_kind == "hosts"
    assert (
        StorageProfile.model_validate({**measured, "hosts": 3, "target_kind": "filesystem"}).target_kind == "filesystem"
    )
