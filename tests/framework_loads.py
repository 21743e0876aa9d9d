"""Real resumes on CPU from the saves of tests/framework_saves.py, for tests/test_restore_oracle.py.

Run as a script, one process per rank (torchrun starts the ranks), each rank under strace (the test wraps it):

    python tests/framework_loads.py KIND --config DIR --out DIR CASE

KIND is hf, lightning, dcp, deepspeed or accelerate; CASE is the framework_saves.py case whose save in DIR is resumed, the way a
user resumes: HF Trainer's train(resume_from_checkpoint=True) for one more step, Lightning's fit(ckpt_path=…) for one
more step, dcp.load of the model and AdamW state, DeepSpeed's engine.load_checkpoint, Accelerate's load_state. Nothing is saved.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.framework_saves import BATCH, SEQUENCE, STEPS, batches, leave_after_every_rank_saved, tiny_model  # noqa: E402


def load_hf(config_dir: str, out: str, case: str) -> None:
    """Trainer under DDP (`ddp-fp32`, `ddp-bf16`): its own resume, one step past the save."""
    import torch
    from transformers import Trainer, TrainingArguments

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
        max_steps=STEPS + 1,
        save_strategy="no",
        per_device_train_batch_size=BATCH,
        report_to=[],
        use_cpu=True,
        bf16=case.endswith("bf16"),
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    Trainer(model=model, args=args, train_dataset=Tokens()).train(resume_from_checkpoint=True)


def load_lightning(config_dir: str, out: str, case: str) -> None:
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
    trainer = L.Trainer(
        default_root_dir=out,
        accelerator="cpu",
        devices=world,
        strategy="ddp" if world > 1 else "auto",
        precision=case,
        max_steps=STEPS + 1,
        enable_checkpointing=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = torch.utils.data.DataLoader(torch.cat(batches(model.config.vocab_size, 32)), batch_size=BATCH)
    (ckpt,) = Path(out, "checkpoints").glob("*.ckpt")
    trainer.fit(Module(), data, ckpt_path=str(ckpt))


def load_dcp(config_dir: str, out: str, case: str) -> None:
    """dcp.load into the state of a fresh model and AdamW, wrapped as the save was (`ddp` or `fsdp2`)."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    dist.init_process_group("gloo")
    model = tiny_model(config_dir)
    if case == "ddp":
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
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=f"{out}/step-{STEPS}")
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def load_deepspeed(config_dir: str, out: str, case: str) -> None:
    """engine.load_checkpoint(out/CASE) after deepspeed.initialize with the save's config (`zS-PREC`)."""
    import deepspeed
    import torch

    deepspeed.init_distributed(dist_backend="gloo")
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
    path, _ = engine.load_checkpoint(f"{out}/{case}")
    assert path is not None, "DeepSpeed found no checkpoint"


def load_accelerate(config_dir: str, out: str, case: str) -> None:
    """Accelerator.load_state of the newest save under out/checkpoints, into a fresh model, AdamW and scheduler
    prepared as the save's were (`bf16` or `fp32`)."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    accelerator = Accelerator(
        cpu=True,
        mixed_precision="bf16" if case == "bf16" else "no",
        project_config=ProjectConfiguration(project_dir=out, automatic_checkpoint_naming=True),
    )
    model = tiny_model(config_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    accelerator.prepare(model, optimizer, scheduler)
    accelerator.load_state()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("hf", "lightning", "dcp", "deepspeed", "accelerate"))
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("case")
    args = parser.parse_args()
    loads = {
        "hf": load_hf,
        "lightning": load_lightning,
        "dcp": load_dcp,
        "deepspeed": load_deepspeed,
        "accelerate": load_accelerate,
    }
    loads[args.kind](args.config, args.out, args.case)
    leave_after_every_rank_saved()


if __name__ == "__main__":
    main()
