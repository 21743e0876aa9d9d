"""Every bad input is refused in one line: the stated exit code, one stderr line, no traceback, no stdout
under --json, and nothing written to the working directory.

The CLI runs in-process (ckplan.cli.app.main with sys.argv set) because a subprocess costs ~0.4 s each;
inputs that could block a process (a FIFO) run as subprocesses with a timeout, so a regression hangs
one test for seconds instead of the suite for ever.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckplan.readers import MAX_DOCUMENT_BYTES, MAX_PLAN_BYTES
from tests.conftest import FIXTURES, ckplan_exe, run_cli

LOG = FIXTURES / "logs" / "torchtitan.log"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    """Every bad file once, by name, outside any test's working directory."""
    from ckplan import catalog
    from ckplan.sizing.plan import build_plan

    d = tmp_path_factory.mktemp("inputs")
    plan = json.loads(build_plan(arch=catalog.model("llama-3.1-8b"), model_name="llama-3.1-8b").model_dump_json())
    profile = json.loads(catalog.storage_classes()["nfs"].model_dump_json())
    files: dict[str, str] = {
        "dir": str(d),
        "devzero": "/dev/zero",
        "urandom": "/dev/urandom",
        "missing": str(d / "missing.json"),
    }

    def put(name: str, data: bytes | str) -> None:
        path = d / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        files[name] = str(path)

    def variant(doc: dict, edit) -> str:
        doc = json.loads(json.dumps(doc))
        edit(doc)
        return json.dumps(doc)

    put("plan.json", json.dumps(plan))
    put("profile.json", json.dumps(profile))
    # what any JSON reader must refuse
    put("binary.json", bytes(range(256)) * 4)
    put("utf16.json", json.dumps(plan)[:200].encode("utf-16"))
    put("badutf8.json", b'{"kind": "ckplan.plan", "model": "\xc3\x28"}')
    put("latin1.json", '{"name": "café"}'.encode("latin-1"))
    put("nested.json", "[" * 200_000 + "]" * 200_000)
    put("nestedobj.json", '{"a": ' * 200_000 + "1" + "}" * 200_000)
    put("empty.json", "")
    put("blank.json", " \n\t\n")
    put("truncated.json", json.dumps(plan)[:500])
    put("notjson.json", "{not json")
    put("nan.json", '{"kind": NaN}')
    put("array.json", "[]")
    put("string.json", '"plan"')
    put("null.json", "null")
    # plans that parse but are not plans ckplan wrote
    put("plan_v99.json", variant(plan, lambda p: p.update(schema_version=99)))
    put("plan_negtotal.json", variant(plan, lambda p: p.update(total_bytes=-1)))
    put("plan_gpus0.json", variant(plan, lambda p: p["setup"].update(gpus=0)))
    put("plan_gpn.json", variant(plan, lambda p: p["setup"].update(gpus_per_node=16)))
    put("plan_world.json", variant(plan, lambda p: p["setup"].update(dp=3)))
    put("plan_nosetup.json", variant(plan, lambda p: p.pop("setup")))
    put("plan_nomanifest.json", variant(plan, lambda p: p.update(manifest=[])))
    put("plan_negfile.json", variant(plan, lambda p: p["manifest"][0].update(bytes=-5)))
    put("plan_kind.json", variant(plan, lambda p: p.update(kind="ckplan.storage")))
    put("plan_inf.json", json.dumps(plan).replace('"bytes_per_parameter": ', '"bytes_per_parameter": 1e400, "x": '))
    put("plan_params0.json", variant(plan, lambda p: p.update(parameters=0)))
    put("plan_zero9.json", variant(plan, lambda p: p["setup"].update(zero=9)))
    put("plan_types.json", variant(plan, lambda p: p.update(writers="many")))
    # profiles that parse but are not profiles ckplan wrote
    put("profile_v99.json", variant(profile, lambda p: p.update(schema_version=99)))
    put("profile_nobw.json", variant(profile, lambda p: p.pop("buffered_bandwidth")))
    put("profile_kind.json", variant(profile, lambda p: p.update(kind="ckplan.plan")))
    put("profile_bwtype.json", variant(profile, lambda p: p.update(buffered_bandwidth="fast")))
    # Hugging Face config.json files (--config): one ckplan sizes, one it does not, one missing a size
    llama = {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
    }
    put("config_llama.json", json.dumps(llama))
    put("config_t5.json", json.dumps({**llama, "model_type": "t5"}))
    put("config_nolayers.json", json.dumps({k: v for k, v in llama.items() if k != "num_hidden_layers"}))
    put("bad.toml", "name = [")
    put("deep.toml", "a = " + "[" * 100_000)
    put("binary.toml", bytes(range(256)))
    put("hosts_bad.txt", "node01\nnot a host!\n")
    put("hosts_empty.txt", "# nobody\n\n")
    put("hosts_dup.txt", "node01\nnode01\n")
    put("empty.bin", b"")
    put("binary.log", bytes(range(256)) * 64)
    put("empty.log", "")
    put("utf16.log", LOG.read_text().encode("utf-16"))
    # larger than the read limits, but sparse: the size is refused from stat, before a byte is read
    for name, size in (("huge_plan.json", MAX_PLAN_BYTES + 1), ("huge_profile.json", MAX_DOCUMENT_BYTES + 1)):
        with open(d / name, "wb") as f:
            f.truncate(size)
        files[name] = str(d / name)
    target = d / "target"
    target.mkdir()
    files["target"] = str(target)
    os.mkfifo(d / "fifo")
    files["fifo"] = str(d / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d / "socket"))  # the file stays after the socket is closed
    sock.close()
    files["socket"] = str(d / "socket")
    return files


def _plan_files(*names: str) -> list:
    return [(f"recommend-plan-{n}", ["recommend", "--plan", f"@{n}"], 2) for n in names]


