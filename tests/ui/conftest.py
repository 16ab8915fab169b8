"""Fixtures for the dashboard's browser tests: a real `jobwire serve --ui`, real jobs, a real browser.

* The server is the built binary (``$JOBWIRE_BIN``, else ``<repo>/target/debug/jobwire``) started
  by the Python SDK's ``jobwire.testing.JobwireServer`` on free loopback ports with its embedded
  Redis, ``--ui`` and an auth file (``auth.PRINCIPALS``: an admin, a viewer and a seeder; tokens
  from ``jobwire token new``). One server per module (``ui_server``); tests that would disturb
  each other's counts work on queues of their own (``fresh_queue``).
* The jobs are made through the SDK as an application would (``seed.py``): waiting, delayed,
  completed, active (a worker holding a lease) and dead jobs, dead by a handler raising
  ``NonRetryable`` and by one raising an error of its own.
* The browser is Debian's Chromium (``/usr/bin/chromium``, from ``scripts/setup.sh --test``)
  driven by Playwright from PyPI; Playwright's own browser download is never used.
  ``admin_page``/``viewer_page`` log in through the login form.
* ``shot(page, name)`` saves a full-page screenshot to ``.ci/artifacts/screenshots/<name>.png``
  (gitignored; ``scripts/test.sh`` prints the folder). With ``JOBWIRE_UI_SCREENSHOTS=<dir>``
  the two README pictures are also written there at the viewport size
  (``scripts/ui-screenshots.sh``).

Run: bash scripts/setup.sh --test && cargo build && .venv/bin/pytest tests/ui
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import grpc
import jobwire.sync
import pytest
from jobwire.testing import JobwireServer
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, Response, expect, sync_playwright

from auth import PRINCIPALS, Auth, make_auth, write_auth_file

REPO_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO_ROOT / ".ci" / "artifacts" / "screenshots"
CHROMIUM = os.environ.get("JOBWIRE_UI_CHROMIUM", "/usr/bin/chromium")
VIEWPORT = {"width": 1280, "height": 800}
# Which screenshots the README shows (docs/img/<file>) when JOBWIRE_UI_SCREENSHOTS is set.
README_SHOTS = {"overview": "ui-overview.png", "dead-letters": "ui-dead-letters.png"}
# Chromium's background services (updates, safe browsing, sign-in) would reach for the network,
# which this machine's is closed to; --no-sandbox because CI runs as root.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--disable-gpu",
]

# Playwright's expectations wait (auto-retry) up to this long; a patience, never a timing claim.
expect.set_options(timeout=15_000)


def jobwire_binary() -> str:
    """``$JOBWIRE_BIN``, else ``<repo>/target/debug/jobwire`` (then also put in ``$JOBWIRE_BIN``,
    where ``jobwire.testing`` looks)."""
    binary = Path(os.environ.get("JOBWIRE_BIN") or REPO_ROOT / "target" / "debug" / "jobwire")
    if not binary.is_file():
        pytest.fail(f"jobwire binary not found at {binary}: run `cargo build` or set JOBWIRE_BIN")
    os.environ["JOBWIRE_BIN"] = str(binary)
    return str(binary)


class UiServer(JobwireServer):
    """`jobwire serve --ui` (plus ``args``) on free ports; ``url(path)`` is a dashboard address."""

    def __init__(
        self, workdir: Path, args: list[str], auth: Auth | None, redis_url: str | None = None
    ) -> None:
        super().__init__(workdir, ["--ui", *args], redis_url=redis_url)
        self.auth = auth

    def url(self, path: str = "/ui/") -> str:
        return f"http://127.0.0.1:{self.http_port}{path}"

    def client(self, principal: str = "seeder") -> jobwire.sync.Client:
        """A blocking SDK client of this server with ``principal``'s token (none without auth)."""
        token = self.auth.tokens[principal] if self.auth is not None else None
        return jobwire.sync.Client(self.target, token=token)

    def channel(self, principal: str = "seeder") -> grpc.Channel:
        """A blocking gRPC channel (for the generated stubs in ``jobwire.pb``) with ``principal``'s token."""
        token = self.auth.tokens[principal] if self.auth is not None else None
        return jobwire.sync.connect(self.target, token=token)


def start_server(workdir: Path, args: list[str] = (), auth: Auth | None = None) -> UiServer:
    """A started `jobwire serve --ui` (``args``; ``auth``'s file is the caller's to pass)."""
    jobwire_binary()
    server = UiServer(workdir, list(args), auth)
    server.start()
    return server


