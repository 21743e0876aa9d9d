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


@pytest.mark.parametrize(
    "path,options,kind,endpoint",
    [
        ("/var/tmp/x", {}, "filesystem", None),
        ("/var/tmp/x", {"s3": {"endpoint_url": "http://e:9"}}, "filesystem", None),
        ("/mnt/lustre/x", {"hosts": {"hosts": "h1,h2"}}, "hosts", None),
        # an s3:// URL is the object store's, hosts given or not, with its own options kept
        ("s3://bucket/p", {"hosts": {"hosts": "h1"}, "s3": {"endpoint_url": "http://e:9"}}, "s3", "http://e:9"),
        ("s3://bucket/p", {"hosts": HostsOptions(hosts="h1")}, "s3", None),
    ],
)
def test_a_request_hands_the_claiming_backend_its_own_options(path, options, kind, endpoint):
    """A ProbeRequest's options, read into each backend's model whether given as models or mappings, and the spec
    it makes: the options of the backend ProbeTarget then picks, in BACKENDS' order."""
    from ckplan.probe.request import ProbeRequest

    spec = ProbeRequest(path=path, options=options).spec()
    assert ProbeTarget(spec).kind == kind
    assert getattr(spec.options, "kind", "filesystem") == kind
    assert getattr(spec.options, "endpoint_url", None) == endpoint


def test_a_requests_options_are_its_backends_models():
    from pydantic import ValidationError

    from ckplan.probe.request import ProbeRequest

    with pytest.raises(ValidationError, match="hosts names no hosts"):
        ProbeRequest(path="/x", options={"hosts": {"hosts": " ,"}})
    with pytest.raises(ValidationError, match="options names no backend with options: 'nfs' \\(takes s3, hosts\\)"):
        ProbeRequest(path="/x", options={"nfs": {}})
    with pytest.raises(ValidationError, match="part_bytes must be 5 MiB to 5 GiB"):
        ProbeRequest(path="/x", options={"s3": {"part_bytes": "1MiB"}})


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