# (test id, argv with @name for a file from `inputs`, exit code); --json is appended for every command but agent
CASES = [
    # size: model and optimizer flags
    ("size-params-empty", ["size", "--params", ""], 2),
    ("size-params-space", ["size", "--params", " "], 2),
    ("size-params-huge", ["size", "--params", "1e400"], 2),
    ("size-params-above-max", ["size", "--params", "2e15"], 2),
    ("size-params-tiny", ["size", "--params", "1e-3"], 2),
    ("size-params-zero", ["size", "--params", "0"], 2),
    ("size-params-negative", ["size", "--params", "-7B"], 2),
    ("size-params-nan", ["size", "--params", "nan"], 2),
    ("size-params-inf", ["size", "--params", "inf"], 2),
    ("size-params-word", ["size", "--params", "seven billion"], 2),
    ("size-params-unit", ["size", "--params", "7Q"], 2),
    ("size-params-two-dots", ["size", "--params", "7.0.1B"], 2),
    ("size-params-and-model", ["size", "--params", "7B", "--model", "llama-2-7b"], 2),
    ("size-model-empty", ["size", "--model", ""], 2),
    ("size-config-missing", ["size", "--config", "@missing"], 2),
    ("size-config-directory", ["size", "--config", "@dir"], 2),
    ("size-config-devzero", ["size", "--config", "@devzero"], 2),
    ("size-config-binary", ["size", "--config", "@binary.json"], 2),
    ("size-config-not-json", ["size", "--config", "@notjson.json"], 2),
    ("size-config-array", ["size", "--config", "@array.json"], 2),
    ("size-config-a-plan", ["size", "--config", "@plan.json"], 2),
    ("size-config-unknown-type", ["size", "--config", "@config_t5.json"], 2),
    ("size-config-no-layers", ["size", "--config", "@config_nolayers.json"], 2),
    ("size-config-and-params", ["size", "--config", "@config_llama.json", "--params", "7B"], 2),
    ("size-config-and-model", ["size", "--config", "@config_llama.json", "--model", "llama-2-7b"], 2),
    ("recommend-config-and-plan", ["recommend", "--plan", "@plan.json", "--config", "@config_llama.json"], 2),
    ("size-model-unknown", ["size", "--model", "gpt-5"], 2),
    ("size-optimizer", ["size", "--optimizer", "adamx"], 2),
    ("size-optimizer-empty", ["size", "--optimizer", ""], 2),
    ("size-precision", ["size", "--precision", "fp8"], 2),
    ("size-framework", ["size", "--framework", "jax"], 2),
    ("size-dtype-no-value", ["size", "--dtype", "master"], 2),
    ("size-dtype-unknown-state", ["size", "--dtype", "momentum=bf16"], 2),
    ("size-dtype-unknown-dtype", ["size", "--dtype", "master=fp7"], 2),
    ("size-option-bogus", ["size", "--option", "bogus=1"], 2),
    ("size-option-hf-bogus", ["size", "--framework", "hf", "--zero", "0", "--option", "bogus=1"], 2),
    ("size-option-shard-zero", ["size", "--framework", "hf", "--zero", "0", "--option", "hf_shard_size=0"], 2),
    ("size-option-no-equals", ["size", "--option", "hf_shard_size"], 2),
    # size: world
    ("size-gpus-zero", ["size", "--gpus", "0"], 2),
    ("size-gpus-negative", ["size", "--gpus", "-8"], 2),
    ("size-gpus-huge", ["size", "--gpus", "99999999999"], 2),
    ("size-gpus-above-max", ["size", "--gpus", str(2**20 + 8)], 2),
    ("size-gpus-float", ["size", "--gpus", "8.5"], 2),
    ("size-gpus-word", ["size", "--gpus", "eight"], 2),
    ("size-gpus-empty", ["size", "--gpus", ""], 2),
    ("size-gpn-over-gpus", ["size", "--gpus", "8", "--gpus-per-node", "16"], 2),
    ("size-gpn-zero", ["size", "--gpus-per-node", "0"], 2),
    ("size-gpn-huge", ["size", "--gpus", "16", "--gpus-per-node", str(2**40)], 2),
    ("size-gpn-not-dividing", ["size", "--gpus", "12", "--gpus-per-node", "8"], 2),
    ("size-tp-zero", ["size", "--tp", "0"], 2),
    ("size-tp-not-dividing", ["size", "--gpus", "8", "--tp", "3"], 2),
    ("size-tp-heads", ["size", "--model", "llama-3.1-8b", "--gpus", "64", "--tp", "64"], 2),
    ("size-pp-layers", ["size", "--model", "llama-3.1-8b", "--gpus", "64", "--pp", "64"], 2),
    ("size-pp-negative", ["size", "--pp", "-1"], 2),
    ("size-zero-stage", ["size", "--zero", "4"], 2),
    ("size-hf-tp", ["size", "--framework", "hf", "--tp", "2"], 2),
    ("size-hf-gather-zero2", ["size", "--framework", "hf", "--zero", "2", "--option", "gather_16bit=true"], 2),
    ("size-hf-gather-word", ["size", "--framework", "hf", "--zero", "3", "--option", "gather_16bit=maybe"], 2),
    # size: interval demand
    ("size-interval-zero", ["size", "--interval", "0"], 2),
    ("size-interval-huge", ["size", "--interval", "1e400s"], 2),
    ("size-interval-11y", ["size", "--interval", "4000d"], 2),
    ("size-interval-unit", ["size", "--interval", "5 fortnights"], 2),
    ("size-interval-empty", ["size", "--interval", ""], 2),
    ("size-overhead-150", ["size", "--interval", "5m", "--max-overhead", "150%"], 2),
    ("size-overhead-zero", ["size", "--interval", "5m", "--max-overhead", "0%"], 2),
    ("size-overhead-nan", ["size", "--interval", "5m", "--max-overhead", "nan"], 2),
    ("size-overhead-word", ["size", "--interval", "5m", "--max-overhead", "some"], 2),
    ("size-unknown-flag", ["size", "--nonsense"], 2),
    ("size-extra-argument", ["size", "extra"], 2),
    ("size-flag-without-value", ["size", "--params"], 2),
    # models, profiles
    ("models-extra-argument", ["models", "llama"], 2),
    ("models-unknown-flag", ["models", "--all"], 2),
    ("profiles-extra-argument", ["profiles", "nfs"], 2),
    ("profiles-unknown-flag", ["profiles", "--saved"], 2),
    ("unknown-command", ["sise"], 2),
    # probe: flags refused before anything is measured (fio is never reached)
    ("probe-no-path", ["probe"], 2),
    ("probe-empty-path", ["probe", ""], 2),
    ("probe-save-empty", ["probe", "@target", "--save", ""], 2),
    ("probe-save-slash", ["probe", "@target", "--save", "a/b"], 2),
    ("probe-save-newline", ["probe", "@target", "--save", "a\nb"], 2),
    ("probe-save-dot", ["probe", "@target", "--save", ".hidden"], 2),
    ("probe-hosts-empty", ["probe", "@target", "--hosts", ""], 2),
    ("probe-hosts-commas", ["probe", "@target", "--hosts", ",,"], 2),
    ("probe-writers-zero", ["probe", "@target", "--writers", "0"], 2),
    ("probe-writers-huge", ["probe", "@target", "--writers", "99999999"], 2),
    ("probe-writers-word", ["probe", "@target", "--writers", "many"], 2),
    ("probe-quick-thorough", ["probe", "@target", "--quick", "--thorough"], 2),
    ("probe-scale-zero", ["probe", "@target", "--scale", "0"], 2),
    ("probe-scale-two", ["probe", "@target", "--scale", "2"], 2),
    ("probe-scale-nan", ["probe", "@target", "--scale", "nan"], 2),
    ("probe-max-bytes", ["probe", "@target", "--max-bytes", "lots"], 2),
    ("probe-max-bytes-huge", ["probe", "@target", "--max-bytes", "2EB"], 2),
    ("probe-out-directory", ["probe", "@target", "--out", "@dir"], 2),
    ("probe-plan-binary", ["probe", "@target", "--plan", "@binary.json"], 2),
    ("probe-plan-v99", ["probe", "@target", "--plan", "@plan_v99.json"], 2),
    ("probe-plan-devzero", ["probe", "@target", "--plan", "@devzero"], 2),
    ("probe-hosts-file-bad-entry", ["probe", "@target", "--hosts-file", "@hosts_bad.txt"], 2),
    ("probe-hosts-file-empty", ["probe", "@target", "--hosts-file", "@hosts_empty.txt"], 2),
    ("probe-hosts-file-duplicate", ["probe", "@target", "--hosts-file", "@hosts_dup.txt"], 2),
    ("probe-hosts-file-binary", ["probe", "@target", "--hosts-file", "@binary.json"], 2),
    ("probe-hosts-file-utf16", ["probe", "@target", "--hosts-file", "@utf16.json"], 2),
    ("probe-hosts-file-directory", ["probe", "@target", "--hosts-file", "@dir"], 2),
    ("probe-hosts-file-devzero", ["probe", "@target", "--hosts-file", "@devzero"], 2),
    ("probe-hosts-file-missing", ["probe", "@target", "--hosts-file", "@missing"], 2),
    ("probe-s3-bad-bucket", ["probe", "s3://a"], 2),
    ("probe-s3-bad-endpoint", ["probe", "s3://bucket/x", "--endpoint-url", "ftp://x"], 2),
    ("probe-part-size", ["probe", "s3://bucket/x", "--part-size", "0"], 2),
    ("probe-timeout", ["probe", "s3://bucket/x", "--timeout", "-1s"], 2),
    # clean
    ("clean-empty", ["clean", ""], 2),
    ("clean-space", ["clean", " "], 2),
    ("clean-missing", ["clean", "@missing"], 2),
    ("clean-file", ["clean", "@plan.json"], 2),
    ("clean-s3-bad-bucket", ["clean", "s3://-x"], 2),
    # recommend: policy flags
    ("recommend-plan-and-params", ["recommend", "--plan", "@plan.json", "--params", "7B"], 2),
    ("recommend-plan-and-gpus", ["recommend", "--plan", "@plan.json", "--gpus", "16"], 2),
    ("recommend-plan-and-framework", ["recommend", "--plan", "@plan.json", "--framework", "dcp"], 2),
    ("recommend-node-rate-inf", ["recommend", "--node-failure-rate", "inf"], 2),
    ("recommend-node-rate-nan", ["recommend", "--node-failure-rate", "nan"], 2),
    ("recommend-node-rate-negative", ["recommend", "--node-failure-rate", "-1"], 2),
    ("recommend-job-rate-inf", ["recommend", "--job-failure-rate", "inf"], 2),
    ("recommend-job-rate-huge", ["recommend", "--job-failure-rate", "1e300"], 2),
    ("recommend-rates-zero", ["recommend", "--node-failure-rate", "0", "--job-failure-rate", "0"], 2),
    ("recommend-mtbf-zero", ["recommend", "--mtbf", "0"], 2),
    ("recommend-mtbf-huge", ["recommend", "--mtbf", "1e400h"], 2),
    ("recommend-mtbf-nan", ["recommend", "--mtbf", "nan"], 2),
    ("recommend-restart-huge", ["recommend", "--restart", "1e9h"], 2),
    ("recommend-restart-negative", ["recommend", "--restart", "-1m"], 2),
    ("recommend-max-loss-zero", ["recommend", "--max-loss", "0"], 2),
    ("recommend-max-loss-huge", ["recommend", "--max-loss", "11000d"], 2),
    ("recommend-overhead-100", ["recommend", "--max-overhead", "100%"], 2),
    ("recommend-mode", ["recommend", "--mode", "staged"], 2),
    ("recommend-stall-sync", ["recommend", "--stall-time", "1s"], 2),
    ("recommend-iteration-zero", ["recommend", "--iteration-time", "0s"], 2),
    ("recommend-snapshot-huge", ["recommend", "--snapshot-bandwidth", "2PB/s"], 2),
    ("recommend-snapshot-zero", ["recommend", "--snapshot-bandwidth", "0GB/s"], 2),
    ("recommend-snapshot-tiny", ["recommend", "--snapshot-bandwidth", "0.1B/s"], 2),
    ("recommend-host-memory-huge", ["recommend", "--host-memory", "2EiB"], 2),
    ("recommend-local-disk-unit", ["recommend", "--local-disk", "3 bushels"], 2),
    ("recommend-changed-zero", ["recommend", "--changed-fraction", "0%"], 2),
    ("recommend-changed-over", ["recommend", "--changed-fraction", "101%"], 2),
    ("recommend-save-time-zero", ["recommend", "--save-time", "0s"], 2),
    ("recommend-save-time-huge", ["recommend", "--save-time", "1e12h"], 2),
    ("recommend-serializer-unknown", ["recommend", "--serialize-bandwidth", "pickle=1GB/s"], 2),
    ("recommend-serializer-no-rate", ["recommend", "--serialize-bandwidth", "torch.save"], 2),
    ("recommend-serializer-huge", ["recommend", "--serialize-bandwidth", "torch.save=9PB/s"], 2),
    ("recommend-storage-unknown", ["recommend", "--storage", "floppy"], 2),
    ("recommend-storage-empty", ["recommend", "--storage", ""], 2),
    # recommend: every kind of bad plan file
    *_plan_files(
        "binary.json",
        "utf16.json",
        "badutf8.json",
        "latin1.json",
        "nested.json",
        "nestedobj.json",
        "empty.json",
        "blank.json",
        "truncated.json",
        "notjson.json",
        "nan.json",
        "array.json",
        "string.json",
        "null.json",
        "plan_v99.json",
        "plan_negtotal.json",
        "plan_gpus0.json",
        "plan_gpn.json",
        "plan_world.json",
        "plan_nosetup.json",
        "plan_nomanifest.json",
        "plan_negfile.json",
        "plan_kind.json",
        "plan_inf.json",
        "plan_params0.json",
        "plan_zero9.json",
        "plan_types.json",
        "profile.json",
        "huge_plan.json",
        "devzero",
        "urandom",
        "socket",
        "dir",
        "missing",
    ),
    # recommend: every kind of bad storage profile file
    *[
        (f"recommend-storage-{n}", ["recommend", "--storage", f"@{n}"], 2)
        for n in (
            "binary.json",
            "utf16.json",
            "badutf8.json",
            "nested.json",
            "nestedobj.json",
            "empty.json",
            "truncated.json",
            "nan.json",
            "array.json",
            "profile_v99.json",
            "profile_nobw.json",
            "profile_kind.json",
            "profile_bwtype.json",
            "plan.json",
            "huge_profile.json",
            "bad.toml",
            "deep.toml",
            "binary.toml",
            "urandom",
            "socket",
            "dir",
            "missing",
        )
    ],
    # report
    ("report-no-storage", ["report"], 2),
    ("report-plan-utf16", ["report", "--storage", "nfs", "--plan", "@utf16.json"], 2),
    ("report-plan-and-model", ["report", "--storage", "nfs", "--plan", "@plan.json", "--model", "llama-2-7b"], 2),
    ("report-storage-v99", ["report", "--storage", "@profile_v99.json"], 2),
    ("report-storage-dir", ["report", "--storage", "@dir"], 2),
    ("report-mtbf", ["report", "--storage", "nfs", "--mtbf", "soon"], 2),
    ("report-gpus", ["report", "--storage", "nfs", "--gpus", "0"], 2),
    # validate (each refused before torch is imported or a byte is saved)
    ("validate-no-plan", ["validate", "@target", "--storage", "nfs"], 2),
    ("validate-plan-nested", ["validate", "@target", "--plan", "@nested.json", "--storage", "nfs"], 2),
    ("validate-plan-negtotal", ["validate", "@target", "--plan", "@plan_negtotal.json", "--storage", "nfs"], 2),
    ("validate-plan-devzero", ["validate", "@target", "--plan", "@devzero", "--storage", "nfs"], 2),
    ("validate-storage-binary", ["validate", "@target", "--plan", "@plan.json", "--storage", "@binary.json"], 2),
    ("validate-mode", ["validate", "@target", "--plan", "@plan.json", "--storage", "nfs", "--mode", "later"], 2),
    ("validate-repeats-word", ["validate", "@target", "--plan", "@plan.json", "--storage", "nfs", "--repeats", "x"], 2),
    # provision
    ("provision-config-unknown-type", ["provision", "--gpus", "8", "--config", "@config_t5.json"], 2),
    ("provision-gpus-empty", ["provision", "--gpus", ""], 2),
    ("provision-gpus-word", ["provision", "--gpus", "1024,lots"], 2),
    ("provision-gpus-zero", ["provision", "--gpus", "0"], 2),
    ("provision-gpus-huge", ["provision", "--gpus", "8,99999999999"], 2),
    ("provision-gpn-over", ["provision", "--gpus", "8", "--gpus-per-node", "16"], 2),
    ("provision-plan", ["provision", "--gpus", "8", "--plan", "@plan.json"], 2),
    ("provision-keep-zero", ["provision", "--gpus", "8", "--keep", "0"], 2),
    ("provision-goodput", ["provision", "--gpus", "8", "--target-goodput", "120%"], 2),
    ("provision-chart-directory", ["provision", "--gpus", "8", "--chart", "@dir"], 2),
    ("provision-storage-empty-file", ["provision", "--gpus", "8", "--storage", "@empty.json"], 2),
    ("provision-node-rate-nan", ["provision", "--gpus", "8", "--node-failure-rate", "nan"], 2),
    ("provision-option", ["provision", "--gpus", "8", "--option", "bogus=1"], 2),
    # agent (never reaches fio's server: each is refused first)
    ("agent-port-zero", ["agent", "--port", "0"], 2),
    ("agent-port-high", ["agent", "--port", "70000"], 2),
    ("agent-port-word", ["agent", "--port", "http"], 2),
    ("agent-extra-argument", ["agent", "host"], 2),
    ("agent-bind-empty", ["agent", "--bind", ""], 2),
    ("agent-info-port-is-fio-port", ["agent", "--port", "8799", "--info-port", "8799"], 2),
    ("agent-info-port-zero", ["agent", "--info-port", "0"], 2),
    ("agent-linger-word", ["agent", "--linger", "soon"], 2),
    # k8s (the Kubernetes rules on names, paths and placement: tests/test_k8s.py has the rest)
    ("k8s-zero-nodes", ["k8s", "--nodes", "0", "--claim", "c"], 2),
    ("k8s-no-claim", ["k8s", "--nodes", "2"], 2),
    ("k8s-name-not-a-label", ["k8s", "--nodes", "2", "--claim", "c", "--name", "My.Probe"], 2),
    ("k8s-relative-mount-path", ["k8s", "--nodes", "2", "--claim", "c", "--mount-path", "ckpt"], 2),
    ("k8s-unknown-form", ["k8s", "--nodes", "2", "--claim", "c", "--form", "deployment"], 2),
    ("k8s-plan-missing", ["k8s", "--nodes", "2", "--claim", "c", "--plan", "@missing"], 2),
    # diagnose
    ("diagnose-no-log", ["diagnose"], 2),
    ("diagnose-log-missing", ["diagnose", "@missing"], 2),
    ("diagnose-log-directory", ["diagnose", "@dir"], 2),
    ("diagnose-log-devzero", ["diagnose", "@devzero"], 2),
    ("diagnose-log-urandom", ["diagnose", "@urandom"], 2),
    ("diagnose-log-socket", ["diagnose", "@socket"], 2),
    ("diagnose-log-binary", ["diagnose", "@binary.log"], 2),
    ("diagnose-log-empty", ["diagnose", "@empty.log"], 2),
    ("diagnose-log-utf16", ["diagnose", "@utf16.log"], 2),
    ("diagnose-by", ["diagnose", str(LOG), "--by", "step"], 2),
    ("diagnose-plan-alone", ["diagnose", str(LOG), "--plan", "@plan.json"], 2),
    ("diagnose-plan-binary", ["diagnose", str(LOG), "--plan", "@binary.json", "--storage", "nfs"], 2),
    ("diagnose-storage-nested", ["diagnose", str(LOG), "--plan", "@plan.json", "--storage", "@nested.json"], 2),
    ("diagnose-pattern-regex", ["diagnose", str(LOG), "--pattern", "(unclosed"], 2),
    ("diagnose-pattern-groups", ["diagnose", str(LOG), "--pattern", "took ([0-9.]+)s"], 2),
    ("diagnose-interval", ["diagnose", str(LOG), "--interval", "-5m"], 2),
    # watch
    ("watch-missing", ["watch", "@missing", "--duration", "1s"], 2),
    ("watch-interval-zero", ["watch", "--interval", "0", "--duration", "1s"], 2),
    ("watch-interval-huge", ["watch", "--interval", "1e400s", "--duration", "1s"], 2),
    ("watch-duration-word", ["watch", "--duration", "forever"], 2),
    ("watch-duration-negative", ["watch", "--duration", "-1s"], 2),
    ("watch-record-directory", ["watch", "--record", "@dir", "--duration", "1s"], 2),
    # compress-test
    ("compress-file-missing", ["compress-test", "--file", "@missing"], 2),
    ("compress-file-directory", ["compress-test", "--file", "@dir"], 2),
    ("compress-file-devzero", ["compress-test", "--file", "@devzero"], 2),
    ("compress-file-urandom", ["compress-test", "--file", "@urandom"], 2),
    ("compress-file-socket", ["compress-test", "--file", "@socket"], 2),
    ("compress-file-empty", ["compress-test", "--file", "@empty.bin"], 2),
    ("compress-extra-argument", ["compress-test", "x"], 2),
]