@pytest.fixture(scope="session")
def auth(tmp_path_factory) -> Auth:
    """A token per ``PRINCIPALS`` entry and the auth file granting them."""
    directory = tmp_path_factory.mktemp("auth")
    a = make_auth(jobwire_binary(), directory)
    write_auth_file(a)
    return a


@pytest.fixture(scope="module")
def ui_server(auth, tmp_path_factory) -> Iterator[UiServer]:
    """`jobwire serve --ui --auth-file ...` for this module."""
    server = start_server(tmp_path_factory.mktemp("jobwire"), ["--auth-file", str(auth.file)], auth)
    try:
        yield server
    finally:
        server.stop()
        if os.environ.get("JOBWIRE_TEST_SHOW_LOG"):
            print(f"\n--- jobwire log ({server.log_path}) ---\n{server.tail(200)}")


@pytest.fixture(scope="module")
def seeder(ui_server) -> Iterator[jobwire.sync.Client]:
    """An SDK client of the module's server with the seeder's token (producer, worker, admin)."""
    client = ui_server.client("seeder")
    yield client
    client.close()


@pytest.fixture
def fresh_queue(request) -> str:
    """A queue name unique to this test and run."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-")
    return f"ui-{base}-{secrets.token_hex(3)}"


# === the browser ===


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright) -> Iterator[Browser]:
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} not found: bash scripts/setup.sh --test installs Debian's chromium")
    b = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield b
    b.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the item (``rep_call``), for ``new_context``'s teardown."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def new_context(browser, request) -> Iterator:
    """Makes fresh browser contexts (own cookies) for this test; closes them after it. When the
    test failed, each open page is saved first to .ci/artifacts/screenshots/failed/."""
    made: list[BrowserContext] = []

    def make() -> BrowserContext:
        ctx = browser.new_context(viewport=VIEWPORT)
        made.append(ctx)
        return ctx

    yield make
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        failed = SCREENSHOTS / "failed"
        failed.mkdir(parents=True, exist_ok=True)
        name = "".join(c if c.isalnum() or c in "-_" else "-" for c in request.node.name)
        for i, page in enumerate(p for ctx in made for p in ctx.pages):
            try:
                page.screenshot(path=str(failed / f"{name}-{i}.png"), full_page=True)
            except Exception as e:  # a crashed page: the test's own failure says more
                print(f"no screenshot of {page.url}: {e}")
    for ctx in made:
        ctx.close()


@pytest.fixture
def page(new_context) -> Page:
    """A page in a fresh context, not logged in."""
    return new_context().new_page()


def check_origin(resp: Response) -> Response:
    """``resp``, after checking that it is not the dashboard's refusal of the form's origin.

    A regression guard: with `Referrer-Policy: no-referrer` on every page Chromium sends
    `Origin: null` with a submitted form, which the dashboard once refused (403 "the request
    comes from another origin"), so that no login or action worked in a real browser.
    """
    if resp.status == 403 and "comes from another origin" in resp.text():
        origin = resp.request.header_value("origin")
        fetch_site = resp.request.header_value("sec-fetch-site")
        pytest.fail(
            f"the dashboard refused its own form as another origin: {resp.request.method} {resp.url} "
            f"sent with Origin {origin!r}, Sec-Fetch-Site {fetch_site!r}"
        )
    return resp


def login(page: Page, server: UiServer, principal: str) -> Page:
    """Logs ``page`` in with ``principal``'s token through the form; returns on the overview."""
    page.goto(server.url("/ui/login"))
    page.locator("form#login input[name=token]").fill(server.auth.tokens[principal])
    with page.expect_response(lambda r: r.request.method == "POST") as info:
        page.locator("form#login [type=submit]").click()
    check_origin(info.value)
    expect(page).to_have_url(server.url("/ui/"))
    expect(page.locator("#whoami")).to_contain_text(principal)
    return page


@pytest.fixture
def admin_page(new_context, ui_server) -> Page:
    """A page logged in as the admin (``oncall``)."""
    return login(new_context().new_page(), ui_server, "oncall")


@pytest.fixture
def viewer_page(new_context, ui_server) -> Page:
    """A page logged in as the viewer (``support``)."""
    return login(new_context().new_page(), ui_server, "support")


def shot(page: Page, name: str) -> Path:
    """Saves a full-page screenshot of ``page`` as .ci/artifacts/screenshots/<name>.png; the
    README's pictures also to $JOBWIRE_UI_SCREENSHOTS at the viewport size."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    readme_dir = os.environ.get("JOBWIRE_UI_SCREENSHOTS")
    if readme_dir and name in README_SHOTS:
        Path(readme_dir).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(readme_dir) / README_SHOTS[name]), full_page=False)
    return path


__all__ = ["PRINCIPALS", "UiServer", "login", "shot", "start_server"]
