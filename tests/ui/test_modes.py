"""The dashboard's modes: off without ``--ui``, open to ``anonymous`` without an auth file, and
``--ui-read-only``.

* Without ``--ui`` every ``/ui`` path is 404 (GET and POST), the HTTP port otherwise serving.
* ``--ui`` without ``--auth-file``: no login; the visitor is ``anonymous`` with every right,
  and the ``#auth-off`` banner says so on every page.
* ``--ui --ui-read-only`` beside a normal ``--ui`` server on the same Redis: the admin sees no
  ``[data-action]`` on any page of the read-only one, and the very replay request that the
  normal server's confirmation form would send, posted to the read-only server with that
  session's valid CSRF token, is refused 403 with the job still dead.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from jobwire.testing import JobwireServer, RedisServer
from playwright.sync_api import expect

import seed
from actions import audit_lines, confirmation_form, csrf_of, dead_ids, post, state, with_csrf
from conftest import UiServer, jobwire_binary, login, shot, start_server


def status_of(url: str, method: str = "GET") -> int:
    req = urllib.request.Request(url, method=method, data=b"token=x" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def test_without_the_flag_the_dashboard_is_not_there(tmp_path):
    jobwire_binary()
    with JobwireServer(tmp_path) as server:
        base = f"http://127.0.0.1:{server.http_port}"
        assert status_of(f"{base}/readyz") == 200
        for path in (
            "/ui",
            "/ui/",
            "/ui/login",
            "/ui/workers",
            "/ui/queues/emails",
            "/ui/queues/emails/dead",
        ):
            assert status_of(base + path) == 404, path
        assert status_of(f"{base}/ui/login", "POST") == 404
        assert status_of(f"{base}/ui/logout", "POST") == 404


def test_without_an_auth_file_everyone_is_anonymous(page, tmp_path):
    server = start_server(tmp_path)
    try:
        with server.client() as client:
            seed.make_dead(client, "open", invalid_address=["receipt-1"])
        for path in ("/ui/", "/ui/workers", "/ui/queues/open/dead", "/ui/queues/open/jobs/receipt-1"):
            page.goto(server.url(path))
            expect(page.locator("#auth-off")).to_be_visible()
            expect(page.locator("#whoami")).to_contain_text("anonymous")
            expect(page.locator("form#login")).to_have_count(0)
        # All rights: the dead page has its actions.
        page.goto(server.url("/ui/queues/open/dead"))
        expect(page.locator("[data-action=replay-selected]")).to_have_count(1)
        shot(page, "auth-off")
    finally:
        server.stop()


@pytest.fixture(scope="module")
def pair(auth, tmp_path_factory):
    """A normal `--ui` server and a `--ui --ui-read-only` one on the same Redis."""
    redis = RedisServer(tmp_path_factory.mktemp("redis"))
    redis.start()
    servers: list[UiServer] = []
    try:
        for name, extra in (("normal", []), ("read-only", ["--ui-read-only"])):
            jobwire_binary()
            s = UiServer(
                tmp_path_factory.mktemp(name), ["--auth-file", str(auth.file), *extra], auth, redis.url
            )
            s.start()
            servers.append(s)
        yield servers[0], servers[1]
    finally:
        for s in servers:
            s.stop()
        redis.stop()


def test_read_only_hides_and_refuses_every_action(new_context, pair):
    normal, read_only = pair
    with normal.client() as client:
        dead = seed.make_dead(
            client, "frozen", invalid_address=["receipt-1", "receipt-2"], completed=["welcome-1"]
        )
        client.enqueue("frozen", "send-welcome", {"to": "ada@example.com"}, job_id="welcome-2")
        target = dead.invalid_address[0]

        page = login(new_context().new_page(), read_only, "oncall")
        for path in (
            "/ui/",
            "/ui/workers",
            "/ui/queues/frozen?state=waiting",
            "/ui/queues/frozen?state=dead",
            "/ui/queues/frozen/dead",
            f"/ui/queues/frozen/jobs/{target}",
        ):
            page.goto(read_only.url(path))
            expect(page.locator("#whoami")).to_contain_text("oncall")
            expect(page.locator("[data-action]")).to_have_count(0)
        shot(page, "read-only-dead-letters")

        # The replay request the normal server would carry out, sent to the read-only one.
        admin = login(new_context().new_page(), normal, "oncall")
        action, fields = confirmation_form(admin, normal, "frozen", target)
        path = action.split(str(normal.http_port), 1)[1]
        page.goto(read_only.url("/ui/queues/frozen/dead"))
        before = dead_ids(client, "frozen")
        assert post(page, read_only.url(path), with_csrf(fields, csrf_of(page))) == 403
        assert state(client, "frozen", target) == "dead"
        assert dead_ids(client, "frozen") == before
        assert not audit_lines(read_only, "replay_dead_letters", "frozen")