COMMANDS = {
    "size",
    "models",
    "probe",
    "clean",
    "profiles",
    "recommend",
    "report",
    "validate",
    "provision",
    "agent",
    "k8s",
    "diagnose",
    "watch",
    "compress-test",
}


def _argv(argv: list[str], files: dict[str, str]) -> list[str]:
    """@name replaced by the input file's path, and --json added where the command takes it."""
    args = [files[a[1:]] if a.startswith("@") else a for a in argv]
    return args if args[0] == "agent" or args[0] not in COMMANDS else args + ["--json"]


@pytest.fixture
def run(tmp_path, monkeypatch, capsys):
    """Run ckplan in-process in a fresh, empty working directory; return (exit code, stdout, stderr)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("CKPLAN_DEBUG", raising=False)
    sigterm = signal.getsignal(signal.SIGTERM)

    def go(*argv: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["ckplan", *argv])
        from ckplan.cli.app import main

        try:
            with pytest.raises(SystemExit) as exit_:
                main()
        finally:
            signal.signal(signal.SIGTERM, sigterm)  # probe and validate install a handler
        out, err = capsys.readouterr()
        return exit_.value.code, out, err

    yield go
    assert sorted(os.listdir(cwd)) == [], "a refused command wrote to the working directory"
    assert not (tmp_path / "config").exists(), "a refused command saved a profile"


def _check(code: int, out: str, err: str, expected: int, json_out: bool = True) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == expected, (code, err)
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("ckplan: error: "), lines[0]
    if json_out:
        assert out == "", out
    return lines[0]


@pytest.mark.parametrize("argv,code", [pytest.param(a, c, id=i) for i, a, c in CASES])
def test_bad_input_is_one_line(run, inputs, argv, code):
    args = _argv(argv, inputs)
    _check(*run(*args), code, json_out="--json" in args)


def test_cases_are_distinct_and_cover_every_command():
    assert len({i for i, _, _ in CASES}) == len(CASES) and len({tuple(a) for _, a, _ in CASES}) == len(CASES)
    assert {a[0] for _, a, _ in CASES} >= COMMANDS
    assert len(CASES) >= 150


# Messages: each names the flag or the file, and says what is wrong in the user's terms.
@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["size", "--params", "1e400"], "--params is too large: '1e400' (at most 1e15)"),
        (["size", "--params", "1e-3"], "--params must be ≥ 1: '1e-3'"),
        (["size", "--params", ""], "not a valid --params: ''"),
        (["size", "--gpus", str(2**20 + 8)], "--gpus is too large: '1048584' (at most 1,048,576 GPUs)"),
        (["size", "--gpus", "8", "--gpus-per-node", "16"], "--gpus-per-node 16 exceeds --gpus 8"),
        (["size", "--option", "bogus=1"], "unknown --option 'bogus': the deepspeed layout takes writer"),
        (["size", "--framework", "hf", "--zero", "0", "--option", "bogus=1"], "the hf layout takes hf_shard_size"),
        (["recommend", "--node-failure-rate", "inf"], "--node-failure-rate is too large: 'inf'"),
        (["recommend", "--node-failure-rate", "nan"], "--node-failure-rate is not a number: 'nan'"),
        (["recommend", "--restart", "1e9h"], "--restart is too large: '1e9h' (at most 10 years)"),
        (["recommend", "--snapshot-bandwidth", "2PB/s"], "--snapshot-bandwidth is too large: '2PB/s' (at most 1 PB/s)"),
        (["recommend", "--host-memory", "2EiB"], "--host-memory is too large: '2EiB' (at most 1 EB)"),
        (
            ["recommend", "--plan", "@plan.json", "--params", "7B"],
            "give --plan or the plan flags, not both (got --plan and --params)",
        ),
        (["recommend", "--plan", "@plan_v99.json"], "plan schema version 99; this ckplan reads version 1"),
        (["recommend", "--plan", "@plan.json", "--config", "@config_llama.json"], "not both (got --plan and --config)"),
        (["size", "--config", "@config_nolayers.json"], "config_nolayers.json has no num_hidden_layers"),
        (["size", "--config", "@config_t5.json"], "model_type 't5' is not one ckplan sizes"),
        (["size", "--config", "@plan.json"], "plan.json has no model_type"),
        (["size", "--config", "@array.json"], "array.json is not a Hugging Face config"),
        (["size", "--config", "@dir"], "config.json"),
        (["recommend", "--plan", "@plan_negtotal.json"], "total_bytes: Input should be greater than or equal to 0"),
        (["recommend", "--plan", "@plan_gpus0.json"], "setup.gpus: Input should be greater than or equal to 1"),
        (["recommend", "--plan", "@nested.json"], "nested too deeply"),
        (["recommend", "--plan", "@utf16.json"], "is UTF-16 text"),
        (["recommend", "--plan", "@badutf8.json"], "is not UTF-8 text: byte 0xc3 at offset 34"),
        (["recommend", "--plan", "@binary.json"], "is a binary file"),
        (["recommend", "--plan", "@devzero"], "plan /dev/zero is a character device, not a regular file"),
        (["recommend", "--plan", "@dir"], "is a directory, not a regular file"),
        (
            ["recommend", "--plan", "@huge_plan.json"],
            f"is too large: {MAX_PLAN_BYTES + 1:,} bytes (at most {MAX_PLAN_BYTES:,})",
        ),
        (["recommend", "--plan", "@nan.json"], "NaN is not a JSON number"),
        (["recommend", "--storage", "@profile_v99.json"], "has schema version 99"),
        (
            ["recommend", "--storage", "@profile_nobw.json"],
            "is not a valid storage profile: buffered_bandwidth: Field required",
        ),
        (["clean", ""], "clean needs a directory or s3://bucket/prefix, got an empty path"),
        (["provision", "--gpus", "8", "--chart", "@dir"], "--chart"),
        (["probe", "@target", "--save", "a\nb"], "--save takes a plain name"),
        (["probe", "@target", "--hosts", ""], "--hosts names no hosts"),
        (["probe", "@target", "--writers", "0"], "--writers must be ≥ 1: '0'"),
        (["diagnose", "@devzero"], "log /dev/zero is a character device"),
        (["recommend", "--storage", "@socket"], "is a socket, not a regular file"),
        (["compress-test", "--file", "@dir"], "--file"),
        (["siez", "--params", "7B"], "No such command 'siez'. Did you mean 'size'?"),
        (["probe", "@target", "--quick", "--thorough"], "give --quick or --thorough, not both"),
        (["calibrate", "--quick", "--thorough"], "give --quick or --thorough, not both"),
    ],
)
def test_message_names_the_flag_or_file(run, inputs, argv, fragment):
    line = _check(*run(*_argv(argv, inputs)), 2)
    assert fragment in line, line


@pytest.mark.parametrize(
    "argv",
    [
        ["recommend", "--plan", "@fifo"],
        ["recommend", "--storage", "@fifo"],
        ["diagnose", "@fifo"],
        ["compress-test", "--file", "@fifo"],
        ["probe", "@target", "--hosts-file", "@fifo"],
        ["size", "--config", "@fifo"],
    ],
    ids=["plan", "storage", "log", "compress-file", "hosts-file", "config"],
)
def test_fifo_is_refused_without_blocking(inputs, tmp_path, argv):
    """A FIFO with no writer blocks whoever opens it: refused from its stat, within the timeout."""
    proc = run_cli(*_argv(argv, inputs), timeout=20, cwd=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert "is a FIFO, not a regular file" in _check(proc.returncode, proc.stdout, proc.stderr, 2)
    assert os.listdir(tmp_path) == []


# Environment problems: exit 3, with what to install.
def test_fio_missing_is_an_environment_problem(run, inputs, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    line = _check(*run("probe", inputs["target"], "--quick", "--json"), 3)
    assert "fio is not installed" in line
    assert "fio is not installed" in _check(*run("agent", "--port", "8799"), 3, json_out=False)


@pytest.mark.parametrize(
    "argv,hidden,fragment",
    [
        (["compress-test"], "numpy", "needs numpy: pip install 'ckplan[compress]'"),
        (
            ["compress-test", "--file", "@plan.json"],
            "zstandard",
            "needs zstandard and lz4: pip install 'ckplan[compress]'",
        ),
        (
            ["provision", "--gpus", "8", "--chart", "chart.png"],
            "matplotlib",
            "--chart needs matplotlib: pip install 'ckplan[report]'",
        ),
        (["report", "--storage", "nfs"], "matplotlib", "needs matplotlib: pip install 'ckplan[report]'"),
        (["probe", "s3://bucket/prefix"], "boto3", "S3 probing needs boto3: pip install 'ckplan[s3]'"),
        (["clean", "s3://bucket/prefix"], "boto3", "needs boto3"),
    ],
    ids=["compress-numpy", "compress-zstandard", "provision-chart", "report", "probe-s3", "clean-s3"],
)
def test_missing_extra_is_an_environment_problem(run, inputs, monkeypatch, argv, hidden, fragment):
    monkeypatch.setitem(sys.modules, hidden, None)  # what `import` sees when the package is not installed
    line = _check(*run(*_argv(argv, inputs)), 3)
    assert fragment in line, line


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
def test_compress_test_without_numpy_end_to_end(tmp_path, json_flag):
    """A fresh interpreter where numpy cannot be imported, as after a plain `pip install ckplan`: nothing the
    CLI imports on the way (typer, rich, pydantic, ckplan's own modules) may need it before the extra is named."""
    import subprocess

    hide = (
        "import sys; sys.modules['numpy'] = None; sys.argv = ['ckplan', 'compress-test', *sys.argv[1:]]; "
        "from ckplan.cli.app import main; main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", hide, *json_flag],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1"},
    )
    line = _check(proc.returncode, proc.stdout, proc.stderr, 3, json_out=bool(json_flag))
    assert line == "ckplan: error: compress-test's generated tensors needs numpy: pip install 'ckplan[compress]'", line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("command", ["probe", "clean"])
