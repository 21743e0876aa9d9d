"""The restore manifest: what every rank reads on resume, pinned to figures computed by hand from the save's file
sizes (docs/restore-reads.md gives each framework's reads).

Every case is 64 GPUs on 8 nodes of 8 and `--params 1e9`. The file sizes below are the save manifest's, written
out as numbers (their own tests are tests/test_sizing.py's); each test first checks the plan still has them.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from tests.conftest import run_cli, run_json

GPUS, PER_NODE, NODES = 64, 8, 8


def _plan(*args: str) -> dict:
    return run_json("size", "--params", "1e9", "--gpus", str(GPUS), *args)


def _sizes(plan: dict) -> Counter[tuple[str, int]]:
    """(file name with its numbers as N, bytes) → how many files."""
    return Counter((re.sub(r"\d+", "N", f["path"].rsplit("/", 1)[-1]), f["bytes"]) for f in plan["manifest"])


def test_hf_trainer_ddp_every_rank_reads_the_whole_checkpoint():
    plan = _plan("--framework", "hf", "--zero", "0")
    model, optimizer, scheduler, state, config, rng = 4_000_034_957, 8_000_178_696, 1_500, 8_000, 1_000, 15_000
    args, generation = 6_000, 200  # training_args.bin and generation_config.json: written, never read on resume
    assert _sizes(plan) == {
        ("model.safetensors", model): 1,
        ("optimizer.pt", optimizer): 1,
        ("scheduler.pt", scheduler): 1,
        ("trainer_state.json", state): 1,
        ("config.json", config): 1,
        ("rng_state_N.pth", rng): 64,
        ("training_args.bin", args): 1,
        ("generation_config.json", generation): 1,
    }
    total = 12_001_190_353
    assert plan["total_bytes"] == total == model + optimizer + scheduler + state + config + 64 * rng + args + generation
    r = plan["restore"]
    # each rank: the model, optimizer.pt, scheduler.pt, trainer_state.json twice, config.json, its own RNG file
    per_rank = 12_000_247_153
    assert per_rank == model + optimizer + scheduler + 2 * state + config + rng
    assert r["rank_bytes"] == per_rank
    assert r["rank_bytes_by_format"] == {"safetensors": model, "torch.save": optimizer + scheduler + rng, "raw": 17_000}
    # a node: the whole checkpoint's state once (its page cache serving its 8 ranks) and its 8 RNG files
    per_node = 12_000_344_153
    assert per_node == model + optimizer + scheduler + state + config + 8 * rng
    assert r["node_bytes"] == per_node
    assert r["node_requested_bytes"] == 96_001_977_224 == 8 * per_rank
    assert r["node_files"] == 13  # 5 shared files and 8 RNG files
    assert r["storage_bytes"] == 96_002_753_224 == NODES * per_node
    assert r["requested_bytes"] == 768_015_817_792 == GPUS * per_rank
    assert r["read_amplification"] == pytest.approx(96_002_753_224 / total)
    assert (r["nodes"], r["readers_per_node"]) == (8, 8)
    assert "page cache" in r["page_cache"] and "cold" in r["page_cache"]
    shared = {f["path"].rsplit("/", 1)[-1]: (f["bytes"], f["readers"], f["nodes"]) for f in r["files"]}
    assert shared["trainer_state.json"] == (2 * state, 64, 8)
    assert shared["model.safetensors"] == (model, 64, 8)
    assert (r["own_files"], r["own_bytes"]) == (64, 64 * rng)
    assert any("training_args.bin" in n and "generation_config.json" in n for n in r["notes"])


def test_lightning_every_rank_reads_the_ckpt():
    plan = _plan("--framework", "lightning")
    ckpt = 12_000_282_496
    assert _sizes(plan) == {("epoch=N-step=N.ckpt", ckpt): 1}
    r = plan["restore"]
    assert (r["rank_bytes"], r["node_bytes"], r["node_requested_bytes"]) == (ckpt, ckpt, 8 * ckpt)
    assert r["storage_bytes"] == 96_002_259_968 == NODES * ckpt
    assert r["requested_bytes"] == 768_018_079_744 == GPUS * ckpt
    assert r["read_amplification"] == 8.0
    assert r["files"] == [
        {"path": plan["manifest"][0]["path"], "bytes": ckpt, "format": "torch.save", "readers": 64, "nodes": 8}
    ]


def test_deepspeed_zero1_model_states_read_again_by_each_data_parallel_rank():
    plan = _plan("--framework", "deepspeed", "--zero", "1")
    latest, model_states, shard, fp32_script, torch_script = 16, 2_000_091_396, 187_505_296, 38_580, 2_490
    assert _sizes(plan) == {
        ("latest", latest): 1,
        ("mp_rank_N_model_states.pt", model_states): 1,
        ("bfN_zero_pp_rank_N_mp_rank_N_optim_states.pt", shard): 64,
        ("zero_to_fpN.py", fp32_script): 1,
        ("zero_to_torch.py", torch_script): 1,
    }
    total = 14_000_471_426
    assert plan["total_bytes"] == total == latest + model_states + 64 * shard + fp32_script + torch_script
    r = plan["restore"]
    dp = 64
    # every rank loads the model states and, before that, torch.loads the first model-states file once more to
    # check mp_world_size (state_dict_factory.py check_ckpt_list; tests/test_restore_oracle.py sees it): so the
    # checkpoint (less the recovery scripts, which no rank reads), plus the model states read 2·dp − 1 more times
    # and `latest` dp − 1 more
    requested = 268_012_038_656
    assert requested == total - fp32_script - torch_script + (2 * dp - 1) * model_states + (dp - 1) * latest
    assert r["requested_bytes"] == requested
    assert r["rank_bytes"] == 4_187_688_104 == latest + 2 * model_states + shard
    # a node reads the model states once for its 8 ranks, and their 8 shards
    node = 3_500_133_780
    assert node == latest + model_states + 8 * shard
    assert (r["node_bytes"], r["node_files"]) == (node, 10)
    assert r["node_requested_bytes"] == 33_501_504_832 == 8 * (latest + 2 * model_states + shard)
    assert r["storage_bytes"] == 28_001_070_240 == NODES * node
    assert r["read_amplification"] == pytest.approx(28_001_070_240 / total)
    assert (r["own_files"], r["own_bytes"]) == (64, 64 * shard)


def test_deepspeed_zero3_each_rank_reads_its_own_files():
    plan = _plan("--framework", "deepspeed", "--zero", "3")
    latest, placeholders, shard = 16, 91_396, 187_504_996
    assert _sizes(plan) == {
        ("latest", latest): 1,
        ("zero_pp_rank_N_mp_rank_N_model_states.pt", placeholders): 64,
        ("bfN_zero_pp_rank_N_mp_rank_N_optim_states.pt", shard): 64,
        ("zero_to_fpN.py", 38_580): 1,
        ("zero_to_torch.py", 2_490): 1,
    }
    r = plan["restore"]
    # each rank reads its own model states twice (checked, then loaded) and its own optimizer shard
    assert r["rank_bytes"] == 187_687_804 == latest + 2 * placeholders + shard
    assert r["node_bytes"] == 1_500_771_152 == latest + 8 * (placeholders + shard)
    assert r["node_requested_bytes"] == 1_501_502_432 == 8 * (latest + 2 * placeholders + shard)
    assert r["storage_bytes"] == 12_006_169_216 == NODES * latest + GPUS * (placeholders + shard)
    assert r["requested_bytes"] == 12_012_019_456 == GPUS * (latest + 2 * placeholders + shard)
    assert (r["own_files"], r["own_bytes"]) == (128, GPUS * (2 * placeholders + shard))
    assert r["read_amplification"] == pytest.approx(12_006_169_216 / 12_006_210_174)  # < 1: the scripts are not read


@pytest.mark.parametrize("zero", [3, 0])
def test_dcp_sharded_reads_own_slices_ddp_reads_everything(zero):
    plan = _plan("--framework", "dcp", "--zero", str(zero))
    metadata, distcp = 13_968_000, 187_500_000
    assert _sizes(plan) == {(".metadata", metadata): 1, ("__N_N.distcp", distcp): 64}
    r = plan["restore"]
    if zero == 3:  # FSDP: each rank its own .distcp (its saved chunks) and the whole .metadata
        assert r["rank_bytes"] == 201_468_000 == distcp + metadata
        assert r["rank_bytes_by_format"] == {"dcp": distcp, "raw": metadata}
        assert r["node_bytes"] == 1_513_968_000 == 8 * distcp + metadata
        assert r["storage_bytes"] == 12_111_744_000 == GPUS * distcp + NODES * metadata
        assert r["requested_bytes"] == 12_893_952_000 == GPUS * (distcp + metadata)
    else:  # DDP: every rank holds every tensor whole, so reads every saved chunk
        assert r["rank_bytes"] == 12_013_968_000 == GPUS * distcp + metadata
        assert r["node_bytes"] == 12_013_968_000
        assert r["storage_bytes"] == 96_111_744_000 == NODES * (GPUS * distcp + metadata)
        assert r["requested_bytes"] == 768_893_952_000 == GPUS * (GPUS * distcp + metadata)


def test_sums_over_strided_readers():
    """Pure arithmetic: readers every step-th rank, on runs of nodes or one per node."""
    from ckplan.frameworks.layout import Parallelism, Read, Readers
    from ckplan.sizing.restore import restore_manifest

    par = Parallelism(gpus=12, gpus_per_node=2, tp=1, pp=1, zero=1)  # 6 nodes of 2
    reads = [
        Read("a.pt", 100, Readers(1, 4, 3)),  # ranks 1, 5, 9: nodes 0, 2, 4, one reader each
        Read("b.pt", 10, Readers(0, 2, 3)),  # ranks 0, 2, 4: nodes 0, 1, 2
        Read("c.json", 1, Readers(0, 1, 12), times=2),  # every rank, twice
        Read("d.pt", 1000, Readers(7, 1, 1)),  # rank 7 alone (node 3)
    ]
    r = restore_manifest(reads, par, checkpoint_bytes=1111, notes=[])
    assert [(f.path, f.bytes, f.readers, f.nodes) for f in r.files] == [
        ("a.pt", 100, 3, 3),
        ("b.pt", 10, 3, 3),
        ("c.json", 2, 12, 6),
    ]
    assert (r.own_files, r.own_bytes) == (1, 1000)
    assert r.rank_bytes == 1002  # rank 7: d.pt and c.json twice
    assert r.rank_bytes_by_format == {"torch.save": 1000, "raw": 2}
    # distinct bytes per node: 0: a b c = 111, 1: b c = 11, 2: a b c = 111, 3: d c = 1001, 4: a c = 101, 5: c = 1
    assert (r.node_bytes, r.node_files, r.node_requested_bytes, r.readers_per_node) == (1001, 2, 1004, 2)
    assert r.storage_bytes == 111 + 11 + 111 + 1001 + 101 + 1
    assert r.requested_bytes == 3 * 100 + 3 * 10 + 12 * 2 + 1000
    assert r.read_amplification == pytest.approx(1336 / 1111)
    assert r.nodes == 6


CASES = [
    ("hf", "0", []),
    ("hf", "2", []),
    ("hf", "3", ["--option", "gather_16bit=true"]),
    ("lightning", "0", []),
    ("dcp", "3", ["--tp", "2"]),
    ("deepspeed", "1", ["--tp", "2", "--pp", "2"]),
    ("deepspeed", "0", ["--tp", "2"]),
    ("deepspeed", "3", []),
    ("megatron", "1", ["--tp", "4", "--pp", "2"]),
    ("dlio", "1", ["--tp", "2", "--pp", "2"]),
]


@pytest.mark.parametrize(("framework", "zero", "extra"), CASES)
def test_a_single_reader_is_the_files_writer(framework, zero, extra):
    """own_files counts a file one rank reads as read by its writer: every layout gives a lone reader so."""
    from ckplan.frameworks import FRAMEWORKS
    from ckplan.frameworks.layout import Parallelism
    from ckplan.sizing.plan import CheckpointPlan

    plan = CheckpointPlan.model_validate(_plan("--framework", framework, "--zero", zero, *extra))
    s = plan.setup
    par = Parallelism(gpus=s.gpus, gpus_per_node=s.gpus_per_node, tp=s.tp, pp=s.pp, zero=s.zero, ep=s.ep)
    writer = {f.path: f.rank for f in plan.manifest}
    declared = FRAMEWORKS[framework].layout.restore(par, plan.manifest)
    assert declared.reads
    for read in declared.reads:
        assert read.readers.start + read.readers.step * (read.readers.count - 1) < s.gpus, read
        if read.readers.count == 1:
            assert read.readers.start == writer[read.path], read
    assert plan.restore is not None and plan.restore.requested_bytes >= plan.restore.storage_bytes


def test_plans_without_a_restore_manifest_still_load_and_keep_their_fingerprint(tmp_path):
    from ckplan.sizing.plan import CheckpointPlan

    data = _plan("--framework", "deepspeed", "--zero", "1")
    old = {k: v for k, v in data.items() if k != "restore"}
    with_restore, without = CheckpointPlan.model_validate(data), CheckpointPlan.model_validate(old)
    assert without.restore is None and with_restore.restore is not None
    assert with_restore.fingerprint == without.fingerprint
    path = tmp_path / "old-plan.json"
    path.write_text(json.dumps(old))
    proc = run_cli("recommend", "--plan", str(path), "--storage", "nfs", "--json")
    assert proc.returncode == 0, proc.stderr


def test_dcp_ddp_with_tensor_parallelism_says_it_cannot_tell():
    plan = _plan("--framework", "dcp", "--zero", "0", "--tp", "2")
    assert plan["restore"] is None
    assert any("DCP under DDP with tensor parallelism" in a for a in plan["assumptions"])


def test_size_shows_the_restore_manifest():
    proc = run_cli("size", "--params", "1e9", "--gpus", "64", "--framework", "deepspeed", "--zero", "1")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "What a restart reads" in out and "Read amplification 2.00×" in out and "Page cache:" in out
    assert "busiest node (8 reader(s))" in out and "3.50 GB" in out and "28.00 GB" in out  # node and storage bytes


def test_measured_plans_carry_a_restore_manifest_where_the_framework_is_known():
    from ckplan.sizing.measured import measured_plan

    files = [("global_step5/mp_rank_00_model_states.pt", 1000), ("latest", 12), ("zero_to_fp32.py", 500)]
    files += [(f"global_step5/bf16_zero_pp_rank_{dp}_mp_rank_00_optim_states.pt", 300) for dp in range(4)]
    plan = measured_plan(files, source="ds", gpus_per_node=2)
    r = plan.restore
    assert r is not None
    assert r.rank_bytes == 12 + 2 * 1000 + 300  # the model states checked, then loaded
    assert r.node_bytes == 12 + 1000 + 2 * 300 and r.storage_bytes == 2 * (12 + 1000) + 4 * 300
    assert r.requested_bytes == 4 * (12 + 2 * 1000 + 300)
    assert r.read_amplification == pytest.approx((2 * 1012 + 1200) / (1512 + 1200))

    legacy = [
        ("iter_0000005/mp_rank_00/model_optim_rng.pt", 1000),
        ("iter_0000005/mp_rank_01/model_optim_rng.pt", 1000),
    ]
    plan = measured_plan(legacy, source="legacy")
    assert plan.restore is None
    assert any(a.startswith("restore: ") and "legacy" in a for a in plan.assumptions)


def test_a_file_read_two_ways_counts_once_per_node():
    """DeepSpeed's mp_rank_00 under model parallelism: loaded by its dp replicas, checked by every rank."""
    from ckplan.frameworks.layout import Parallelism, Read, Readers
    from ckplan.sizing.restore import restore_manifest

    par = Parallelism(gpus=8, gpus_per_node=4, tp=2, pp=1, zero=1)
    reads = [Read("m.pt", 100, Readers(0, 2, 4)), Read("m.pt", 100, Readers(0, 1, 8))]
    r = restore_manifest(reads, par, checkpoint_bytes=100, notes=[])
    assert r.requested_bytes == 4 * 100 + 8 * 100
    assert (r.rank_bytes, r.node_bytes, r.node_files, r.storage_bytes) == (200, 100, 1, 200)
    assert [(f.readers, f.nodes) for f in r.files] == [(4, 2), (8, 0)]  # the second way reaches no new node


def test_a_plan_without_a_restore_manifest_renders_without_one():
    proc = run_cli("size", "--params", "1e9", "--gpus", "16", "--framework", "dcp", "--zero", "0", "--tp", "2")
    assert proc.returncode == 0, proc.stderr
    assert "What a restart reads" not in proc.stdout and "DCP under DDP with tensor parallelism" in proc.stdout


def test_measured_dcp_is_taken_as_sharded_and_says_so():
    from ckplan.sizing.measured import measured_plan

    files = [("step-5/.metadata", 100), *((f"step-5/__{r}_0.distcp", 1000) for r in range(4))]
    r = measured_plan(files, source="dcp", gpus_per_node=4).restore
    assert r is not None
    assert (r.rank_bytes, r.node_bytes, r.requested_bytes) == (1100, 4100, 4400)
    assert any("DCP's files do not tell DDP from FSDP" in n for n in r.notes)
