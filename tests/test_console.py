"""The web console in a real browser: Debian's Chromium driven through its ChromeDriver by
Selenium. A query's rows and timings, a large result paged, its plan, an error, text that looks
like markup shown as text, a long query cancelled while the node table shows its slot taken and
freed, and a gateway with tokens asking for one. With $CXG_SCREENSHOTS set, screenshots go there
(docs/images/ holds the README's)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.test_gateway import TOKENS, _region
from tests.test_regions_live import _file, _regions

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"  # Debian's packages (scripts/bootstrap.sh)


def _chrome() -> WebDriver:
    """A headless Chromium of its own (a fresh profile: no sessionStorage, no token)."""
    assert shutil.which(CHROMEDRIVER), "the console's tests need chromium, chromium-driver: scripts/bootstrap.sh dev"
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1500,1000"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def browser():
    driver = _chrome()
    try:
        yield driver
    finally:
        driver.quit()


def _until(driver: WebDriver, condition: Callable[[WebDriver], Any], what: str) -> Any:
    return WebDriverWait(driver, 60, poll_frequency=0.05).until(condition, f"waited for {what}")


def _text(driver: WebDriver, element: str) -> str:
    return driver.find_element(By.ID, element).text


def _run(driver: WebDriver, sql: str, tag: str = "", button: str = "run") -> None:
    editor = driver.find_element(By.ID, "sql")
    editor.clear()
    editor.send_keys(sql)
    label = driver.find_element(By.ID, "tag")
    label.clear()
    label.send_keys(tag)
    driver.find_element(By.ID, button).click()


def _cells(driver: WebDriver, table: str) -> list[list[str]]:
    """The text of a table's body cells, read in one call (as shown: innerText)."""
    script = "return [...arguments[0].tBodies[0]?.rows ?? []].map(r => [...r.cells].map(c => c.innerText.trim()))"
    return driver.execute_script(script, driver.find_element(By.ID, table))


