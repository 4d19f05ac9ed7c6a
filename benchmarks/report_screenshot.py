"""Open a run's report.html in headless Chromium, check it drew, and save a screenshot.

``python benchmarks/report_screenshot.py RUN_DIR OUT.png [--width 1400] [--height 2400]``

The page is loaded from file:// with the network off (it must need none); the script
prints how long the page took to load and draw, the browser's console errors (there
must be none) and the page's size. Needs Debian's chromium and chromium-driver and the
selenium package (the dev extra).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=2400)
    args = parser.parse_args()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    page = (args.run_dir / "report" / "report.html").resolve()
    options = Options()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in (*FLAGS, f"--window-size={args.width},{args.height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    try:
        began = time.monotonic()
        driver.get(page.as_uri())
        drawn = driver.execute_script(
            "const c = document.querySelector('canvas'); if (!c) return 0;"
            "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            "let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++;"
            "return n / (d.length / 4);"
        )
        loaded_s = time.monotonic() - began
        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(args.out))
    finally:
        driver.quit()
    size_mb = page.stat().st_size / 1e6
    print(f"{page}: {size_mb:.1f} MB, loaded and drawn in {loaded_s:.2f} s")
    print(f"heatmap canvas: {drawn:.0%} of its pixels drawn; console errors: {len(errors)}")
    for error in errors:
        print(f"  {error.get('message')}")
    print(f"screenshot: {args.out}")
    return 1 if errors or not drawn else 0


if __name__ == "__main__":
    sys.exit(main())