def test_unreachable_s3_endpoint_is_an_environment_problem(run, tmp_path, monkeypatch, command):
    from tests.s3server import credentials_env, free_port

    for key, value in credentials_env(tmp_path / "aws").items():  # not the user's ~/.aws
        monkeypatch.setenv(key, value)
    line = _check(
        *run(
            command,
            "s3://bucket/prefix",
            "--endpoint-url",
            f"http://127.0.0.1:{free_port()}",
            "--timeout",
            "2s",
            "--json",
        ),
        3,
    )
    assert "cannot connect to the S3 endpoint" in line, line


@pytest.mark.parametrize("command", ["probe", "clean"])
@pytest.mark.parametrize(
    "region_flag,env,code,fragment",
    [
        (["--region", "us east"], {}, 2, "--region 'us east' is not a valid AWS region name"),
        ([], {"AWS_DEFAULT_REGION": "us east"}, 3, "the AWS region 'us east' set in the environment"),
        ([], {"AWS_SECRET_ACCESS_KEY": None}, 3, "incomplete AWS credentials in env: AWS_SECRET_ACCESS_KEY is missing"),
    ],
    ids=["bad-region-flag", "bad-region-env", "half-a-key-pair"],
)
def test_s3_client_set_up_failures_are_one_line(run, tmp_path, monkeypatch, command, region_flag, env, code, fragment):
    from tests.s3server import credentials_env

    for key, value in {**credentials_env(tmp_path / "aws"), **env}.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    argv = [command, "s3://bucket/prefix", "--endpoint-url", "http://127.0.0.1:1", *region_flag, "--json"]
    assert fragment in _check(*run(*argv), code)


# The last line of defence: anything else is one line and exit 1, and --debug shows the traceback.
class _Bug(Exception):
    pass


def _broken(*args, **kwargs):
    raise _Bug("first line\nsecond line")


def test_internal_error_is_one_line_exit_1(run, monkeypatch):
    monkeypatch.setattr("ckplan.planning.recommend.compare", _broken)
    code, out, err = run("recommend", "--json")
    assert code == 1 and out == "" and "Traceback" not in err
    assert err.splitlines() == ["ckplan: internal error: _Bug: first line (rerun with --debug for the traceback)"]


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_reraises(run, monkeypatch, how):
    monkeypatch.setattr("ckplan.planning.recommend.compare", _broken)
    if how == "env":
        monkeypatch.setenv("CKPLAN_DEBUG", "1")
    monkeypatch.setattr(sys, "argv", ["ckplan", *(["--debug"] if how == "flag" else []), "recommend"])
    from ckplan.cli.app import main

    with pytest.raises(_Bug):
        main()


def test_measurement_failed_exits_4(run, monkeypatch):
    from ckplan.errors import MeasurementFailed

    def fails(*args, **kwargs):
        raise MeasurementFailed("the target filled up mid-run (ENOSPC)")

    monkeypatch.setattr("ckplan.planning.recommend.compare", fails)
    assert "filled up" in _check(*run("recommend", "--json"), 4)


def test_fio_failing_mid_run_exits_4(run, monkeypatch):
    from ckplan.probe.fio import FioError

    def fails(*args, **kwargs):
        raise FioError("fio exited 1")

    monkeypatch.setattr("ckplan.planning.recommend.compare", fails)
    assert "fio exited 1" in _check(*run("recommend", "--json"), 4)


# What stays accepted: the limits are inclusive and the defaults unchanged.
def test_valid_edges_still_run(run, inputs):
    for argv in (
        ["size", "--params", "1e15", "--json"],
        ["size", "--gpus", "4", "--json"],
        ["size", "--gpus", "16", "--gpus-per-node", "16", "--json"],
        ["recommend", "--plan", inputs["plan.json"], "--json"],
        ["recommend", "--storage", inputs["profile.json"], "--json"],
        ["recommend", "--mtbf", "1s", "--storage", "nfs", "--json"],  # the least MTBF taken
        ["size", "--interval", "1us", "--max-overhead", "0.0001%", "--json"],  # the least interval and budget
        ["recommend", "--iteration-time", "1us", "--restart", "0", "--changed-fraction", "0.0001%", "--json"],
    ):
        code, out, err = run(*argv)
        assert code == 0, (argv, err)
        json.loads(out)
    assert json.loads(run("size", "--gpus", "4", "--json")[1])["setup"]["gpus_per_node"] == 4


