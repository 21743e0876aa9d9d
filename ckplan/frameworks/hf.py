"""Hugging Face Trainer (transformers Trainer._save_checkpoint), under DDP (--zero 0) or DeepSpeed (--zero 1-3).

Under DDP:
- `checkpoint-{N}/` with the model as safetensors shards
  `model-{i:05d}-of-{n:05d}.safetensors` split greedily by tensor at
  max_shard_size (5 GB in transformers 4.x; v5 raised it to 50 GB: override
  with --option hf_shard_size=50GB) and `model.safetensors.index.json`;
  a single `model.safetensors` when it fits in one shard.
- `optimizer.pt`, `scheduler.pt`, `trainer_state.json`, `training_args.bin`,
  `config.json`, `generation_config.json`: written by the main process.
- `rng_state_{i}.pth`, one per process (`rng_state.pth` for one process).
- The module's parameters are what is saved: fp32 under AMP (bf16=True).

Under DeepSpeed (the Trainer's `deepspeed=` config), read from transformers' trainer.py:
- save_model: `accelerator.get_state_dict(engine)` gathers the engine's 16-bit module weights and
  the main process writes them with save_pretrained: the same safetensors shards, index,
  config.json, generation_config.json and training_args.bin. Under ZeRO-3 the gather happens only
  with `stage3_gather_16bit_weights_on_model_save` (--option gather_16bit=true; DeepSpeed's default
  is false). Without it get_state_dict raises, Trainer writes the config files with an empty state
  dict, deletes the empty weights file and calls engine.save_checkpoint(checkpoint-N) instead.
- _save_optimizer_and_scheduler: engine.save_checkpoint(checkpoint-N) on every rank, DeepSpeed's
  own layout (`latest`, zero_to_fp32.py, zero_to_torch.py, `global_step{N}/`): the deepspeed layout's files, reused.
  No optimizer.pt. `scheduler.pt` is written when the LR scheduler is the Trainer's own (a
  DeepSpeed config without optimizer/scheduler sections, as TRL's and LLaMA-Factory's are).
- rng_state_{i}.pth per process and trainer_state.json, as under DDP.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from ckplan.errors import InputError
from ckplan.frameworks.deepspeed import DeepSpeedLayout
from ckplan.frameworks.framework import Framework, Saver
from ckplan.frameworks.layout import (
    CONFIG_JSON_BYTES,
    RNG_STATE_BYTES,
    SAFETENSORS_INDEX_PER_TENSOR_BYTES,
    SCHEDULER_BYTES,
    TRAINER_STATE_BYTES,
    TRAINING_ARGS_BYTES,
    BufferedWriter,
    FileKind,
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
from ckplan.units import parse_bytes

DEFAULT_SHARD_BYTES = 5 * 10**9
SAFETENSORS_HEADER_PER_TENSOR_BYTES = 120  # JSON header entry: dtype, shape, data_offsets
GATHERED = "gathered_weights"  # the 16-bit model rank 0 gathers from DeepSpeed and writes as safetensors
BOOLEANS = {"true": True, "false": False}
# read whole by every rank on a DDP resume, beside the safetensors shards
DDP_READS = ("model.safetensors.index.json", "config.json", "optimizer.pt", "pytorch_model.bin")


class HfLayout(BufferedWriter):
    name = "hf"
    default_zero = 0  # plain Trainer under DDP; --zero 1-3 is Trainer with DeepSpeed
    shows_zero_stage: ZeroShown = "nonzero"
    description = "Hugging Face Trainer (safetensors shards, optimizer.pt, rng_state_i.pth)"
    # --option hf_shard_size=50GB: Trainer's max_shard_size; gather_16bit: ZeRO-3's stage3_gather_16bit_weights_on_model_save
    options: tuple[str, ...] = ("hf_shard_size", "gather_16bit")
    deepspeed = DeepSpeedLayout()

    def fp32_master(self, zero: int) -> bool:
        return self.deepspeed.fp32_master(zero)  # under DDP the optimizer steps the module's own parameters

    def check(self, par: Parallelism) -> None:
        if par.tp > 1 or par.pp > 1:
            raise InputError(
                "the hf layout models Trainer under DDP (‹zero› 0) or DeepSpeed ZeRO (‹zero› 1-3), data "
                "parallel only (‹tp› 1, ‹pp› 1); with Megatron or FSDP use ‹framework› megatron or dcp"
            )

    def check_options(self, par: Parallelism, options: dict[str, str]) -> None:
        if "gather_16bit" in options:
            if par.zero != 3:
                raise InputError(
                    "‹options› gather_16bit= is DeepSpeed ZeRO-3's stage3_gather_16bit_weights_on_model_save: "
                    f"it needs ‹zero› 3 (ZeRO-{par.zero} always gathers the 16-bit model)"
                )
            self._gather(options)

    def _gather(self, options: dict[str, str]) -> bool:
        value = options.get("gather_16bit", "false").lower()
        if value not in BOOLEANS:
            raise InputError(f"‹options› gather_16bit= takes true or false, got {options['gather_16bit']!r}")
        return BOOLEANS[value]

    def _writes_gathered(self, zero: int, options: dict[str, str]) -> bool:
        return 0 < zero < 3 or (zero == 3 and self._gather(options))

    def persisted(self, states: list[StateBytes], zero: int, options: dict[str, str] | None = None) -> list[StateBytes]:
        if zero == 0:
            return fp32_copy_only(states)
        saved = self.deepspeed.persisted(states, zero)
        if self._writes_gathered(zero, options or {}):
            saved = saved + [s.model_copy(update={"name": GATHERED}) for s in states if s.kind == "weights"]
        return saved

    def notes(self, par: Parallelism, options: dict[str, str]) -> list[str]:
        if par.zero == 0:
            return []
        trainer = f"HF Trainer + DeepSpeed ZeRO-{par.zero}: "
        if self._writes_gathered(par.zero, options):
            return [
                trainer + "rank 0 writes the model gathered to 16 bits as safetensors shards (Trainer.save_model), "
                "then every rank writes DeepSpeed's checkpoint-N/global_stepN/ (engine.save_checkpoint in "
                "_save_optimizer_and_scheduler); no optimizer.pt"
            ]
        return [
            trainer + "without stage3_gather_16bit_weights_on_model_save (DeepSpeed's default; --option "
            "gather_16bit=true to change) no model safetensors are written: Trainer.save_model calls "
            "engine.save_checkpoint instead, and _save_optimizer_and_scheduler calls it again, so the "
            "global_stepN/ files are written twice per save (transformers issue 34534); the manifest lists them once"
        ]

    def files(self, inp: LayoutInput) -> list[ManifestFile]:
        if inp.par.zero == 0:
            return self._ddp_files(inp)
        return self._deepspeed_files(inp)

    def restore(self, par: Parallelism, manifest: list[ManifestFile]) -> RestoreReads:
        """Trainer's resume on every rank (docs/restore-reads.md §1-2): trainer_state.json twice (train and
        _get_epochs_trained…: trainer.py:1580,1712), the rank's own rng_state_{rank}.pth (:3899-3919), scheduler.pt
        (:4039-4042); under DDP also config.json (:3714), the model's safetensors and their index
        (:3740,3783) and optimizer.pt (:4019-4037), each whole on every rank; under DeepSpeed, only
        engine.load_checkpoint's files instead (:1578,1846-1850; integrations/deepspeed.py:682-703)."""
        if any(f.path.endswith(".distcp") for f in manifest):
            return RestoreReads(
                None, ["HF Trainer under FSDP (accelerate's DCP directories): its resume reads are not modelled"]
            )
        deepspeed = [f for f in manifest if "/global_step" in f"/{f.path}" or file_name(f.path) == "latest"]
        engine = {f.path for f in deepspeed}
        reads, unread = self.deepspeed.load_checkpoint(par, deepspeed) if deepspeed else ([], [])
        for f in manifest:
            name = file_name(f.path)
            if name in ("trainer_state.json", "scheduler.pt", "scaler.pt") or (
                not deepspeed and (name in DDP_READS or name.endswith(".safetensors"))
            ):
                times = 2 if name == "trainer_state.json" else 1
                reads.append(Read(f.path, f.bytes, every_rank(par), times))
            elif RNG_STATE.fullmatch(name):
                reads.append(Read(f.path, f.bytes, own_rank(f.rank)))
            elif f.path not in engine:
                unread.append(f.path)
        return RestoreReads(reads, not_read_note(unread, "Trainer's resume does not open them"))

    def _shards(self, inp: LayoutInput, weight_kind: str) -> list[tuple[str, int, str]]:
        """save_pretrained's safetensors shards of the `weight_kind` state, and the index when there are several."""
        shard_limit = parse_bytes(inp.options.get("hf_shard_size", DEFAULT_SHARD_BYTES), "--option hf_shard_size")
        shards: list[list[int]] = [[0, 0]]  # [payload bytes, tensor count]
        for t in inp.tensors:
            size = inp.scaled(total(inp.states([t]), (weight_kind,)))
            if shards[-1][1] and shards[-1][0] + size > shard_limit:
                shards.append([0, 0])
            shards[-1][0] += size
            shards[-1][1] += 1
        n = len(shards)
        files = []
        for i, (payload, count) in enumerate(shards):
            name = "model.safetensors" if n == 1 else f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            files.append((name, payload + SAFETENSORS_HEADER_PER_TENSOR_BYTES * count, "weights"))
        if n > 1:
            files.append(
                ("model.safetensors.index.json", SAFETENSORS_INDEX_PER_TENSOR_BYTES * len(inp.tensors), "small")
            )
        return files

    def _rng_files(self, inp: LayoutInput, d: str) -> list[ManifestFile]:
        par = inp.par
        out = []
        for rank in range(par.gpus):
            name = "rng_state.pth" if par.gpus == 1 else f"rng_state_{rank}.pth"
            out.append(
                ManifestFile(path=f"{d}/{name}", bytes=RNG_STATE_BYTES, rank=rank, node=par.node(rank), kind="small")
            )
        return out

    def _ddp_files(self, inp: LayoutInput) -> list[ManifestFile]:
        d = f"checkpoint-{inp.step}"
        weight_kind = "master" if any(s.kind == "master" for s in inp.states(inp.tensors[:1])) else "weights"
        files = self._shards(inp, weight_kind)
        optim = total(self.persisted(inp.states(inp.tensors), 0), ("optimizer",))
        files += [
            ("optimizer.pt", inp.scaled(optim) + int(torch_save_bytes(0, 2 * len(inp.tensors))), "optimizer"),
            ("scheduler.pt", SCHEDULER_BYTES, "small"),
            ("trainer_state.json", TRAINER_STATE_BYTES, "small"),
            ("training_args.bin", TRAINING_ARGS_BYTES, "small"),
            ("config.json", CONFIG_JSON_BYTES, "small"),
            ("generation_config.json", CONFIG_JSON_BYTES // 5, "small"),
        ]
        out = [ManifestFile(path=f"{d}/{name}", bytes=b, rank=0, node=0, kind=k) for name, b, k in files]
        return out + self._rng_files(inp, d)

    def _deepspeed_files(self, inp: LayoutInput) -> list[ManifestFile]:
        """In _save_checkpoint's order: save_model (rank 0), engine.save_checkpoint (every rank), scheduler.pt,
        the RNG states (every rank), trainer_state.json."""
        d = f"checkpoint-{inp.step}"
        files = self._shards(inp, "weights") if self._writes_gathered(inp.par.zero, inp.options) else []
        files += [
            ("config.json", CONFIG_JSON_BYTES, "small"),
            ("generation_config.json", CONFIG_JSON_BYTES // 5, "small"),
            ("training_args.bin", TRAINING_ARGS_BYTES, "small"),
        ]
        out = [ManifestFile(path=f"{d}/{name}", bytes=b, rank=0, node=0, kind=k) for name, b, k in files]
        out += self.deepspeed.save_checkpoint(inp, d)
        out.append(ManifestFile(path=f"{d}/scheduler.pt", bytes=SCHEDULER_BYTES, rank=0, node=0, kind="small"))
        out += self._rng_files(inp, d)
        out.append(
            ManifestFile(path=f"{d}/trainer_state.json", bytes=TRAINER_STATE_BYTES, rank=0, node=0, kind="small")
        )
        return out


# What `size --from` reads back (frameworks/names.py): `rng_state_{rank}.pth` by each process (`rng_state.pth` for
# one); the rest by the main process; with DeepSpeed a `global_stepN/` inside, with FSDP (accelerate) DCP
# directories inside, each read by its own framework's names.
RNG_STATE = re.compile(r"rng_state(?:_(\d+))?\.pth")
TRAINER_FILES = ("trainer_state.json", "optimizer.pt", "scheduler.pt", "training_args.bin")
SMALL_TRAINER_FILES = ("scheduler.pt", "training_args.bin")


class RngState(ProcessFile):
    """rng_state_{rank}.pth (rng_state.pth for one process)."""


@dataclass(kw_only=True)
class TrainerFile(Named):
    """A file the main process writes: the state, optimizer, scheduler and arguments, the weights."""

    def kind(self, par: Parallelism) -> FileKind:
        return "small" if self.name in SMALL_TRAINER_FILES else super().kind(par)


class HfNames:
    looks_like = "HF Trainer (checkpoint-N/)"
    step_dirs: tuple[str, ...] = ("checkpoint-",)
    siblings: tuple[str, ...] = ()
    ep_files: str | None = None

    def read(self, path: PurePosixPath, size: int) -> Named | None:
        name = path.name
        if m := RNG_STATE.fullmatch(name):
            return RngState(path=str(path), bytes=size, process=int(m[1]) if m[1] is not None else 0)
        weights = name.endswith(".safetensors") or (name.startswith("pytorch_model") and name.endswith(".bin"))
        if name in TRAINER_FILES or weights:
            return TrainerFile(path=str(path), bytes=size)
        return None

    def recognises(self, files: Sequence[Named], source: str) -> bool:
        # Trainer's checkpoint-N/, holding DeepSpeed's or DCP's files when it runs under them
        return any(isinstance(f, (RngState, TrainerFile)) for f in files)

    def world(self, files: Sequence[Named], ep: int | None) -> WorldPart | None:
        return process_world(files, RngState, "HF Trainer", "rng_state_R.pth")

    def ranks(self, files: Sequence[Named], par: Parallelism, ep: int | None) -> list[str]:
        return process_ranks(files, RngState)


# Hugging Face Trainer ("[INFO|trainer.py:N] YYYY-mm-dd HH:MM:SS,mmm >> ..."): from "Saving model checkpoint to
# DIR" to the last timestamped line that names DIR. Trainer prints no end marker, so this is a lower bound.
class HfTrainer(DirectorySpan):
    name = "hf"
    marker = "Saving model checkpoint to"
    needles = (marker.encode(),)
    start = re.compile(r"Saving model checkpoint to (\S+)")


FRAMEWORK = Framework(
    HfLayout(),
    HfNames(),
    Saver("safetensors", "safetensors.torch.save_file shards + torch.save optimizer/RNG"),
    (HfTrainer,),
    recorders=("TrainerRecorder",),
)
