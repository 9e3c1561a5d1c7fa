"""``python -m devkit.screenshots --out docs/console/``: PNG screenshots of the operator pages in headless Chromium.

With ``--url`` it photographs a running worker (e.g. the one ``make demo`` leaves on
http://127.0.0.1:6066). Without, it starts its own on the local stack: a scratch database
and topic prefix, one worker, the demo workload of every slice (``python -m streams demo``),
the pages, then it stops the worker and drops the database. One page is one line of PAGES.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from devkit import database
from devkit.browser import chrome, full_page_screenshot
from devkit.workers import ROOT, WorkerProcess, worker_env

# (file name, path on the worker). A last segment ``{State}`` is the first row of that state
# in the listing (its id read from the listing's JSON page).
PAGES: tuple[tuple[str, str], ...] = (
    ("overview", "/status"),
    ("rows-filtered", "/console/rows/calendar/reminders?state=Sent"),
    ("row-detail", "/console/rows/calendar/reminders/{Pending}"),
)

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://reminders@127.0.0.1:55432/reminders")
KAFKA = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:19092")


def resolve(base_url: str, path: str) -> str:
    """``path`` with a last segment ``{State}`` replaced by the first such row's id."""
    listing, last = path.rsplit("/", 1)
    if not (last.startswith("{") and last.endswith("}")):
        return path
    query = f"{listing}?state={last[1:-1]}&limit=1&format=json"
    with urllib.request.urlopen(base_url + query, timeout=10) as r:
        ids = json.loads(r.read())["ids"]
    if not ids:
        raise SystemExit(f"no row to photograph for {path}")
    return f"{listing}/{ids[0]}"


def login(driver: WebDriver, base_url: str, token: str) -> None:
    """Log in through the console's form, so detail pages show their action forms."""
    driver.get(base_url + "/console/login")
    driver.find_element(By.NAME, "token").send_keys(token)
    driver.find_element(By.NAME, "actor").send_keys("screenshots")
    driver.find_element(By.CSS_SELECTOR, 'button[type="submit"]').click()
    WebDriverWait(driver, 15).until(lambda d: d.current_url.endswith("/console/rows"))


def shoot(
    base_url: str,
    out: Path,
    width: int = 1440,
    height: int = 1150,
    full: bool = False,
    token: str = "",
) -> list[Path]:
    """Every page of PAGES under ``base_url`` as ``out/<name>.png``: what a ``width`` x
    ``height`` window shows first (``full``: the whole page); logged in when ``token``."""
    saved = []
    base_url = base_url.rstrip("/")
    out.mkdir(parents=True, exist_ok=True)
    with chrome(width=width, height=height) as driver:
        if token:
            login(driver, base_url, token)
        for name, path in PAGES:
            driver.get(base_url + resolve(base_url, path))
            target = out / f"{name}.png"
            if full:
                full_page_screenshot(driver, target, width=width)
            else:
                driver.save_screenshot(str(target))
            saved.append(target)
    return saved


@contextmanager
def demo_worker() -> Iterator[tuple[str, str]]:
    """A worker of its own on the local stack with the demo workload sent and console actions
    on (a random WEB_ADMIN_TOKEN); yields its URL and the token."""
    from db.migrate import migrate
    from streams.kafka_admin import contract_topic_names, ensure_topics
    from streams.settings import Settings

    name = f"shots_{uuid.uuid4().hex[:8]}"
    prefix = f"{name}."
    url = asyncio.run(database.create_database(DATABASE_URL, name))
    try:
        asyncio.run(migrate(url))
        settings = Settings(kafka_bootstrap=KAFKA, topic_prefix=prefix)
        asyncio.run(ensure_topics(settings, contract_topic_names(settings)))
        token = secrets.token_hex(32)
        env = worker_env(url, KAFKA, prefix, WEB_ADMIN_TOKEN=token)
        with tempfile.TemporaryDirectory(prefix="shots-") as tmp:
            worker = WorkerProcess(env, Path(tmp), "shots-worker").start()
            try:
                asyncio.run(worker.wait_ready())
                demo = subprocess.run(
                    [sys.executable, "-m", "streams", "demo"],
                    env={**os.environ, **env, "WEB_PORT": str(worker.port)},
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                if demo.returncode != 0:
                    raise SystemExit(f"the demo workload failed:\n{demo.stdout}{demo.stderr}")
                yield f"http://127.0.0.1:{worker.port}", token
            finally:
                worker.stop()
    finally:
        asyncio.run(database.drop_database(DATABASE_URL, name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devkit.screenshots", description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "console")
    parser.add_argument("--url", help="a running worker (default: start one with demo data)")
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--height", type=int, default=1150)
    parser.add_argument("--full", action="store_true", help="the whole page, not the first screen")
    args = parser.parse_args(argv)
    if args.url:
        token = os.environ.get("WEB_ADMIN_TOKEN", "")
        saved = shoot(args.url, args.out, args.width, args.height, args.full, token)
    else:
        with demo_worker() as (url, token):
            saved = shoot(url, args.out, args.width, args.height, args.full, token)
    for path in saved:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
