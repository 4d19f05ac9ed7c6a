"""report.html in a real headless Chromium: it renders, draws, hovers and zooms, silently.

Needs Debian's ``chromium`` and ``chromium-driver`` (scripts/system-packages.sh) and
``selenium`` (the dev extra). Without them the test is skipped locally and fails in
CI (``CI=true``), so a CI image that lost the browser cannot pass unnoticed. The
screenshot goes to pytest's tmp path, and to ``$RTK_ARTIFACTS_DIR`` when set.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.telemetry.report import build_report, write_report
from toolkit.telemetry.report.grid import device_grid
from toolkit.telemetry.report.terminal import short_device

NODES, GPUS = 16, 8
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _missing(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why}: CI must run the browser test (bash scripts/system-packages.sh)")
    pytest.skip(why)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed (pip install -e '.[dev]')")
    binary = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        _missing("chromium or chromedriver is not installed (Debian: chromium chromium-driver)")
    options = Options()
    options.binary_location = binary
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def test_report_page_draws_hovers_and_zooms_without_errors(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    nodes = [NodeSpec(f"node{i + 1:02d}", gpus=GPUS) for i in range(NODES)]
    nodes[4] = NodeSpec("node05", gpus=GPUS, lost_at_s=4.0)
    run = build_run(tmp_path, RunSpec(nodes=nodes, steps=10, barrier_every=5, lead_s=1, tail_s=1))
    report = build_report(run.run_dir)
    files = write_report(report)
    grid = device_grid(report)
    assert grid.buckets is not None

    browser.get(files.html.resolve().as_uri())
    WebDriverWait(browser, 20).until(
        lambda d: d.execute_script(
            "return !!window.rtkReport && +document.getElementById('heatmap').dataset.drawn > 0"
        )
    )
    page = browser.execute_script("return window.rtkReport")
    assert (page["devices"], page["nodes"], page["buckets"]) == (
        NODES * GPUS,
        NODES,
        grid.buckets.count,
    )

    # The heatmap drew: most of its plot area is coloured, in many colours.
    pixels = browser.execute_script(
        """
        const c = document.getElementById('heatmap'), r = window.devicePixelRatio || 1;
        const at = window.rtkReport.at(0, 0), g = c.getContext('2d');
        const x = Math.ceil(at.x * r), y = Math.ceil(at.y * r);
        const d = g.getImageData(x, y, c.width - x - Math.ceil(14 * r), c.height - y - Math.ceil(30 * r)).data;
        let blank = 0; const colours = new Set();
        for (let i = 0; i < d.length; i += 4) {
          if (d[i + 3] === 0 || (d[i] > 250 && d[i + 1] > 250 && d[i + 2] > 250)) blank++;
          colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
        }
        return {total: d.length / 4, blank: blank, colours: colours.size};
        """
    )
    assert pixels["total"] > 10_000
    assert pixels["blank"] < 0.05 * pixels["total"] and pixels["colours"] >= 10

    # Hover over a cell of node05 (lost at 4 s: blank late) and one of node02. The pointer
    # is placed from the canvas's centre, which must be in view for that to be exact.
    heat = browser.find_element(By.ID, "heatmap")
    browser.execute_script("arguments[0].scrollIntoView({block: 'start'})", heat)
    power = grid.values["power_w"]
    width_s = grid.buckets.width_s
    for row, col in ((4 * GPUS + 3, grid.buckets.count - 2), (GPUS + 5, grid.buckets.count // 3)):
        at = browser.execute_script(f"return window.rtkReport.at({row}, {col})")
        ActionChains(browser).move_to_element_with_offset(
            heat, at["x"] - at["width"] / 2, at["y"] - at["height"] / 2
        ).perform()
        text = browser.find_element(By.ID, "hover").text
        who, times, reading = text.split(" · ")
        node, device = grid.rows[row]
        assert who == f"{node} / {short_device(device)}", text
        first_s, last_s = (float(t) for t in times.removesuffix(" s").split("-"))
        assert (first_s, last_s) == pytest.approx((col * width_s, (col + 1) * width_s), abs=0.006)
        value = power[row, col]
        if np.isnan(value):
            assert reading == "power: no samples", text
        else:
            assert reading.startswith("power: ") and reading.endswith(" W"), text
            assert float(reading[7:-2]) == pytest.approx(value, abs=0.1), text
    assert browser.execute_script("return window.rtkReport.hover(-1, -1)") is None
    assert not browser.find_element(By.ID, "hover").is_displayed()

    # Drag across the middle third: the view zooms to those buckets; reset shows them all.
    count = grid.buckets.count
    start = browser.execute_script(f"return window.rtkReport.at(0, {count // 3})")
    end = browser.execute_script(f"return window.rtkReport.at(0, {2 * count // 3})")
    ActionChains(browser).move_to_element_with_offset(
        heat, start["x"] - start["width"] / 2, 0
    ).click_and_hold().move_by_offset(end["x"] - start["x"], 0).release().perform()
    view = browser.execute_script("return window.rtkReport.view()")
    assert abs(view["b0"] - count // 3) <= 1 and abs(view["b1"] - (2 * count // 3 + 1)) <= 1
    assert view["t0_s"] == pytest.approx(view["b0"] * width_s)
    browser.execute_script("window.rtkReport.zoom(1.0, 2.0)")
    view = browser.execute_script("return window.rtkReport.view()")
    assert view["t0_s"] <= 1.0 < 2.0 <= view["t1_s"] and view["b1"] - view["b0"] < count
    browser.find_element(By.ID, "reset").click()
    assert browser.execute_script("return window.rtkReport.view()")["b1"] == count
    assert browser.execute_script("return window.rtkReport.setLayer('temperature_c')")

    # The long tables are folded; the filter box keeps only the rows that match.
    devices = browser.find_element(By.ID, "devices")
    assert not devices.is_displayed()
    browser.execute_script(
        "document.getElementById('devices').closest('details').open = true;"
        "const f = document.querySelector('input[data-table=devices]');"
        "f.value = 'node03'; f.dispatchEvent(new Event('input'));"
    )
    visible = [r for r in devices.find_elements(By.TAG_NAME, "tr") if r.is_displayed()]
    assert len(visible) == 1 + GPUS + 1  # the header, node03's GPUs and host

    browser.execute_script("document.getElementById('layer').scrollIntoView()")
    screenshot = tmp_path / "report-browser.png"
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.read_bytes()[:8] == PNG_SIGNATURE
    artefacts = os.environ.get("RTK_ARTIFACTS_DIR")
    if artefacts:
        Path(artefacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, Path(artefacts) / screenshot.name)

    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == []
