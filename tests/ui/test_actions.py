"""The admin's actions through the dashboard, each checked through the gRPC API afterwards.

Each test has a queue of its own with real dead jobs (seed.make_dead: three ``invalid_address``
and two ``TemplateMissing``). Replay of one selected job (select, replay-selected, the
confirmation with its count, confirm): the job is waiting, active or completed and no longer
dead, the others untouched, one audit line by the admin with count 1. Replay by filter: the
confirmation shows how many match before anything changes, then exactly those are replayed.
Delete of a selected job; replay from a dead job's own page; pause and resume; purge only with
the queue's name typed (a wrong or empty name changes nothing).
"""

from __future__ import annotations

import re

import pytest
from jobwire import pb
from playwright.sync_api import expect

import seed
from actions import audit_lines, confirm, count_field, dead_ids, first_number, post, state, submit
from conftest import shot

ALIVE = {"waiting", "active", "completed"}  # a replayed job may already have run again


@pytest.fixture
def dead(seeder, fresh_queue) -> seed.Dead:
    return seed.make_dead(
        seeder,
        fresh_queue,
        invalid_address=[f"receipt-{i}" for i in range(3)],
        template_missing=["digest-1", "digest-2"],
    )


def test_replay_one_selected_dead_job(admin_page, ui_server, seeder, fresh_queue, dead):
    target = dead.invalid_address[0]
    page = admin_page
    page.goto(ui_server.url(f"/ui/queues/{fresh_queue}/dead"))
    page.locator(f"table#dead input[type=checkbox][name=job_id][value='{target}']").check()
    submit(page, page.locator("[data-action=replay-selected]"))
    expect(page.locator("#confirm-count")).to_be_visible()
    expect(page.locator("body")).to_contain_text(target)  # the first ids are shown
    assert dead_ids(seeder, fresh_queue) == sorted(dead.all), "changed before the confirmation"
    shot(page, "confirm-replay")
    confirm(page, 1)
    expect(page.locator("#result")).to_contain_text(re.compile(r"replay", re.I))
    assert first_number(page.locator("#result").inner_text()) == 1
    shot(page, "result-replay")

    assert state(seeder, fresh_queue, target) in ALIVE
    job = seeder.get_job(fresh_queue, target)
    assert job.replays == 1
    assert dead_ids(seeder, fresh_queue) == sorted(set(dead.all) - {target})
    lines = audit_lines(ui_server, "replay_dead_letters", fresh_queue)
    assert len(lines) == 1 and "oncall" in lines[0] and count_field(lines[0]) == 1, lines


def test_replay_by_filter_shows_the_count_then_replays_exactly_those(
    admin_page, ui_server, seeder, fresh_queue, dead
):
    flt = pb.DeadLetterFilter(error_type="TemplateMissing")
    matching = sorted(j.job_id for j in seeder.dead_letters.list(fresh_queue, filter=flt))
    assert matching == sorted(dead.template_missing)
    page = admin_page
    page.goto(ui_server.url(f"/ui/queues/{fresh_queue}/dead"))
    form = page.locator("form#dlq-filter")
    form.locator("[name=error_type]").fill("TemplateMissing")
    form.locator("[type=submit]").first.click()
    expect(page.locator("table#dead input[type=checkbox][name=job_id]")).to_have_count(len(matching))
    submit(page, page.locator("[data-action=replay-filter]"))
    expect(page.locator("#confirm-count")).to_be_visible()
    assert first_number(page.locator("#confirm-count").inner_text()) == len(matching)
    assert dead_ids(seeder, fresh_queue) == sorted(dead.all), "changed before the confirmation"
    shot(page, "confirm-replay-filter")
    confirm(page, len(matching))
    assert first_number(page.locator("#result").inner_text()) == len(matching)

    for job_id in matching:
        assert state(seeder, fresh_queue, job_id) in ALIVE, job_id
    assert dead_ids(seeder, fresh_queue) == sorted(dead.invalid_address)
    lines = audit_lines(ui_server, "replay_dead_letters", fresh_queue)
    assert len(lines) == 1 and count_field(lines[0]) == len(matching), lines


def test_delete_selected(admin_page, ui_server, seeder, fresh_queue, dead):
    doomed = dead.invalid_address[:2]
    page = admin_page
    page.goto(ui_server.url(f"/ui/queues/{fresh_queue}/dead"))
    for job_id in doomed:
        page.locator(f"table#dead input[type=checkbox][name=job_id][value='{job_id}']").check()
    submit(page, page.locator("[data-action=delete-selected]"))
    confirm(page, len(doomed))
    assert first_number(page.locator("#result").inner_text()) == len(doomed)
    for job_id in doomed:
        assert state(seeder, fresh_queue, job_id) == "gone", job_id
    assert dead_ids(seeder, fresh_queue) == sorted(set(dead.all) - set(doomed))
    lines = audit_lines(ui_server, "delete_dead_letters", fresh_queue)
    assert len(lines) == 1 and count_field(lines[0]) == len(doomed), lines


