"""`ckplan size --from DIR`: plans measured from checkpoint directories on disk.

- DeepSpeed is not installed here, so its checkpoint is written as engine.save_checkpoint names and writes its
  files (deepspeed/runtime/engine.py: _get_ckpt_name → mp_rank_XX_model_states.pt, _get_zero_ckpt_name →
  bf16_zero_pp_rank_R_mp_rank_XX_optim_states.pt; `latest` and zero_to_fp32.py beside the tag), with torch.save
  of a real model's and Adam's state, as DeepSpeed does.
- The DCP checkpoint is a real torch.distributed.checkpoint.save by 4 ranks in a gloo process group.
- HF Trainer (transformers Trainer._save_checkpoint) and Megatron-LM (checkpointing.get_checkpoint_name,
  get_distributed_optimizer_checkpoint_name) directories hold files of known sizes under those names.
The expected figures are the files' own: the count and os.path.getsize of what is on disk.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, run_cli, run_json


def _disk(root: Path) -> dict[str, int]:
    """Every regular file under root (symlinks not followed) and its size: what a scan must find."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                out[str(p.relative_to(root))] = os.path.getsize(p)
    return out


def _put(path: Path, size: int) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    return size


def _ranks(plan: dict) -> dict[str, tuple[int, int]]:
    return {f["path"]: (f["rank"], f["node"]) for f in plan["manifest"]}


def _recommend_end_to_end(plan: dict, tmp_path: Path) -> dict:
    """The scanned plan, as `size --json` wrote it, through `recommend --plan … --storage tmpfs --json`."""
    plan_file = tmp_path / "scanned-plan.json"
    plan_file.write_text(json.dumps(plan))
    rec = run_json("recommend", "--plan", str(plan_file), "--storage", "tmpfs")
    assert rec["kind"] == "ckplan.recommendation"
    assert "measured from disk" in rec["plan"]
    assert rec["recommended_interval_s"] > 0
    return rec


