"""`ckplan diagnose` reads logs in binary blocks: the same saves as feeding every line, whatever the block size.

The reference is the reader it replaced: the file in text mode (universal newlines, UTF-8 with
undecodable bytes replaced), every line fed to every extractor. Every file here is a real file,
read at block sizes down to one byte, so that every line end and every match falls across a
block boundary somewhere.
"""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckplan.diagnose import logs
from ckplan.diagnose.extractors import Custom, required_literals
from ckplan.diagnose.logs import BLOCK, extract
from ckplan.errors import InputError
from ckplan.frameworks import LOG_EXTRACTORS
from tests.conftest import FIXTURES, assert_one_line_error, run_cli, run_json

LOGS = FIXTURES / "logs"
FRAMEWORKS = ["torchtitan", "megatron", "deepspeed", "hf", "lightning"]
SMALL_BLOCKS = [*range(1, 34), 61, 256, 4096]  # every offset of a short line across a boundary


def line_by_line(paths: list[Path], pattern: str | None = None):
    """The saves and bytes as the line-by-line reader found them, or the error it raised."""
    try:
        extractors = [Custom(pattern)] if pattern else [cls() for cls in LOG_EXTRACTORS]
        saves = []
        for path in paths:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    for ex in extractors:
                        saves.extend(ex.feed(line))
            for ex in extractors:
                saves.extend(ex.finish())
        return saves, sum(p.stat().st_size for p in paths)
    except InputError as exc:
        return "error", str(exc)


def blocks(paths: list[Path], pattern: str | None = None, block: int = BLOCK):
    try:
        saves, read, _ = extract(paths, pattern, block)
        return saves, read
    except InputError as exc:
        return "error", str(exc)


def _all_fixtures() -> bytes:
    return b"".join((LOGS / f"{name}.log").read_bytes() for name in FRAMEWORKS)


def _variants(tmp_path: Path) -> dict[str, Path]:
    """The five framework logs in one file, with each kind of line end, and the awkward cases."""
    lf = _all_fixtures()
    assert lf.endswith(b"\n") and b"\r" not in lf
    variants = {
        "lf": lf,
        "crlf": lf.replace(b"\n", b"\r\n"),
        "cr": lf.replace(b"\n", b"\r"),  # old Mac, or a progress bar's carriage returns
        "mixed": b"".join(line + (b"\n", b"\r\n", b"\r")[i % 3] for i, line in enumerate(lf.split(b"\n")[:-1])),
        "no-final-newline": lf[:-1],
        "crlf-no-final-newline": lf.replace(b"\n", b"\r\n")[:-2],
        "blank-lines": lf.replace(b"\n", b"\n\n\r\n\r"),
        "undecodable": lf.replace(b"INFO", b"IN\xffFO\xe2\x82").replace(b"checkpoint-500", b"checkpoint-\xe9500"),
        "non-ascii": lf.replace(b"INFO", "ÍNFO ٣٤ —".encode()),
        "bom": b"\xef\xbb\xbf" + lf,
    }
    paths = {}
    for name, data in variants.items():
        paths[name] = tmp_path / f"{name}.log"
        paths[name].write_bytes(data)
    return paths


def test_every_variant_at_every_block_size(tmp_path):
    for name, path in _variants(tmp_path).items():
        expected = line_by_line([path])
        assert expected[0] != "error" and {s.source for s in expected[0]} == set(FRAMEWORKS), name
        for block in [*SMALL_BLOCKS, BLOCK]:
            assert blocks([path], block=block) == expected, (name, block)


