"""`ckplan k8s`: its manifests against the official Kubernetes OpenAPI schemas (strict, five minor versions, shipped
offline by kubernetes-validate) and the JobSet CRD's published schema (tests/fixtures/jobset, v0.9.1), the literals
no schema checks, the plan's ConfigMap, and bad input. No cluster runs here: none can on these machines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from ckplan.k8s.manifests import BEGIN, CONTROLLER_SCRIPT, END, EXCLUSIVE, LINGER, Manifests, manifests
from ckplan.k8s.request import ManifestRequest
from ckplan.probe import hostlist
from ckplan.request import PlanRequest
from tests.conftest import assert_one_line_error, run_cli

K8S_VERSIONS = ("1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0")
JOBSET_SCHEMA = Path(__file__).parent / "fixtures" / "jobset" / "jobset-v1alpha2.json"
EVERY_OPTION = [
    "--nodes", "4", "--claim", "lustre-ckpt", "--mount-path", "/mnt/ckpt", "--name", "probe7", "--namespace", "ml",
    "--image", "registry.example.com/infra/ckplan:0.1.0", "--node-selector", "nvidia.com/gpu.present=true",
    "--node-selector", "pool=h100", "--toleration", "nvidia.com/gpu=present:NoSchedule", "--toleration",
    "dedicated:NoExecute", "--toleration", "spot", "--cpu", "8", "--memory", "32Gi", "--service-account", "ckplan",
    "--drop-caches", "--storage-class", "lustre-rwx", "--csi-driver", "lustre.csi.aws.com", "--port", "9000",
    "--deadline", "2h",
]  # fmt: skip


def generate(*args: str, plan: Path | None = None) -> tuple[list[dict[str, Any]], str]:
    """The objects `ckplan k8s` prints (the YAML stream) and its stderr."""
    argv = ["k8s", *args] + (["--plan", str(plan)] if plan else [])
    proc = run_cli(*argv)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d is not None], proc.stderr


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(PlanRequest.model_validate({"params": 1e9, "gpus": 16}).plan().model_dump_json())
    return path


def by_kind(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        out.setdefault(o["kind"], []).append(o)
    return out


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_job_form_validates_strictly_for_each_kubernetes_version(version, plan_file):
    objects, _ = generate(*EVERY_OPTION, plan=plan_file)
    assert sorted(o["kind"] for o in objects) == ["ConfigMap", "Job", "Job", "Service"]
    for o in objects:
        kubernetes_validate.validate(o, version, strict=True)


def test_strict_validation_refuses_an_unknown_field():
    """The validation can fail: a field no schema has is refused, in a pod spec and in a Service's spec."""
    objects, _ = generate("--nodes", "2", "--claim", "c")
    job = by_kind(objects)["Job"][0]
    job["spec"]["template"]["spec"]["restartpolicy"] = "Never"  # a misspelling
    with pytest.raises(kubernetes_validate.ValidationError, match="restartpolicy"):
        kubernetes_validate.validate(job, K8S_VERSIONS[0], strict=True)
    service = by_kind(objects)["Service"][0]
    service["spec"]["publishNotReady"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(service, K8S_VERSIONS[-1], strict=True)


def test_job_form_literals_the_schema_does_not_check(plan_file):
    objects, err = generate(*EVERY_OPTION, plan=plan_file)
    kinds = by_kind(objects)
    (service,) = kinds["Service"]
    agents, controller = sorted(kinds["Job"], key=lambda j: j["metadata"]["name"])
    assert (agents["metadata"]["name"], controller["metadata"]["name"]) == ("probe7-agents", "probe7-probe")
    assert {o["metadata"]["namespace"] for o in objects} == {"ml"}
    assert service["metadata"]["name"] == "probe7-agents"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert [p["port"] for p in service["spec"]["ports"]] == [9000, 9001]
    spec = agents["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 4
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 7200
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] and pod["restartPolicy"] == "Never"
    # the Service selects exactly the agents: their labels, not the controller's
    assert service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    assert not service["spec"]["selector"].items() <= controller["spec"]["template"]["metadata"]["labels"].items()
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "pool": "h100"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
        {"key": "spot", "operator": "Exists"},
    ]
    assert pod["serviceAccountName"] == "ckplan"
    assert pod["volumes"] == [{"name": "target", "persistentVolumeClaim": {"claimName": "lustre-ckpt"}}]
    (agent,) = pod["containers"]
    assert agent["image"] == "registry.example.com/infra/ckplan:0.1.0"
    assert agent["command"] + agent["args"] == [
        "ckplan", "agent", "--bind", "0.0.0.0", "--port", "9000", "--info-port", "9001", "--linger", LINGER,
    ]  # fmt: skip
    assert agent["readinessProbe"]["httpGet"] == {"path": "/", "port": "info"}
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in agent["env"]} == {
        "CKPLAN_NODE_NAME": "spec.nodeName",
        "CKPLAN_POD_NAME": "metadata.name",
    }
    assert agent["volumeMounts"] == [{"name": "target", "mountPath": "/mnt/ckpt"}]
    assert agent["resources"] == {"requests": {"cpu": "8", "memory": "32Gi"}, "limits": {"cpu": "8", "memory": "32Gi"}}
    assert agent["securityContext"] == {"privileged": True}
    # the controller: the probe over every agent's DNS name, the plan from the ConfigMap, the facts as labels
    cpod = controller["spec"]["template"]["spec"]
    (probe,) = cpod["containers"]
    assert probe["command"] == ["sh", "-c", CONTROLLER_SCRIPT, "ckplan-probe"] and "securityContext" not in probe
    args = probe["args"]
    assert args[0] == "/mnt/ckpt"
    hosts = hostlist.parse_hosts(args[args.index("--hosts") + 1], None)
    assert [str(h) for h in hosts] == [f"probe7-agents-{i}.probe7-agents:9000" for i in range(4)]
    assert args[args.index("--agent-info-port") + 1] == "9001" and "--drop-caches" in args
    labels = [args[i + 1] for i, a in enumerate(args) if a == "--label"]
    assert labels == [
        "kubernetes.form=job",
        "kubernetes.namespace=ml",
        "kubernetes.claim=lustre-ckpt",
        "kubernetes.storage_class=lustre-rwx",
        "kubernetes.csi_driver=lustre.csi.aws.com",
    ]
    assert args[args.index("--plan") + 1] == "/etc/ckplan/plan.json"
    assert {"name": "plan", "mountPath": "/etc/ckplan", "readOnly": True} in probe["volumeMounts"]
    assert {"name": "plan", "configMap": {"name": "probe7-plan"}} in cpod["volumes"]
    (config,) = kinds["ConfigMap"]
    assert config["metadata"]["name"] == "probe7-plan"
    assert json.loads(config["data"]["plan.json"]) == json.loads(plan_file.read_text())
    # what to run next, on stderr: stdout is only the YAML stream kubectl reads
    assert "until kubectl -n ml get job/probe7-probe -o jsonpath='{.status.succeeded}{.status.failed}'" in err
    assert (
        "kubectl -n ml delete job,service,configmap -l app.kubernetes.io/name=ckplan,app.kubernetes.io/instance=probe7"
        in err
    )
    assert "kubectl -n ml logs job/probe7-probe | sed -n" in err and BEGIN in err and END in err


