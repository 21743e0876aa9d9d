"""PyTorch Lightning's default checkpoint: one torch.save file from rank 0.

`epoch={e}-step={N}.ckpt` under `checkpoints/` holds the module's state_dict
(fp32 under AMP), optimizer and scheduler states, loops and callbacks. Applies
to single-device and DDP strategies; Lightning's FSDP strategy writes a DCP
directory and its DeepSpeed strategy writes DeepSpeed's layout.
"""

from __future__ import annotations

from ckplan.errors import InputError
from ckplan.sizing.layouts.base import (
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
    fp32_copy_only,
    not_read_note,
    torch_save_bytes,
    total,
)
from ckplan.sizing.states import StateBytes


class LightningLayout(BufferedWriter):
    name = "lightning"
    description = "PyTorch Lightning ModelCheckpoint (one .ckpt via torch.save, rank 0)"
    shows_zero_stage: ZeroShown = "never"
    default_zero = 0  # one stage: no sharding

    def check(self, par: Parallelism) -> None:
        if par.zero or par.tp > 1 or par.pp > 1:
            raise InputError(
                "the lightning layout is one torch.save file (DDP: ‹zero› 0, ‹tp› 1, ‹pp› 1); "
                "Lightning's FSDP strategy writes DCP (‹framework› dcp), its DeepSpeed strategy DeepSpeed's layout"
            )

    def persisted(self, states: list[StateBytes], zero: int, options: dict[str, str] | None = None) -> list[StateBytes]:
        return fp32_copy_only(states)

    def restore(self, par: Parallelism, manifest: list[ManifestFile]) -> RestoreReads:
        """Every rank torch.loads the whole .ckpt before setup and restores the optimizer, loops and callbacks from
        that dict (checkpoint_connector.py:67-84, strategy.py:366-368, torch_io.py:61-91, trainer.py:1044-1046)."""
        reads = [Read(f.path, f.bytes, every_rank(par)) for f in manifest if f.path.endswith(".ckpt")]
        unread = [f.path for f in manifest if not f.path.endswith(".ckpt")]
        return RestoreReads(reads, not_read_note(unread, "Lightning resumes from the one .ckpt"))

    def files(self, inp: LayoutInput) -> list[ManifestFile]:
        states = self.persisted(inp.states(inp.tensors), 0)
        payload = inp.scaled(total(states)) + SCHEDULER_BYTES + RNG_STATE_BYTES
        size = int(torch_save_bytes(payload, len(inp.tensors) * len(states)))
        return [
            ManifestFile(path=f"checkpoints/epoch=0-step={inp.step}.ckpt", bytes=size, rank=0, node=0, kind="mixed")
        ]
