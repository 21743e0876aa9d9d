"""`ckplan probe --emit-jobs DIR`: every fio run of a probe, as a job file a person can run again.

Each run becomes `NNN-NAME.fio` (multi-host: `NNN-NAME.hostI.fio`), numbered in the order the runs happened: the job
text ckplan gave fio under a comment saying the phase, what the run measures, the profile figure it produced and
where that is in fio's JSON; `run.sh` runs all or some of them again. A single-host probe's scratch directory is
gone when it ends, so its job files name `${CKPLAN_JOB_DIR}` (fio expands environment variables; unset, fio refuses
the job) and run.sh fills it with a fresh `mktemp -d` on the probed target: the same filesystem and an empty
directory, as measured. Multi-host job files make and remove their own directories, so they are emitted as sent.
Runs that are not fio (the calibration, a single-host replay) are a comment in run.sh.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from ckplan.errors import InputError
from ckplan.profile import JobFile

if TYPE_CHECKING:
    from ckplan.probe.engine import RunNote

PLACEHOLDER = "${CKPLAN_JOB_DIR}"
SCRIPT = "run.sh"


def check_dir(path: Path) -> Path:
    """The directory the job files go to: new, or an empty directory, checked before the probe writes a byte."""
    path = path.expanduser()
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise InputError(f"‹emit_jobs› {path} is not a directory: give a new or empty directory for the job files")
        if any(path.iterdir()):
            raise InputError(
                f"‹emit_jobs› {path} is not empty: give a new or empty directory, so that its numbered "
                "job files are this probe's alone"
            )
        if not os.access(path, os.W_OK | os.X_OK):
            raise InputError(f"‹emit_jobs› {path} is not writable by this user")
    else:  # created by the first job file written (JobWriter), so that a refused probe leaves no directory behind
        parent = path.absolute().parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(f"cannot create the ‹emit_jobs› directory {path}: {parent} is not a writable directory")
    return path.absolute()


class JobWriter:
    """Writes each run's job file as it starts (a failed run's too) and rewrites run.sh after each."""

    def __init__(self, directory: Path, about: str, fio_version: str, local_target: Path | None = None):
        self.directory = directory.absolute()
        self.about = about  # "the probe of PATH on HOST"
        self.fio_version = fio_version
        self.local_target = local_target  # single host: where run.sh makes its fresh directory; None: multi-host
        # the probe's scratch directory as written in a job file, replaced by PLACEHOLDER
        self.scratch: str | None = None
        self.jobs: list[JobFile] = []
        self.blocks: list[str] = []
        self.warm_ups: dict[str, str] = {}  # group -> the number of its latest warm-up run

    def record(self, cmd: list[str], texts: dict[str, str], note: RunNote) -> None:
        """One fio run: its command line and the text of each job file it names (a path in cmd → the text)."""
        number = f"{len(self.jobs) + 1:03d}"
        first = next(iter(texts.values()))
        # not the global section, nor a multi-host run's own housekeeping (ckplan-marker, ckplan-cleanup)
        sections = [line.strip()[1:-1] for line in first.splitlines() if line.strip().startswith("[")]
        job = next((s for s in sections if s != "global" and not s.startswith("ckplan-")), "job")
        stem = f"{number}-{note.name or job}"
        multi_host = self.local_target is None
        names = {path: f"{stem}.host{i}.fio" if multi_host else f"{stem}.fio" for i, path in enumerate(texts)}
        hand = ["fio"] + [names.get(arg, arg) for arg in cmd[1:]]
        group = note.group or note.phase
        warm_up = None if note.warm_up else self.warm_ups.get(group)
        if note.warm_up:
            self.warm_ups[group] = number
        for path, text in texts.items():
            if self.scratch:
                text = text.replace(self.scratch, PLACEHOLDER)
            self._write(names[path], self._comment(number, note, cmd, hand, warm_up) + text)
        self.jobs.append(
            JobFile(
                number=int(number),
                files=list(names.values()),
                phase=note.phase,
                figure=note.figure,
                raw_fio=note.raw_fio,
            )
        )
        run = [f"  {shlex.join(hand)} > {stem}.json"]
        if note.count_files_in:
            sub = f'"$dir"/{shlex.quote(note.count_files_in)}'
            run = [f"  mkdir -- {sub}", *run, f"  ls -A -- {sub} | wc -l > {stem}.files", f"  rm -rf -- {sub}"]
        head = [f"# {number}  {note.phase}: {note.figure}", f"if want {number}; then"]
        self.blocks.append("\n".join([*head, f"  echo {shlex.quote(f'{number} {note.phase}')} >&2", *run, "fi"]))
        self._write(SCRIPT, self._script())

    def other(self, phase: str, why: str) -> None:
        """A phase that ran here without fio: a comment in run.sh at its place in the order."""
        self.blocks.append(f"# ({phase} ran here: {why}; it has no fio job file)")
        self._write(SCRIPT, self._script())

    def _comment(self, number: str, note: RunNote, cmd: list[str], hand: list[str], warm_up: str | None) -> str:
        lines = [
            f"ckplan probe --emit-jobs: fio run {number} of {self.about} ({self.fio_version})",
            f"phase:    {note.phase}",
            f"measures: {note.measures}",
            f"figure:   {note.figure}",
            f"read:     {note.read}",
        ]
        if note.raw_fio is not None:
            lines.append(f"          the profile's raw_fio[{note.raw_fio}] holds this run's output")
        if warm_up:
            lines.append(
                f"run first: the warm-up, run {warm_up}, as the probe did (the first runs after other work run "
                f"slow, and its figure was measured after it): `sh run.sh {warm_up} {number}`"
            )
        lines.append(f"ckplan ran: {shlex.join(cmd)}")
        if self.local_target is not None:
            lines += [
                f"directory: {PLACEHOLDER} stands for the probe's scratch directory on the target, removed after "
                "the probe; run.sh makes a fresh one on the same target and removes it afterwards. By hand:",
                f"  mkdir -p DIR && CKPLAN_JOB_DIR=DIR {shlex.join(hand)}",
                "  (DIR on the probed filesystem for the same figure; a ':' in DIR written as '\\:')",
            ]
        else:
            lines += [
                "directory: exactly as ckplan sent it: each host writes under its own directory in the target as the "
                "hosts see it, which fio makes (filename_format) and the last section (ckplan-cleanup) removes;",
                f"  every host runs `ckplan agent` (a fio server). By hand: {shlex.join(hand)}",
            ]
        if note.count_files_in:
            lines.append(
                f"files:    ckplan counts the files in {PLACEHOLDER}/{note.count_files_in} after the run "
                "(fio counts no creates); run.sh writes that count to the run's .files file"
            )
        lines.append("output:   --status-interval=1 prints one JSON document a second; the last one is final")
        return "".join(f"# {line}\n" for line in lines)

    def _script(self) -> str:
        head = [
            "#!/bin/sh",
            f"# Every fio run of {self.about} ({self.fio_version}), in the order they ran.",
            "# Each NNN-*.fio begins with what it measures and the profile figure it produced; the profile's",
            "# measurement.jobs lists the same, with the index of each run's output in raw_fio.",
            "#",
            "#   sh run.sh            every run, in order",
            "#   sh run.sh 005 007    only these runs",
            "# fio's output of run NNN goes to NNN-NAME.json here (the last JSON document in it is the final one).",
        ]
        if self.local_target is not None:
            head += [
                "#",
                "# The probe wrote in a fresh scratch directory on the target, removed after it; the job files name it",
                f"# {PLACEHOLDER}. This script makes a fresh directory on the same target (mktemp -d) and removes it at",
                "# the end: the same filesystem, and an empty directory, as the probe had. To write elsewhere:",
                "#   CKPLAN_JOB_DIR=/some/dir sh run.sh 005    (made if missing, and kept)",
            ]
        head += [
            "set -eu",
            'cd "$(dirname "$0")"',
            'only=" $* "',
            'want() { [ "$only" = "  " ] || case "$only" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }',
            f'[ "$(fio --version)" = {shlex.quote(self.fio_version)} ] || '
            f'echo "run.sh: warning: this is $(fio --version); the probe ran {self.fio_version}" >&2',
        ]
        if self.local_target is not None:
            head += [
                'if [ -n "${CKPLAN_JOB_DIR:-}" ]; then',
                "  dir=$CKPLAN_JOB_DIR",
                '  mkdir -p -- "$dir"',
                "else",
                f"  dir=$(mktemp -d {shlex.quote(str(self.local_target / 'ckplan-jobs.XXXXXX'))})",
                "  trap 'rm -rf -- \"$dir\"' EXIT",
                "  trap 'exit 130' INT TERM",
                "fi",
                "case $dir in *[';#']*) echo \"run.sh: fio cannot take ';' or '#' in a path: $dir\" >&2; exit 2 ;; esac",
                "# fio splits a directory at ':': escape it (and '\\'), as ckplan does",
                "CKPLAN_JOB_DIR=$(printf '%s\\n' \"$dir\" | sed -e 's/\\\\/\\\\\\\\/g' -e 's/:/\\\\:/g')",
                "export CKPLAN_JOB_DIR",
            ]
        return "\n".join(head + [""] + self.blocks) + "\n"

    def _write(self, name: str, text: str) -> None:
        try:  # the directory is made here, not when the probe is prepared: nothing is left if it is refused
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create the ‹emit_jobs› directory {self.directory}: {exc.strerror}") from None
        try:
            (self.directory / name).write_text(text)
        except OSError as exc:
            raise InputError(f"cannot write {self.directory / name} (‹emit_jobs›): {exc.strerror}") from None
