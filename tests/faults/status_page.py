"""Loads the bridge's status page in headless Chromium (Debian's, driven by Playwright) and
waits until every expected text is on it (the page refreshes itself), then keeps a screenshot.

Usage: status_page.py URL SCREENSHOT TIMEOUT_S TEXT [TEXT ...]
Exit 0 when every TEXT appeared in time; 1 with the page's text otherwise. Part of the status
page feature (src/observe/status_page.rs lists the pieces); run by tests/faults/status_page.rs.
"""

import sys
import tempfile
import time

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
# This machine's network is closed: Chromium's background connections would only fail.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def main() -> int:
    url, screenshot, timeout_s, expected = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=FLAGS, headless=True
        )
        page = browser.new_page()
        requests = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(url)
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            try:
                text = page.inner_text("body")
            except Exception:  # the page is being replaced by its refresh
                text = ""
            if all(t in text for t in expected):
                break
            time.sleep(0.25)
        page.screenshot(path=screenshot, full_page=True)
        browser.close()
    foreign = [r for r in requests if not r.startswith(url.split("/status")[0])]
    if foreign:
        print("the page fetched from elsewhere:", foreign)
        return 1
    missing = [t for t in expected if t not in text]
    if missing:
        print(f"missing {missing!r} after {timeout_s} s; the page said:\n{text}")
        return 1
    print(f"the page showed {expected!r}; screenshot {screenshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
