"""Hugging Face Accelerate's `Accelerator.save_state` (accelerate/checkpointing.py save_accelerator_state), under
DDP or on one process.

- One directory per save: the one given, or `checkpoints/checkpoint_{i}/` with ProjectConfiguration's
  automatic_checkpoint_naming (its i counts saves; the manifest names it by step).
- `model.safetensors`: the unwrapped module's state dict with safetensors (safe_serialization, the default), by
  the main process; `optimizer.bin` (the optimizer's state_dict) and `scheduler.bin` with torch.save, by the main
  process (save_on_each_node=False, the default).
- `random_states_{process_index}.pkl`: each process's RNG states, with torch.save.
- The module's parameters are what is saved: fp32 under mixed_precision="bf16" (autocast keeps no half copy).

Under FSDP Accelerate writes DCP directories (`pytorch_model_fsdp_0/`, `optimizer_0/`) instead; that is not
modelled here: accelerate 1.16 runs FSDP only on accelerators (state.py sets DistributedType.FSDP for GPU-like
distributed types; on CPU it runs MULTI_CPU and drops the plugin), so no FSDP save could be checked on this CPU.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath

from ckplan.errors import InputError
from ckplan.frameworks.framework import Framework, Saver
from ckplan.frameworks.hf import SAFETENSORS_HEADER_PER_TENSOR_BYTES
from ckplan.frameworks.layout import (
    RNG_STATE_BYTES,
    SCHEDULER_BYTES,
    BufferedWriter,
    LayoutInput,
    ManifestFile,
    Parallelism,
    Read,
    RestoreReads,
    ZeroShown,
    every_rank,
    file_name,
    fp32_copy_only,
    not_read_note,
    own_rank,
    torch_save_bytes,
    total,
)
from ckplan.frameworks.logs import DirectorySpan
from ckplan.frameworks.names import Named, ProcessFile, WorldPart, process_ranks, process_world
from ckplan.model.states import StateBytes

# read whole by every process in load_state (checkpointing.py load_accelerator_state), beside its own RNG file
EVERY_PROCESS_READS = ("model.safetensors", "optimizer.bin", "scheduler.bin")


class AccelerateLayout(BufferedWriter):
    name = "accelerate"
    description = "Hugging Face Accelerate save_state (model.safetensors, optimizer.bin, random_states_i.pkl)"
    default_zero = 0  # DDP
    shows_zero_stage: ZeroShown = "never"

    def check(self, par: Parallelism) -> None:
        if par.zero != 0 or par.tp > 1 or par.pp > 1:
            raise InputError(
                "the accelerate layout models save_state under DDP (‹zero› 0, ‹tp› 1, ‹pp› 1); its FSDP directories "
                "are not modelled: use ‹framework› dcp for a sharded save"
            )

    def persisted(self, states: list[StateBytes], zero: int, options: dict[str, str] | None = None) -> list[StateBytes]:
        return fp32_copy_only(states)

    def files(self, inp: LayoutInput) -> list[ManifestFile]:
        d = f"checkpoints/checkpoint_{inp.step}"
        saved = self.persisted(inp.states(inp.tensors), 0)
        weights = inp.scaled(total(saved, ("weights", "master")))
        optimizer = inp.scaled(total(saved, ("optimizer",)))
        tensors = len(inp.tensors)
        main = [
            ("model.safetensors", weights + SAFETENSORS_HEADER_PER_TENSOR_BYTES * tensors, "weights"),
            ("optimizer.bin", int(torch_save_bytes(optimizer, 2 * tensors)), "optimizer"),
            ("scheduler.bin", SCHEDULER_BYTES, "small"),
        ]
        out = [ManifestFile(path=f"{d}/{name}", bytes=b, rank=0, node=0, kind=k) for name, b, k in main]
        par = inp.par
        return out + [
            ManifestFile(
                path=f"{d}/random_states_{r}.pkl", bytes=RNG_STATE_BYTES, rank=r, node=par.node(r), kind="small"
            )
            for r in range(par.gpus)
        ]

    def restore(self, par: Parallelism, manifest: list[ManifestFile]) -> RestoreReads:
        """load_state on every process: the model, optimizer and scheduler files whole, and its own RNG states."""
        reads, unread = [], []
        for f in manifest:
            name = file_name(f.path)
            if name in EVERY_PROCESS_READS:
                reads.append(Read(f.path, f.bytes, every_rank(par)))
            elif RANDOM_STATES.fullmatch(name):
                reads.append(Read(f.path, f.bytes, own_rank(f.rank)))
            else:
                unread.append(f.path)
        return RestoreReads(reads, not_read_note(unread, "load_state does not open them"))


# What `size --from` reads back (frameworks/names.py): `random_states_{i}.pkl` by process i, the rest by the main
# process; model.safetensors is read by the names of HF Trainer, which writes one too.
RANDOM_STATES = re.compile(r"random_states_(\d+)\.pkl")


class RandomStates(ProcessFile):
    def once(self) -> str | None:
        return self.name  # checkpoints/checkpoint_0/ beside checkpoint_1/: two saves


class AccelerateNames:
    looks_like = "Accelerate (random_states_R.pkl)"
    step_dirs: tuple[str, ...] = ()  # checkpoint_{i} counts saves, not steps
    siblings: tuple[str, ...] = ()
    ep_files: str | None = None

    def read(self, path: PurePosixPath, size: int) -> Named | None:
        if m := RANDOM_STATES.fullmatch(path.name):
            return RandomStates(path=str(path), bytes=size, process=int(m[1]))
        return None

    def recognises(self, files: Sequence[Named], source: str) -> bool:
        # under FSDP or DeepSpeed Accelerate writes random_states beside DCP's or DeepSpeed's files, whose own names
        # read them (this layout does not model those saves)
        ours = any(isinstance(f, RandomStates) for f in files)
        return ours and not any(f.names_writer and not isinstance(f, RandomStates) for f in files)

    def world(self, files: Sequence[Named], ep: int | None) -> WorldPart | None:
        return process_world(files, RandomStates, "Accelerate", "random_states_R.pkl")

    def ranks(self, files: Sequence[Named], par: Parallelism, ep: int | None) -> list[str]:
        return process_ranks(files, RandomStates)


# Accelerate (accelerator.py save_state, checkpointing.py), through Python logging with a "%(asctime)s" format
# ("YYYY-mm-dd HH:MM:SS,mmm") at INFO: from "Saving current state to DIR" to the last timestamped line that names DIR,
# the main process's "Random states saved in DIR/random_states_0.pkl"; custom objects registered for checkpointing
# log only where their save begins, so theirs is not counted.
class Accelerate(DirectorySpan):
    name = "accelerate"
    marker = "Saving current state to"
    needles = (marker.encode(),)
    start = re.compile(r"Saving current state to (\S+)")


FRAMEWORK = Framework(
    AccelerateLayout(),
    AccelerateNames(),
    Saver("safetensors", "safetensors.torch.save_file model + torch.save optimizer/scheduler/RNG"),
    (Accelerate,),
    recorders=("record_accelerate",),
)
