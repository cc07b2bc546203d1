"""The ``firesteel ui`` page opened in a real headless browser, for tests that check what a
person would see: Debian's ``chromium`` driven by Playwright (its own browser downloads
cannot run here), the page served on 127.0.0.1 for the locations given."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ui_page"]


@contextmanager
def ui_page(locations: list[str], ready: str) -> Iterator[Any]:
    """A Playwright page showing ``firesteel ui`` of ``locations`` (checkpoints or pipeline
    work folders), once the selector ``ready`` is on it; the browser and the server stop
    when the block ends."""
    from playwright.sync_api import sync_playwright

    from firesteel.cli.ui import serve

    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: make install installs it (apt-get)"
    server = serve(locations)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
                page.wait_for_selector(ready)
                yield page
            finally:
                browser.close()
    finally:
        server.shutdown()
