"""`ckplan size --from DIR`: an existing checkpoint directory's files and sizes, made into a plan.

This module reads the directory (os.scandir, one stat per file) and never a file's contents; the plan is
made from the (path, bytes) pairs by sizing.measured, which reads them with each framework's names
(ckplan/frameworks/).

- DIR may be one checkpoint (`global_stepN/`, `checkpoint-N/`, `iter_NNNNNNN/`, `step-N/`, or a directory of
  any name holding DCP or DeepSpeed files), or the directory a run saves into. There, the newest checkpoint
  directory is measured, with the files a save writes beside it (DeepSpeed's `latest` and `zero_to_fp32.py`,
  Megatron's `latest_checkpointed_iteration.txt`); other entries are left out, and the plan says so.
- Lightning saves a checkpoint as one file, `*.ckpt`, in ModelCheckpoint's directory (`checkpoints/`, or
  `lightning_logs/version_N/checkpoints/` with a logger): DIR may be that directory or any directory above it
  (the run's default_root_dir). The newest checkpoint (the highest `step=N` in its name, with a `last*.ckpt`
  beside it) is measured; the run's other files (hparams.yaml, metrics, other checkpoints) are left out.
- Paths in the plan are relative to DIR, led by DIR's own name when DIR is a checkpoint directory, as the
  layouts name them (`global_step1000/…`, `checkpoints/epoch=0-step=1000.ckpt`).
- Symlinks are not followed and not counted. The walk is bounded: at most MAX_SCAN_FILES entries and
  MAX_SCAN_DEPTH levels, past which it stops with one line.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ckplan.errors import InputError
from ckplan.frameworks import FRAMEWORKS, SAVE_SIBLINGS, STEP_DIR
from ckplan.sizing.measured import measured_plan
from ckplan.sizing.plan import MAX_MANIFEST_FILES, CheckpointPlan

# A directory holding more files than a plan may list (sizing.plan.MAX_MANIFEST_FILES) is not one checkpoint.
MAX_SCAN_FILES = MAX_MANIFEST_FILES
MAX_SCAN_DEPTH = 16  # a checkpoint nests 3 or 4 levels (checkpoint-N/global_stepN/…, iter_N/mp_rank_XX/…)


def scan_plan(
    directory: Path,
    *,
    gpus_per_node: int | None = None,
    gpus: int | None = None,
    parameters: int | None = None,
    ep: int | None = None,
) -> CheckpointPlan:
    """The plan of the checkpoint saved in `directory`, measured from its files' names and sizes."""
    files, notes = scan(directory)
    return measured_plan(
        files,
        source=os.path.abspath(os.path.expanduser(directory)),
        gpus_per_node=gpus_per_node,
        gpus=gpus,
        parameters=parameters,
        ep=ep,
        notes=notes,
    )


def scan(directory: Path) -> tuple[list[tuple[str, int]], list[str]]:
    """(path relative to the scan, bytes) of every regular file of one checkpoint in `directory`, and notes."""
    path = Path(os.path.expanduser(directory))
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputError(f"cannot read ‹from_dir› {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        what = "a file" if stat.S_ISREG(st.st_mode) else "not a directory"
        raise InputError(f"‹from_dir› {path} is {what}: give the checkpoint's directory")
    walk = _Walk(path)
    top = walk.entries(path)
    if not top:
        raise InputError(f"‹from_dir› {path} is empty")
    name = Path(os.path.abspath(path)).name
    if STEP_DIR.fullmatch(name):
        for entry in top:  # DIR is one checkpoint: its entries, already read, under its own name
            walk.entry(entry, name, 1)
        return walk.done()
    steps = {e: m for e in top if (m := STEP_DIR.fullmatch(e.name)) and e.is_dir(follow_symlinks=False)}
    candidates = list(steps)
    if not candidates:
        for entry in top:
            walk.entry(entry, "", 1)
        files, notes = walk.done()
        return _newest_loose_save(files, notes, name, path)
    kinds = sorted({m[1] for m in steps.values()})
    if len(kinds) > 1:
        raise InputError(
            f"‹from_dir› {path} holds checkpoints of more than one kind ({', '.join(k + 'N' for k in kinds)}): "
            "give the directory of one checkpoint"
        )
    chosen = max(candidates, key=lambda e: int(steps[e][2]))
    walk.tree(Path(chosen.path), chosen.name, 1)
    siblings = [e for e in top if e.name in SAVE_SIBLINGS and e.is_file(follow_symlinks=False)]
    for entry in siblings:
        walk.entry(entry, "", 1)
    left = len(top) - len(siblings) - len(candidates)
    if len(candidates) > 1:
        walk.notes.append(f"{path} holds {len(candidates)} checkpoints: the newest, {chosen.name}, is measured")
    if left:
        walk.notes.append(f"{left} other entr{'y' if left == 1 else 'ies'} in {path} left out: not part of a save")
    return walk.done()


def _newest_loose_save(
    files: list[tuple[str, int]], notes: list[str], name: str, path: Path
) -> tuple[list[tuple[str, int]], list[str]]:
    """The newest save among a run's loose checkpoint files (Lightning's .ckpt), as the first framework that keeps
    its saves so finds it; else the files as they are."""
    for fw in FRAMEWORKS.values():
        if fw.newest_save is not None and (found := fw.newest_save(files, notes, name, str(path))) is not None:
            return found
    return files, notes


class _Walk:
    """A bounded walk that does not follow symlinks: regular files and their sizes, and what it skipped."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: list[tuple[str, int]] = []
        self.visited = 0
        self.skipped = 0
        self.notes: list[str] = []

    def entries(self, directory: Path | str) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(directory) as it:
                out = []
                for entry in it:
                    self.visited += 1
                    if self.visited > MAX_SCAN_FILES:
                        raise InputError(
                            f"‹from_dir› {self.root} holds more than {MAX_SCAN_FILES:,} files and "
                            "directories: give the directory of one checkpoint"
                        )
                    out.append(entry)
                return sorted(out, key=lambda e: e.name)
        except OSError as exc:
            raise InputError(f"cannot read {directory}: {exc.strerror}") from None

    def tree(self, directory: Path | str, prefix: str, depth: int) -> None:
        if depth > MAX_SCAN_DEPTH:
            raise InputError(
                f"‹from_dir› {self.root} nests directories more than {MAX_SCAN_DEPTH} levels deep: "
                "give the directory of one checkpoint"
            )
        for entry in self.entries(directory):
            self.entry(entry, prefix, depth)

    def entry(self, entry: os.DirEntry[str], prefix: str, depth: int) -> None:
        rel = f"{prefix}/{entry.name}" if prefix else entry.name
        try:
            if entry.is_dir(follow_symlinks=False):
                self.tree(entry.path, rel, depth + 1)
            elif entry.is_file(follow_symlinks=False):
                self.files.append((rel, entry.stat(follow_symlinks=False).st_size))
            else:
                self.skipped += 1  # symlinks, FIFOs, sockets, devices: a save writes none of them
        except OSError as exc:
            raise InputError(f"cannot read {entry.path}: {exc.strerror}") from None

    def done(self) -> tuple[list[tuple[str, int]], list[str]]:
        if not self.files:
            raise InputError(f"‹from_dir› {self.root} holds no regular files")
        if self.skipped:
            self.notes.append(f"{self.skipped} symlink(s) or special file(s) left out: a save writes regular files")
        return self.files, self.notes
