"""What reaches the terminal: text from a file (a profile's name, a plan's model, a log's or a host list's name)
is shown with its control characters visible and never read as rich markup; a stdout that is closed, or whose
encoding lacks ckplan's non-ASCII characters, is no internal error. The CLI runs as a user runs it: the installed
script in a subprocess, on files written here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from ckplan.terminal import FALLBACK, ascii_char, visible
from tests.conftest import FIXTURES, ckplan_exe, run_cli

# every trick at once: clear the screen, retitle the window (OSC ended by BEL), return to the line's start,
# backspace, a C1 CSI, a right-to-left override, rich markup and a link, an emoji code
HOSTILE = "evil\x1b[2J\x1b]0;title\x07\r\b\x9b\u202e[bold red]x[/] [link=http://e.example]y[/link] :warning:"
# what each part must show as
SHOWN = [
    "\\x1b[2J",
    "\\x1b]0;title\\x07",
    "\\r",
    "\\x08",
    "\\x9b",
    "\\u202e",
    "[bold red]x[/]",
    "[link=http://e.example]y[/link]",
    ":warning:",
]


def raw_controls(text: str) -> list[str]:
    """Every character of `text` that a terminal would act on or hide: controls but the newline, format
    characters, surrogates, line and paragraph separators."""
    return [c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")]


def assert_shown(text: str) -> None:
    assert raw_controls(text) == [], raw_controls(text)
    for part in SHOWN:
        assert part in text, (part, text)


def nfs_profile(**fields) -> dict:
    from ckplan import catalog

    return {**json.loads(catalog.storage_classes()["nfs"].model_dump_json()), **fields}


def plan_doc() -> dict:
    from ckplan import catalog
    from ckplan.sizing.plan import build_plan

    return json.loads(build_plan(arch=catalog.model("llama-3.1-8b"), model_name="llama-3.1-8b").model_dump_json())


def test_visible_escapes_what_acts_on_a_terminal_and_keeps_the_rest():
    assert visible("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert visible("\x1b]0;t\x07") == "\\x1b]0;t\\x07"
    assert visible("a\rb\nc\td\b\x7f\x9b") == "a\\rb\\nc\\td\\x08\\x7f\\x9b"
    assert visible("\u202eabc\u2066\u200b\ufeff") == "\\u202eabc\\u2066\\u200b\\ufeff"
    assert visible("line\u2028para\u2029") == "line\\u2028para\\u2029"
    assert visible("bad\udcffname") == "bad\\udcffname"  # a file name's undecodable byte
    assert visible("\U000e0001tag") == "\\U000e0001tag"
    for fine in ("plain", "C:\\path\\x1b", "größe 中文 ×µ‹› ≥ 😀", "[bold]x[/]", "", "a b"):
        assert visible(fine) == fine


def test_ascii_fallback_spells_ckplans_characters():
    assert [ascii_char(c) for c in "×µ‹›≥…—é─│┏"] == ["x", "u", "<", ">", ">=", "...", "--", "e", "-", "|", "+"]
    assert ascii_char("½") == "\\xbd" and ascii_char("中") == "\\u4e2d"  # no ASCII spelling: the escape
    assert "≥ 1 µs, ½".encode("ascii", FALLBACK) == b">= 1 us, \\xbd"


def test_a_hostile_profile_prints_as_written(tmp_path):
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(nfs_profile(name=HOSTILE, notes=[f"note {HOSTILE}"])))
    proc = run_cli("recommend", "--params", "7e9", "--storage", str(profile), check=True)
    assert_shown(proc.stdout)
    assert f"OK on {visible(HOSTILE)} (nfs, sync)" in proc.stdout.replace("\n", " ")
    assert "[bold red]" not in proc.stderr and proc.stderr == ""
    # --json stays exact: JSON's own escapes carry every character back
    assert (
        json.loads(run_cli("recommend", "--params", "7e9", "--storage", str(profile), "--json").stdout)["storage"]
        == HOSTILE
    )


def test_profiles_shows_a_saved_profile_and_its_file_name_escaped(tmp_path):
    saved = tmp_path / "cfg" / "ckplan" / "profiles"
    saved.mkdir(parents=True)
    (saved / "mine\x1b[2J\u202e.json").write_text(json.dumps(nfs_profile(name="p\x1b]0;t\x07\r[red]x[/]")))
    # a relative XDG_CONFIG_HOME keeps the path short enough for its column
    proc = run_cli("profiles", cwd=tmp_path, env={"XDG_CONFIG_HOME": "cfg"}, check=True)
    assert raw_controls(proc.stdout) == []
    assert "cfg/ckplan/profiles/mine\\x1b[2J\\u202e.json" in proc.stdout
    assert "│ p\\x1b]0;t\\x07\\r[red]x[/] │" in proc.stdout


@pytest.mark.parametrize("command", [["recommend"], ["recommend", "--storage", "nfs"]])
def test_a_hostile_plan_prints_as_written(tmp_path, command):
    doc = plan_doc()
    doc["setup"]["model"] = HOSTILE
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    proc = run_cli(*command, "--plan", str(plan), check=True)
    assert_shown(proc.stdout)
    assert proc.stdout.startswith(visible(HOSTILE) + " ("), proc.stdout[:200]


def _one_error_line(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    assert proc.returncode == code, proc.stderr
    assert raw_controls(proc.stderr) == [], proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckplan: error: "), proc.stderr
    return lines[0]


def test_an_error_line_shows_a_file_name_escaped(tmp_path):
    """A file name with an escape sequence and a newline: the error stays one line, the name visible in it."""
    plan = tmp_path / "bad\x1b[2J\n\u202e.json"
    plan.write_text("{")
    line = _one_error_line(run_cli("recommend", "--plan", str(plan), "--json"))
    assert f"plan {tmp_path}/bad\\x1b[2J\\n\\u202e.json is not valid JSON" in line, line


def test_diagnose_of_hostile_logs(tmp_path):
    log = tmp_path / "job\x1b]0;title\x07\u202e.log"
    log.write_text((FIXTURES / "logs" / "torchtitan.log").read_text() + "junk \x1b[2J\r line\n")
    proc = run_cli("diagnose", str(log), check=True)
    assert raw_controls(proc.stdout) == [] and "3 saves in 1 log(s)" in proc.stdout
    missing = tmp_path / "gone\x1b[2J.log"
    line = _one_error_line(run_cli("diagnose", str(missing)))
    assert line == f"ckplan: error: cannot read log {tmp_path}/gone\\x1b[2J.log: No such file or directory"


def test_diagnose_of_a_record_file_with_hostile_names(tmp_path):
    from ckplan.record import SaveRecord

    def record(step: int, seconds: float) -> str:
        start = 1e9 + step
        return SaveRecord(
            framework="dcp",
            step=step,
            rank=0,
            world_size=1,
            host=HOSTILE,
            mode="sync",
            start=start,
            end=start + seconds,
            seconds=seconds,
            blocking_seconds=seconds,
            path=f"/ckpt/{HOSTILE}",
            counted="directory",
            bytes=1000,
            files=2,
        ).model_dump_json()

    good = tmp_path / "records\x1b[2J.jsonl"
    good.write_text(f"{record(1, 10.0)}\n{record(2, 11.0)}\n")
    proc = run_cli("diagnose", str(good), check=True)
    assert raw_controls(proc.stdout) == [] and "2 step(s), 2 save records (dcp)" in proc.stdout
    bad = tmp_path / "bad\x1b]0;t\x07.jsonl"
    bad.write_text(record(1, 10.0).replace('"mode":"sync"', '"mode":"\\u001b[2J"') + "\n")
    line = _one_error_line(run_cli("diagnose", str(bad)))
    assert f"{tmp_path}/bad\\x1b]0;t\\x07.jsonl:1: not a ckplan.save-record version 1 line: mode:" in line, line


def test_a_hostile_hosts_file_is_refused_in_one_visible_line(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    hosts = tmp_path / "hosts\x1b[2J.txt"
    hosts.write_text("good1\nnode\x1b]0;t\x07\u202e:8765\n")
    line = _one_error_line(run_cli("probe", str(target), "--hosts-file", str(hosts), "--json"))
    assert "--hosts-file line 2: bad host list 'node\\x1b]0;t\\x07\\u202e:8765'" in line, line
    line = _one_error_line(run_cli("probe", str(target), "--hosts-file", str(tmp_path / "gone\x1b[2J"), "--json"))
    assert f"cannot read --hosts-file {tmp_path}/gone\\x1b[2J: No such file or directory" in line, line


class _Bug(Exception):
    pass


def test_internal_error_line_is_escaped(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise _Bug("\x1b[2Jboom\x07")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("CKPLAN_DEBUG", raising=False)
    monkeypatch.setattr("ckplan.planning.recommend.compare", broken)
    monkeypatch.setattr(sys, "argv", ["ckplan", "recommend", "--json"])
    from ckplan.cli.app import main

    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 1
    assert capsys.readouterr().err.splitlines() == [
        "ckplan: internal error: _Bug: \\x1b[2Jboom\\x07 (rerun with --debug for the traceback)"
    ]


# stdout and the encoding


def _run(argv: list[str], cwd: Path, env: dict[str, str | None] | None = None, **kw) -> subprocess.CompletedProcess:
    full = {**os.environ, "NO_COLOR": "1", "XDG_CONFIG_HOME": str(cwd / "config")}
    for key, value in (env or {}).items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    return subprocess.run(ckplan_exe() + argv, cwd=cwd, env=full, timeout=120, **kw)


def _close(fd: int):
    return lambda: os.close(fd)


_OUTPUTS = [
    ["size"],
    ["size", "--json"],
    ["models"],
    ["recommend", "--json"],
    ["diagnose", str(FIXTURES / "logs" / "torchtitan.log")],
    ["--help"],
    ["--version"],
]


@pytest.mark.parametrize("argv", _OUTPUTS, ids=" ".join)
def test_a_closed_stdout_is_one_line_exit_3(tmp_path, argv):
    """`ckplan size >&-`: the output cannot be written, as on a full disk."""
    proc = _run(argv, tmp_path, stderr=subprocess.PIPE, text=True, preexec_fn=_close(1))
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.splitlines() == [
        "ckplan: error: cannot write the output to stdout: it is not open (Bad file descriptor)"
    ]


def test_a_closed_stderr_keeps_the_error_off_stdout(tmp_path):
    """`ckplan size --params -5 --json 2>&-`: the error line has nowhere to go, and stdout stays empty."""
    proc = _run(["size", "--params", "-5", "--json"], tmp_path, stdout=subprocess.PIPE, text=True, preexec_fn=_close(2))
    assert (proc.returncode, proc.stdout) == (2, "")


def test_a_closed_descriptor_is_not_taken_by_the_next_file(tmp_path):
    """With 0 and 1 closed, the next file opened would take 0 (and the one after, 1), and what a child such as fio
    writes to its stdout would land in it: they are held on /dev/null first."""
    code = (
        "import os, sys; from ckplan.cli.app import _open_standard_descriptors; _open_standard_descriptors(); "
        "fd = os.open('f', os.O_CREAT | os.O_WRONLY); print(fd, os.path.realpath('/proc/self/fd/1'), file=sys.stderr)"
    )

    def close_both() -> None:
        os.close(0)
        os.close(1)

    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, stderr=subprocess.PIPE, text=True, timeout=60, preexec_fn=close_both
    )
    assert proc.returncode == 0, proc.stderr
    fd, stdout = proc.stderr.split()
    assert int(fd) > 2 and stdout == os.devnull


ASCII_ENVS = {
    "PYTHONIOENCODING=ascii": {"PYTHONIOENCODING": "ascii"},
    "LC_ALL=C PYTHONUTF8=0": {"LC_ALL": "C", "LANG": None, "PYTHONUTF8": "0", "PYTHONIOENCODING": None},
}
_TABLES = [
    ["size"],
    ["models"],
    ["recommend"],
    ["recommend", "--storage", "nfs"],
    ["profiles"],
    ["provision", "--gpus", "8"],
    ["--help"],
]


@pytest.mark.parametrize("env", list(ASCII_ENVS), ids=str)
@pytest.mark.parametrize("argv", _TABLES, ids=" ".join)
def test_an_ascii_terminal_gets_the_tables_in_ascii(tmp_path, env, argv):
    proc = _run(argv, tmp_path, ASCII_ENVS[env], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.isascii() and proc.stderr == b""
    assert len(proc.stdout) > 500


def test_size_in_ascii_is_the_utf8_table_spelt_in_ascii(tmp_path):
    """Same lines, each as wide (the columns stay aligned), the ASCII ones identical; boxes drawn in ASCII."""
    utf8 = _run(["size"], tmp_path, capture_output=True, text=True, encoding="utf-8").stdout.splitlines()
    ascii_ = _run(["size"], tmp_path, {"PYTHONIOENCODING": "ascii"}, capture_output=True, text=True).stdout.splitlines()
    assert "┃ state" in "\n".join(utf8) and "| state" in "\n".join(ascii_)
    assert len(ascii_) == len(utf8) > 40
    assert [len(line) for line in ascii_] == [len(line) for line in utf8]
    assert [a for a, u in zip(ascii_, utf8, strict=True) if u.isascii()] == [u for u in utf8 if u.isascii()]
    assert ascii_[0] == utf8[0].replace(" · ", " - ") and " · " in utf8[0]


def test_json_in_ascii_is_the_same_document(tmp_path):
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(nfs_profile(name="größe ≥ \u202e 😀")))
    argv = ["recommend", "--storage", str(profile), "--json"]
    utf8 = _run(argv, tmp_path, capture_output=True, text=True, encoding="utf-8")
    ascii_ = _run(argv, tmp_path, {"PYTHONIOENCODING": "ascii"}, capture_output=True)
    assert utf8.returncode == ascii_.returncode == 0, ascii_.stderr
    assert ascii_.stdout.isascii()
    assert json.loads(ascii_.stdout) == json.loads(utf8.stdout)
    assert json.loads(ascii_.stdout)["storage"] == "größe ≥ \u202e 😀"


@pytest.mark.parametrize("env", list(ASCII_ENVS), ids=str)
def test_an_error_line_in_ascii(tmp_path, env):
    proc = _run(["size", "--params", "-5"], tmp_path, ASCII_ENVS[env], capture_output=True)
    assert proc.returncode == 2 and proc.stdout == b""
    assert proc.stderr.decode("ascii").splitlines() == ["ckplan: error: --params must be >= 1: '-5'"]


@pytest.mark.parametrize("env", ["LANG=C", "LC_ALL=C"])
def test_a_c_locale_still_prints(tmp_path, env):
    """A C locale without PYTHONIOENCODING: Python's UTF-8 mode (PEP 540) writes UTF-8, tables as usual."""
    key = env.split("=")[0]
    proc = _run(
        ["size"],
        tmp_path,
        {"LANG": None, "LC_ALL": None, "PYTHONIOENCODING": None, "PYTHONUTF8": None, key: "C"},
        capture_output=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "What one save holds" in proc.stdout.decode() and proc.stderr == b""
