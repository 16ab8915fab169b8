"""Every dashboard page in a real browser, checked against what the gRPC API says.

The module's server gets a small but complete picture (``showcase``): queue ``emails`` with
completed, dead (two error types), waiting and delayed jobs; ``billing``, paused, with a dead
job, a waiting binary payload and an oversized one; ``reports`` with an active job held by a
connected worker. The admin looks at each page: the overview's rows and cells (counts, the
paused flag, workers, sparklines), the queue page for each state (the ids in the table are the
jobs gRPC has in that state), the search by name, the pager, a job page (state, attempts, the
error history, pretty JSON or hex payload, capped, metadata, trace id), the dead-letter page
and its filter, the workers page. Each page is saved as a screenshot (conftest.shot).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import jobwire.sync
import pytest
from jobwire import pb
from playwright.sync_api import Page, expect

import seed
from conftest import shot

STATES = ["waiting", "delayed", "active", "completed", "dead"]
STATE = {s: getattr(pb, f"JOB_STATE_{s.upper()}") for s in STATES}
BIG = 100 * 1024  # bytes of the oversized payload (the page shows at most 64 KiB)
BIG_END = "END-OF-THE-BIG-PAYLOAD"
COMPLETED = ["welcome-ada", "welcome-grace", "welcome-alan"]


@dataclass
class Showcase:
    emails_ids: list[str]
    completed: list[str]
    billing_ids: list[str]
    dead: seed.Dead
    active_id: str
    worker_id: str
    binary_id: str
    big_id: str


@pytest.fixture(scope="module")
def showcase(seeder: jobwire.sync.Client):
    dead = seed.make_dead(
        seeder,
        "emails",
        invalid_address=["receipt-1001", "receipt-1002", "receipt-1003"],
        template_missing=["digest-week-47", "digest-week-48"],
        completed=COMPLETED,
    )
    for who in ("edsger", "barbara"):
        seeder.enqueue("emails", "send-welcome", {"to": f"{who}@example.com"}, job_id=f"welcome-{who}")
    seeder.enqueue("emails", "send-reminder", {"to": "ada@example.com"}, job_id="reminder-ada", delay=3600)

    seed.make_dead(seeder, "billing", invalid_address=["invoice-mail-77"])
    seeder.queues.pause("billing")
    binary = bytes([0x00, 0x01, 0xFF, 0x7F, 0x80]) + b"\x10" * 11
    seeder.enqueue(
        "billing", "charge", binary, job_id="charge-binary", content_type="application/octet-stream"
    )
    big = json.dumps({"rows": "x" * BIG + BIG_END})
    seeder.enqueue("billing", "export", big, job_id="export-big", content_type="application/json")

    held = seed.HeldLease(seeder, "reports", "report-q4", worker_id="reports-worker-1")
    try:
        yield Showcase(
            completed=COMPLETED,
            emails_ids=[
                *COMPLETED,
                "welcome-edsger",
                "welcome-barbara",
                "reminder-ada",
                *dead.all,
            ],
            billing_ids=["invoice-mail-77", "charge-binary", "export-big"],
            dead=dead,
            active_id="report-q4",
            worker_id="reports-worker-1",
            binary_id="charge-binary",
            big_id="export-big",
        )
    finally:
        held.release()


def number(text: str) -> int:
    digits = re.sub(r"[^0-9]", "", text)
    assert digits, f"no number in {text!r}"
    return int(digits)


def number_in(text: str | None) -> int:
    """The first number in ``text``."""
    m = re.search(r"\d+", text or "")
    assert m, f"no number in {text!r}"
    return int(m.group())


def row_ids(page: Page, table: str, attr: str) -> list[str]:
    rows = page.locator(f"table#{table} tr[{attr}]")
    return [rows.nth(i).get_attribute(attr) for i in range(rows.count())]


def test_overview(admin_page, ui_server, seeder, showcase):
    page = admin_page
    page.goto(ui_server.url("/ui/"))
    table = page.locator("table#queues")
    expect(table).to_be_visible()
    queues = {q.queue: q for q in seeder.queues.list()}
    assert {"emails", "billing", "reports"} <= set(queues)
    expect(table.locator("tr[data-queue]")).to_have_count(len(queues))
    for name, stats in queues.items():
        row = table.locator(f"tr[data-queue='{name}']")
        for col in ("waiting", "delayed", "active", "dead"):
            expect(row.locator(f"td[data-col={col}]")).to_have_text(
                re.compile(rf"^\D*{getattr(stats, col)}\D*$"), use_inner_text=True
            )
        assert number(row.locator("td[data-col=workers]").inner_text()) == stats.workers_connected
        expect(row.locator("td[data-col=oldest_waiting]")).to_be_attached()
        expect(row.locator("svg.spark")).to_have_count(2)
        # A link to the queue's page.
        expect(row.locator(f"a[href^='/ui/queues/{name}']").first).to_be_attached()
    assert queues["billing"].paused and not queues["emails"].paused
    paused = table.locator("tr[data-queue='billing'] td[data-col=paused]").inner_text().strip()
    running = table.locator("tr[data-queue='emails'] td[data-col=paused]").inner_text().strip()
    assert paused != running, (paused, running)
    assert queues["reports"].workers_connected >= 1
    assert queues["emails"].oldest_waiting_age.ToTimedelta().total_seconds() >= 0
    assert table.locator("tr[data-queue='emails'] td[data-col=oldest_waiting]").inner_text().strip()
    # The sparklines count this replica's last minutes: emails had 3 jobs completed and 5
    # attempts failed (3 NonRetryable, 2 TemplateMissing), all since the server started.
    sparks = table.locator("tr[data-queue='emails'] svg.spark")
    assert number_in(sparks.nth(0).get_attribute("aria-label")) == len(showcase.completed)
    assert number_in(sparks.nth(1).get_attribute("aria-label")) == len(showcase.dead.all)
    shot(page, "overview")


@pytest.mark.parametrize("state", STATES)
def test_queue_page_per_state(admin_page, ui_server, seeder, showcase, state):
    # emails has jobs in every state but active; reports has the held one.
    queue, ids = ("reports", [showcase.active_id]) if state == "active" else ("emails", showcase.emails_ids)
    expected = sorted(j for j in ids if seed.state_of(seeder, queue, j) == STATE[state])
    assert expected, f"the showcase has no {state} job on {queue}"
    assert getattr(seeder.queues.stats(queue), state) == len(expected)
    page = admin_page
    page.goto(ui_server.url(f"/ui/queues/{queue}?state={state}"))
    expect(page.locator("#config")).to_be_visible()
    expect(page.locator("#paused")).to_be_attached()
    expect(page.locator("form#job-search")).to_be_attached()
    expect(page.locator("table#jobs tr[data-job-id]")).to_have_count(len(expected))
    assert sorted(row_ids(page, "jobs", "data-job-id")) == expected
    shot(page, f"queue-{state}")


def test_queue_page_config_and_paused(admin_page, ui_server, seeder, showcase):
    page = admin_page
    config = seeder.queues.get_config("billing")
    page.goto(ui_server.url("/ui/queues/billing?state=waiting"))
    expect(page.locator("#config")).to_contain_text(str(config.default_max_attempts))
    billing_paused = page.locator("#paused").inner_text()
    page.goto(ui_server.url("/ui/queues/emails?state=waiting"))
    assert page.locator("#paused").inner_text() != billing_paused


def test_job_links_open_the_job_page(admin_page, ui_server, showcase):
    page = admin_page
    page.goto(ui_server.url("/ui/queues/emails?state=completed"))
    page.locator("table#jobs tr[data-job-id='welcome-ada'] a").first.click()
    expect(page).to_have_url(ui_server.url("/ui/queues/emails/jobs/welcome-ada"))
    expect(page.locator("#job-state")).to_contain_text(re.compile("completed", re.I))


def test_search_by_name(admin_page, ui_server, seeder, showcase):
    page = admin_page
    page.goto(ui_server.url("/ui/queues/emails?state=dead&name=send-digest"))
    expect(page.locator("table#jobs tr[data-job-id]")).to_have_count(len(showcase.dead.template_missing))
    assert sorted(row_ids(page, "jobs", "data-job-id")) == sorted(showcase.dead.template_missing)
    # The same through the form.
    page.goto(ui_server.url("/ui/queues/emails?state=dead"))
    form = page.locator("form#job-search")
    form.locator("[name=name]").fill("send-receipt")
    form.locator("[type=submit]").click()
    expect(page.locator("table#jobs tr[data-job-id]")).to_have_count(len(showcase.dead.invalid_address))
    assert sorted(row_ids(page, "jobs", "data-job-id")) == sorted(showcase.dead.invalid_address)
    shot(page, "queue-search")


def test_pager_walks_every_job_once(admin_page, ui_server, seeder, fresh_queue):
    ids = [f"bulk-{i:04d}" for i in range(260)]
    results = seeder.enqueue_batch(
        [jobwire.job_spec(fresh_queue, "send-welcome", {"n": i}, job_id=j) for i, j in enumerate(ids)]
    )
    assert all(r.created for r in results)
    page = admin_page
    page.goto(ui_server.url(f"/ui/queues/{fresh_queue}?state=waiting"))
    first = page.locator("table#jobs tr[data-job-id]").first
    seen: list[str] = []
    for _ in range(len(ids) + 1):
        expect(first).to_be_attached()
        rows = row_ids(page, "jobs", "data-job-id")
        seen += rows
        if page.locator("a.next-page").count() == 0:
            break
        page.locator("a.next-page").first.click()
        # The next page is there once its first row is another job (a navigation or a swap).
        expect(first).not_to_have_attribute("data-job-id", rows[0])
    assert len(seen) == len(set(seen)), "a job shown on two pages"
    assert sorted(seen) == ids


def test_job_page_of_a_dead_job(admin_page, ui_server, seeder, showcase):
    job_id = showcase.dead.invalid_address[0]
    job = seeder.get_job("emails", job_id)
    assert job.state == pb.JOB_STATE_DEAD and job.errors
    page = admin_page
    page.goto(ui_server.url(f"/ui/queues/emails/jobs/{job_id}"))
    expect(page.locator("#job-state")).to_contain_text(re.compile("dead", re.I))
    expect(page.locator("#attempts")).to_contain_text(str(job.attempts_made))
    for err in job.errors:
        expect(page.locator("#errors")).to_contain_text(err.message)
        expect(page.locator("#errors")).to_contain_text(err.error_type)
    # Pretty JSON: one member a line, whatever the key order.
    shown = page.locator("#payload").inner_text()
    for key, value in json.loads(job.payload).items():
        assert f"{json.dumps(key)}: {json.dumps(value)}" in shown, shown
    assert len(shown.strip().splitlines()) >= 4, shown
    for key, value in job.metadata.items():
        expect(page.locator("#metadata")).to_contain_text(key)
        expect(page.locator("#metadata")).to_contain_text(value)
    expect(page.locator("#trace-id")).to_contain_text(seed.TRACE_ID)
    shot(page, "job")


def test_job_page_of_a_template_missing_job(admin_page, ui_server, seeder, showcase):
    job_id = showcase.dead.template_missing[0]
    job = seeder.get_job("emails", job_id)
    page = admin_page
    page.goto(ui_server.url(f"/ui/queues/emails/jobs/{job_id}"))
    expect(page.locator("#errors")).to_contain_text("TemplateMissing")
    expect(page.locator("#errors")).to_contain_text(job.errors[-1].message)


def test_job_page_shows_binary_payload_as_hex(admin_page, ui_server, seeder, showcase):
    job = seeder.get_job("billing", showcase.binary_id)
    page = admin_page
    page.goto(ui_server.url(f"/ui/queues/billing/jobs/{showcase.binary_id}"))
    expect(page.locator("#payload")).to_be_visible()
    shown = re.sub(r"[^0-9a-f]", "", page.locator("#payload").inner_text().lower())
    assert job.payload.hex() in shown, shown


def test_job_page_caps_a_big_payload(admin_page, ui_server, seeder, showcase):
    job = seeder.get_job("billing", showcase.big_id)
    assert len(job.payload) > BIG
    page = admin_page
    page.goto(ui_server.url(f"/ui/queues/billing/jobs/{showcase.big_id}"))
    expect(page.locator("#payload")).to_be_visible()
    text = page.locator("#payload").inner_text()
    assert len(text) < len(job.payload), "the payload is shown whole"
    assert BIG_END not in text and BIG_END.encode().hex() not in re.sub(r"\s", "", text).lower()
    shot(page, "job-big-payload")


def test_dead_letter_page(admin_page, ui_server, seeder, showcase):
    page = admin_page
    page.goto(ui_server.url("/ui/queues/emails/dead"))
    expect(page.locator("form#dlq-filter")).to_be_visible()
    dead = sorted(j.job_id for j in seeder.dead_letters.list("emails"))
    boxes = page.locator("table#dead input[type=checkbox][name=job_id]")
    expect(boxes).to_have_count(len(dead))
    assert sorted(boxes.nth(i).get_attribute("value") for i in range(boxes.count())) == dead
    shot(page, "dead-letters")


def test_dead_letter_filter(admin_page, ui_server, seeder, showcase):
    page = admin_page
    page.goto(ui_server.url("/ui/queues/emails/dead"))
    form = page.locator("form#dlq-filter")
    form.locator("[name=error_type]").fill("TemplateMissing")
    form.locator("[type=submit]").first.click()
    expect(page).to_have_url(re.compile(r"error_type=TemplateMissing"))
    want = sorted(
        j.job_id
        for j in seeder.dead_letters.list("emails", filter=pb.DeadLetterFilter(error_type="TemplateMissing"))
    )
    assert want == sorted(showcase.dead.template_missing)
    boxes = page.locator("table#dead input[type=checkbox][name=job_id]")
    expect(boxes).to_have_count(len(want))
    assert sorted(boxes.nth(i).get_attribute("value") for i in range(boxes.count())) == want
    # A message prefix through the URL.
    page.goto(ui_server.url("/ui/queues/emails/dead?message_prefix=mailbox+does+not"))
    expect(boxes).to_have_count(len(showcase.dead.invalid_address))
    shot(page, "dead-letters-filtered")


def test_workers_page(admin_page, ui_server, seeder, showcase):
    page = admin_page
    page.goto(ui_server.url("/ui/workers"))
    table = page.locator("table#workers")
    expect(table).to_be_visible()
    with ui_server.channel("seeder") as channel:
        workers = list(pb.QueueServiceStub(channel).ListWorkers(pb.ListWorkersRequest(), timeout=10).streams)
    held = [w for w in workers if w.worker_id == showcase.worker_id]
    assert len(held) == 1 and held[0].held_leases == 1, workers
    expect(table.locator("tr[data-stream-id]")).to_have_count(len(workers))
    for w in workers:
        row = table.locator(f"tr[data-stream-id='{w.stream_id}']")
        expect(row).to_contain_text(w.worker_id)
        expect(row).to_contain_text(w.replica_id)
        for queue in w.queues:
            expect(row).to_contain_text(queue)
    shot(page, "workers")