@pytest.fixture(scope="module")
def deepspeed_dir(tmp_path_factory) -> Path:
    """A ZeRO-2, bf16, 4-rank DeepSpeed checkpoint of a small model after one Adam step, as engine.save_checkpoint
    lays it out: rank 0 writes the 16-bit module, every rank its partition of the fp32 master and Adam moments."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(96, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 96)).sum().backward()
    opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    moments = {k: torch.cat([opt.state[p][k].flatten() for p in model.parameters()]) for k in ("exp_avg", "exp_avg_sq")}
    save_dir = tmp_path_factory.mktemp("ds") / "run"
    tag = save_dir / "global_step1"
    tag.mkdir(parents=True)
    torch.save(
        {
            "module": {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()},
            "global_steps": 1,
            "dp_world_size": 4,
            "mp_world_size": 1,
        },
        tag / "mp_rank_00_model_states.pt",
    )
    for rank, part in enumerate(flat.chunk(4)):
        n = part.numel()
        start = rank * flat.chunk(4)[0].numel()
        torch.save(
            {
                "optimizer_state_dict": {
                    "fp32_flat_groups": [part.clone()],
                    "state": {k: v[start : start + n].clone() for k, v in moments.items()},
                },
                "ds_config": {},
                "ds_version": "0.16",
            },
            tag / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt",
        )
    (save_dir / "latest").write_text("global_step1")
    (save_dir / "zero_to_fp32.py").write_text("# DeepSpeed's recovery script\n" * 100)
    (save_dir / "zero_to_torch.py").write_text("# and since 0.19 its second one\n" * 10)
    return save_dir


@pytest.fixture(scope="module")
def dcp_dir(tmp_path_factory) -> Path:
    """A DCP checkpoint saved by 4 ranks of a gloo group (forked after torch is imported, to start quickly); each
    rank holds its own shard of the weights and Adam moments, as FSDP does."""
    pytest.importorskip("torch")
    import multiprocessing

    out = tmp_path_factory.mktemp("dcp") / "step-40"
    rendezvous = out.parent / "rendezvous"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_dcp_rank, args=(rank, 4, str(rendezvous), str(out))) for rank in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    return out


def _dcp_rank(rank: int, world: int, rendezvous: str, out: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    gen = torch.Generator().manual_seed(rank)
    state = {
        f"model.shard{rank}": torch.randn(128 * (rank + 1), 64, generator=gen),
        f"optim.exp_avg.shard{rank}": torch.zeros(128 * (rank + 1), 64),
        f"optim.exp_avg_sq.shard{rank}": torch.zeros(128 * (rank + 1), 64),
    }
    dcp.save(state, checkpoint_id=out)
    dist.destroy_process_group()


def test_deepspeed_checkpoint_written_with_torch(deepspeed_dir, tmp_path):
    """Eight files: `latest`, zero_to_fp32.py and zero_to_torch.py beside the tag, rank 0's model states and four
    optimizer partitions. 4 ranks at 2 per node are 2 nodes; partition R is rank R's."""
    plan = run_json("size", "--from", str(deepspeed_dir), "--gpus-per-node", "2")
    disk = _disk(deepspeed_dir)
    assert len(disk) == 8
    assert plan["file_count"] == 8
    assert plan["total_bytes"] == sum(disk.values())
    assert {f["path"]: f["bytes"] for f in plan["manifest"]} == disk
    s = plan["setup"]
    assert (
        s["framework"],
        s["gpus"],
        s["gpus_per_node"],
        s["nodes"],
        s["dp"],
        s["tp"],
        s["pp"],
        s["zero"],
        s["step"],
    ) == ("deepspeed", 4, 2, 2, 4, 1, 1, 1, 1)
    assert s["precision"] == "bf16-mixed"  # the bf16_ prefix
    assert s["parameters"] is None and plan["parameters"] is None and plan["bytes_per_parameter"] is None
    ranks = _ranks(plan)
    for r in range(4):
        assert ranks[f"global_step1/bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt"] == (r, r // 2)
    for rank0 in ("global_step1/mp_rank_00_model_states.pt", "latest", "zero_to_fp32.py", "zero_to_torch.py"):
        assert ranks[rank0] == (0, 0)
    assert plan["writers"] == 4 and plan["nodes_writing"] == 2 and plan["max_writers_per_node"] == 2
    assert [n["writers"] for n in plan["nodes"]] == [2, 2]
    assert plan["coordinated_save"] is False
    assert plan["assumptions"][0].startswith("measured from disk")
    assert f"{sum(disk.values()):,} bytes" in plan["assumptions"][0]
    _recommend_end_to_end(plan, tmp_path)


def test_dcp_checkpoint_written_by_four_ranks(dcp_dir, tmp_path):
    """torch.distributed.checkpoint.save: one __R_0.distcp per rank and the coordinator's .metadata."""
    plan = run_json("size", "--from", str(dcp_dir), "--gpus-per-node", "2")
    disk = _disk(dcp_dir)
    assert sorted(disk) == [".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp"]
    assert plan["file_count"] == 5
    assert plan["total_bytes"] == sum(disk.values())
    ranks = _ranks(plan)
    assert {p: ranks[f"step-40/{p}"] for p in disk} == {
        ".metadata": (0, 0),
        "__0_0.distcp": (0, 0),
        "__1_0.distcp": (1, 0),
        "__2_0.distcp": (2, 1),
        "__3_0.distcp": (3, 1),
    }
    s = plan["setup"]
    assert (s["framework"], s["gpus"], s["nodes"], s["step"]) == ("dcp", 4, 2, 40)
    assert plan["coordinated_save"] is True and plan["operations"]["renames"] == 1
    # rank 3 holds the largest shard
    assert plan["bytes_per_rank_max"] == disk["__3_0.distcp"]
    _recommend_end_to_end(plan, tmp_path)
    # the plan group's own --from gives the same plan
    direct = run_json("recommend", "--from", str(dcp_dir), "--gpus-per-node", "2", "--storage", "tmpfs")
    assert (
        direct["plan"]
        == run_json("recommend", "--plan", str(tmp_path / "scanned-plan.json"), "--storage", "tmpfs")["plan"]
    )


def test_hf_trainer_output_dir(tmp_path):
    """An HF Trainer output_dir: the newest checkpoint-N is measured; rng_state_R.pth is process R's, the rest the
    main process's. 8 processes at 4 per node are 2 nodes."""
    out = tmp_path / "output"
    _put(out / "checkpoint-500" / "optimizer.pt", 10)  # an older save: left out
    ckpt = out / "checkpoint-1000"
    sizes = {
        "model-00001-of-00002.safetensors": 4_900_000,
        "model-00002-of-00002.safetensors": 1_100_000,
        "model.safetensors.index.json": 24_000,
        "optimizer.pt": 12_000_321,
        "scheduler.pt": 1_465,
        "trainer_state.json": 8_121,
        "training_args.bin": 5_905,
        "config.json": 710,
        "generation_config.json": 180,
        **{f"rng_state_{r}.pth": 14_960 for r in range(8)},
    }
    for name, size in sizes.items():
        _put(ckpt / name, size)
    _put(out / "runs" / "events.out.tfevents", 5000)  # the run's logs: not a save's
    (ckpt / "link.safetensors").symlink_to(ckpt / "config.json")  # not followed, not counted
    plan = run_json("size", "--from", str(out), "--gpus-per-node", "4")
    assert plan["file_count"] == len(sizes) == 17
    assert plan["total_bytes"] == sum(sizes.values()) == sum(os.path.getsize(ckpt / n) for n in sizes)
    s = plan["setup"]
    assert (s["framework"], s["gpus"], s["nodes"], s["step"]) == ("hf", 8, 2, 1000)
    ranks = _ranks(plan)
    assert ranks["checkpoint-1000/rng_state_5.pth"] == (5, 1)
    assert ranks["checkpoint-1000/optimizer.pt"] == (0, 0)
    kinds = {f["path"].split("/")[-1]: f["kind"] for f in plan["manifest"]}
    assert kinds["optimizer.pt"] == "optimizer" and kinds["model-00001-of-00002.safetensors"] == "weights"
    assert kinds["trainer_state.json"] == "small"
    notes = " ".join(plan["assumptions"])
    assert "the newest, checkpoint-1000, is measured" in notes and "left out" in notes and "symlink" in notes


def test_lightning_run_directory(tmp_path):
    """A Lightning run's default_root_dir with a logger: ModelCheckpoint saves into
    lightning_logs/version_0/checkpoints/; with save_top_k=-1 and save_last the older checkpoints stay beside the
    newest and last.ckpt. The newest save (the highest step=N, with last.ckpt) is measured, rank 0's; the logger's
    files and the older checkpoint are left out. DIR = checkpoints/ itself gives the paths under its name, as
    the layout names them."""
    out = tmp_path / "run"
    ckpts = out / "lightning_logs" / "version_0" / "checkpoints"
    _put(ckpts / "epoch=0-step=500.ckpt", 7_040_100)
    newest = _put(ckpts / "epoch=1-step=1000.ckpt", 7_040_200)
    last = _put(ckpts / "last.ckpt", 7_040_200)
    _put(out / "lightning_logs" / "version_0" / "hparams.yaml", 30)
    _put(out / "lightning_logs" / "version_0" / "metrics.csv", 400)
    plan = run_json("size", "--from", str(out), "--gpus", "4", "--gpus-per-node", "2")
    assert {f["path"]: (f["bytes"], f["rank"], f["kind"]) for f in plan["manifest"]} == {
        "lightning_logs/version_0/checkpoints/epoch=1-step=1000.ckpt": (newest, 0, "mixed"),
        "lightning_logs/version_0/checkpoints/last.ckpt": (last, 0, "mixed"),
    }
    s = plan["setup"]
    assert (s["framework"], s["gpus"], s["nodes"], s["step"], s["zero"]) == ("lightning", 4, 2, 1000, 0)
    assert plan["total_bytes"] == newest + last and plan["writers"] == 1
    notes = " ".join(plan["assumptions"])
    assert "holds 2 Lightning checkpoints: the newest" in notes and "3 other files" in notes
    inner = run_json("size", "--from", str(ckpts))
    assert sorted(f["path"] for f in inner["manifest"]) == [
        "checkpoints/epoch=1-step=1000.ckpt",
        "checkpoints/last.ckpt",
    ]


def test_lightning_checkpoints_without_steps(tmp_path):
    """One .ckpt of any name is one save; several whose names give no step cannot be told apart."""
    _put(tmp_path / "one" / "best.ckpt", 1000)
    plan = run_json("size", "--from", str(tmp_path / "one"))
    assert [(f["path"], f["rank"]) for f in plan["manifest"]] == [("one/best.ckpt", 0)]
    assert plan["setup"]["framework"] == "lightning"
    _put(tmp_path / "two" / "best.ckpt", 1000)
    _put(tmp_path / "two" / "other.ckpt", 1000)
    assert_one_line_error(run_cli("size", "--from", str(tmp_path / "two")), "give no step")


def test_hf_trainer_with_deepspeed(tmp_path):
    """HF Trainer under DeepSpeed ZeRO-2: save_model's gathered safetensors from rank 0, engine.save_checkpoint's
    global_stepN/ inside checkpoint-N, one rng_state per process. The ranks agree: 4."""
    ckpt = tmp_path / "checkpoint-20"
    sizes = {
        "model.safetensors": 2_000_000,
        "config.json": 700,
        "training_args.bin": 5_900,
        "latest": 12,
        "zero_to_fp32.py": 38_580,
        "zero_to_torch.py": 2_490,
        "scheduler.pt": 1_500,
        "trainer_state.json": 900,
        "global_step20/mp_rank_00_model_states.pt": 2_004_000,
        **{f"global_step20/bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt": 3_000_000 + r for r in range(4)},
        **{f"rng_state_{r}.pth": 14_960 for r in range(4)},
    }
    for name, size in sizes.items():
        _put(ckpt / name, size)
    plan = run_json("size", "--from", str(ckpt), "--gpus-per-node", "2", "--params", "1e6")
    assert plan["file_count"] == len(sizes)
    assert plan["total_bytes"] == sum(sizes.values())
    s = plan["setup"]
    assert (s["framework"], s["gpus"], s["zero"], s["nodes"]) == ("hf", 4, 1, 2)
    ranks = _ranks(plan)
    assert ranks["checkpoint-20/global_step20/bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt"] == (3, 1)
    assert ranks["checkpoint-20/model.safetensors"] == (0, 0)
    assert plan["parameters"] == 1_000_000 and plan["bytes_per_parameter"] > 0  # --params states the count


def _megatron(tmp_path: Path, tp: int, pp: int) -> tuple[Path, dict[str, int]]:
    save = tmp_path / "megatron"
    sizes = {"latest_checkpointed_iteration.txt": 3}
    for t in range(tp):
        for p in range(pp):
            d = f"iter_0000200/mp_rank_{t:02d}_{p:03d}"
            sizes[f"{d}/model_optim_rng.pt"] = 1_000_000 + 10 * t + p
            sizes[f"{d}/distrib_optim.pt"] = 6_000_000 + 10 * t + p
    for name, size in sizes.items():
        _put(save / name, size)
    _put(save / "iter_0000100" / "mp_rank_00_000" / "model_optim_rng.pt", 7)  # an older save: left out
    return save, sizes


def test_megatron_legacy_iteration(tmp_path):
    """Megatron's torch format: data-parallel rank 0 of each (tp, pp) writes model_optim_rng.pt and, with the
    distributed optimizer, distrib_optim.pt. The names give tp 2 × pp 2 but not the data-parallel size: one
    data-parallel rank without --gpus; with --gpus 16, rank = pp·(dp·tp) + tp, so stage 1 is on node 1."""
    save, sizes = _megatron(tmp_path, 2, 2)
    plan = run_json("size", "--from", str(save))
    assert plan["file_count"] == 9 and plan["total_bytes"] == sum(sizes.values())
    s = plan["setup"]
    assert (s["framework"], s["gpus"], s["tp"], s["pp"], s["dp"], s["step"]) == ("megatron", 4, 2, 2, 1, 200)
    assert plan["coordinated_save"] is False
    assert any("--gpus" in a for a in plan["assumptions"])

    plan = run_json("size", "--from", str(save), "--gpus", "16", "--gpus-per-node", "8")
    ranks = _ranks(plan)
    assert ranks["iter_0000200/mp_rank_01_000/distrib_optim.pt"] == (1, 0)
    assert ranks["iter_0000200/mp_rank_00_001/model_optim_rng.pt"] == (8, 1)
    assert ranks["iter_0000200/mp_rank_01_001/model_optim_rng.pt"] == (9, 1)
    assert ranks["latest_checkpointed_iteration.txt"] == (0, 0)
    assert (plan["setup"]["dp"], plan["writers"], plan["nodes_writing"]) == (4, 4, 2)
    assert_one_line_error(run_cli("size", "--from", str(save), "--gpus", "6"), "not a multiple of the checkpoint's 4")


def test_accelerate_project_directory(tmp_path):
    """Accelerate's automatic naming: project/checkpoints/checkpoint_i/, i counting saves (not steps). One save's
    directory is read, its processes from the random_states names; a directory holding two saves is refused rather
    than summed."""
    for i in (0, 1):
        d = tmp_path / "checkpoints" / f"checkpoint_{i}"
        for name, size in (("model.safetensors", 2_000_000), ("optimizer.bin", 4_000_000), ("scheduler.bin", 1401)):
            _put(d / name, size)
        for r in (0, 1):
            _put(d / f"random_states_{r}.pkl", 14_497)
    plan = run_json("size", "--from", str(tmp_path / "checkpoints" / "checkpoint_1"))
    assert (plan["setup"]["framework"], plan["setup"]["gpus"], plan["setup"]["step"]) == ("accelerate", 2, 0)
    assert _ranks(plan)["random_states_1.pkl"] == (1, 0)
    assert plan["total_bytes"] == 6_001_401 + 2 * 14_497
    for where in (tmp_path, tmp_path / "checkpoints"):
        assert_one_line_error(run_cli("size", "--from", str(where)), "holds more than one save")


def test_accelerate_under_fsdp_is_read_by_its_dcp_files(tmp_path):
    """Under FSDP Accelerate writes DCP directories beside its random_states files: the DCP names read the save
    (its shards, a sharded resume), not Accelerate's DDP layout, which models none of them."""
    d = tmp_path / "checkpoint_0"
    for sub in ("pytorch_model_fsdp_0", "optimizer_0"):
        for r in (0, 1):
            _put(d / sub / f"__{r}_0.distcp", 3_000_000)
        _put(d / sub / ".metadata", 40_000)
    for r in (0, 1):
        _put(d / f"random_states_{r}.pkl", 14_497)
    plan = run_json("size", "--from", str(d))
    assert (plan["setup"]["framework"], plan["setup"]["gpus"]) == ("dcp", 2)
    assert plan["restore"]["rank_bytes"] > 6_000_000  # each rank's own shards, not only its RNG file


def test_megatron_legacy_expert_parallel_directories(tmp_path):
    """mp_rank_TT_PPP_EEE: expert-parallel ranks in the names, with no --ep given. The world is at least tp × pp × ep
    (2 here), written by data-parallel rank 0 of each group: rank order tp, ep, dp, pp puts ep rank e on rank e."""
    for e in (0, 1):
        _put(tmp_path / "iter_0000050" / f"mp_rank_00_000_{e:03d}" / "model_optim_rng.pt", 1000 + e)
    plan = run_json("size", "--from", str(tmp_path / "iter_0000050"))
    s = plan["setup"]
    assert (s["framework"], s["gpus"], s["tp"], s["pp"], s["step"]) == ("megatron", 2, 1, 1, 50)
    assert sorted(_ranks(plan).values()) == [(0, 0), (1, 0)]
    # an --ep the names agree with changes nothing; another is refused with the size the names show
    assert run_json("size", "--from", str(tmp_path / "iter_0000050"), "--ep", "2")["manifest"] == plan["manifest"]
    assert_one_line_error(
        run_cli("size", "--from", str(tmp_path / "iter_0000050"), "--ep", "4"),
        "--ep 4 disagrees with the expert-parallel size 2 the checkpoint's names show",
    )


def test_megatron_torch_dist_iteration(tmp_path):
    """Megatron-Core's torch_dist format (the megatron layout): DCP files in iter_NNNNNNN/, common.pt, metadata.json."""
    it = tmp_path / "iter_0000300"
    sizes = {
        **{f"__{r}_0.distcp": 500_000 + r for r in range(8)},
        ".metadata": 9_000,
        "common.pt": 16_000,
        "metadata.json": 100,
    }
    for name, size in sizes.items():
        _put(it / name, size)
    plan = run_json("size", "--from", str(it))
    assert (plan["setup"]["framework"], plan["setup"]["gpus"], plan["file_count"]) == ("megatron", 8, 11)
    assert plan["total_bytes"] == sum(sizes.values()) and plan["coordinated_save"] is True
    assert _ranks(plan)["iter_0000300/__7_0.distcp"] == (7, 0)


CASES = [  # the layouts' own plans, as a directory of their files would show them
    dict(framework="deepspeed", gpus=16, zero=1),
    dict(framework="deepspeed", gpus=16, zero=3),
    dict(framework="deepspeed", gpus=16, zero=0),
    dict(framework="deepspeed", gpus=32, tp=2, pp=4, zero=1),
    dict(framework="dcp", gpus=16, zero=3),
    dict(framework="megatron", gpus=32, tp=4, pp=2),
    dict(framework="hf", gpus=16, zero=0),
    dict(framework="hf", gpus=16, zero=2),
    dict(framework="lightning", gpus=16, zero=0),
    dict(framework="accelerate", gpus=16, zero=0),
    dict(framework="deepspeed", gpus=16, zero=1, ep=4, model="mixtral-8x7b"),  # --from … --ep 4
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_the_layouts_files_read_back(case):
    """measured_plan reads each layout's file names back to the rank the layout gave the file (ckplan/frameworks/).
    DeepSpeed's pipeline layer files are the exception: their stage is not in the name, and the scan balances the
    stages by bytes (PipelineModule's partition_method='parameters') where the layout splits the blocks evenly."""
    from ckplan import catalog
    from ckplan.sizing.measured import measured_plan
    from ckplan.sizing.plan import build_plan

    case = dict(case)
    planned = build_plan(arch=catalog.model(case.pop("model", "llama-3.1-8b")), gpus_per_node=8, **case)
    # DeepSpeed ZeRO-0 and Lightning do not name the data-parallel ranks: --gpus gives them
    unnamed = case["framework"] == "lightning" or case["framework"] == "deepspeed" and not case["zero"]
    names_say = case["gpus"] if unnamed else None
    measured = measured_plan(
        [(f.path, f.bytes) for f in planned.manifest], source="x", gpus_per_node=8, gpus=names_say, ep=case.get("ep")
    )
    want = {f.path: (f.rank, f.node, f.kind) for f in planned.manifest}
    got = {f.path: (f.rank, f.node, f.kind) for f in measured.manifest}
    layers = {p for p in want if re.search(r"/layer_\d+-model_", p)}  # pipeline layer files, not MoE expert files
    assert {p: got[p] for p in want if p not in layers} == {p: want[p] for p in want if p not in layers}
    assert measured.total_bytes == planned.total_bytes and measured.file_count == planned.file_count
    assert measured.setup.gpus == case["gpus"]
    if layers:
        s = measured.setup
        assert (s.tp, s.pp) == (case["tp"], case["pp"])
        stage_of = {}
        for p in layers:  # contiguous runs of layers per stage, every stage used
            idx, tp = int(p.split("layer_")[1][:2]), int(p.split("-model_")[1][:2])
            stage_of[idx] = (got[p][0] - tp) // (s.dp * s.tp)
        stages = [stage_of[i] for i in sorted(stage_of)]
        assert stages == sorted(stages) and set(stages) == set(range(s.pp))


def test_moe_expert_files_without_ep_stay_on_rank_zero_and_dlio_is_refused():
    """Without --ep a DeepSpeed-MoE save's expert files (their writer's expert-parallel rank is not in the name) go
    to rank 0, as weights, and the plan says so; a wrong --ep and a DLIO save are refused with the reason."""
    from ckplan import catalog
    from ckplan.errors import InputError
    from ckplan.sizing.measured import measured_plan
    from ckplan.sizing.plan import build_plan

    moe = build_plan(arch=catalog.model("mixtral-8x7b"), framework="deepspeed", gpus=16, zero=1, ep=4)
    files = [(f.path, f.bytes) for f in moe.manifest]
    experts = [f for f in moe.manifest if "_expert_" in f.path]
    assert len(experts) == 32 * 8 and {f.rank for f in experts} == {0, 1, 2, 3}  # 32 MoE layers × 8 experts
    measured = measured_plan(files, source="x")
    got = {f.path: (f.rank, f.kind) for f in measured.manifest if "_expert_" in f.path}
    assert set(got.values()) == {(0, "weights")} and len(got) == 256
    assert any("expert-parallel size is not in the names" in a for a in measured.assumptions)
    for ep, fragment in ((3, "must divide the checkpoint's 8 experts"), (16, "at most its 16 data-parallel")):
        with pytest.raises(InputError, match=fragment):
            measured_plan(files, source="x", ep=ep)
    dense = build_plan(arch=catalog.model("llama-3.1-8b"), framework="deepspeed", gpus=16, zero=1)
    with pytest.raises(InputError, match="applies to a DeepSpeed-MoE checkpoint"):
        measured_plan([(f.path, f.bytes) for f in dense.manifest], source="x", ep=4)
    for tp, pp, zero in ((2, 2, 1), (1, 1, 3), (1, 1, 0)):
        dlio = build_plan(arch=catalog.model("llama-3.1-8b"), framework="dlio", gpus=8, tp=tp, pp=pp, zero=zero)
        with pytest.raises(InputError, match="DLIO benchmark checkpoint .*--framework dlio"):
            measured_plan([(f.path, f.bytes) for f in dlio.manifest], source="x")


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda d: _put(d / "notes.txt", 10), "no recognised checkpoint"),
        (lambda d: None, "is empty"),
        (lambda d: (d / "sub").mkdir(), "holds no regular files"),
        (
            lambda d: [_put(d / t / "zero_pp_rank_0_mp_rank_00_optim_states.pt", 5) for t in ("tagA", "tagB")],
            "more than one save",
        ),
        (lambda d: [(d / "global_step1").mkdir(), (d / "iter_0000001").mkdir()], "more than one kind"),
    ],
)
def test_bad_directories_one_line(tmp_path, make, fragment):
    d = tmp_path / "ckpt"
    d.mkdir()
    make(d)
    assert_one_line_error(run_cli("size", "--from", str(d)), fragment)


def test_bad_from_arguments_one_line(deepspeed_dir, dcp_dir, tmp_path):
    a_file = deepspeed_dir / "latest"
    assert_one_line_error(run_cli("size", "--from", str(a_file)), "is a file")
    assert_one_line_error(run_cli("size", "--from", str(tmp_path / "missing")), "no such file")
    assert_one_line_error(run_cli("size", "--from", str(deepspeed_dir), "--framework", "dcp"), "drop --framework")
    assert_one_line_error(
        run_cli("recommend", "--from", str(deepspeed_dir), "--plan", str(a_file)), "give --plan or --from, not both"
    )
    assert_one_line_error(run_cli("size", "--from", str(dcp_dir), "--gpus", "8"), "disagrees with the 4 ranks")


def test_scan_is_bounded(tmp_path, monkeypatch):
    """A directory with more entries than MAX_SCAN_FILES is refused before it is walked further."""
    from ckplan import scan
    from ckplan.errors import InputError

    for i in range(30):
        _put(tmp_path / "d" / f"__{i}_0.distcp", 1)
    monkeypatch.setattr(scan, "MAX_SCAN_FILES", 20)
    with pytest.raises(InputError, match="more than 20 files"):
        scan.scan(tmp_path / "d")