def test_match_across_the_default_block_boundary(tmp_path):
    """A real log larger than one block, with a save line cut by the boundary at each of several places."""
    save = b"[rank0]:2025-01-01 00:00:%02d,000 - root - INFO - Finished saving the checkpoint in %d.50 seconds.\n"
    filler = b"[rank0]:2025-01-01 00:00:00,000 - root - INFO - step: 1  loss:  2.3456\n"
    for cut in [0, 1, 20, 60, len(save % (0, 10)) - 2, len(save % (0, 10)) - 1]:
        head = save % (1, 10) + filler * ((BLOCK - cut) // len(filler) - 2)
        head += b"x" * (BLOCK - cut - len(head) - 1) + b"\n"  # the next line starts `cut` bytes before the boundary
        assert len(head) == BLOCK - cut
        path = tmp_path / "big.log"
        path.write_bytes(head + save % (2, 11) + filler * 3 + save % (3, 12))
        d = run_json("diagnose", str(path))
        assert [p["seconds"] for p in d["series"]] == [10.5, 11.5, 12.5], cut
        assert d["bytes_read"] == path.stat().st_size


def test_crlf_split_between_blocks(tmp_path):
    """The \\r of a \\r\\n the last byte of one block, the \\n the first of the next: one line end, not two."""
    lines = [
        b"2024-05-02 09:00:00,000 INFO saving model to '/ckpt/a.ckpt'",
        b"",
        b"2024-05-02 09:00:07,500 INFO done",
        b"2024-05-02 09:30:00,000 INFO saving model to '/ckpt/b.ckpt'",
        b"2024-05-02 09:30:08,250 INFO done",
    ]
    data = b"\r\n".join(lines) + b"\r\n"
    path = tmp_path / "crlf.log"
    path.write_bytes(data)
    block = data.index(b"\r\n") + 1  # the first block ends on the \r
    assert blocks([path], block=block) == line_by_line([path])
    assert [s.seconds for s in blocks([path], block=block)[0]] == [7.5, 8.25]


def test_final_line_without_newline(tmp_path):
    path = tmp_path / "cut.log"
    path.write_bytes(
        b"Finished saving the checkpoint in 1.5 seconds.\nnoise\nFinished saving the checkpoint in 2.5 seconds."
    )
    for block in [*SMALL_BLOCKS, BLOCK]:
        saves, read = blocks([path], block=block)
        assert [s.seconds for s in saves] == [1.5, 2.5] and read == path.stat().st_size


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_line_longer_than_a_block(tmp_path, where):
    """A line of several blocks (a dumped tensor, a progress bar of carriage returns) is read whole."""
    block = 4096
    junk = b"z" * (3 * block + 17)
    match = b" Finished saving the checkpoint in 4.25 seconds. "
    line = {"start": match + junk, "middle": junk + match + junk, "end": junk + match}[where]
    path = tmp_path / "long.log"
    path.write_bytes(
        b"Finished saving the checkpoint in 1.5 seconds.\n"
        + line
        + b"\nFinished saving the checkpoint in 2.5 seconds.\n"
    )
    for size in (block, block + 1, 7):
        saves, _ = blocks([path], block=size)
        assert [s.seconds for s in saves] == [1.5, 4.25, 2.5]


def test_state_carries_across_files(tmp_path):
    """A Lightning save opened at the end of one log ends at the first timestamped line of the next, as before."""
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"2024-05-02 09:00:00,000 INFO saving model to '/ckpt/a.ckpt'\nno stamp here")
    b.write_bytes(
        b"no stamp\r2024-05-02 09:00:03,000 INFO x\r2024-05-02 09:30:00,000 INFO saving model to '/c/b.ckpt'\r\n"
        b"2024-05-02 09:30:01,000 INFO y"
    )
    for block in SMALL_BLOCKS:
        assert blocks([a, b], block=block) == line_by_line([a, b])
    assert [s.seconds for s in blocks([a, b])[0]] == [3.0, 1.0]


def test_a_timestamp_in_unicode_digits_is_seen_in_the_bytes(tmp_path):
    """TIMESTAMP's \\d matches Arabic-Indic digits: the line that ends an open Lightning save is found, and refused, as before."""
    path = tmp_path / "digits.log"
    path.write_bytes(
        "2024-05-02 09:00:00,000 INFO saving model to '/c/a.ckpt'\nno stamp\n"
        "٢٠٢٤-٠٥-٠٢ ٠٩:٠٠:٠٧ x\n2024-05-02 09:00:09,000 y\n".encode()
    )
    expected = line_by_line([path])
    assert expected == ("error", "cannot read the timestamp '٢٠٢٤-٠٥-٠٢ ٠٩:٠٠:٠٧'")
    for block in SMALL_BLOCKS:
        assert blocks([path], block=block) == expected


