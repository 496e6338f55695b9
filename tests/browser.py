"""A page of headless Chromium (Debian's /usr/bin/chromium, driven by Playwright) for the tests of the web page.

Needs `apt-get install -y chromium` and the `playwright` Python package (no browser download: Playwright drives the
system Chromium); a test that asks for a page skips with the reason when either is absent."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextmanager
def chromium_page(profile: Path, **context) -> Iterator[tuple[object, list[str]]]:
    """(a page of a fresh headless Chromium whose profile is the folder ``profile``, the list its uncaught page
    errors are appended to); ``context``: more options of Playwright's persistent context (e.g. ``viewport``)."""
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium (install it: apt-get update && apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(str(profile), executable_path=str(CHROMIUM), headless=True,
                                                        args=FLAGS, **context)
        try:
            page = browser.pages[0] if browser.pages else browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            yield page, errors
        finally:
            browser.close()