def test_every_plan_size_writes_reads_back(run, tmp_path):
    """Plan files are validated where read, but never more strictly than what `size --json` writes."""
    from ckplan import catalog
    from ckplan.sizing.plan import build_plan

    # DeepSpeed ZeRO-3 without mixed precision has a negative small_file_bytes: it must still read back
    for kw in (
        {"framework": "deepspeed", "zero": 3, "precision": "fp32", "optimizer": "sgd"},
        {"framework": "hf", "zero": 0, "gpus": 1},
        {"framework": "megatron", "gpus": 24, "gpus_per_node": 8, "tp": 2},
    ):
        path = tmp_path / "plan.json"
        path.write_text(
            build_plan(arch=catalog.model("llama-3.1-8b"), model_name="llama-3.1-8b", **kw).model_dump_json()
        )
        code, out, err = run("recommend", "--plan", str(path), "--storage", "nfs", "--json")
        assert code == 0, (kw, err)


def test_tiny_mtbf_is_all_waste_not_an_overflow(run):
    code, out, err = run("recommend", "--mtbf", "1s", "--storage", "nfs", "--json")
    assert code == 0, err
    assert json.loads(out)["expected_waste_fraction"] == 1.0


def test_save_time_without_storage_gives_one_recommendation(run):
    code, out, err = run("recommend", "--save-time", "5m", "--json")
    assert code == 0, err
    recs = json.loads(out)["recommendations"]
    assert len(recs) == 1 and recs[0]["storage"] == "measured (--save-time)" and recs[0]["save_seconds"] == 300


# Properties: whatever the option values, ckplan answers (0) or refuses in one line (2); never a traceback.
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
_number = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers(-(10**20), 10**20).map(str))
_value = st.one_of(
    _text, _number, st.sampled_from(["7B", "1e15", "1e16", "5m", "5%", "0", "-1", "1e400", "nan", "", " "])
)
_small_world = st.one_of(
    st.integers(-3, 64), st.integers(2**20 + 1, 2**70)
)  # valid worlds stay small: big plans are slow


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=_value, interval=_value, overhead=_value, gpus=_small_world, gpn=st.one_of(st.none(), _small_world))
def test_size_options_property(run, params, interval, overhead, gpus, gpn):
    argv = [
        "size",
        "--params",
        params,
        "--interval",
        interval,
        "--max-overhead",
        overhead,
        "--gpus",
        str(gpus),
        "--json",
    ]
    code, out, err = run(*argv + (["--gpus-per-node", str(gpn)] if gpn is not None else []))
    assert code in (0, 2), err
    if code:
        _check(code, out, err, 2)
    else:
        json.loads(out)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mtbf=_value, restart=_value, node_rate=_number, max_loss=_value, snapshot=_value)
def test_recommend_options_property(run, mtbf, restart, node_rate, max_loss, snapshot):
    code, out, err = run(
        "recommend",
        "--storage",
        "nfs",
        "--mtbf",
        mtbf,
        "--restart",
        restart,
        "--node-failure-rate",
        node_rate,
        "--max-loss",
        max_loss,
        "--snapshot-bandwidth",
        snapshot,
        "--mode",
        "async",
        "--json",
    )
    assert code in (0, 2), err
    if code:
        _check(code, out, err, 2)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


_DROP = object()


def _mutate(doc, path: list, value):
    """doc with the value at `path` (keys or indexes, taken modulo what is there) replaced or removed."""
    node = doc
    for step in path[:-1]:
        if isinstance(node, dict) and node:
            node = node[sorted(node)[step % len(node)]]
        elif isinstance(node, list) and node:
            node = node[step % len(node)]
    if isinstance(node, dict) and node:
        key = sorted(node)[path[-1] % len(node)]
        if value is _DROP:
            del node[key]
        else:
            node[key] = value
    elif isinstance(node, list) and node:
        node[path[-1] % len(node)] = None if value is _DROP else value
    return doc


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    which=st.sampled_from(["plan", "profile"]),
    path=st.lists(st.integers(0, 50), min_size=1, max_size=4),
    value=st.one_of(st.just(_DROP), _json),
    raw=st.one_of(st.none(), _json),
)
def test_malformed_json_files_property(run, inputs, tmp_path_factory, which, path, value, raw):
    """A plan or profile ckplan wrote, with one value replaced or removed, or any JSON document instead."""
    source = json.loads(Path(inputs[f"{which}.json"]).read_text())
    doc = raw if raw is not None else _mutate(source, path, value)
    target = tmp_path_factory.mktemp("doc") / f"{which}.json"
    target.write_text(json.dumps(doc))
    flag = "--plan" if which == "plan" else "--storage"
    code, out, err = run("recommend", flag, str(target), *(["--storage", "nfs"] if which == "plan" else []), "--json")
    assert code in (0, 2), err
    if code:
        _check(code, out, err, 2)


# Inputs at the edges of what a number, a file or the environment can be: each refused where it enters, in one
# line naming the flag, field or file, before any work; the fragment is what the line must contain.
_PROFILE_EDITS = {  # name → (the edit of a profile holding every optional part, the field the refusal names)
    "files0": (lambda p: p["small_files"].update(files_per_s=0), "small_files.files_per_s"),
    "ops0": (lambda p: p["small_files"].update(ops_per_s=0), "small_files.ops_per_s"),
    "files-subnormal": (lambda p: p["small_files"].update(files_per_s=1e-320), "small_files.files_per_s"),
    "aggregate-files0": (lambda p: p.update(aggregate_files_per_s=0), "aggregate_files_per_s"),
    "replay-seconds0": (lambda p: p["replay"].update(seconds=0), "replay.seconds"),
    "replay-seconds-subnormal": (lambda p: p["replay"].update(seconds=1e-320), "replay.seconds"),
    "replay-full0": (lambda p: p["replay"].update(full_scale_seconds=0), "replay.full_scale_seconds"),
    "replay-scale0": (lambda p: p["replay"].update(scale=0), "replay.scale"),
    "replay-fixed-negative": (lambda p: p["replay"].update(fixed_seconds=-1), "replay.fixed_seconds"),
    "read-replay-seconds0": (lambda p: p["read_replay"].update(seconds=0), "read_replay.seconds"),
    "read-replay-full0": (lambda p: p["read_replay"].update(full_scale_seconds=0), "read_replay.full_scale_seconds"),
    "calibration-rate0": (
        lambda p: p["calibration"]["serialize_bytes_per_s"].update({"torch.save": 0}),
        "calibration.serialize_bytes_per_s.torch.save",
    ),
    "calibration-rate-subnormal": (
        lambda p: p["calibration"]["serialize_bytes_per_s"].update({"dcp": 1e-320}),
        "calibration.serialize_bytes_per_s.dcp",
    ),
    "calibration-read-rate0": (
        lambda p: p["calibration"]["deserialize_bytes_per_s"].update({"torch.save": 0}),
        "calibration.deserialize_bytes_per_s.torch.save",
    ),
    "calibration-dcp-negative": (
        lambda p: p["calibration"].update(dcp_fixed_seconds=-0.01),
        "calibration.dcp_fixed_seconds",
    ),
    "fsync-negative": (lambda p: p["fsync_latency"].update(p50_s=-1e-3), "fsync_latency.p50_s"),
    "fsync-subnormal": (lambda p: p["fsync_latency"].update(p50_s=1e-320), "fsync_latency.p50_s"),
    "sync-write-negative": (
        lambda p: p.update(sync_write_latency={"p50_s": -1, "p99_s": -1, "p999_s": -1}),
        "sync_write_latency.p50_s",
    ),
    "bandwidth0": (lambda p: p["buffered_bandwidth"][0].update(bytes_per_s=0), "buffered_bandwidth.0.bytes_per_s"),
    "bandwidth-subnormal": (
        lambda p: p["buffered_bandwidth"][0].update(bytes_per_s=1e-320),
        "buffered_bandwidth.0.bytes_per_s",
    ),
    "spread-subnormal": (
        lambda p: p["buffered_bandwidth"][0].update(spread={"median": 1e-320, "min": 1e-320, "max": 1e-320}),
        "buffered_bandwidth.0.spread.median",
    ),
    "best-write0": (lambda p: p.update(best_write_bytes_per_s=0), "best_write_bytes_per_s"),
    "page-cache0": (lambda p: p.update(page_cache_write={"writers": 1, "bytes_per_s": 0}), "page_cache_write"),
    "direct0": (lambda p: p.update(direct_bandwidth=[{"writers": 1, "bytes_per_s": 0}]), "direct_bandwidth.0"),
    "read-bandwidth0": (lambda p: p.update(read_bandwidth=[{"writers": 1, "bytes_per_s": 0}]), "read_bandwidth.0"),
    "limit-subnormal": (lambda p: p.update(aggregate_limit_bytes_per_s=1e-320), "aggregate_limit_bytes_per_s"),
    "measured-negative": (lambda p: p["measurement"].update(duration_s=-5), "measurement.duration_s"),
}


def _full_profile() -> dict:
    """The nfs class with every optional part a probe can add: a replay, a read replay, a calibration."""
    from ckplan import catalog

    profile = json.loads(catalog.storage_classes()["nfs"].model_dump_json())
    replay = {"seconds": 2.0, "bytes": 10**9, "files": 4, "scale": 0.5, "plan_fingerprint": "0" * 16}
    profile["replay"] = {**replay, "writers": 2, "full_scale_seconds": 4.0}
    profile["read_replay"] = {**replay, "readers": 2, "full_scale_seconds": 4.0}
    profile["calibration"] = {
        "serialize_bytes_per_s": {"torch.save": 1e9, "safetensors": 1e9, "dcp": 1e9},
        "deserialize_bytes_per_s": {"torch.save": 2e9},
        "sample_bytes": 10**8,
        "tensor_bytes": 10**6,
        "dcp_fixed_seconds": 0.01,
        "dcp_ranks": 2,
        "torch_version": "2",
        "host": "h",
        "duration_s": 3.0,
    }
    return profile


def _zero_bytes_plan(keep: int) -> dict:
    """A 16-GPU plan whose files hold 0 bytes but the first `keep`, its totals made to agree (a consistent plan)."""
    from ckplan import catalog
    from ckplan.sizing.plan import build_plan, manifest_fields

    plan = build_plan(arch=catalog.model("llama-3.1-8b"), model_name="llama-3.1-8b", gpus=16)
    manifest = [f.model_copy(update={"bytes": f.bytes if i < keep else 0}) for i, f in enumerate(plan.manifest)]
    doc = json.loads(plan.model_copy(update=manifest_fields(manifest, plan.operations.renames)).model_dump_json())
    doc["small_file_bytes"] = doc["total_bytes"] - doc["state_bytes"]
    return doc