def strict_crd_schema() -> dict[str, Any]:
    """The JobSet CRD's schema as the API server applies it with strict field validation: an object that lists its
    properties takes no others (unless it preserves unknown fields); an object without a list is free."""
    doc = json.loads(JOBSET_SCHEMA.read_text())

    def strict(node: Any) -> Any:
        if isinstance(node, list):
            return [strict(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: strict(v) for k, v in node.items()}
        free = "additionalProperties" in out or out.get("x-kubernetes-preserve-unknown-fields")
        if "properties" in out and not free:
            out["additionalProperties"] = False
        return out

    return strict(doc["openAPIV3Schema"])


def test_jobset_form_validates_against_the_jobset_crd_schema(plan_file):
    objects, _ = generate(*EVERY_OPTION, "--form", "jobset", plan=plan_file)
    kinds = by_kind(objects)
    assert sorted(kinds) == ["ConfigMap", "JobSet"]
    (jobset,) = kinds["JobSet"]
    doc = json.loads(JOBSET_SCHEMA.read_text())
    assert jobset["apiVersion"] == f"{doc['group']}/{doc['version']}" == "jobset.x-k8s.io/v1alpha2"
    schema = strict_crd_schema()
    jsonschema.validate(jobset, schema)
    wrong = json.loads(json.dumps(jobset))
    wrong["spec"]["successPolicy"]["targets"] = ["probe"]  # not the CRD's field name: refused
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, schema)
    # the pod templates inside are core PodTemplateSpecs: each Job template validates as a batch/v1 Job's spec
    for rj in jobset["spec"]["replicatedJobs"]:
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": rj["template"]["spec"]}
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(job, version, strict=True)


