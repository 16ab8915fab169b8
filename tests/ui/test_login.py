"""Logging in and out of the dashboard in a real browser (`serve --ui --auth-file`).

The login form; a bad token gets the form again with 401 and an error, and no session; a good
one lands on the overview with the principal shown and a session cookie that is HttpOnly,
SameSite=Strict and scoped to /ui, the token itself in no URL, page or server log line;
pages without a session show the login form; logout ends the session on the server (the old
cookie no longer opens a page).
"""

from __future__ import annotations

from playwright.sync_api import expect

from conftest import check_origin, login, shot

SESSION_COOKIE = "jobwire_session"


def test_login_form(page, ui_server):
    page.goto(ui_server.url("/ui/login"))
    form = page.locator("form#login")
    expect(form).to_be_visible()
    expect(form.locator("input[name=token]")).to_have_attribute("type", "password")
    expect(form.locator("[type=submit]")).to_be_visible()
    shot(page, "login")


def test_bad_token_is_refused(page, ui_server):
    page.goto(ui_server.url("/ui/login"))
    # A well-formed token of a known id with the wrong secret, then something that is no token.
    forged = ui_server.auth.tokens["oncall"][:-4] + "AAAA"
    for bad in (forged, "not-a-token"):
        page.locator("form#login input[name=token]").fill(bad)
        with page.expect_response(
            lambda r: r.url == ui_server.url("/ui/login") and r.request.method == "POST"
        ) as resp:
            page.locator("form#login [type=submit]").click()
        assert check_origin(resp.value).status == 401
        expect(page.locator(".error")).to_be_visible()
        expect(page.locator("form#login")).to_be_visible()
        assert SESSION_COOKIE not in {c["name"] for c in page.context.cookies()}
    shot(page, "login-refused")


def test_good_token_opens_the_overview(page, ui_server):
    token = ui_server.auth.tokens["oncall"]
    urls: list[str] = []
    page.on("request", lambda r: urls.append(r.url))
    login(page, ui_server, "oncall")
    expect(page.locator("nav a[href='/ui/']").first).to_be_attached()
    expect(page.locator("nav a[href='/ui/workers']").first).to_be_attached()

    cookies = {c["name"]: c for c in page.context.cookies()}
    assert SESSION_COOKIE in cookies, cookies
    cookie = cookies[SESSION_COOKIE]
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/ui"
    secret = token.split("_", 2)[2]
    assert secret not in cookie["value"]
    assert not [u for u in urls if secret in u]
    assert secret not in page.content()
    assert secret not in ui_server.log_path.read_text(errors="replace")


def test_pages_need_a_session(page, ui_server):
    for path in ("/ui/", "/ui/workers"):
        page.goto(ui_server.url(path))
        expect(page.locator("form#login")).to_be_visible()
        expect(page.locator("#whoami")).to_have_count(0)


def test_logout_ends_the_session(new_context, ui_server):
    ctx = new_context()
    page = login(ctx.new_page(), ui_server, "support")
    old = [c for c in ctx.cookies() if c["name"] == SESSION_COOKIE]
    assert len(old) == 1

    with page.expect_response(lambda r: r.request.method == "POST") as resp:
        page.locator("form[action='/ui/logout'] [type=submit]").click()
    check_origin(resp.value)
    expect(page.locator("form#login")).to_be_visible()
    page.goto(ui_server.url("/ui/"))
    expect(page.locator("form#login")).to_be_visible()

    # The old cookie, replayed in another browser, opens nothing: the server forgot the session.
    replay = new_context()
    replay.add_cookies(old)
    other = replay.new_page()
    other.goto(ui_server.url("/ui/"))
    expect(other.locator("form#login")).to_be_visible()
    expect(other.locator("#whoami")).to_have_count(0)
