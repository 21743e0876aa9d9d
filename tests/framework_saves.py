"""Real training runs on CPU whose checkpoints tests/test_framework_oracle.py compares with ckplan's manifests.

Run as a script, one process per rank (torchrun starts the ranks; a single process runs without it):

    python tests/framework_saves.py KIND --config DIR --out DIR [CASE ...]

KIND is hf, lightning, dcp, deepspeed, megatron or accelerate. Each run builds the model from DIR/config.json with
transformers' from_config (no hub: HF_HUB_OFFLINE=1), trains two steps of AdamW on random tokens with gloo on
127.0.0.1 and saves the framework's own way, as a user would. The test sets the environment: the hub cache in its
scratch directory, HF_HUB_OFFLINE=1, DS_ACCELERATOR=cpu.

With CKPLAN_TEST_RECORD=FILE in the environment, every save goes through ckplan.record's adapter for its framework
into FILE, and each rank writes the wall-clock span of the call that saves (around train() or fit() for HF Trainer
and Lightning, whose saves happen inside it) to FILE.wall-RANK as JSON: tests/test_record_frameworks.py bounds each
record by it. With CKPLAN_TEST_LOG=FILE, accelerate's run logs at INFO into FILE with an asctime format, for
`ckplan diagnose` to read.

Writer ranks: run as root, every rank first takes gid OWNER_GID + rank as its group (its uid stays root, so it
reads and writes as before), so the group of each file on disk is the rank that created it, whatever wrote it
(torch.save's C++ writer, safetensors' Rust one, Python's open, a temporary file renamed into place). Not as
root, the files keep one group and the test cannot tell the writers apart.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

OWNER_GID = 20_000  # a rank's files belong to group OWNER_GID + rank
STEPS = 2
SEQUENCE = 16
BATCH = 2
MEGATRON_CPU_REFUSAL = "Torch not compiled with CUDA enabled"
RECORD = os.environ.get("CKPLAN_TEST_RECORD")
LOG = os.environ.get("CKPLAN_TEST_LOG")  # accelerate: its log, at INFO, into this file


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def timed(call):
    """call(), and with RECORD, its wall-clock span in RECORD.wall-RANK."""
    start = time.time()
    result = call()
    end = time.time()
    if RECORD:
        with open(f"{RECORD}.wall-{rank()}", "w") as f:
            json.dump({"start": start, "end": end}, f)
    return result


def own_files_as_rank() -> None:
    if os.geteuid() != 0:
        return
    os.setgroups([])
    os.setgid(OWNER_GID + rank())


def tiny_model(config_dir: str):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config_dir))


def batches(vocab: int, count: int = STEPS):
    import torch

    g = torch.Generator().manual_seed(rank())
    return [torch.randint(0, vocab, (BATCH, SEQUENCE), generator=g) for _ in range(count)]


def run_hf(config_dir: str, out: str, case: str) -> None:
    """HF Trainer: `ddp-bf16` / `ddp-fp32` (plain Trainer; DDP under torchrun), `dsS-PREC[-gather]` (Trainer with
    DeepSpeed ZeRO-S, ZeRO-3 with stage3_gather_16bit_weights_on_model_save when `-gather`)."""
    import torch
    from transformers import Trainer, TrainingArguments

    parts = case.split("-")
    precision = parts[1]
    deepspeed = None
    if parts[0].startswith("ds"):
        stage = int(parts[0][2:])
        deepspeed = {
            "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": "auto",
            "train_batch_size": "auto",
            "zero_optimization": {"stage": stage},
            "zero_allow_untested_optimizer": True,
            "bf16": {"enabled": "auto"},
        }
        if stage == 3:
            deepspeed["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = parts[-1] == "gather"
    model = tiny_model(config_dir)
    vocab = model.config.vocab_size

    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> dict:
            ids = torch.randint(0, vocab, (SEQUENCE,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    args = TrainingArguments(
        output_dir=out,
        max_steps=STEPS,
        save_steps=STEPS,
        save_strategy="steps",
        per_device_train_batch_size=BATCH,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        bf16=precision == "bf16",
        deepspeed=deepspeed,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=Tokens())
    if RECORD:
        from ckplan.record import TrainerRecorder

        trainer.add_callback(TrainerRecorder(trainer, RECORD))
    timed(trainer.train)


def run_lightning(config_dir: str, out: str, case: str) -> None:
    """Lightning: `PRECISION` (bf16-mixed, 32-true), `PRECISION-async` through AsyncCheckpointIO; DDP over the
    torchrun ranks when there are several."""
    import lightning as L
    import torch

    model = tiny_model(config_dir)

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def training_step(self, batch, index):
            return self.model(input_ids=batch, labels=batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    precision, asynchronous = case.removesuffix("-async"), case.endswith("-async")
    plugins = []
    if RECORD:
        from ckplan.record import RecordingCheckpointIO

        plugins.append(RecordingCheckpointIO(RECORD, asynchronous=asynchronous))
    elif asynchronous:
        from lightning.pytorch.plugins.io import AsyncCheckpointIO

        plugins.append(AsyncCheckpointIO())
    trainer = L.Trainer(
        default_root_dir=out,
        accelerator="cpu",
        devices=world,
        strategy="ddp" if world > 1 else "auto",
        precision=precision,
        max_steps=STEPS,
        plugins=plugins,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = torch.utils.data.DataLoader(torch.cat(batches(model.config.vocab_size, 32)), batch_size=BATCH)
    timed(lambda: trainer.fit(Module(), data))


def run_dcp(config_dir: str, out: str, case: str) -> None:
    """torch.distributed.checkpoint of the model and AdamW state (get_state_dict, as torchtitan saves): `ddp`
    (DDP replicas, bf16 autocast) or `fsdp2` (fully_shard per block and at the root, bf16 MixedPrecisionPolicy);
    `ddp-async` saves the DDP case with dcp.async_save and waits for its persist."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    dist.init_process_group("gloo")
    model = tiny_model(config_dir)
    vocab = model.config.vocab_size
    if case.startswith("ddp"):
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in model.model.layers:
            fully_shard(block, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for ids in batches(vocab):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=case.startswith("ddp")):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state, where = {"model": model_state, "optimizer": optimizer_state}, f"{out}/step-{STEPS}"
    if case == "ddp-async":
        if RECORD:
            from ckplan.record import dcp_async_save

            timed(lambda: dcp_async_save(RECORD, state, checkpoint_id=where, step=STEPS).result())
        else:
            dcp.async_save(state, checkpoint_id=where).result()
    elif RECORD:
        from ckplan.record import dcp_save

        timed(lambda: dcp_save(RECORD, state, checkpoint_id=where, step=STEPS))
    else:
        dcp.save(state, checkpoint_id=where)
    dist.barrier()
    dist.destroy_process_group()