def test_jobset_form_literals(plan_file):
    objects, err = generate("--nodes", "3", "--claim", "c", "--form", "jobset", plan=plan_file)
    (jobset,) = by_kind(objects)["JobSet"]
    spec = jobset["spec"]
    assert spec["network"] == {
        "enableDNSHostnames": True,
        "subdomain": "ckplan-agents",
        "publishNotReadyAddresses": True,
    }
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["probe"]}
    agents, probe = spec["replicatedJobs"]
    assert (agents["name"], agents["replicas"], probe["name"], probe["replicas"]) == ("agents", 3, "probe", 1)
    assert agents["template"]["metadata"]["annotations"] == {EXCLUSIVE: "kubernetes.io/hostname"}
    assert agents["template"]["spec"]["completions"] == 1
    assert agents["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    args = probe["template"]["spec"]["template"]["spec"]["containers"][0]["args"]
    hosts = hostlist.parse_hosts(args[args.index("--hosts") + 1], None)
    # JobSet's DNS hostnames: JOBSET-REPLICATEDJOB-JOBINDEX-PODINDEX.SUBDOMAIN
    assert [str(h) for h in hosts] == [f"ckplan-agents-{j}-0.ckplan-agents:8765" for j in range(3)]
    assert "kubernetes.form=jobset" in args
    assert "kubectl -n default delete jobset/ckplan configmap/ckplan-plan" in err
    assert "kubectl -n default logs job/ckplan-probe-0 | sed" in err


def test_json_is_the_model_and_the_yaml_its_objects():
    proc = run_cli("k8s", "--nodes", "2", "--claim", "c", "--json")
    assert proc.returncode == 0, proc.stderr
    model = Manifests.model_validate_json(proc.stdout)
    assert proc.stderr == ""  # the next steps are in the model
    objects, _ = generate("--nodes", "2", "--claim", "c")
    assert model.objects == objects and model.hosts == "ckplan-agents-[0-1].ckplan-agents:8765"
    assert model.steps[0] == "kubectl apply --server-side -f ckplan-k8s.yaml"


def test_library_and_cli_build_the_same_objects():
    request = ManifestRequest(nodes=2, claim="c", form="jobset")
    built = manifests(request, ["--quick"])
    objects, _ = generate("--nodes", "2", "--claim", "c", "--form", "jobset", "--", "--quick")
    assert built.objects == objects


def test_probe_flags_after_the_separator_reach_the_controller():
    objects, _ = generate("--nodes", "2", "--claim", "c", "--", "--quick", "--writers", "2", "--no-calibrate")
    controller = [o for o in objects if o["metadata"]["name"] == "ckplan-probe"][0]
    assert controller["spec"]["template"]["spec"]["containers"][0]["args"][-4:] == [
        "--quick",
        "--writers",
        "2",
        "--no-calibrate",
    ]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--nodes", "0", "--claim", "c"], "--nodes"),
        (["--nodes", "65537", "--claim", "c"], "--nodes"),
        (["--nodes", "2"], "--claim"),
        (["--nodes", "2", "--claim", "c", "--name", "Bad_Name"], "--name 'Bad_Name' is not a DNS-1035 label"),
        (["--nodes", "2", "--claim", "c", "--name", "-x"], "is not a DNS-1035 label"),
        (["--nodes", "2", "--claim", "c", "--name", "7x"], "starting with a letter"),
        (["--nodes", "2", "--claim", "c", "--namespace", "a" * 64], "--namespace"),
        (["--nodes", "2", "--claim", "Claim"], "--claim 'Claim' is not a DNS subdomain"),
        (["--nodes", "2", "--claim", "c", "--mount-path", "ckpt"], "--mount-path must be an absolute path"),
        (["--nodes", "2", "--claim", "c", "--mount-path", "/a/../b"], "without '..'"),
        (["--nodes", "2", "--claim", "c", "--mount-path", "/etc/ckplan"], "is under /etc, which the image"),
        (["--nodes", "2", "--claim", "c", "--mount-path", "/tmp"], "is under /tmp"),
        (["--nodes", "2", "--claim", "c", "--form", "helm"], "--form"),
        (["--nodes", "2", "--claim", "c", "--toleration", "gpu:NoRun"], "the effect must be one of"),
        (["--nodes", "2", "--claim", "c", "--node-selector", "pool"], "--node-selector takes NAME=VALUE"),
        (["--nodes", "2", "--claim", "c", "--node-selector", "pool=a b"], "a label value is at most 63"),
        (["--nodes", "2", "--claim", "c", "--cpu", "two"], "--cpu 'two' is not a Kubernetes quantity"),
        (["--nodes", "2", "--claim", "c", "--image", "bad image"], "--image 'bad image' is not an image"),
        (["--nodes", "2", "--claim", "c", "--deadline", "0s"], "--deadline"),
        (["--nodes", "2", "--claim", "c", "--deadline", "500ms"], "--deadline"),
        (["--nodes", "2", "--claim", "c", "--port", "65535"], "--port"),
        (["--nodes", "2000", "--claim", "c", "--name", "n" * 52], "the last agent's name"),
        (["--nodes", "100", "--claim", "c", "--name", "n" * 46, "--form", "jobset"], "over 63 characters"),
        (["--nodes", "2", "--claim", "c", "--", "--hosts", "x"], "the manifests set --hosts themselves"),
        (["--nodes", "2", "--claim", "c", "--", "--out=/x"], "the manifests set --out themselves"),
        (["--nodes", "2", "--claim", "c", "--", "--no-such-flag"], "No such option: --no-such-flag"),
        (["--nodes", "2", "--claim", "c", "--", "--writers"], "--writers"),
        (["--nodes", "2", "--claim", "c", "--", "/other/path"], "unexpected extra argument"),
        (["--nodes", "2", "--claim", "c", "--", "--help"], "--help is not a probe flag"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    assert_one_line_error(run_cli("k8s", *args), fragment)


def test_a_plan_over_a_configmaps_limit_is_refused(tmp_path):
    """A ConfigMap holds at most 1 MiB: a DCP plan of 16,384 ranks' files is 1.9 MB as JSON."""
    path = tmp_path / "plan.json"
    plan = PlanRequest.model_validate({"params": 70e9, "gpus": 16384, "framework": "dcp"}).plan()
    path.write_text(plan.model_dump_json())
    assert path.stat().st_size > 1024 * 1024
    assert_one_line_error(
        run_cli("k8s", "--nodes", "2", "--claim", "c", "--plan", str(path)), "over a ConfigMap's 1,048,576"
    )


def test_the_docs_command_makes_valid_manifests(plan_file):
    """docs/kubernetes.md's `ckplan k8s` line, as the reader copies it (the plan file made here)."""
    import re
    import shlex

    docs = (Path(__file__).parents[1] / "docs" / "kubernetes.md").read_text()
    (command,) = [c for c in re.findall(r"^ckplan k8s .*?(?<!\\)$", docs, re.M | re.S)]
    argv = shlex.split(command.replace("\\\n", " ").split(">")[0])[2:]
    objects, err = generate(*[str(plan_file) if a == "plan.json" else a for a in argv])
    assert {o["kind"] for o in objects} == {"ConfigMap", "Service", "Job"} and "until kubectl -n ml get" in err
    for o in objects:
        kubernetes_validate.validate(o, K8S_VERSIONS[-1], strict=True)
