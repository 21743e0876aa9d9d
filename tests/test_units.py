import pytest

from ckplan.errors import InputError
from ckplan.units import fmt_bytes, parse_bytes, parse_count, parse_duration, parse_fraction, parse_rate


@pytest.mark.parametrize(
    "text,expected", [("7e9", 7e9), ("7B", 7e9), ("70b", 70e9), ("1.5T", 1.5e12), ("500M", 5e8), (" 8 ", 8)]
)
def test_parse_count(text, expected):
    assert parse_count(text) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("30GB", 30 * 10**9),
        ("30GiB", 30 * 2**30),
        ("4k", 4096),
        ("1.5 MB", 1_500_000),
        ("512MiB", 512 * 2**20),
        ("100", 100),
    ],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    "text,expected", [("5m", 300), ("90s", 90), ("2h", 7200), ("1.5d", 129600), ("250ms", 0.25), ("300", 300)]
)
def test_parse_duration(text, expected):
    assert parse_duration(text) == pytest.approx(expected)


def test_parse_fraction_and_rate():
    assert parse_fraction("5%") == pytest.approx(0.05)
    assert parse_fraction("0.05") == pytest.approx(0.05)
    assert parse_rate("2GB/s") == 2e9
    assert parse_rate("1GiB/s") == 2**30


@pytest.mark.parametrize(
    "fn,text",
    [
        (parse_count, "abc"),
        (parse_count, "-1"),
        (parse_count, "0"),
        (parse_count, "7X"),
        (parse_bytes, "30 furlongs"),
        (parse_duration, "0"),
        (parse_duration, "-5m"),
        (parse_fraction, "150%"),
        (parse_fraction, "0"),
        (parse_fraction, "five"),
    ],
)
def test_bad_input_raises_input_error(fn, text):
    with pytest.raises(InputError):
        fn(text)


def test_fmt_bytes_shows_both_units():
    assert fmt_bytes(98e9) == "98.00 GB (91.27 GiB)"
    assert fmt_bytes(2**30) == "1.07 GB (1.00 GiB)"


def test_decimal_and_binary_terabytes():
    """TB is 10^12 (storage vendors' and ckplan's decimal units), TiB is 2^40.

    Deliberate break this catches: TB read as 2^40 (the CLI's default --local-disk 30.72TB would be
    33.78e12 bytes instead of 30.72e12)."""
    assert parse_bytes("30.72TB") == 30_720_000_000_000
    assert parse_bytes("1TB") == 1_000_000_000_000 and parse_bytes("1tb") == 10**12
    assert parse_bytes("1TiB") == 1_099_511_627_776
    assert parse_rate("2TB/s") == 2e12 and parse_rate("1TiB/s") == 2**40
    assert parse_bytes("1PB") == 10**15 and parse_bytes("1PiB") == 2**50


def test_fmt_named_reads_the_unit_from_the_name():
    """A Recommendation's `needed` figures, as the console and the report both show them: the save time a
    duration (the report printed 1.71e+03 before), bandwidth a rate, a file rate a count."""
    from ckplan.units import fmt_named

    assert fmt_named("save_seconds", 1710) == "28.5 min"
    assert fmt_named("aggregate_bandwidth_bytes_per_s", 2.5e9) == "2.50 GB/s"
    assert fmt_named("files_per_s_per_node", 1234.4) == "1,234"