def run_accelerate(config_dir: str, out: str, case: str) -> None:
    """Accelerate's save_state after two AdamW steps with an LR scheduler, under DDP on several processes or one
    process: `bf16` (mixed_precision="bf16") or `fp32`; the save goes to checkpoints/checkpoint_0/ by
    ProjectConfiguration's automatic naming."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    if LOG:  # Accelerate's INFO lines with Python logging's asctime, as a training script configures them
        import logging

        logging.basicConfig(filename=LOG, format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level="INFO")
    accelerator = Accelerator(
        cpu=True,
        mixed_precision="bf16" if case == "bf16" else "no",
        project_config=ProjectConfiguration(project_dir=out, automatic_checkpoint_naming=True),
    )
    model = tiny_model(config_dir)
    vocab = model.config.vocab_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    for ids in batches(vocab):
        loss = model(input_ids=ids, labels=ids).loss
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    if RECORD:
        from ckplan.record import record_accelerate

        record_accelerate(accelerator, RECORD, step=lambda: STEPS)
    timed(accelerator.save_state)


def run_deepspeed(config_dir: str, out: str, cases: list[str]) -> None:
    """deepspeed.initialize with AdamW as the client optimizer, then engine.save_checkpoint(out/CASE) for each
    `zS-PREC` case (ZeRO stage S, PREC bf16 or fp32), one after another in the same ranks."""
    import deepspeed
    import torch

    deepspeed.init_distributed(dist_backend="gloo")
    for case in cases:
        stage, precision = int(case[1]), case.split("-")[1]
        model = tiny_model(config_dir)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        config = {
            "train_micro_batch_size_per_gpu": BATCH,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": stage},
            "zero_allow_untested_optimizer": True,
            "bf16": {"enabled": precision == "bf16"},
        }
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        for ids in batches(model.config.vocab_size):
            engine.backward(engine(input_ids=ids, labels=ids).loss)
            engine.step()
        if RECORD:
            from ckplan.record import record_deepspeed

            record_deepspeed(engine, RECORD)
        timed(functools.partial(engine.save_checkpoint, f"{out}/{case}"))
        torch.distributed.barrier()
        del engine, model, optimizer


def run_megatron(config_dir: str, out: str, case: str) -> None:
    """Megatron-Core: the same model as a GPTModel (local layer spec), its DDP and distributed optimizer, then
    dist_checkpointing.save (torch_dist) into out/iter_0000002/ and the tracker file Megatron-LM writes. Where
    megatron-core cannot run on CPU, writes the reason to out/skip.txt instead."""
    import json

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    with open(os.path.join(config_dir, "config.json")) as f:
        hf = json.load(f)
    dist.init_process_group("gloo")
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    ps.initialize_model_parallel(1, 1)
    config = TransformerConfig(
        num_layers=hf["num_hidden_layers"],
        hidden_size=hf["hidden_size"],
        ffn_hidden_size=hf["intermediate_size"],
        num_attention_heads=hf["num_attention_heads"],
        num_query_groups=hf.get("num_key_value_heads"),
        use_cpu_initialization=True,
        gated_linear_unit=True,
        activation_func=F.silu,
        normalization="RMSNorm",
        add_bias_linear=False,
        bf16=case == "bf16",
    )
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
        vocab_size=hf["vocab_size"],
        max_sequence_length=hf["max_position_embeddings"],
        position_embedding_type="rope",
        share_embeddings_and_output_weights=False,
    )
    module = Float16Module(config, model) if case == "bf16" else model
    try:
        ddp = DistributedDataParallel(
            config, DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=True), module
        )
    except AssertionError as exc:
        if MEGATRON_CPU_REFUSAL not in str(exc):
            raise
        if rank() == 0:
            with open(os.path.join(out, "skip.txt"), "w") as f:
                f.write(f"megatron.core.distributed.DistributedDataParallel on CPU: {exc}")
        dist.destroy_process_group()
        return
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-3, bf16=case == "bf16", use_distributed_optimizer=True), [ddp]
    )
    positions = torch.arange(SEQUENCE).unsqueeze(0).expand(BATCH, -1)
    mask = torch.ones(1, 1, SEQUENCE, SEQUENCE, dtype=torch.bool).triu(1)
    for ids in batches(hf["vocab_size"]):
        ddp.zero_grad_buffer()
        optimizer.zero_grad()
        ddp(ids, positions, mask, labels=ids).float().mean().backward()
        ddp.finish_grad_sync()
        optimizer.step()
    state = {"model": model.sharded_state_dict(), "iteration": STEPS, "checkpoint_version": 3.0}
    state["optimizer"] = optimizer.sharded_state_dict(state["model"])
    directory = os.path.join(out, f"iter_{STEPS:07d}")
    os.makedirs(directory, exist_ok=True)
    dist_checkpointing.save(state, directory)
    if rank() == 0:
        with open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(STEPS))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("hf", "lightning", "dcp", "deepspeed", "megatron", "accelerate"))
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("cases", nargs="+")
    args = parser.parse_args()
    own_files_as_rank()
    if args.kind == "deepspeed":
        run_deepspeed(args.config, args.out, args.cases)
    else:
        (case,) = args.cases
        {
            "hf": run_hf,
            "lightning": run_lightning,
            "dcp": run_dcp,
            "megatron": run_megatron,
            "accelerate": run_accelerate,
        }[args.kind](args.config, args.out, case)
    leave_after_every_rank_saved()


def leave_after_every_rank_saved() -> None:
    """Wait for every rank's save, then end without the interpreter's teardown: DeepSpeed's CPU shm_comm op
    leaves a joinable C++ thread that aborts the process at exit now and then ("terminate called without an
    active exception", SIGABRT), after every file is written, which would fail the run for a reason that is not
    the checkpoint's."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
