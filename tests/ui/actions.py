"""Helpers for the dashboard's actions: the confirmation step, the audit lines, job states by gRPC."""

from __future__ import annotations

import re

import grpc
import jobwire.sync
from jobwire import pb
from playwright.sync_api import Locator, Page, Response, expect

from conftest import UiServer, check_origin


def first_number(text: str) -> int:
    m = re.search(r"\d+", text.replace(",", ""))
    assert m, f"no number in {text!r}"
    return int(m.group())


def submit(page: Page, button: Locator) -> Response:
    """Clicks a submit ``button`` and returns the response to the POST it sends (the first one:
    a 303 when the dashboard redirects after the action), so the action is done on the server
    when this returns."""
    with page.expect_response(lambda r: r.request.method == "POST") as info:
        button.click()
    return check_origin(info.value)


def confirm(page: Page, count: int) -> None:
    """On a bulk action's confirmation page: checks ``#confirm-count`` says ``count`` and
    clicks ``[data-action=confirm]``; returns on the result page."""
    expect(page.locator("#confirm-count")).to_be_visible()
    assert first_number(page.locator("#confirm-count").inner_text()) == count
    submit(page, page.locator("[data-action=confirm]"))
    expect(page.locator("#result")).to_be_visible()


def confirmation_form(page: Page, server: UiServer, queue: str, job_id: str) -> tuple[str, list[list[str]]]:
    """As the admin on ``page``: selects ``job_id`` on ``queue``'s dead page and clicks
    replay-selected; returns the confirmation form's action URL and fields (the request that
    would replay it), unsent."""
    page.goto(server.url(f"/ui/queues/{queue}/dead"))
    page.locator(f"table#dead input[type=checkbox][name=job_id][value='{job_id}']").check()
    submit(page, page.locator("[data-action=replay-selected]"))
    expect(page.locator("#confirm-count")).to_be_visible()
    assert first_number(page.locator("#confirm-count").inner_text()) == 1
    form = page.locator("form:has([data-action=confirm])")
    action = form.evaluate("f => f.action")
    fields = form.evaluate("f => [...new FormData(f).entries()]")
    assert any(k == "csrf" for k, _ in fields), fields
    return action, fields


def post(page: Page, url: str, fields: list[list[str]]) -> int:
    """POSTs ``fields`` form-encoded to ``url`` from ``page`` (its cookies, same origin); the
    status, a redirect not followed."""
    return page.evaluate(
        """async ([url, fields]) => {
            const r = await fetch(url, {method: "POST", body: new URLSearchParams(fields),
                                        redirect: "manual", credentials: "same-origin"});
            return r.type === "opaqueredirect" ? 303 : r.status;
        }""",
        [url, fields],
    )


def csrf_of(page: Page) -> str:
    token = page.locator("input[name=csrf]").first.get_attribute("value")
    assert token, "no CSRF token on the page"
    return token


def with_csrf(fields: list[list[str]], token: str | None) -> list[list[str]]:
    out = [[k, v] for k, v in fields if k != "csrf"]
    return out + ([["csrf", token]] if token is not None else [])


def state(client: jobwire.sync.Client, queue: str, job_id: str) -> str:
    """The job's state as gRPC says (``"waiting"``, ``"dead"``, ...), ``"gone"`` if NOT_FOUND."""
    try:
        job = client.get_job(queue, job_id)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:
            return "gone"
        raise
    return pb.JobState.Name(job.state).removeprefix("JOB_STATE_").lower()


def dead_ids(client: jobwire.sync.Client, queue: str) -> list[str]:
    return sorted(j.job_id for j in client.dead_letters.list(queue))


def audit_lines(server: UiServer, action: str, queue: str) -> list[str]:
    """The server's audit lines (target jobwire::audit, outcome done) of ``action``
    (``replay_dead_letters``) on ``queue``: ``... admin action principal=oncall via=token
    action="replay_dead_letters" queue="q" filter="job_ids(1)" count=1 outcome="done"``."""
    log = server.log_path.read_text(errors="replace")
    done = re.compile(
        rf'jobwire::audit: admin action .*\baction="?{re.escape(action)}"? queue="?{re.escape(queue)}"? '
        r'.*outcome="?done'
    )
    return [line for line in log.splitlines() if done.search(line)]


def count_field(line: str) -> int:
    m = re.search(r"count=(\d+)", line)
    assert m, line
    return int(m.group(1))