@pytest.fixture(scope="module")
def edges(inputs, tmp_path_factory) -> dict[str, str]:
    """The files of `inputs` and the edge cases': profiles, plans, checkpoint directories and logs."""
    from ckplan import catalog
    from ckplan.sizing.plan import build_plan, interval_demand

    d = tmp_path_factory.mktemp("edges")
    files = dict(inputs)

    def put(name: str, data: bytes | str) -> str:
        path = d / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        files[name] = str(path)
        return str(path)

    full = _full_profile()
    put("profile_full.json", json.dumps(full))
    for name, (edit, _) in _PROFILE_EDITS.items():
        doc = json.loads(json.dumps(full))
        edit(doc)
        put(f"profile_{name}.json", json.dumps(doc))
    # 1e400 is valid JSON, and a float reads it as infinity
    put("profile_calibration-duration-inf.json", json.dumps(full).replace('"duration_s": 3.0', '"duration_s": 1e400'))

    plan = build_plan(arch=catalog.model("llama-3.1-8b"), model_name="llama-3.1-8b")
    with_interval = json.loads(plan.model_copy(update={"interval": interval_demand(plan, 300, 0.05)}).model_dump_json())
    for name, edit in {
        "interval-subnormal": lambda p: p["interval"].update(interval_s=1e-320),
        "interval-overhead0": lambda p: p["interval"].update(max_overhead=0),
        "interval-budget-subnormal": lambda p: p["interval"].update(stall_budget_s=1e-320),
        "bpp-subnormal": lambda p: p.update(bytes_per_parameter=1e-320),
        "node-bytes0": lambda p: p["nodes"][0].update(bytes=0),
    }.items():
        doc = json.loads(json.dumps(with_interval))
        edit(doc)
        put(f"plan_{name}.json", json.dumps(doc))
    put("plan_allzero.json", json.dumps(_zero_bytes_plan(0)))
    put("plan_onefile.json", json.dumps(_zero_bytes_plan(1)))  # one file holds bytes, the rest none: refused too

    # checkpoint directories whose files hold nothing, or whose names are numbered no framework's way
    for name, paths, size in (
        (
            "allzero",
            ["global_step1/zero_pp_rank_0_mp_rank_00_optim_states.pt", "global_step1/mp_rank_00_model_states.pt"],
            0,
        ),
        ("onezero", ["checkpoint-1/model.safetensors"], 0),
        ("dcpzero", ["step-1/__0_0.distcp", "step-1/__1_0.distcp", "step-1/.metadata"], 0),
        ("rank-ds", ["global_step1/zero_pp_rank_99999999999999999999_mp_rank_00_optim_states.pt"], 5),
        ("rank-dcp", ["step-1/__999999999999_0.distcp", "step-1/.metadata"], 5),
        ("rank-rng", ["checkpoint-1/rng_state_99999999999999999999.pth", "checkpoint-1/trainer_state.json"], 5),
        ("rank-megatron", ["iter_0000001/mp_rank_99999999_999/model_optim_rng.pt"], 5),
        ("rank-mp", ["global_step1/mp_rank_99999999_model_states.pt"], 5),
        ("world", ["global_step1/zero_pp_rank_1048575_mp_rank_1048575_optim_states.pt"], 5),
        ("dup-dcp", ["step-1/__01_0.distcp", "step-1/__1_0.distcp", "step-1/__0_0.distcp", "step-1/.metadata"], 5),
        (
            "dup-rng",
            ["checkpoint-1/rng_state.pth", "checkpoint-1/rng_state_0.pth", "checkpoint-1/trainer_state.json"],
            5,
        ),
        (
            "dup-ds",
            [
                "global_step1/zero_pp_rank_0_mp_rank_00_optim_states.pt",
                "global_step1/zero_pp_rank_00_mp_rank_00_optim_states.pt",
            ],
            5,
        ),
    ):
        for path in paths:
            put(f"from_{name}/{path}", b"x" * size)
        files[f"from_{name}"] = str(d / f"from_{name}")

    stamp = "[rank0]:2025-04-01 00:20:16,730 - root - INFO - "
    put("log_torchtitan_1e308.log", f"{stamp}Finished saving the checkpoint in 1{'0' * 308} seconds.\n" * 3)
    put(
        "log_megatron_huge.log",
        "successfully saved checkpoint from iteration 10 to /ckpt\nsave-checkpoint ......: (1.0, 1e17)\n".replace(
            "1e17", "1" + "0" * 17
        )
        * 3,
    )
    put("log_took.log", "save took 1e-320s\nsave took 3s\nsave took -5s\nsave took 4s\n")
    put("log_negative.log", "save took -5s\nsave took 3s\nsave took 4s\n")
    put(
        "log_span.log",
        "save 0001-01-01 00:00:00 to 9999-01-01 00:00:00\nsave 2025-01-01 00:00:00 to 2025-01-01 00:00:05\n",
    )
    put(
        "log_reversed.log",
        "save 2025-01-01 00:10:00 to 2025-01-01 00:00:00\nsave 2025-01-01 00:10:00 to 2025-01-01 00:10:05\n",
    )
    put("log_backtrack.log", "took " + "a" * 40 + "!\ntook 3s\n")
    files["nodir"] = str(d / "no-such-dir" / "out.json")
    files["under_file"] = inputs["plan.json"] + "/out.json"
    files["long"] = str(d / ("x" * 300 + ".json"))
    return files


_SPAN = r"save (?P<start>\S+ \S+) to (?P<end>\S+ \S+)"
_TOOK = r"took (?P<duration>[-0-9.e]+)s"

