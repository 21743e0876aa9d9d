"""The probe-target interface: ProbeTarget picks the target from the spec, every target has the
same methods, and the profile records which kind of target measured it."""

from __future__ import annotations

import json

import pytest

from ckplan import catalog
from ckplan.probe.backends import ProbeTarget
from ckplan.probe.backends.hosts import HostsBackend, HostsOptions
from ckplan.probe.backends.local import LocalBackend
from ckplan.probe.backends.s3 import S3Backend, S3Options
from ckplan.probe.engine import TargetSpec
from ckplan.profile import StorageProfile
from tests.conftest import run_json


@pytest.mark.parametrize(
    "spec,cls,kind",
    [
        (TargetSpec("/var/tmp/x"), LocalBackend, "filesystem"),
        (TargetSpec("s3://bucket/prefix"), S3Backend, "s3"),
        (TargetSpec("/mnt/lustre/x", options=HostsOptions(hosts="h1,h2:8766")), HostsBackend, "hosts"),
        # `ckplan clean DIR` passes the object store's options whatever the path: they name no other backend
        (TargetSpec("/var/tmp/x", options=S3Options(endpoint_url="http://127.0.0.1:9")), LocalBackend, "filesystem"),
        (TargetSpec("s3://bucket/prefix", options=S3Options(timeout_s=5)), S3Backend, "s3"),
    ],
)
def test_probe_target_picks_the_backend_and_prepares_nothing(spec, cls, kind):
    target = ProbeTarget(spec)
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


def test_a_multi_host_replay_past_fios_job_limit_is_refused_before_any_run(tmp_path):
    """fio runs at most 4,096 jobs at once, and the hosts' replay writes a file as one job, or two where it ends in
    a partial MiB: 2,100 files of 1.5 MiB on one node are 4,200 jobs, refused at prepare, before any host is asked
    (the port here has no agent) and before the other phases run."""
    from ckplan.errors import InputError
    from tests.handmade import hand_plan

    plan = hand_plan([(f"f{i}.pt", 3 * 2**19, 0, 0) for i in range(2100)])
    spec = TargetSpec(str(tmp_path), options=HostsOptions(hosts="127.0.0.1:9"), plan=plan)
    with pytest.raises(InputError, match="as 4,200 fio jobs"):
        HostsBackend(spec).prepare(spec)
    half = TargetSpec(
        str(tmp_path), options=HostsOptions(hosts="127.0.0.1:9"), plan=plan, scale=0.5
    )  # 768 KiB each: one job a file
    assert HostsBackend(half).prepare(half).hosts == 1
