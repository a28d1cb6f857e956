"""An operator's session ends 12 h after its login or 30 minutes after its latest console page (core.admin.
AdminSessionMiddleware), with a real staff login through the admin's form; the API never loads a session."""
from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.contrib.sessions.models import Session
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.admin import SEEN, SINCE
from orders.console import VIEWER_GROUP

from ..conftest import shopper_headers

pytestmark = pytest.mark.django_db
CONSOLE = "/admin/campaigns/campaign/"


@pytest.fixture
def operator(client):
    """The test client, logged in through the admin's login form as a staff user (a viewer, no superuser)."""
    User.objects.create_user("olga", password="pw-olga-1", is_staff=True).groups.add(
        Group.objects.get(name=VIEWER_GROUP))
    answer = client.post("/admin/login/", {"username": "olga", "password": "pw-olga-1", "next": "/admin/"})
    assert answer.status_code == 302 and answer["Location"] == "/admin/"
    return client


def age(client, **seconds_ago: int) -> None:
    """Move the session's login (since) and latest page (seen) into the past, as the clock would."""
    session, now = client.session, int(time.time())
    for name, key in (("since", SINCE), ("seen", SEEN)):
        if name in seconds_ago:
            session[key] = now - seconds_ago[name]
    session.save()


def test_a_session_lasts_12_hours_and_its_cookie_too(operator) -> None:
    assert settings.SESSION_COOKIE_AGE == settings.ADMIN_SESSION_SECONDS == 12 * 3600
    assert operator.cookies[settings.SESSION_COOKIE_NAME]["max-age"] == 12 * 3600
    assert operator.get("/admin/").status_code == 200
    assert operator.session[SINCE] == operator.session[SEEN] == pytest.approx(time.time(), abs=5)


def test_an_active_operator_stays_logged_in_and_an_idle_one_is_asked_to_log_in_again(operator) -> None:
    operator.get("/admin/")
    age(operator, since=3600, seen=29 * 60)  # 29 minutes idle: still in
    assert operator.get(CONSOLE).status_code == 200
    assert operator.session[SEEN] == pytest.approx(time.time(), abs=5)  # this page counts as activity

    age(operator, seen=31 * 60)
    answer = operator.get(CONSOLE)

    assert answer.status_code == 302 and answer["Location"].startswith("/admin/login/")
    assert Session.objects.count() == 0  # the session itself is gone, not only refused
    assert operator.get(CONSOLE).status_code == 302


def test_a_session_ends_12_hours_after_the_login_however_active(operator) -> None:
    operator.get("/admin/")
    age(operator, since=12 * 3600 + 1, seen=10)

    answer = operator.get(CONSOLE)

    assert answer.status_code == 302 and answer["Location"].startswith("/admin/login/")
    # Logging in again starts a new 12 h.
    operator.post("/admin/login/", {"username": "olga", "password": "pw-olga-1", "next": "/admin/"})
    assert operator.get(CONSOLE).status_code == 200


def test_the_api_never_loads_the_operators_session(operator, live_campaign) -> None:
    """An operator's browser sends its session cookie to the API too: the API does not read it."""
    campaign = live_campaign(total_stock=5)
    operator.get("/admin/")
    age(operator, seen=31 * 60)  # idle: the console would end it, the API leaves it alone

    with CaptureQueriesContext(connection) as queries:
        claimed = operator.post(f"/api/v1/campaigns/{campaign.pk}/claim", "{}", "application/json",
                                **shopper_headers("ann"))
        listed = operator.get("/api/v1/campaigns", **shopper_headers("ann"))

    assert claimed.status_code == 200 and listed.status_code == 200
    assert not [q["sql"] for q in queries if "django_session" in q["sql"]]
    assert Session.objects.count() == 1