EDGE_CASES = [
    # floats at the edges: subnormal, underflowing to 0, or below the least figure a flag takes
    ("size-interval-subnormal", ["size", "--interval", "1e-320s"], "--interval is subnormal"),
    ("size-interval-underflow", ["size", "--interval", "1e-400s"], "--interval is too close to zero"),
    ("size-interval-below-1us", ["size", "--interval", "1e-300s"], "--interval must be at least 1 µs"),
    ("size-interval-ms-subnormal", ["size", "--interval", "1e-318ms"], "--interval is subnormal"),
    ("size-overhead-subnormal", ["size", "--interval", "5m", "--max-overhead", "1e-320"], "--max-overhead must lie"),
    ("size-overhead-tiny", ["size", "--interval", "5m", "--max-overhead", "1e-300"], "--max-overhead must lie"),
    ("size-overhead-percent-underflow", ["size", "--max-overhead", "1e-400%"], "--max-overhead is too close to zero"),
    ("size-params-subnormal", ["size", "--params", "1e-320"], "--params is subnormal"),
    ("recommend-iteration-subnormal", ["recommend", "--iteration-time", "1e-320s"], "--iteration-time is subnormal"),
    ("recommend-iteration-below-1us", ["recommend", "--iteration-time", "1e-9s"], "--iteration-time must be at least"),
    ("recommend-mtbf-picohours", ["recommend", "--mtbf", "1e-12h"], "--mtbf must be at least 1.0 s"),
    ("recommend-mtbf-half-second", ["recommend", "--mtbf", "0.5s"], "--mtbf must be at least 1.0 s"),
    ("recommend-mtbf-subnormal", ["recommend", "--mtbf", "1e-320h"], "--mtbf is subnormal"),
    ("recommend-restart-subnormal", ["recommend", "--restart", "1e-320s"], "--restart is subnormal"),
    ("recommend-restart-underflow", ["recommend", "--restart", "1e-400s"], "--restart is too close to zero"),
    ("recommend-restart-below-1us", ["recommend", "--restart", "1e-9s"], "--restart must be at least 1 µs (or 0)"),
    ("recommend-max-loss-subnormal", ["recommend", "--max-loss", "1e-310h"], "--max-loss must be at least 1 µs"),
    ("recommend-save-time-subnormal", ["recommend", "--save-time", "1e-320s"], "--save-time is subnormal"),
    (
        "recommend-stall-subnormal",
        ["recommend", "--mode", "async", "--stall-time", "5e-324s"],
        "--stall-time is subnormal",
    ),
    (
        "recommend-node-rate-subnormal",
        ["recommend", "--node-failure-rate", "1e-320"],
        "--node-failure-rate is subnormal",
    ),
    ("recommend-job-rate-subnormal", ["recommend", "--job-failure-rate", "5e-324"], "--job-failure-rate is subnormal"),
    (
        "recommend-node-rate-underflow",
        ["recommend", "--node-failure-rate", "1e-400"],
        "--node-failure-rate is too close to zero",
    ),
    ("recommend-changed-subnormal", ["recommend", "--changed-fraction", "1e-320"], "--changed-fraction must lie"),
    (
        "recommend-snapshot-subnormal",
        ["recommend", "--snapshot-bandwidth", "1e-320GB/s"],
        "--snapshot-bandwidth is subnormal",
    ),
    ("recommend-host-memory-subnormal", ["recommend", "--host-memory", "1e-320"], "--host-memory is subnormal"),
    ("recommend-local-disk-underflow", ["recommend", "--local-disk", "1e-400TB"], "--local-disk is too close to zero"),
    (
        "recommend-aggregate-subnormal",
        ["recommend", "--aggregate-limit", "1e-320GB/s"],
        "--aggregate-limit is subnormal",
    ),
    (
        "recommend-serializer-subnormal",
        ["recommend", "--serialize-bandwidth", "torch.save=1e-320GB/s"],
        "--serialize-bandwidth is subnormal",
    ),
    ("report-mtbf-picohours", ["report", "--storage", "nfs", "--mtbf", "1e-12h"], "--mtbf must be at least 1.0 s"),
    ("provision-mtbf-picohours", ["provision", "--gpus", "8", "--mtbf", "1e-12h"], "--mtbf must be at least 1.0 s"),
    (
        "provision-goodput-subnormal",
        ["provision", "--gpus", "8", "--target-goodput", "1e-320"],
        "--target-goodput must lie",
    ),
    ("probe-scale-subnormal", ["probe", "@target", "--scale", "1e-320"], "--scale is subnormal"),
    ("probe-scale-tiny", ["probe", "@target", "--scale", "1e-9"], "--scale must be ≥"),
    ("probe-max-bytes-subnormal", ["probe", "@target", "--max-bytes", "1e-320GB"], "--max-bytes is subnormal"),
    (
        "probe-agent-wait-subnormal",
        ["probe", "@target", "--hosts", "127.0.0.1", "--agent-wait", "1e-320s"],
        "--agent-wait is subnormal",
    ),
    ("probe-timeout-underflow", ["probe", "s3://bucket/x", "--timeout", "1e-400s"], "--timeout is too close to zero"),
    ("probe-part-size-underflow", ["probe", "s3://bucket/x", "--part-size", "1e-400MiB"], "--part-size is too close"),
    # the S3 options are read and bounded whatever the target: a part S3 refuses is refused on a directory too
    ("probe-part-size-small-dir", ["probe", "@target", "--part-size", "1MiB"], "--part-size must be 5 MiB to 5 GiB"),
    ("probe-agent-wait-alone", ["probe", "@target", "--agent-wait", "1m"], "--agent-wait applies to a multi-host"),
    (
        "probe-agent-info-port-alone",
        ["probe", "@target", "--agent-info-port", "8766"],
        "--agent-info-port applies to a multi-host",
    ),
    ("probe-drop-caches-alone", ["probe", "@target", "--drop-caches"], "--drop-caches applies to a multi-host"),
    ("probe-agent-info-port-zero", ["probe", "@target", "--hosts", "h", "--agent-info-port", "0"], "--agent-info-port"),
    ("probe-label-bad-name", ["probe", "@target", "--label", "a b=c"], "--label: 'a b' is not a label name"),
    ("probe-label-no-value", ["probe", "@target", "--label", "claim"], "--label takes NAME=VALUE"),
    ("clean-timeout-zero", ["clean", "@target", "--timeout", "0s"], "--timeout must be > 0"),
    (
        "probe-emit-jobs-s3",
        ["probe", "s3://bucket/x", "--endpoint-url", "http://127.0.0.1:9", "--emit-jobs", "@target"],
        "--emit-jobs writes fio job files; the S3 probe runs ckplan's own client",
    ),
    (
        "validate-scale-subnormal",
        ["validate", "@target", "--plan", "@plan.json", "--storage", "nfs", "--scale", "1e-320"],
        "--scale is subnormal",
    ),
    ("watch-interval-subnormal", ["watch", "--interval", "1e-320s", "--duration", "1s"], "--interval is subnormal"),
    ("watch-duration-below-1us", ["watch", "--duration", "1e-300s"], "--duration must be at least 1 µs"),
    ("diagnose-interval-subnormal", ["diagnose", str(LOG), "--interval", "1e-320s"], "--interval is subnormal"),
    # zeros and subnormals inside a hand-edited profile, refused at load naming the field
    *[
        (f"recommend-storage-{name}", ["recommend", "--storage", f"@profile_{name}.json"], field)
        for name, (_, field) in _PROFILE_EDITS.items()
    ],
    (
        "report-storage-files0",
        ["report", "--storage", "@profile_files0.json"],
        "small_files.files_per_s",
    ),
    (
        "diagnose-storage-replay-seconds0",
        ["diagnose", str(LOG), "--plan", "@plan.json", "--storage", "@profile_replay-seconds0.json"],
        "replay.seconds",
    ),
    (
        "validate-storage-calibration-rate0",
        ["validate", "@target", "--plan", "@plan.json", "--storage", "@profile_calibration-rate0.json"],
        "calibration.serialize_bytes_per_s",
    ),
    (
        "provision-storage-fsync-negative",
        ["provision", "--gpus", "8", "--storage", "@profile_fsync-negative.json"],
        "fsync_latency.p50_s",
    ),
    # plans whose bytes are zero, or whose demand figures are subnormal
    ("recommend-plan-allzero", ["recommend", "--plan", "@plan_allzero.json"], "weights file of 0 bytes"),
    ("recommend-plan-onefile", ["recommend", "--plan", "@plan_onefile.json"], "weights file of 0 bytes"),
    ("recommend-plan-node-bytes0", ["recommend", "--plan", "@plan_node-bytes0.json"], "nodes.0.bytes is 0"),
    (
        "recommend-storage-calibration-duration-inf",
        ["recommend", "--storage", "@profile_calibration-duration-inf.json"],
        "calibration.duration_s",
    ),
    ("recommend-plan-bpp-subnormal", ["recommend", "--plan", "@plan_bpp-subnormal.json"], "bytes_per_parameter"),
    (
        "recommend-plan-interval-subnormal",
        ["recommend", "--plan", "@plan_interval-subnormal.json"],
        "interval.interval_s",
    ),
    ("recommend-plan-overhead0", ["recommend", "--plan", "@plan_interval-overhead0.json"], "interval.max_overhead"),
    (
        "recommend-plan-budget-subnormal",
        ["recommend", "--plan", "@plan_interval-budget-subnormal.json"],
        "interval.stall_budget_s",
    ),
    ("report-plan-allzero", ["report", "--storage", "nfs", "--plan", "@plan_allzero.json"], "weights file of 0 bytes"),
    (
        "diagnose-plan-allzero",
        ["diagnose", str(LOG), "--plan", "@plan_allzero.json", "--storage", "nfs"],
        "weights file of 0 bytes",
    ),
    (
        "validate-plan-allzero",
        ["validate", "@target", "--plan", "@plan_allzero.json", "--storage", "nfs"],
        "weights file of 0 bytes",
    ),
    ("probe-plan-allzero", ["probe", "@target", "--plan", "@plan_allzero.json"], "weights file of 0 bytes"),
    # size --from: files holding nothing, ranks past any world, one writer's file numbered twice
    ("size-from-allzero", ["size", "--from", "@from_allzero"], "hold 0 bytes"),
    ("size-from-onezero", ["size", "--from", "@from_onezero"], "hold 0 bytes"),
    ("size-from-dcpzero", ["size", "--from", "@from_dcpzero"], "hold 0 bytes"),
    ("recommend-from-allzero", ["recommend", "--from", "@from_allzero"], "hold 0 bytes"),
    ("size-from-rank-ds", ["size", "--from", "@from_rank-ds"], "more than the 1,048,576 GPUs"),
    ("size-from-rank-dcp", ["size", "--from", "@from_rank-dcp"], "more than the 1,048,576 GPUs"),
    ("size-from-rank-rng", ["size", "--from", "@from_rank-rng"], "more than the 1,048,576 GPUs"),
    ("size-from-rank-megatron", ["size", "--from", "@from_rank-megatron"], "more than the 1,048,576 GPUs"),
    ("size-from-rank-mp", ["size", "--from", "@from_rank-mp"], "more than the 1,048,576 GPUs"),
    ("size-from-world", ["size", "--from", "@from_world"], "1,099,511,627,776 ranks"),
    ("size-from-dup-dcp", ["size", "--from", "@from_dup-dcp"], "number the same writer's file twice"),
    ("size-from-dup-rng", ["size", "--from", "@from_dup-rng"], "number the same writer's file twice"),
    ("size-from-dup-ds", ["size", "--from", "@from_dup-ds"], "number the same writer's file twice"),
    # logs: save times past any save's, subnormal or negative
    ("diagnose-torchtitan-1e308", ["diagnose", "@log_torchtitan_1e308.log"], "lasts 1e+308 s"),
    ("diagnose-megatron-huge", ["diagnose", "@log_megatron_huge.log"], "megatron log's save"),
    ("diagnose-pattern-subnormal", ["diagnose", "@log_took.log", "--pattern", _TOOK], "(a subnormal number)"),
    ("diagnose-pattern-negative", ["diagnose", "@log_negative.log", "--pattern", _TOOK], "ends before it starts"),
    ("diagnose-pattern-span", ["diagnose", "@log_span.log", "--pattern", _SPAN], "lasts 3.15"),
    ("diagnose-pattern-reversed", ["diagnose", "@log_reversed.log", "--pattern", _SPAN], "ends before it starts"),
    # patterns that backtrack: a repeat in a repeat refused when read, anything else stopped by the line budget
    (
        "diagnose-pattern-nested-plus",
        ["diagnose", str(LOG), "--pattern", r"in (?P<duration>(\d+)+)"],
        "repeats a repeat",
    ),
    (
        "diagnose-pattern-nested-star",
        ["diagnose", str(LOG), "--pattern", r"(?P<duration>(\d*)*) s"],
        "repeats a repeat",
    ),
    (
        "diagnose-pattern-nested-optional",
        ["diagnose", str(LOG), "--pattern", r"in (?P<duration>(?:\d+\.?)+) seconds"],
        "repeats a repeat",
    ),
    (
        "diagnose-pattern-nested-bounded",
        ["diagnose", str(LOG), "--pattern", r"in (?P<duration>(?:[0-9.]{1,3}){1,9}) s"],
        "repeats a repeat",
    ),
    (
        "diagnose-pattern-nested-branch",
        ["diagnose", str(LOG), "--pattern", r"in (?P<duration>(?:x|\d+)+)"],
        "repeats a repeat",
    ),
    (
        "diagnose-pattern-nested-lookahead",
        ["diagnose", str(LOG), "--pattern", r"(?=(?:a+)+)in (?P<duration>\d+)"],
        "repeats a repeat",
    ),
    (
        "diagnose-pattern-nested-timestamps",
        ["diagnose", str(LOG), "--pattern", r"(?P<start>(?:\S+\s?)+) to (?P<end>\S+)"],
        "repeats a repeat",
    ),
    (
        "diagnose-pattern-budget",
        ["diagnose", "@log_backtrack.log", "--pattern", r"took (?P<duration>(?:a|a)+)$"],
        "ran for over 1.0 s on one line",
    ),
    # output paths refused before the work: kernel file systems, missing or file parents, over-long names
    ("probe-out-proc-new", ["probe", "@target", "--out", "/proc/ckplan-profile.json"], "is on a proc file system"),
    ("probe-out-proc-existing", ["probe", "@target", "--out", "/proc/version"], "is on a proc file system"),
    ("probe-out-sys", ["probe", "@target", "--out", "/sys/ckplan-profile.json"], "is on a sysfs file system"),
    ("probe-out-no-parent", ["probe", "@target", "--out", "@nodir"], "cannot write --out"),
    ("probe-out-parent-file", ["probe", "@target", "--out", "@under_file"], "Not a directory"),
    ("probe-out-too-long", ["probe", "@target", "--out", "@long"], "File name too long"),
    ("probe-out-socket", ["probe", "@target", "--out", "@socket"], "is a socket"),
    ("probe-save-too-long", ["probe", "@target", "--save", "a" * 300], "--save is 300 bytes long"),
    ("probe-save-too-long-utf8", ["probe", "@target", "--save", "é" * 126], "--save is 252 bytes long"),
    ("probe-emit-jobs-proc", ["probe", "@target", "--emit-jobs", "/proc/ckplan-jobs"], "--emit-jobs /proc/ckplan-jobs"),
    ("probe-emit-jobs-file", ["probe", "@target", "--emit-jobs", "@plan.json"], "is not a directory"),
    ("calibrate-out-sys", ["calibrate", "--out", "/sys/ckplan-calibration.json"], "is on a sysfs file system"),
    ("calibrate-out-proc-existing", ["calibrate", "--out", "/proc/version"], "is on a proc file system"),
    ("calibrate-out-no-parent", ["calibrate", "--out", "@nodir"], "No such file or directory"),
    ("report-out-file", ["report", "--storage", "nfs", "--out", "@plan.json"], "is not a directory"),
    ("report-out-proc", ["report", "--storage", "nfs", "--out", "/proc/ckplan-report"], "is on a proc file system"),
    ("provision-chart-proc", ["provision", "--gpus", "8", "--chart", "/proc/ckplan.png"], "--chart /proc/ckplan.png"),
    ("provision-chart-no-parent", ["provision", "--gpus", "8", "--chart", "@nodir"], "cannot write --chart"),
    ("watch-record-proc", ["watch", "--record", "/proc/ckplan.csv", "--duration", "1s"], "--record /proc/ckplan.csv"),
    ("watch-record-socket", ["watch", "--record", "@socket", "--duration", "1s"], "is a socket"),
]


