"""The interface every framework layout implements, and what layouts share.

A layout answers two questions for one framework: which states it persists
(some frameworks keep only the fp32 copy of the weights) and which files a
save produces, with the rank that writes each one.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import Field, computed_field

from ckplan.model.architecture import Tensor
from ckplan.model.states import StateBytes
from ckplan.schema import Int, Model
from ckplan.units import MAX_BYTES as MAX_FILE_BYTES

FileKind = Literal["weights", "optimizer", "mixed", "small"]

# Sizes of the small files, measured from real saves or read from the
# frameworks' source; each is an estimate and is listed as an assumption.
RNG_STATE_BYTES = 15_000  # torch.save of python/numpy/cpu/cuda RNG states (HF rng_state_{i}.pth is ~14.5 KB)
SCHEDULER_BYTES = 1_500  # torch.save of an LR scheduler state_dict
TRAINER_STATE_BYTES = 8_000  # HF trainer_state.json early in a run; grows with log history
TRAINING_ARGS_BYTES = 6_000  # HF training_args.bin
CONFIG_JSON_BYTES = 1_000  # config.json / generation_config.json / metadata.json
LATEST_TAG_BYTES = 16  # 'latest', 'latest_checkpointed_iteration.txt'
TORCH_SAVE_OVERHEAD_BYTES = 4_096  # pickle header and per-file records of a torch.save zip
TORCH_SAVE_PER_TENSOR_BYTES = 300  # per-tensor pickle record and zip entry in a torch.save file
# DeepSpeed copies its recovery scripts beside `latest` at each ZeRO save (engine._copy_recovery_script); the
# sizes of deepspeed/utils/zero_to_fp32.py and zero_to_torch.py in DeepSpeed 0.19.8
ZERO_TO_FP32_SCRIPT_BYTES = 38_580
ZERO_TO_TORCH_SCRIPT_BYTES = 2_490
DCP_METADATA_PER_CHUNK_BYTES = 250  # one chunk entry (offsets, sizes, storage index) in DCP .metadata
SAFETENSORS_INDEX_PER_TENSOR_BYTES = 60  # one '"name": "model-0000x-of-0000n.safetensors"' line


FileFormat = Literal["torch.save", "safetensors", "dcp", "raw"]

# How a writer's bytes reach the target: through the page cache with an fsync at the end (torch.save, DCP's
# FileSystemWriter, safetensors), or with O_DIRECT (DeepSpeed FastPersist). They sustain different rates.
WritePath = Literal["buffered", "direct"]

# When a plan's one-line description names the ZeRO stage: "always" where the stage shapes the files (DeepSpeed,
# DCP/FSDP, Megatron's distributed optimizer, DLIO), "nonzero" where a stage means the framework runs under DeepSpeed
# (HF Trainer), "never" where there is none (Lightning's one torch.save file).
ZeroShown = Literal["always", "nonzero", "never"]


def file_format(path: str) -> FileFormat:
    """How a file's bytes are produced: torch.save's zip (CRC32 over every record), safetensors, DCP's
    .distcp (FileSystemWriter torch.saves each tensor into the stream, torch 2.x `_write_item`), or raw
    writes (JSON and text files)."""
    if path.endswith((".pt", ".pth", ".ckpt", ".bin")):
        return "torch.save"
    if path.endswith(".safetensors"):
        return "safetensors"
    if path.endswith(".distcp"):
        return "dcp"
    return "raw"


MAX_PATH_BYTES = 4096  # PATH_MAX on Linux
MAX_NAME_BYTES = 255  # NAME_MAX: one component


# a relative path of components of 1-255 characters without '/' or control characters, none of them '.' or '..'
_PLAIN_PATH = re.compile(r"(?!\.\.?(?:/|$))[^/\x00-\x1f\x7f]{1,255}(?:/(?!\.\.?(?:/|$))[^/\x00-\x1f\x7f]{1,255})*")


def manifest_path_error(path: str) -> str | None:
    """Why `path` cannot name a file of a save, or None. A save's files live under its checkpoint directory, so
    a path is relative, with no empty, `.` or `..` component, no control or format character (they break fio's
    job files, and terminals show a bidi override's name reversed) and within Linux's length limits: a plan file
    that arrives from elsewhere cannot name a file outside the directory ckplan writes into. Every writer checks
    the resolved path again (ckplan.confine)."""
    if path.isascii() and len(path) <= MAX_PATH_BYTES and _PLAIN_PATH.fullmatch(path):
        return None  # the common case, checked in one match: a plan may list a million files
    if not path:
        return "is empty"
    if path.startswith("/"):
        return "is absolute: a save's files are relative to its directory"
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in path):  # C0, DEL, C1; bidi and zero-width marks
        return "holds a control or format character"
    if len(path.encode()) > MAX_PATH_BYTES:
        return f"is longer than {MAX_PATH_BYTES} bytes"
    for part in path.split("/"):
        if not part:
            return "has an empty component (a doubled or trailing '/')"
        if part in (".", ".."):
            return f"has a {part!r} component: give a normalised relative path"
        if len(part.encode()) > MAX_NAME_BYTES:
            return f"has a component longer than {MAX_NAME_BYTES} bytes"
    return None


class ManifestFile(Model):
    path: str
    bytes: Int = Field(ge=0, le=MAX_FILE_BYTES)  # bounded so that a hand-edited plan file is refused where it is read
    rank: Int = Field(ge=0)
    node: Int = Field(ge=0)
    kind: FileKind
    # its path is checked with the plan's other rules (CheckpointPlan._consistent_manifest), in one pass

    @computed_field  # type: ignore[prop-decorator]
    @property
    def format(self) -> FileFormat:
        return file_format(self.path)


@dataclass(frozen=True, slots=True)
class Parallelism:
    """World layout. Rank order: tensor-parallel fastest, then data, then pipeline (Megatron's default).

    Expert parallelism (ep) is carved out of the data-parallel ranks, as Megatron-Core (order tp-cp-ep-dp-pp),
    torchtitan (the dp_shard_in_ep mesh dimension) and DeepSpeed-MoE (its default E+D groups) do: an EP group is
    `ep` consecutive data-parallel ranks, so EP rank = dp rank mod ep and expert-data-parallel rank = dp rank div
    ep; the experts are split into `ep` contiguous blocks, expert e on EP rank e div (experts / ep).
    """

    gpus: int
    gpus_per_node: int
    tp: int
    pp: int
    zero: int
    ep: int = 1

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)

    @property
    def edp(self) -> int:
        """Expert-data-parallel size: the replicas of one EP rank's experts."""
        return self.dp // self.ep

    @property
    def mp(self) -> int:
        return self.tp * self.pp

    def rank(self, pp: int, dp: int, tp: int) -> int:
        return pp * (self.dp * self.tp) + dp * self.tp + tp

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node


@dataclass(frozen=True, slots=True)
class LayoutInput:
    """What a layout needs: the world, the model's tensors, and a state-bytes function."""

    par: Parallelism
    tensors: list[Tensor]
    states: StatesFn
    scale: float  # bytes multiplier when the model is known only by its parameter count
    step: int
    options: dict[str, str]

    def stage_tensors(self) -> list[list[Tensor]]:
        """Tensors of each pipeline stage: embeddings first, head last, blocks split evenly."""
        layers = 1 + max(t.layer for t in self.tensors if t.layer is not None)
        bounds = split_even(layers, self.par.pp)
        stage_of_layer: list[int] = []
        for stage, count in enumerate(bounds):
            stage_of_layer += [stage] * count
        stages: list[list[Tensor]] = [[] for _ in range(self.par.pp)]
        for t in self.tensors:
            if t.layer is not None:
                stages[stage_of_layer[t.layer]].append(t)
            elif t.role == "embedding":
                stages[0].append(t)
            else:
                stages[-1].append(t)
        return stages

    def scaled(self, nbytes: float) -> int:
        return int(round(nbytes * self.scale))


@dataclass(frozen=True, slots=True)
class Readers:
    """The ranks start, start + step, … (count of them) that read one file on resume. One progression says every
    rank, a rank alone, or the data-parallel replicas of a model-parallel rank, without listing them."""

    start: int
    step: int
    count: int

    def __contains__(self, rank: int) -> bool:
        offset = rank - self.start
        return offset >= 0 and offset % self.step == 0 and offset // self.step < self.count


@dataclass(frozen=True, slots=True)
class Read:
    """One file a resume reads whole, by `readers`, each reading it `times` (HF Trainer reads trainer_state.json
    twice)."""

    path: str
    bytes: int
    readers: Readers
    times: int = 1


@dataclass(frozen=True, slots=True)
class RestoreReads:
    """What the ranks of a resume read, from a save's files; `notes` say which files no rank reads and why. `reads`
    None: the layout cannot say for these files, and `notes` say why."""

    reads: list[Read] | None
    notes: list[str]


def every_rank(par: Parallelism) -> Readers:
    return Readers(0, 1, par.gpus)


def own_rank(rank: int) -> Readers:
    return Readers(rank, 1, 1)


def dp_replicas(par: Parallelism, writer: int, ep: int = 1) -> Readers:
    """The data-parallel ranks sharing the writer's (pipeline stage, tensor rank): rank(stage, dp, tp) for every
    dp, or every ep-th dp when the file holds one expert-parallel rank's experts."""
    return Readers(writer, par.tp * ep, par.dp // ep)


def file_name(path: str) -> str:
    return path[path.rfind("/") + 1 :]


def not_read_note(paths: list[str], why: str) -> list[str]:
    """A note naming the files of a save that a resume does not read (their names, each once)."""
    if not paths:
        return []
    names = sorted({file_name(p) for p in paths})
    shown = ", ".join(names[:6]) + (", …" if len(names) > 6 else "")
    return [f"not read on resume ({why}): {len(paths):,} file(s), {shown}"]


class StatesFn(Protocol):
    def __call__(self, tensors: list[Tensor]) -> list[StateBytes]: ...


class Layout(Protocol):
    name: str
    description: str
    # a collective save whose ranks plan, gather and barrier together (DCP): a fixed cost per save
    coordinated_save: bool
    shows_zero_stage: ZeroShown

    def write_path(self, options: dict[str, str]) -> WritePath:
        """How this framework's writer reaches the target, with the layout options given."""

    def check(self, par: Parallelism) -> None:
        """Raise InputError for a parallelism this framework cannot run."""

    def persisted(self, states: list[StateBytes], zero: int, options: dict[str, str] | None = None) -> list[StateBytes]:
        """The states this framework writes, out of all the states training holds (a state written twice,
        as HF Trainer's gathered weights beside DeepSpeed's, is listed twice)."""

    def files(self, inp: LayoutInput) -> list[ManifestFile]:
        """Every file of one save, with the rank that writes it."""

    def restore(self, par: Parallelism, manifest: list[ManifestFile]) -> RestoreReads:
        """What every rank reads on resume from the save of `manifest` (a sized plan's or one measured from disk),
        by the framework's load path (docs/restore-reads.md)."""

    # what most frameworks do, in LayoutDefaults; a layout states only where it differs
    options: tuple[str, ...]  # the --option names the layout reads
    rank_order: str  # how the framework numbers its ranks
    supports_ep: bool  # the framework shards experts over --ep ranks
    default_zero: int  # the ZeRO stage when none is given
    renames_per_save: int  # renames one save does (DCP: .metadata.tmp -> .metadata)
    # where a checkpoint's file names leave the resume open (`size --from`), the ZeRO stage its restore is read at
    # and the note that says so; None: the names tell
    measured_restore_zero: int | None
    measured_restore_note: str

    def fp32_master(self, zero: int) -> bool:
        """Whether training in fp32 still keeps an fp32 master copy of the weights (DeepSpeed's ZeRO optimizers
        copy them into flat fp32 partitions; torch's optimizers step the module's own parameters)."""

    def check_options(self, par: Parallelism, options: dict[str, str]) -> None:
        """Raise InputError for options this parallelism cannot take."""

    def notes(self, par: Parallelism, options: dict[str, str]) -> list[str]:
        """Framework facts for the plan's assumptions."""


class LayoutDefaults:
    """What a layout does unless it says otherwise: the base of every layout."""

    coordinated_save = False
    options: tuple[str, ...] = ()
    rank_order = "tp, dp, pp"
    supports_ep = False
    default_zero = 1
    renames_per_save = 0
    measured_restore_zero: int | None = None
    measured_restore_note = ""

    def fp32_master(self, zero: int) -> bool:
        return False

    def check_options(self, par: Parallelism, options: dict[str, str]) -> None:
        return None

    def notes(self, par: Parallelism, options: dict[str, str]) -> list[str]:
        return []


class BufferedWriter(LayoutDefaults):
    """For layouts whose writer is torch.save, DCP's FileSystemWriter or safetensors: the page cache, fsync at the end."""

    def write_path(self, options: dict[str, str]) -> WritePath:
        return "buffered"


def split_even(total: int, parts: int) -> list[int]:
    """Split an integer into `parts` integers that differ by at most one and sum to `total`."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def fp32_copy_only(states: list[StateBytes]) -> list[StateBytes]:
    """Drop half-precision weights when an fp32 master exists.

    Under torch AMP and FSDP mixed precision the module's own parameters are the
    fp32 copy; the half copy only lives during forward/backward and is not saved.
    """
    if any(s.kind == "master" for s in states):
        return [s for s in states if s.kind != "weights"]
    return states


def total(states: list[StateBytes], kinds: tuple[str, ...] = ("weights", "master", "optimizer")) -> int:
    return sum(s.bytes for s in states if s.kind in kinds)


def torch_save_bytes(payload: float, tensor_count: int) -> float:
    """Size of a torch.save file: tensor payload plus the pickle/zip records."""
    return payload + TORCH_SAVE_OVERHEAD_BYTES + TORCH_SAVE_PER_TENSOR_BYTES * tensor_count
