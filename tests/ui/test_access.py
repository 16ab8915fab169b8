"""Who may act in the dashboard, in a real browser: the viewer only looks, CSRF guards every POST.

The viewer (``support``, role viewer on every queue) sees every page but no ``[data-action]``
element on any of them (the admin, on the same pages, does: the check is not vacuous). A POST
forged by the viewer, with its own session cookie and the valid CSRF token of its own page,
copying the admin's replay form field for field, is refused 403 and the job stays dead, with no
audit line of a replay. The admin's own POSTs without a CSRF token, with a wrong one, or with
another session's are refused 403 and change nothing; the same form with its own token then
works (so the refused requests differed only in the token).
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

import seed
from actions import audit_lines, confirmation_form, csrf_of, dead_ids, post, state, with_csrf
from conftest import shot


@pytest.fixture(scope="module")
def dead(seeder) -> seed.Dead:
    d = seed.make_dead(
        seeder,
        "access",
        invalid_address=["receipt-1", "receipt-2"],
        template_missing=["digest-1"],
        completed=["welcome-1"],
    )
    seeder.enqueue("access", "send-welcome", {"to": "ada@example.com"}, job_id="welcome-2")
    return d


def pages(dead: seed.Dead) -> dict[str, str]:
    """Every page kind, by screenshot name, for queue ``access``."""
    out = {
        "overview": "/ui/",
        "workers": "/ui/workers",
        "dead-letters": "/ui/queues/access/dead",
        "job-dead": f"/ui/queues/access/jobs/{dead.invalid_address[0]}",
        "job-completed": "/ui/queues/access/jobs/welcome-1",
    }
    for s in ("waiting", "delayed", "active", "completed", "dead"):
        out[f"queue-{s}"] = f"/ui/queues/access?state={s}"
    return out


def test_viewer_sees_no_actions_anywhere(viewer_page, admin_page, ui_server, dead):
    for name, path in pages(dead).items():
        viewer_page.goto(ui_server.url(path))
        expect(viewer_page.locator("#whoami")).to_contain_text("support")
        expect(viewer_page.locator("nav a[href='/ui/']").first).to_be_visible()
        expect(viewer_page.locator("nav a[href='/ui/workers']").first).to_be_visible()
        expect(viewer_page.locator("[data-action]")).to_have_count(0)
        if name in ("dead-letters", "job-dead", "queue-waiting"):
            shot(viewer_page, f"viewer-{name}")
    # The admin, on the pages that have actions, sees them.
    for path, action in [
        ("/ui/queues/access/dead", "replay-selected"),
        (f"/ui/queues/access/jobs/{dead.invalid_address[0]}", "replay"),
        ("/ui/queues/access?state=waiting", "pause"),
    ]:
        admin_page.goto(ui_server.url(path))
        expect(admin_page.locator(f"[data-action={action}]")).to_have_count(1)


def test_forged_post_by_the_viewer_is_refused(admin_page, viewer_page, ui_server, seeder, dead):
    target = dead.invalid_address[0]
    action, fields = confirmation_form(admin_page, ui_server, "access", target)
    viewer_page.goto(ui_server.url("/ui/queues/access/dead"))
    viewer_csrf = csrf_of(viewer_page)
    before = dead_ids(seeder, "access")
    replays = len(audit_lines(ui_server, "replay_dead_letters", "access"))

    assert post(viewer_page, action, with_csrf(fields, viewer_csrf)) == 403
    assert state(seeder, "access", target) == "dead"
    assert dead_ids(seeder, "access") == before
    assert len(audit_lines(ui_server, "replay_dead_letters", "access")) == replays


def test_admin_post_without_the_right_csrf_token_is_refused(admin_page, viewer_page, ui_server, seeder, dead):
    target = dead.invalid_address[1]
    action, fields = confirmation_form(admin_page, ui_server, "access", target)
    own = dict(fields)["csrf"]
    viewer_page.goto(ui_server.url("/ui/"))
    others = csrf_of(viewer_page)
    wrong = own[:-1] + ("A" if own[-1] != "A" else "B")
    before = dead_ids(seeder, "access")
    replays = len(audit_lines(ui_server, "replay_dead_letters", "access"))

    for token in (None, "", wrong, others):
        assert post(admin_page, action, with_csrf(fields, token)) == 403, token
        assert state(seeder, "access", target) == "dead"
        assert dead_ids(seeder, "access") == before
    assert len(audit_lines(ui_server, "replay_dead_letters", "access")) == replays

    # The same request with its own token is carried out: the refusals were the token's.
    assert post(admin_page, action, fields) == 200
    assert state(seeder, "access", target) in {"waiting", "active", "completed"}
    assert len(audit_lines(ui_server, "replay_dead_letters", "access")) == replays + 1