def test_replay_from_the_job_page(admin_page, ui_server, seeder, fresh_queue, dead):
    target = dead.template_missing[0]
    page = admin_page
    page.goto(ui_server.url(f"/ui/queues/{fresh_queue}/jobs/{target}"))
    expect(page.locator("#job-state")).to_contain_text(re.compile("dead", re.I))
    submit(page, page.locator("[data-action=replay]"))
    # A confirmation step, if the dashboard asks for one, then the result.
    expect(page.locator("#result, [data-action=confirm]").first).to_be_visible()
    if page.locator("[data-action=confirm]").count():
        confirm(page, 1)
    expect(page.locator("#result")).to_be_visible()
    assert state(seeder, fresh_queue, target) in ALIVE
    assert dead_ids(seeder, fresh_queue) == sorted(set(dead.all) - {target})


def test_pause_and_resume(admin_page, ui_server, seeder, fresh_queue):
    seeder.enqueue(fresh_queue, "send-welcome", {"to": "ada@example.com"}, job_id="welcome-ada")
    page = admin_page
    page.goto(ui_server.url(f"/ui/queues/{fresh_queue}"))
    running = page.locator("#paused").inner_text()
    assert submit(page, page.locator("[data-action=pause]")).status < 400
    assert seeder.queues.stats(fresh_queue).paused
    page.goto(ui_server.url(f"/ui/queues/{fresh_queue}"))
    expect(page.locator("#paused")).not_to_have_text(running)
    assert submit(page, page.locator("[data-action=resume]")).status < 400
    assert not seeder.queues.stats(fresh_queue).paused
    page.goto(ui_server.url(f"/ui/queues/{fresh_queue}"))
    expect(page.locator("#paused")).to_have_text(running)
    assert not seeder.queues.stats(fresh_queue).paused
    assert len(audit_lines(ui_server, "pause_queue", fresh_queue)) == 1
    assert len(audit_lines(ui_server, "resume_queue", fresh_queue)) == 1


def test_purge_needs_the_typed_queue_name(admin_page, ui_server, seeder, fresh_queue):
    ids = [f"welcome-{i}" for i in range(3)]
    for job_id in ids:
        seeder.enqueue(fresh_queue, "send-welcome", {"to": f"user{job_id}@example.com"}, job_id=job_id)
    page = admin_page
    for typed in (fresh_queue + "-x", fresh_queue.upper(), "not-the-queue"):
        page.goto(ui_server.url(f"/ui/queues/{fresh_queue}"))
        purge = page.locator("form:has([data-action=purge])")
        purge.locator("input[name=confirm]").fill(typed)
        resp = submit(page, purge.locator("[data-action=purge]"))
        assert resp.status == 400, (typed, resp.status)
        expect(page.locator(".error")).to_contain_text("confirm")
        assert seeder.queues.stats(fresh_queue).waiting == len(ids), typed
    shot(page, "purge-refused")
    # Without the field at all (the browser's `required` would stop an empty one).
    page.goto(ui_server.url(f"/ui/queues/{fresh_queue}"))
    fields = page.locator("form:has([data-action=purge])").evaluate("f => [...new FormData(f).entries()]")
    url = page.locator("form:has([data-action=purge])").evaluate("f => f.action")
    assert post(page, url, [[k, v] for k, v in fields if k != "confirm"]) == 400
    assert post(page, url, [*([k, v] for k, v in fields if k != "confirm"), ["confirm", ""]]) == 400
    assert seeder.queues.stats(fresh_queue).waiting == len(ids)
    assert not audit_lines(ui_server, "purge_queue", fresh_queue)

    page.goto(ui_server.url(f"/ui/queues/{fresh_queue}"))
    purge = page.locator("form:has([data-action=purge])")
    purge.locator("input[name=confirm]").fill(fresh_queue)
    submit(page, purge.locator("[data-action=purge]"))
    expect(page.locator("#result")).to_be_visible()
    assert first_number(page.locator("#result").inner_text()) == len(ids)
    assert seeder.queues.stats(fresh_queue).waiting == 0
    for job_id in ids:
        assert state(seeder, fresh_queue, job_id) == "gone"
    lines = audit_lines(ui_server, "purge_queue", fresh_queue)
    assert len(lines) == 1 and count_field(lines[0]) == len(ids), lines
