"""The HTML report in a real browser: one self-contained file, readable at 1280 px and at phone width
(390 px), the decision line on top and both charts drawn whole.

Chromium is Debian's `chromium` package (scripts/setup --test-tools installs it). The report has no script, so the
layout is read from screenshots: a control copy of the page, in which each chart is swapped for a solid-colour PNG of
the same size, shows where the browser puts each chart; the real page's screenshot must show that chart there."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ckplan.render.formats.html import VERDICT_COLOURS
from tests.conftest import run_json

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM, reason="chromium is not installed (scripts/setup --test-tools installs Debian's chromium package)"
)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Solid colours the control page draws in each chart's place; the report itself uses neither.
MARKERS = [(255, 0, 255), (0, 255, 255)]
# Window heights that hold the whole page (the test checks the page ends above the bottom).
HEIGHTS = {1280: 4200, 390: 8000}


def hex_rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))


def chromium(*args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        cmd = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--force-device-scale-factor=1",
            "--force-color-profile=srgb",
            "--disable-extensions",
            "--host-resolver-rules=MAP * ~NOTFOUND",  # anything the page fetched from a network would fail
            f"--user-data-dir={profile}",
            *args,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}"
    return proc


def screenshot(page: Path, width: int) -> np.ndarray:
    shot = page.with_name(f"{page.stem}-{width}.png")
    chromium(f"--screenshot={shot}", f"--window-size={width},{HEIGHTS[width]}", page.as_uri())
    img = np.asarray(Image.open(shot).convert("RGB")).astype(np.int16)
    assert img.shape[:2] == (HEIGHTS[width], width), f"screenshot is {img.shape[1]}x{img.shape[0]}"
    return img


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text inside the element with id="decision"."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.style = ""
        self.decision = ""
        self._depth = 0  # >0 inside the decision element
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        self._in_style = tag == "style"
        if self._depth or a.get("id") == "decision":
            self._depth += tag not in ("br", "img", "meta", "hr")

    def handle_endtag(self, tag):
        self._in_style = False
        if self._depth:
            self._depth -= 1

    def handle_data(self, data):
        if self._in_style:
            self.style += data
        if self._depth:
            self.decision += data


def parse(text: str) -> Tags:
    p = Tags()
    p.feed(text)
    return p


def png_of(uri: str) -> bytes:
    m = re.fullmatch(r"data:image/png;base64,([A-Za-z0-9+/=]+)", uri or "")
    assert m, f"an <img> is not a PNG data: URI: {uri[:60]!r}"
    data = base64.b64decode(m.group(1), validate=True)
    try:
        Image.open(io.BytesIO(data)).verify()  # checks every chunk's CRC; raises on a truncated or corrupt PNG
        img = Image.open(io.BytesIO(data))
        img.load()
    except Exception as exc:  # PIL raises OSError, SyntaxError or ValueError by the fault
        raise AssertionError(f"an <img>'s data: URI is not a valid PNG: {exc}") from None
    assert data[:8] == PNG_MAGIC and img.size[0] > 0 and img.size[1] > 0
    return data


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    files = run_json("report", "--storage", "nfs", "--model", "llama-2-7b", "--out", str(out))
    charts = {Path(c).name: Path(c).read_bytes() for c in files["charts"]}
    return Path(files["html"]), charts, files["recommendation"]


def test_html_is_self_contained(report):
    page, charts, _ = report
    text = page.read_text(encoding="utf-8")
    doc = parse(text)
    names = [t for t, _ in doc.tags]
    for tag in ("script", "link", "iframe", "object", "embed", "base"):
        assert tag not in names, f"the report has a <{tag}>"
    for tag, attrs in doc.tags:
        for key in ("src", "href", "srcset", "poster", "data", "action"):
            if attrs.get(key) is not None:
                assert attrs[key].startswith(("data:", "#")), f"<{tag} {key}={attrs[key][:60]!r}> is an external asset"
    assert "url(" not in doc.style and "@import" not in doc.style and "@font-face" not in doc.style
    assert any(
        t == "meta" and a.get("name") == "viewport" and "width=device-width" in a.get("content", "")
        for t, a in doc.tags
    )
    assert ".table-wrap{overflow-x:auto" in doc.style and "max-width:100%" in doc.style
    assert text.count('<div class="table-wrap"><table>') == text.count("<table>") >= 3
    # the charts are in the page, byte for byte, and still written beside it for the Markdown
    imgs = [a for t, a in doc.tags if t == "img"]
    assert [png_of(a["src"]) for a in imgs] == [charts["bandwidth.png"], charts["waste.png"]]
    assert "![waste against interval](waste.png)" in page.with_name("report.md").read_text(encoding="utf-8")


@needs_chromium
def test_rendered_dom_has_the_decision_and_both_charts(report):
    page, charts, rec = report
    dom = parse(chromium("--dump-dom", page.as_uri()).stdout)
    decision = " ".join(dom.decision.split())
    assert f"{rec['verdict'].upper()} — {rec['summary']}." in decision, decision
    assert rec["verdict_reason"] in decision
    # the decision comes before every other section of the report
    first = next(i for i, (t, a) in enumerate(dom.tags) if a.get("id") == "decision")
    assert all(t != "h2" for t, _ in dom.tags[:first]) and all(t != "table" for t, _ in dom.tags[:first])
    imgs = [a for t, a in dom.tags if t == "img"]
    assert [png_of(a["src"]) for a in imgs] == [charts["bandwidth.png"], charts["waste.png"]]


def check_rendering(page: Path, charts: list[bytes], verdict: str, width: int) -> None:
    """Screenshot `page` at `width` and check what a reader sees; AssertionError says what is wrong."""
    text = page.read_text(encoding="utf-8")
    # The control page: the same document, each <img>'s source swapped for a solid marker PNG the size of its chart.
    sizes = [Image.open(io.BytesIO(c)).size for c in charts]
    srcs = re.findall(r'<img src="([^"]*)"', text)
    assert len(srcs) == len(charts), f"{len(srcs)} <img> for {len(charts)} charts"
    control = text
    for src, size, colour in zip(srcs, sizes, MARKERS, strict=False):
        buf = io.BytesIO()
        Image.new("RGB", size, colour).save(buf, format="PNG")
        control = control.replace(src, "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode(), 1)
    control_page = page.with_name(page.stem + "-control.html")
    control_page.write_text(control, encoding="utf-8")
    shot, ctl = screenshot(page, width), screenshot(control_page, width)

    white = np.all(shot == 255, axis=2)
    assert (~white).mean() > 0.03 and len(np.unique(shot.reshape(-1, 3), axis=0)) > 200, "the screenshot is blank"
    assert white[-40:].all(), "the page runs past the bottom of the window: the screenshot does not hold all of it"
    assert white[:, -6:].all(), "something pokes out of the page's right edge: the page scrolls sideways"

    boxes = []
    for i, (chart, size, colour) in enumerate(zip(charts, sizes, MARKERS, strict=False)):
        where = np.all(ctl == colour, axis=2)
        assert where.any(), f"chart {i + 1} takes no space on the page"
        ys, xs = np.nonzero(where)
        top, bottom, left, right = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
        w, h = right - left, bottom - top
        assert where.sum() == w * h, f"chart {i + 1} is not drawn whole (cut off or covered)"
        assert abs(w / h - size[0] / size[1]) < 0.03, f"chart {i + 1} is distorted: {w}x{h} for {size[0]}x{size[1]}"
        assert w <= width - 20, f"chart {i + 1} is {w} px wide in a {width} px window"
        if width >= size[0] + 100:
            assert (w, h) == size, f"chart {i + 1} is drawn at {w}x{h}, not at its own {size[0]}x{size[1]}"
        else:
            assert w >= 0.8 * width, f"chart {i + 1} is only {w} px wide in a {width} px window"
        # The real page shows this chart in that box: its own pixels (scaled as the browser scaled them).
        seen = shot[top:bottom, left:right]
        expected = np.asarray(Image.open(io.BytesIO(chart)).convert("RGB").resize((w, h), Image.LANCZOS)).astype(
            np.int16
        )
        grey_seen, grey_expected = seen.mean(axis=2).ravel(), expected.mean(axis=2).ravel()
        match = np.corrcoef(grey_seen, grey_expected)[0, 1] if grey_seen.std() > 0 else 0.0
        # drawn at its own size it is the same pixels (1.000); scaled to 363 px wide, 0.96; a broken image, 0.25
        assert match > (0.995 if (w, h) == size else 0.8), (
            f"chart {i + 1} is not what the page shows there (correlation {match:.3f})"
        )
        boxes.append((top, bottom))
    assert boxes[0][1] <= boxes[1][0], "the charts overlap or are out of order"

    # The decision box, found by its background colour: near the top, above the charts, across the column.
    where = np.all(shot == hex_rgb(VERDICT_COLOURS[verdict][0]), axis=2)
    assert where.any(), "the decision box is not on the page"
    ys, xs = np.nonzero(where)
    assert ys.min() < (320 if width >= 1000 else 420), f"the decision box starts {ys.min()} px down the page"
    assert ys.max() < boxes[0][0], "the decision box is not above the charts"
    assert xs.max() - xs.min() > (0.8 * min(width, 1100) - 100), "the decision box does not span the column"


@needs_chromium
@pytest.mark.parametrize("width", [1280, 390])
def test_renders_in_chromium(report, width):
    page, charts, rec = report
    check_rendering(page, [charts["bandwidth.png"], charts["waste.png"]], rec["verdict"], width)


def _break_uri(text: str) -> str:
    i = text.index('<img src="data:image/png;base64,') + 2000
    return text[:i] + "AAAA" * 50 + text[i + 200 :]  # 150 bytes of the first chart's PNG zeroed: a corrupt image


def _decision_last(text: str) -> str:
    box = re.search(r'<section class="decision .*?</section>', text).group(0)
    return text.replace(box, "").replace("</body>", box + "</body>")


@needs_chromium
@pytest.mark.parametrize(
    "name, mutate, message",
    [
        ("broken-data-uri", _break_uri, "chart 1 is not what the page shows there"),
        ("zero-size-img", lambda t: t.replace("</style>", "img{width:0!important}</style>"), "chart 1 takes no space"),
        ("decision-at-the-end", _decision_last, "the decision box starts"),
    ],
)
def test_the_check_fails_on_a_broken_page(report, tmp_path, name, mutate, message):
    """The screenshot check is live: each of these broken pages fails it."""
    page, charts, rec = report
    broken = tmp_path / "report.html"
    broken.write_text(mutate(page.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(AssertionError, match=message):
        check_rendering(broken, [charts["bandwidth.png"], charts["waste.png"]], rec["verdict"], 390)
