"""The web pages with API keys on: sign in with a key, a hardened cookie, your tenant only, sign out."""

from __future__ import annotations

import re
from typing import Any

from tests.auth.conftest import Keys, t2v


def _csrf(client: Any, path: str = "/ui/sign-in") -> str:
    page = client.get(path).get_data(as_text=True)
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found, page[:500]
    return found.group(1)


def sign_in(client: Any, secret: str, **environ: Any) -> Any:
    token = _csrf(client)
    return client.post(
        "/ui/sign-in", data={"csrf_token": token, "key": secret, "next": "/ui/jobs"}, **environ
    )


def test_pages_send_strangers_to_sign_in(kclient: Any, keys: Keys) -> None:
    for path in ("/", "/ui/jobs", "/ui/batches"):
        response = kclient.get(path)
        assert response.status_code == 302 and "/ui/sign-in" in response.headers["Location"], path
    assert kclient.get("/ui/sign-in").status_code == 200


def test_sign_in_shows_only_your_tenant_and_sign_out_forgets(kclient: Any, keys: Keys) -> None:
    mine = t2v(kclient, keys.alice).get_json()["id"]
    theirs = t2v(kclient, keys.bob).get_json()["id"]
    response = sign_in(kclient, keys.alice)
    assert response.status_code == 303 and response.headers["Location"].endswith("/ui/jobs")
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" not in cookie
    assert keys.alice not in cookie
    page = kclient.get("/ui/jobs").get_data(as_text=True)
    assert mine[:8] in page and theirs[:8] not in page and "alice" in page
    assert kclient.get(f"/ui/jobs/{theirs}").status_code == 404
    assert kclient.get(f"/ui/jobs/{mine}").status_code == 200
    token = _csrf(kclient, "/ui/jobs")
    out = kclient.post("/ui/sign-out", data={"csrf_token": token})
    assert out.status_code == 303
    assert kclient.get("/ui/jobs").status_code == 302


def test_a_wrong_key_is_refused_and_https_cookies_are_secure(kclient: Any, keys: Keys) -> None:
    wrong = sign_in(kclient, "jsk_" + "z" * 32)
    assert wrong.status_code == 401 and "not valid" in wrong.get_data(as_text=True)
    assert "Set-Cookie" not in wrong.headers or "key_id" not in wrong.headers["Set-Cookie"]
    secure = sign_in(kclient, keys.bob, base_url="https://localhost")
    assert secure.status_code == 303 and "Secure" in secure.headers["Set-Cookie"]
    proxied = sign_in(kclient, keys.bob, headers={"X-Forwarded-Proto": "https"})
    assert "Secure" in proxied.headers["Set-Cookie"]


def test_next_never_leaves_the_site(kclient: Any, keys: Keys) -> None:
    token = _csrf(kclient)
    for target in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
        response = kclient.post("/ui/sign-in", data={"csrf_token": token, "key": keys.alice, "next": target})
        assert response.status_code == 303 and response.headers["Location"].endswith("/ui/jobs"), target