@pytest.mark.parametrize("argv,fragment", [pytest.param(a, f, id=i) for i, a, f in EDGE_CASES])
def test_edge_input_is_refused_naming_it(run, edges, argv, fragment):
    line = _check(*run(*_argv(argv, edges)), 2)
    assert fragment in line, line


def test_edge_cases_are_distinct_and_many():
    assert len({i for i, _, _ in EDGE_CASES}) == len(EDGE_CASES)
    assert len({tuple(a) for _, a, _ in EDGE_CASES}) == len(EDGE_CASES)
    assert not {tuple(a) for _, a, _ in EDGE_CASES} & {tuple(a) for _, a, _ in CASES}
    assert len(EDGE_CASES) >= 60


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["probe", "@target", "--out", "@fifo"], "--out"),
        (["calibrate", "--out", "@fifo"], "--out"),
        (["provision", "--gpus", "8", "--chart", "@fifo"], "--chart"),
        (["watch", "--record", "@fifo", "--duration", "1s"], "--record"),
        (["report", "--storage", "nfs", "--out", "@fifo"], "is not a directory"),
        (["probe", "@target", "--emit-jobs", "@fifo"], "is not a directory"),
    ],
    ids=["probe-out", "calibrate-out", "provision-chart", "watch-record", "report-out", "probe-emit-jobs"],
)
def test_fifo_output_is_refused_without_blocking(edges, tmp_path, argv, fragment):
    """Opening a FIFO to write blocks until a reader appears: an output path that is one is refused from its stat."""
    proc = run_cli(*_argv(argv, edges), timeout=20, cwd=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "config")})
    line = _check(proc.returncode, proc.stdout, proc.stderr, 2)
    assert fragment in line and edges["fifo"] in line, line
    assert os.listdir(tmp_path) == []


def _stdout_to(stdout, *argv: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        ckplan_exe() + list(argv),
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "NO_COLOR": "1", "XDG_CONFIG_HOME": str(cwd / "config")},
    )


_OUTPUTS = [["size"], ["size", "--json"], ["models"], ["recommend", "--json"], ["--help"]]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("argv", _OUTPUTS, ids=[" ".join(a) for a in _OUTPUTS])
def test_stdout_on_a_full_device_is_one_line_exit_3(tmp_path, argv):
    with open("/dev/full", "w") as full:
        proc = _stdout_to(full, *argv, cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.splitlines() == ["ckplan: error: cannot write the output to stdout: No space left on device"]


@pytest.mark.parametrize("argv", [*_OUTPUTS, ["size", "--full-manifest", "--gpus", "64"]], ids=" ".join)
def test_stdout_into_a_closed_pipe_exits_141_quietly(tmp_path, argv):
    """`ckplan size | head -c1`: the reader has gone, as a command killed by SIGPIPE would end; nothing is said."""
    read, write = os.pipe()
    os.close(read)  # closed before ckplan writes a byte: every write fails, whatever the pipe's buffer holds
    try:
        proc = _stdout_to(write, *argv, cwd=tmp_path)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")


def test_config_home_that_is_a_file(run, edges, tmp_path, monkeypatch):
    """$XDG_CONFIG_HOME a file: --save is refused before the probe; reading profiles finds no saved ones."""
    config = tmp_path / "config-file"
    config.write_text("not a directory")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    line = _check(*run("probe", edges["target"], "--save", "mine", "--json"), 2)
    assert line == (
        f"ckplan: error: cannot create the --save profile directory {config}/ckplan/profiles: {config} is not a "
        "directory"
    ), line
    assert "unknown storage 'mine'" in _check(*run("recommend", "--storage", "mine", "--json"), 2)
    code, out, err = run("profiles", "--json")
    assert code == 0 and all(p["location"] == "built-in" for p in json.loads(out)["profiles"]), err
    code, out, err = run("recommend", "--storage", "nfs", "--json")
    assert code == 0, err
    assert config.read_text() == "not a directory"


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_host_that_accepts_and_never_answers_ends_by_agent_wait(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(listener.accept()[0])  # and never a byte back

    threading.Thread(target=accept, daemon=True).start()
    target = tmp_path / "shared"
    target.mkdir()
    argv = ["probe", str(target), "--hosts", f"127.0.0.1:{port}", "--agent-wait", "2s", "--quick", "--no-calibrate"]
    proc = subprocess.Popen(
        ckplan_exe() + [*argv, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1", "XDG_CONFIG_HOME": str(tmp_path / "config")},
    )
    start = time.monotonic()
    try:
        out, err = proc.communicate(timeout=15)  # --agent-wait, fio's start-up and the one line, with room
    except subprocess.TimeoutExpired:
        proc.terminate()  # its SIGTERM handler stops fio's client and removes the scratch directory
        proc.communicate(timeout=20)
        pytest.fail(f"probe --hosts still waiting {time.monotonic() - start:.0f} s after --agent-wait 2s")
    finally:
        listener.close()
        for conn in held:
            conn.close()
    line = _check(proc.returncode, out, err, 3)
    assert f"127.0.0.1:{port}" in line, line


@pytest.mark.parametrize(
    "field,value",
    [
        ("mtbf_s", 1e-12 * 3600),
        ("max_overhead", 1e-320),
        ("max_overhead", 1e-300),
        ("iteration_s", 5e-324),
        ("max_loss_s", 0),
        ("restart_s", -1),
        ("restart_s", 1e-320),
        ("changed_fraction", 0),
        ("snapshot_bytes_per_s", 0.5),
        ("host_memory_bytes", math.inf),
        ("node_failures_per_1000_days", -1),
        ("job_failures_per_day", 1e-320),
        ("save_time_s", 0),
        ("aggregate_limit_bytes_per_s", 1e-320),
    ],
)
def test_policy_refuses_what_the_flags_refuse(field, value):
    """The bounds are the model's, so a library caller is refused what the CLI refuses."""
    from pydantic import ValidationError

    from ckplan.planning.policy import Policy

    with pytest.raises(ValidationError, match=field):
        Policy(**{field: value})


def test_interval_demand_refuses_a_subnormal_interval():
    from pydantic import ValidationError

    from ckplan import catalog
    from ckplan.sizing.plan import build_plan, interval_demand

    plan = build_plan(arch=catalog.model("llama-3.1-8b"), model_name="llama-3.1-8b")
    for interval, overhead, field in ((1e-320, 0.05, "interval_s"), (300, 1e-320, "max_overhead")):
        with pytest.raises(ValidationError, match=field):
            interval_demand(plan, interval, overhead)


def test_valid_neighbours_of_the_edges_still_run(run, edges, tmp_path):
    """What lies just inside the edges is answered: a profile with every optional part, a checkpoint with one
    empty state file (noted), possessive and atomic patterns."""
    for argv in (
        ["recommend", "--storage", edges["profile_full.json"]],
        ["diagnose", str(LOG), "--pattern", r"in (?P<duration>(?:\d++\.?)+) seconds"],
        ["diagnose", str(LOG), "--pattern", r"in (?P<duration>(?>\d+\.?)+) seconds"],
        ["recommend", "--mtbf", "1s", "--restart", "0", "--iteration-time", "1us"],
    ):
        code, out, err = run(*argv, "--json")
        assert code == 0, (argv, err)
        json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the output of {argv}"))
    ckpt = tmp_path / "global_step1"
    ckpt.mkdir()
    (ckpt / "mp_rank_00_model_states.pt").write_bytes(b"x" * 1000)
    (ckpt / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"")
    code, out, err = run("size", "--from", str(ckpt), "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["total_bytes"] == 1000
    assert any("1 state file(s) hold 0 bytes (global_step1/zero_pp_rank_0" in a for a in plan["assumptions"])


def test_a_backtracking_pattern_ends_within_seconds(edges):
    """The regex budget, in a process of its own: a budget that stopped working would hang the in-process case
    above, and the suite with it, where this one fails at 20 s."""
    started = time.monotonic()
    proc = run_cli(
        "diagnose", edges["log_backtrack.log"], "--pattern", r"took (?P<duration>(?:a|a)+)$", "--json", timeout=20
    )
    assert time.monotonic() - started < 20
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "ran for over 1.0 s on one line" in lines[0], proc.stderr


def test_a_marker_whose_pid_overflows_a_c_long_is_stale(tmp_path):
    """A scratch marker naming this host and a pid past a C long (os.kill raises OverflowError) names no process:
    its directory is stale, and `clean` removes it."""
    from ckplan.scratch import MARKER, SCRATCH_PREFIX, scratch_dirs

    stale = tmp_path / f"{SCRATCH_PREFIX}{socket.gethostname()}-1-0000"
    stale.mkdir()
    (stale / MARKER).write_text(json.dumps({"host": socket.gethostname(), "pid": 2**70, "started": time.time()}))
    assert [(s.pid, s.live) for s in scratch_dirs(tmp_path)] == [(2**70, False)]
    proc = run_cli("clean", str(tmp_path), "--json", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["removed"] == [str(stale)] and not stale.exists()