def _screenshot(driver: WebDriver, name: str) -> None:
    folder = os.environ.get("CXG_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))


def test_a_query_shows_its_rows_timings_and_where_it_ran(native_gateway, browser, duck) -> None:
    browser.get(native_gateway.url + "/")
    sql = "select n_name, n_regionkey, r_name from nation join region on n_regionkey = r_regionkey order by n_name"
    _run(browser, sql)
    _until(browser, lambda d: "succeeded" in _text(d, "summary"), "the query to succeed")
    summary = _text(browser, "summary")
    assert "25 row(s)" in summary and "total" in summary and "engine" in summary and "nodes node-" in summary
    expected = [[name, str(region), r_name] for name, region, r_name in duck.sql(sql).fetchall()]
    assert _cells(browser, "rows") == expected
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#rows thead th")]
    assert headers == ["n_name", "n_regionkey", "r_name"]
    _until(browser, lambda d: any(row[1] == "succeeded" for row in _cells(d, "statements")), "the statements list")
    _until(browser, lambda d: len(_cells(d, "nodes")) == 2, "the region's two nodes")
    _screenshot(browser, "console")
    _run(browser, sql, button="explain")
    _until(browser, lambda d: d.find_element(By.ID, "plan").is_displayed(), "the plan")
    assert "nation" in _text(browser, "plan") and "region" in _text(browser, "plan")


def test_a_large_result_is_paged(native_gateway, browser, duck) -> None:
    browser.get(native_gateway.url + "/")
    sql = "select l_orderkey, l_linenumber from lineitem order by l_orderkey, l_linenumber"
    _run(browser, sql)
    _until(browser, lambda d: "succeeded" in _text(d, "summary"), "the query to succeed")
    rows = duck.sql(sql).fetchall()
    pages = -(-len(rows) // 10_000)
    assert _text(browser, "page") == f"page 1 of {pages}" and len(_cells(browser, "rows")) == 10_000
    browser.find_element(By.ID, "next").click()
    _until(browser, lambda d: _text(d, "page") == f"page 2 of {pages}", "the second page")
    assert _cells(browser, "rows")[0] == [str(v) for v in rows[10_000]]
    browser.find_element(By.ID, "prev").click()
    _until(browser, lambda d: _text(d, "page") == f"page 1 of {pages}", "the first page again")
    assert _cells(browser, "rows")[0] == [str(v) for v in rows[0]]


def test_errors_are_shown_and_markup_in_data_stays_text(native_gateway, browser) -> None:
    browser.get(native_gateway.url + "/")
    _run(browser, "select * from nowhere")
    _until(browser, lambda d: d.find_element(By.ID, "error").is_displayed(), "the error")
    assert _text(browser, "error").startswith("undefined_table:") and "nowhere" in _text(browser, "error")
    markup = "<img src=x onerror=document.title='pwned'>"
    literal = markup.replace("'", "''")
    _run(browser, f"select '{literal}' as \"<b>name</b>\"")
    _until(browser, lambda d: "succeeded" in _text(d, "summary"), "the query to succeed")
    assert _cells(browser, "rows") == [[markup]]
    assert browser.find_element(By.CSS_SELECTOR, "#rows thead th").text == "<b>name</b>"
    assert not browser.find_elements(By.CSS_SELECTOR, "#rows img, #rows b, #statements img")
    assert browser.title == "cxg console"


def test_a_long_query_is_cancelled_and_the_node_table_follows_its_slot() -> None:
    with _region(nodes=1) as region, _browser_for(region) as browser:

        def running(d: WebDriver) -> str:
            rows = _cells(d, "nodes")
            return rows[0][2] if rows else ""

        _until(browser, lambda d: running(d) == "0", "the node, idle")
        _run(browser, "SELECT 1", tag="slow")  # a simulated query of a minute
        _until(browser, lambda d: running(d) == "1", "the query holding the node's slot")
        _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#statements button.cancel"), "its cancel button")
        assert "running" in _text(browser, "summary")
        _screenshot(browser, "console-running")
        browser.find_element(By.CSS_SELECTOR, "#statements button.cancel").click()
        _until(browser, lambda d: running(d) == "0", "the slot freed")
        _until(browser, lambda d: _cells(d, "statements")[0][1].startswith("cancelled"), "the statement cancelled")
        _until(browser, lambda d: d.find_element(By.ID, "error").is_displayed(), "the editor told")
        assert "cancelled" in _text(browser, "error")


def test_with_tokens_the_console_asks_for_one() -> None:
    with _region(f"gateway.tokens={TOKENS}", nodes=1) as region, _browser_for(region) as browser:
        _until(browser, lambda d: d.find_element(By.ID, "token-dialog").is_displayed(), "the token dialog")
        browser.find_element(By.ID, "token").send_keys("b-secret")
        browser.find_element(By.ID, "save-token").click()
        _run(browser, "SELECT 1", tag="fast")
        _until(browser, lambda d: "succeeded" in _text(d, "summary"), "the query to succeed")
        assert len(_cells(browser, "rows")) == 3 and _text(browser, "page") == "page 1 of 3"  # 7 rows, chunks of 3
        _until(browser, lambda d: [r[2] for r in _cells(d, "statements")] == ["bob"], "bob's statement listed")


@contextmanager
def _browser_for(region) -> Iterator[WebDriver]:
    """A browser of its own on `region`'s console."""
    driver = _chrome()
    try:
        driver.get(region.url + "/")
        yield driver
    finally:
        driver.quit()


def test_with_several_regions_the_console_shows_each_ones_load(tmp_path: Path) -> None:
    path = _file(tmp_path, "idle-pull", {"east": 'databases = {tpch = ["lineitem"]}', "west": 'copies_of = ["east"]'})
    with _regions(path) as regions, _browser_for(regions["east"]) as browser:
        _until(browser, lambda d: d.find_element(By.ID, "regions").is_displayed(), "the regions")
        _until(browser, lambda d: len(_cells(d, "region-table")) == 2, "both regions' rows")
        rows = {row[0]: row for row in _cells(browser, "region-table")}
        assert set(rows) == {"east", "west"}
        # queued, running, slots, room
        assert all(row[2:5] == ["0", "0", "1"] and row[5].isdigit() for row in rows.values()), rows
        assert "idle-pull" in _text(browser, "moved")
