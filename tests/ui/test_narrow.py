"""The dashboard in a narrow window (800 x 600): no page is wider than the window.

A queue gets a dead job whose last error is long and has a long unbroken word (a mailbox
address of 300 characters, as a stack trace's path or a URL would be), a job id and a name of
realistic length, and a waiting job. At 800 px the overview, the queue page (dead and waiting
jobs), the dead-letter page and the job page must not scroll sideways as a whole
(``document.scrollingElement.scrollWidth <= clientWidth``): a wide table scrolls inside its
own box, and the long error is cut short in its cell with the whole text in its ``title``.
"""

from __future__ import annotations

import jobwire.sync
import pytest
from playwright.sync_api import Page, expect

import seed
from conftest import shot

NARROW = {"width": 800, "height": 600}
LONG_TO = "x" * 300 + "@example.invalid"
DEAD_ID = "order-7f3c2a9e-1b4d-4c8e-9a6f-2d5e8b1c0f47"
WAITING_ID = "order-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


@pytest.fixture(scope="module")
def narrow_queue(seeder: jobwire.sync.Client) -> str:
    queue = "narrow-window"
    seeder.enqueue(queue, "send-receipt", {"to": LONG_TO, "order": 1}, job_id=DEAD_ID, max_attempts=1)
    seed.run_worker_until(seeder, queue, lambda: seed.counts(seeder, queue).dead == 1, f"{DEAD_ID} dead")
    seeder.enqueue(queue, "send-welcome", {"to": "ada@example.com"}, job_id=WAITING_ID)
    return queue


def assert_fits(page: Page, what: str) -> None:
    widths = page.evaluate(
        "() => [document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]"
    )
    assert widths[0] <= widths[1], f"{what} is {widths[0]} px wide in a window of {widths[1]} px"


@pytest.mark.parametrize(
    "path",
    [
        "/ui/",
        "/ui/queues/narrow-window?state=dead",
        "/ui/queues/narrow-window?state=waiting",
        "/ui/queues/narrow-window/dead",
        f"/ui/queues/narrow-window/jobs/{DEAD_ID}",
    ],
)
def test_no_page_is_wider_than_an_800px_window(admin_page, ui_server, narrow_queue, path):
    page = admin_page
    page.set_viewport_size(NARROW)
    page.goto(ui_server.url(path))
    expect(page.locator("main h1")).to_be_visible()
    assert_fits(page, path)


@pytest.mark.parametrize(
    ("path", "cell"),
    [
        ("/ui/queues/narrow-window?state=dead", f"table#jobs tr[data-job-id='{DEAD_ID}'] td.msg"),
        ("/ui/queues/narrow-window/dead", f"table#dead tr[data-job-id='{DEAD_ID}'] td.msg"),
    ],
)
def test_a_long_last_error_is_cut_short_with_the_whole_text_in_its_title(
    admin_page, ui_server, seeder, narrow_queue, path, cell
):
    message = seeder.get_job(narrow_queue, DEAD_ID).errors[-1].message
    assert LONG_TO in message
    page = admin_page
    page.set_viewport_size(NARROW)
    page.goto(ui_server.url(path))
    td = page.locator(cell)
    expect(td).to_have_attribute("title", message)
    # Cut short: the cell shows less than the text needs (an ellipsis), on one line.
    clip = td.locator(".clip")
    expect(clip).to_have_count(1)
    clipped = clip.evaluate("e => e.scrollWidth > e.clientWidth")
    assert clipped, "the long error is shown whole"
    assert clip.bounding_box()["height"] < 30, "the long error wraps"
    # The ids and times stay on one line.
    row = page.locator(f"tr[data-job-id='{DEAD_ID}']")
    for part in ("code", "time"):
        for i in range(row.locator(part).count()):
            el = row.locator(part).nth(i)
            assert el.evaluate("e => getComputedStyle(e).whiteSpace") == "nowrap", part
    shot(page, "narrow-" + ("queue" if "state=" in path else "dead"))