PATTERNS = [
    r"took=(?P<duration>[\d.]+)s",
    r"^took=(?P<duration>[\d.]+)s$",  # ^ and $ at the line's ends, as per line
    r"took=(?P<duration>[\d.]+)s\s*$",
    r"(?P<duration>\d+(?:\.\d+)?)s\b",  # no literal of two characters: every line is tried
    r"(?i)TOOK=(?P<duration>[\d.]+)s",  # ignores case: every line is tried
    r"(?:took|lasted)=(?P<duration>[\d.]+)s",  # either literal
    r"durée=(?P<duration>\d+)s",  # a non-ASCII literal
    r"(?<=took=)(?P<duration>[\d.]+)(?=s)",
    r"took=(?P<duration>[\d.]+)s\ntook",  # a \n inside: never across lines, as before
    r"from (?P<start>\S+ \S+) to (?P<end>\S+ \S+)",
    r"^(?P<duration>)$",  # only an empty line, which a \r\n taken for two line ends would make
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_user_patterns_match_as_line_by_line(tmp_path, pattern):
    path = tmp_path / "custom.log"
    path.write_bytes(
        "took=1.5s\r\nTOOK=9s\rnoise took=2.5s \nlasted=3s\ndurée=4s\nx durée=٥s\n".encode()
        + b"save from 2025-01-01 00:00:00 to 2025-01-01 00:00:20\ntook=\xff6s\ntook=\xe2\x827s\ntook=7s"
    )
    expected = line_by_line([path], pattern)
    for block in [*SMALL_BLOCKS, BLOCK]:
        assert blocks([path], pattern, block) == expected, block


@pytest.mark.parametrize(
    "pattern,needles",
    [
        (r"took=(?P<duration>[\d.]+)s", (b"took=",)),
        (r"(?:took|lasted)=(?P<duration>[\d.]+)", (b"took", b"lasted")),
        (r"(?:took|)x(?P<duration>\d)", (b"x",)),  # the empty branch needs nothing
        (r"a(?i:bcd)e(?P<duration>\d)", (b"a",)),  # no literal where case is ignored
        (r"(?i)took=(?P<duration>\d)", (b"",)),
        (r"(?P<duration>\d+)", (b"",)),
        (r"(?:saved )?in (?P<duration>\d+)", (b"in ",)),  # an optional part is not required
        (r"(?:ab)+cd(?P<duration>\d)", (b"ab",)),
        (r"durée=(?P<duration>\d)", ("durée=".encode(),)),
        (r"x\r\nyz(?P<duration>\d)", (b"yz",)),  # a line end is never inside a line's bytes
    ],
)
def test_required_literals(pattern, needles):
    assert required_literals(pattern) == needles


@given(
    st.lists(
        st.sampled_from(
            [
                b"\n",
                b"\r",
                b"\r\n",
                b"\xff",
                b"\xe2\x82",
                " ٣".encode(),
                "٣".encode(),
                b"x",
                b" ",
                b"2024-05-02 09:00:0",
                b"1,000 ",
                b"2,500 ",
                b"Finished saving the checkpoint in ",
                b"3.5 seconds",
                b"successfully saved checkpoint from iteration 7",
                b"save-checkpoint ....: (10.0, 2",
                b"0.0)",
                b"[Torch] Checkpoint g1 is about to be saved!",
                b"[Torch] Checkpoint g1 is ready now!",
                b"Saving model checkpoint to out/ck-1",
                b"out/ck-1/x",
                b"saving model to '/c/m.ckpt'",
            ]
        ),
        max_size=40,
    ),
    st.integers(1, 40),
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_logs_match_line_by_line(tmp_path, parts, block):
    path = tmp_path / "random.log"
    path.write_bytes(b"".join(parts))
    assert blocks([path], block=block) == line_by_line([path])
    for pattern in (r"(?P<duration>\d+\.\d) sec", r"(?i)(?P<duration>\d+\.\d) SEC", r"^(?P<duration>\W*)$"):
        assert blocks([path], pattern, block) == line_by_line([path], pattern)


@pytest.mark.parametrize("capture", ["nan", "1e400", "inf", "-nan"])
def test_a_capture_that_is_not_a_finite_number_is_refused(tmp_path, capture):
    log = tmp_path / "bad.log"
    log.write_text(f"took={capture}s\ntook=12s\ntook=13s\n")
    proc = run_cli("diagnose", str(log), "--pattern", r"took=(?P<duration>\S+?)s")
    assert_one_line_error(proc, "not a finite number of seconds")
    assert proc.stdout == ""  # refused before any table


def test_a_builtin_capture_that_is_not_a_number_is_refused(tmp_path):
    log = tmp_path / "bad.log"
    log.write_text(
        "Finished saving the checkpoint in 1.2.3 seconds.\nFinished saving the checkpoint in "
        + "9" * 400
        + " seconds.\n"
    )
    assert_one_line_error(run_cli("diagnose", str(log)), "not a number of seconds")
    log.write_text("Finished saving the checkpoint in " + "9" * 400 + " seconds.\n")
    assert_one_line_error(run_cli("diagnose", str(log)), "not a finite number of seconds")


def test_block_memory_is_one_block(monkeypatch, tmp_path):
    """The reader allocates one block, whatever the file's size (the benchmark checks the process's peak RSS)."""
    sizes = []
    real = bytearray

    class Counting(real):
        def __init__(self, *a):
            super().__init__(*a)
            sizes.append(len(self))

    monkeypatch.setattr(logs, "bytearray", Counting, raising=False)
    path = tmp_path / "a.log"
    path.write_bytes((LOGS / "torchtitan.log").read_bytes() * 50)
    extract([path], block=256)
    assert sizes == [256]


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_a_line_longer_than_max_line_is_skipped_at_every_block_size(tmp_path, end):
    """A 900-byte line full of save messages between the fixtures' lines: with max_line 500 it is read past and
    counted, and every save before and after it is found as if it were not there, wherever the blocks cut. A block
    larger than max_line reads whole the lines it holds."""
    lf = (LOGS / "torchtitan.log").read_bytes()
    long = b"x" * 10 + b" Finished saving the checkpoint in 9.99 seconds." * 18
    assert 500 < len(long) < 1000
    path, without = tmp_path / "long.log", tmp_path / "without.log"
    path.write_bytes(lf + long + end + lf)
    without.write_bytes(lf + lf)
    expected, _ = line_by_line([without])
    assert len(expected) == 2 * len(line_by_line([LOGS / "torchtitan.log"])[0]) > 0
    for block in [*range(1, 34), 256, 499, 500]:
        saves, read, long_lines = extract([path], block=block, max_line=500)
        assert (saves, read, long_lines) == (expected, path.stat().st_size, 1), block
    saves, _, long_lines = extract([path], block=4096, max_line=500)
    assert long_lines == 0 and len(saves) == len(expected) + 1


def test_a_huge_line_is_not_held(tmp_path):
    """A 64 MiB line with no end among real log lines: the reader's peak allocation stays near two blocks
    (the block, and at most MAX_LINE carried), not the line's size, and the note counts it."""
    import tracemalloc

    lf = (LOGS / "torchtitan.log").read_bytes()
    path = tmp_path / "huge.log"
    with open(path, "wb") as f:
        f.write(lf)
        for _ in range(64):
            f.write(b"Finished saving " * (2**16))
        f.write(b"\n" + lf)
    tracemalloc.start()
    try:
        saves, _, long_lines = extract([path])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert long_lines == 1 and len(saves) == 2 * len(line_by_line([LOGS / "torchtitan.log"])[0])
    assert peak < 2.2 * BLOCK, peak
    d = run_json("diagnose", str(path))
    assert d["notes"] == [f"1 line(s) longer than {BLOCK:,} bytes skipped unread"]
