#!/usr/bin/env python3
"""Regenerate docs/report-screenshot.png: `ckplan report` on the default example on Lustre, rendered by headless
Chromium (Debian's package, `scripts/setup --test-tools`) 1280 px wide, cropped to the page, 256 colours."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image, ImageChops

WIDTH, HEIGHT = 1280, 5000
OUT = Path(__file__).resolve().parent.parent / "docs" / "report-screenshot.png"


def main() -> None:
    exe = shutil.which("ckplan", path=os.path.dirname(sys.executable)) or "ckplan"
    chromium = shutil.which("chromium") or sys.exit("chromium is not installed: scripts/setup --test-tools")
    with tempfile.TemporaryDirectory() as tmp:
        report, shot = Path(tmp) / "report", Path(tmp) / "shot.png"
        subprocess.run([exe, "report", "--storage", "lustre", "--out", str(report)], check=True, capture_output=True)
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--force-device-scale-factor=1",
                "--force-color-profile=srgb",
                f"--user-data-dir={tmp}/profile",
                f"--screenshot={shot}",
                f"--window-size={WIDTH},{HEIGHT}",
                (report / "report.html").as_uri(),
            ],
            check=True,
            capture_output=True,
        )
        img = Image.open(shot).convert("RGB")
        ink = ImageChops.invert(img).getbbox()  # the box around everything not white
        assert ink and ink[3] < HEIGHT - 40, "the page is taller than the window: raise HEIGHT"
        img = img.crop((0, 0, WIDTH, ink[3] + 24))
        img.quantize(256, method=Image.Quantize.MEDIANCUT).save(OUT, optimize=True)
    print(f"{OUT}: {img.size[0]}x{img.size[1]}, {OUT.stat().st_size / 1e3:.0f} KB")


if __name__ == "__main__":
    main()
