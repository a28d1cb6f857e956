"""The TLS proxy of docker-compose.yml (deploy/nginx/), run here by this machine's nginx in front of the real web
server: the same template, rendered as the official image renders it (envsubst of the PROXY_ variables, with the
values and defaults compose gives them, PROXY_PRIVATE_ALLOW_RULES from the image's entry point script of ours),
with loopback ports, a certificate made here and nginx's temporary paths under a folder of the test's.

Through it, over TLS: a claim is claimed, with a chunked body too; the server sees the proxy's X-Forwarded-For
(a client's own addresses do not escape the server's per-address limit) and none of a client's forwarded
fields; HTTP/2 is negotiated; plain HTTP is a redirect; /metrics and the console, where DJANGO_ADMIN_URL puts it,
answer only the allowed addresses; a body over its route's limit (64 KiB; the grants API 1 MiB, the console's
grant upload COUPONS_GRANTS_MAX_FILE_BYTES and its form: config/body_limits.py), a head over the proxy's buffers
and too many claims are refused in the contract's JSON; an IPv6 client is limited by its /64, over IPv6 loopback too.

Skipped, with the reason, where nginx is not installed (CI installs Debian's: .ci/run)."""
from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from core.auth import mint_token

from ..conftest import ROOT, free_port, in_one_second, process_env, stop_group, wait_for
from ..webserver.harness import Server

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
TEMPLATE = ROOT / "deploy" / "nginx" / "templates" / "nginx.conf.template"
ALLOW_SCRIPT = ROOT / "deploy" / "nginx" / "19-couponrush-private-allow.envsh"
BODY_LIMIT = 64 * 1024  # settings DATA_UPLOAD_MAX_MEMORY_SIZE, client_max_body_size
ENVSUBST_NAME = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
COMPOSE_DEFAULT = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:-(.*)\}")

pytestmark = pytest.mark.skipif(not Path(NGINX).exists(),
                                reason="nginx is missing: install it (apt-get install -y nginx) to test the proxy")


# ---------------------------------------------------------------------------------------------------------
# The template, rendered as the image renders it


def compose_proxy() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["proxy"])


def compose_environment() -> dict[str, str]:
    """The proxy's environment as compose gives it when the shell sets none of the variables: ${X:-default} is
    its default."""
    env = {}
    for name, value in compose_proxy()["environment"].items():
        default = COMPOSE_DEFAULT.fullmatch(str(value))
        env[name] = default.group(1) if default else str(value)
    return env


def envsubst(text: str, env: dict[str, str]) -> str:
    """`envsubst "$defined_envs"` as 20-envsubst-on-templates.sh runs it: $NAME and ${NAME} of the names given
    (the set ones that NGINX_ENVSUBST_FILTER admits) become their values; everything else stays."""
    return ENVSUBST_NAME.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), text)


def entry_point_script(exported: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Source the entry point script as the image does, with this environment; print what it exports as
    `exported`."""
    return subprocess.run(["sh", "-c", f'. "{ALLOW_SCRIPT}" && printf %s "${exported}"'],
                          env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, timeout=30)


def private_allow_rules(allowed: str) -> subprocess.CompletedProcess[str]:
    return entry_point_script("PROXY_PRIVATE_ALLOW_RULES", PROXY_PRIVATE_ALLOW=allowed)


def admin_location(admin_url: str) -> subprocess.CompletedProcess[str]:
    return entry_point_script("PROXY_ADMIN_LOCATION", PROXY_ADMIN_URL=admin_url)


def grant_upload_max_body(file_bytes: str) -> subprocess.CompletedProcess[str]:
    return entry_point_script("PROXY_GRANT_UPLOAD_MAX_BODY", PROXY_GRANTS_MAX_FILE_BYTES=file_bytes)


def rendered(settings: dict[str, str]) -> str:
    env = {**compose_environment(), **settings}
    rules, location = private_allow_rules(env["PROXY_PRIVATE_ALLOW"]), admin_location(env["PROXY_ADMIN_URL"])
    upload = grant_upload_max_body(env["PROXY_GRANTS_MAX_FILE_BYTES"])
    assert rules.returncode == location.returncode == upload.returncode == 0, (
        rules.stderr + location.stderr + upload.stderr)
    env["PROXY_PRIVATE_ALLOW_RULES"], env["PROXY_ADMIN_LOCATION"] = rules.stdout, location.stdout
    env["PROXY_GRANT_UPLOAD_MAX_BODY"] = upload.stdout
    admitted = re.compile(env["NGINX_ENVSUBST_FILTER"])
    return envsubst(TEMPLATE.read_text(), {k: v for k, v in env.items() if admitted.search(k)})


class Certificate(NamedTuple):
    cert: Path
    key: Path

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert))


class Proxy:
    """nginx with the rendered template in front of 127.0.0.1:upstream, listening on free loopback ports;
    `edit`, a test's own change to the rendered file (said where it is used)."""

    def __init__(self, folder: Path, upstream: int, certificate: Certificate,
                 edit: Callable[[str, int], str] | None = None, **settings: str) -> None:
        self.folder, self.certificate = folder, certificate
        self.https_port, self.http_port = free_port(), free_port()
        self.conf = folder / "nginx.conf"
        conf = rendered({
            "PROXY_HTTPS_LISTEN": f"127.0.0.1:{self.https_port}", "PROXY_HTTP_LISTEN": f"127.0.0.1:{self.http_port}",
            "PROXY_UPSTREAM": f"127.0.0.1:{upstream}", "PROXY_TLS_CERTIFICATE": str(certificate.cert),
            "PROXY_TLS_CERTIFICATE_KEY": str(certificate.key), "PROXY_PID_FILE": str(folder / "nginx.pid"),
            "PROXY_TEMP_DIR": str(folder), **settings,
        })
        self.conf.write_text(edit(conf, self.https_port) if edit else conf)
        self.log = folder / "nginx.log"
        with self.log.open("wb") as out:  # the access log (/dev/stdout) and the error log (stderr)
            self.proc = subprocess.Popen(self.argv("-g", "daemon off;"), stdout=out, stderr=out,
                                         start_new_session=True)
        try:
            wait_for(self.ready, 20, 0.02, "nginx listens")
        except BaseException:
            self.stop()
            raise

    def argv(self, *options: str) -> list[str]:
        return [NGINX, "-c", str(self.conf), "-p", f"{self.folder}/", "-e", str(self.folder / "error.log"), *options]

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"nginx exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", self.https_port), timeout=1).close()
            return True
        except OSError:
            return False

    def stop(self) -> None:
        stop_group(self.proc)

    def connect(self, source: str = "127.0.0.1") -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.https_port, context=self.certificate.context(),
                                           timeout=10, source_address=(source, 0))

    def tls_socket(self) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.https_port), timeout=10)
        return self.certificate.context().wrap_socket(raw, server_hostname="127.0.0.1")


class Answer(NamedTuple):
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        assert self.headers["Content-Type"] == "application/json", self.headers
        return json.loads(self.body)


def call(proxy: Proxy, method: str, path: str, headers: dict[str, str] | None = None, body: Any = None,
         source: str = "127.0.0.1") -> Answer:
    connection = proxy.connect(source)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return Answer(response.status, response.headers, response.read())
    finally:
        connection.close()


def shopper(user: str, **extra: str) -> dict[str, str]:
    return {"X-User-Id": user, "X-Token": mint_token(user, ttl=600), "Content-Type": "application/json", **extra}


def assert_refusal(answer: Answer, status: int, slug: str) -> dict[str, Any]:
    """The contract's JSON form: code (the HTTP status), status (the slug), a detail."""
    body = answer.json()
    assert (answer.status, body["code"], body["status"]) == (status, status, slug), body
    assert set(body) == {"code", "status", "detail"} and body["detail"]
    return dict(body)


# ---------------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    """nginx's prefix, readable by its workers (running as root, nginx runs them as nobody: pytest's own
    temporary folders are the owner's alone)."""
    path = Path(tempfile.mkdtemp(prefix="couponrush-proxy-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def certificate(folder: Path) -> Certificate:
    cert, key = folder / "c.pem", folder / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-days", "2",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    return Certificate(cert, key)


@pytest.fixture(scope="module")
def proxies(folder: Path, certificate: Certificate) -> Iterator[Callable[..., Proxy]]:
    """Start a proxy in front of a port, with these PROXY_ settings; all of them are stopped at the end."""
    started: list[Proxy] = []

    def start(upstream: int, edit: Callable[[str, int], str] | None = None, **settings: str) -> Proxy:
        own = folder / f"proxy{len(started)}"
        own.mkdir(mode=0o755)
        started.append(Proxy(own, upstream, certificate, edit, **settings))
        return started[-1]

    yield start
    for proxy in started:
        proxy.stop()


@pytest.fixture(scope="module")
def server(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The run command's server (Django, the claim) against the test database."""
    started = Server(tmp_path_factory.mktemp("log") / "server.log")
    yield started
    started.stop()


@pytest.fixture(scope="module")
def proxy(server: Server, proxies: Callable[..., Proxy]) -> Proxy:
    """The proxy as compose configures it (its defaults), in front of the server."""
    return proxies(server.port)


class Echo:
    """The web server alone, serving tests/webserver/echo_app.py: it answers with the request it was handed."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        with log.open("wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.webserver.echo_app", "--port", str(self.port),
                                          "--workers", "1"], cwd=ROOT, env=process_env(), stdout=subprocess.DEVNULL,
                                         stderr=out, start_new_session=True)
        wait_for(self.ready, 20, 0.05, "the echo server listens")

    def ready(self) -> bool:
        assert self.proc.poll() is None, "the echo server exited"
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Echo]:
    started = Echo(tmp_path_factory.mktemp("echo") / "echo.log")
    try:
        yield started
    finally:
        stop_group(started.proc)


@pytest.fixture(scope="module")
def echo_proxy(proxies: Callable[..., Proxy], echo: Echo) -> Proxy:
    return proxies(echo.port)


def handed(answer: Answer) -> dict[str, Any]:
    """What the server was handed, from the echo server's answer: headers as a dict of lists."""
    assert answer.status == 200, answer
    request = answer.json()
    fields: dict[str, list[str]] = {}
    for name, value in request["headers"]:
        fields.setdefault(name, []).append(value)
    return {**request, "headers": fields}


# ---------------------------------------------------------------------------------------------------------
# The configuration


def test_every_variable_of_the_template_is_set_by_compose() -> None:
    """Each ${PROXY_...} of the template has its value in compose (PROXY_PRIVATE_ALLOW_RULES from the entry point
    script), compose sets no PROXY_ variable the template does not use, and nginx's own variables are written
    $name in lowercase: the substitution never reaches them."""
    template = re.sub(r"(?m)^\s*#.*$", "", TEMPLATE.read_text())  # its comments name them too
    braced = set(re.findall(r"\$\{([^}]*)\}", template))
    env = compose_environment()
    assert all(name.startswith("PROXY_") for name in braced), braced
    made_by_the_script = {"PROXY_PRIVATE_ALLOW": "PROXY_PRIVATE_ALLOW_RULES", "PROXY_ADMIN_URL": "PROXY_ADMIN_LOCATION",
                          "PROXY_GRANTS_MAX_FILE_BYTES": "PROXY_GRANT_UPLOAD_MAX_BODY"}
    assert braced == {name for name in env if name.startswith("PROXY_")} - set(made_by_the_script) | set(
        made_by_the_script.values())
    nginx_variables = set(re.findall(r"\$([A-Za-z_][A-Za-z0-9_]*)", template))
    assert nginx_variables and all(name == name.lower() for name in nginx_variables), nginx_variables
    assert env["NGINX_ENVSUBST_FILTER"] == "^PROXY_" and env["NGINX_ENVSUBST_OUTPUT_DIR"] == "/etc/nginx"
    mounts = compose_proxy()["volumes"]
    assert "./deploy/nginx/templates:/etc/nginx/templates:ro" in mounts
    assert f"./{ALLOW_SCRIPT.relative_to(ROOT)}:/docker-entrypoint.d/{ALLOW_SCRIPT.name}:ro" in mounts


def test_the_private_allow_list_becomes_allow_rules_and_refuses_anything_else() -> None:
    assert private_allow_rules("").stdout == "allow 127.0.0.1; "
    assert private_allow_rules("10.0.0.0/8, 192.168.1.7 fd00::/8").stdout == (
        "allow 10.0.0.0/8; allow 192.168.1.7; allow fd00::/8; ")
    assert private_allow_rules("all").stdout == "allow all; "
    for bad in ("10.0.0.1; allow all", "10.0.0.0/8/8", "*", "example.com", "10.0.0.1}"):
        refused = private_allow_rules(bad)
        assert refused.returncode == 1 and "is not an address or a network" in refused.stderr, bad
    # The image sources only executable scripts: the mode is git's.
    mode = subprocess.run(["git", "ls-files", "-s", str(ALLOW_SCRIPT.relative_to(ROOT))], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.split()[0]
    assert mode == "100755" and os.access(ALLOW_SCRIPT, os.X_OK)


def test_web_and_the_proxy_get_the_consoles_path_from_one_variable() -> None:
    """DJANGO_ADMIN_URL moves the console (config/settings/base.py, default admin/): compose hands the same
    value to web and to the proxy, which keeps that path private."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert services["web"]["environment"]["DJANGO_ADMIN_URL"] == "${DJANGO_ADMIN_URL:-admin/}"
    assert compose_proxy()["environment"]["PROXY_ADMIN_URL"] == "${DJANGO_ADMIN_URL:-admin/}"
    assert 'ADMIN_URL = env("DJANGO_ADMIN_URL", "admin/")' in (ROOT / "config" / "settings" / "base.py").read_text()


def test_the_consoles_path_becomes_the_private_prefix_and_nothing_else_is_accepted() -> None:
    assert admin_location("admin/").stdout == "/admin"  # also /admin itself, as web's redirect target
    assert admin_location("ops-7f3a/").stdout == "/ops-7f3a"
    assert admin_location("back/office//").stdout == "/back/office"
    assert admin_location("ops").stdout == "/ops"  # path("ops", ...): the console's pages are /opslogin/...
    assert entry_point_script("PROXY_ADMIN_LOCATION").stdout == "/admin"  # unset: the default
    for bad in ("", "/admin/", "ops;allow all;", "ops {", "ops admin/", "op$x/", "<slug:x>/"):
        refused = admin_location(bad)
        assert refused.returncode == 1 and "is not a path" in refused.stderr, bad


def test_nginx_accepts_the_rendered_configuration(folder: Path, certificate: Certificate) -> None:
    own = folder / "syntax"
    own.mkdir(mode=0o755)
    conf = own / "nginx.conf"
    conf.write_text(rendered({
        "PROXY_HTTPS_LISTEN": f"127.0.0.1:{free_port()}", "PROXY_HTTP_LISTEN": f"127.0.0.1:{free_port()}",
        "PROXY_UPSTREAM": "127.0.0.1:9", "PROXY_TLS_CERTIFICATE": str(certificate.cert),
        "PROXY_TLS_CERTIFICATE_KEY": str(certificate.key), "PROXY_PID_FILE": str(own / "nginx.pid"),
        "PROXY_TEMP_DIR": str(own), "PROXY_PRIVATE_ALLOW": "10.0.0.0/8,fd00::/8",
    }))
    assert "${" not in re.sub(r"(?m)^\s*#.*$", "", conf.read_text())
    result = subprocess.run([NGINX, "-t", "-c", str(conf), "-p", f"{own}/", "-e", str(own / "error.log")],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert f"configuration file {conf} test is successful" in result.stderr
    assert "[warn]" not in result.stderr and "[emerg]" not in result.stderr


# ---------------------------------------------------------------------------------------------------------
# Through the proxy


@pytest.mark.django_db(transaction=True)
def test_a_claim_through_the_proxy_is_claimed_with_a_plain_and_with_a_chunked_body(proxy, live_campaign) -> None:
    campaign = live_campaign(total_stock=5)
    path = f"/api/v1/campaigns/{campaign.pk}/claim"
    plain = call(proxy, "POST", path, shopper("ann"), b"{}")
    chunked = call(proxy, "POST", path, shopper("bob"), iter([b"{", b"}"]))  # http.client: Transfer-Encoding
    assert plain.status == chunked.status == 200
    assert plain.json()["status"] == chunked.json()["status"] == "claimed"
    assert plain.json()["claim_id"] != chunked.json()["claim_id"]
    assert call(proxy, "POST", path, shopper("ann"), b"{}").json()["status"] == "limit_reached"


def test_the_server_is_handed_whole_bodies_and_the_proxys_forwarded_fields_only(echo_proxy) -> None:
    spoofed = {"X-Forwarded-For": "203.0.113.9", "Forwarded": "for=203.0.113.9;proto=https",
               "X-Forwarded-Host": "evil.example", "X-Forwarded-Port": "1", "X-Forwarded-Proto": "gopher",
               "X-Real-IP": "203.0.113.9", "X_Forwarded_For": "203.0.113.9", "Proxy": "http://evil.example"}
    plain = handed(call(echo_proxy, "POST", "/x?a=1", {**spoofed, "Host": "shop.example:8443"}, b"{}"))
    fields = plain["headers"]
    assert fields["x-forwarded-for"] == ["127.0.0.1"] and fields["x-forwarded-proto"] == ["https"]
    assert fields["host"] == ["shop.example"]
    assert not {"forwarded", "x-forwarded-host", "x-forwarded-port", "x-real-ip", "x_forwarded_for", "proxy"} & set(
        fields)
    assert (plain["method"], plain["path"], plain["query"], plain["body"]) == ("POST", "/x", "a=1", "{}")

    # A chunked body with a trailer: the server gets the whole body by its Content-Length, and no trailer.
    with contextlib.closing(echo_proxy.tls_socket()) as sock:
        sock.sendall(b"POST /x HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                     b"1\r\n{\r\n1\r\n}\r\n0\r\nX-Trailer: sneaked\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    request = json.loads(reply.split(b"\r\n\r\n", 1)[1])
    names = [name for name, _ in request["headers"]]
    assert request["body"] == "{}" and ["content-length", "2"] in request["headers"]
    assert "transfer-encoding" not in names and "x-trailer" not in names

    # The largest body the server takes passes whole; one byte more is the proxy's 413, before the server.
    assert len(handed(call(echo_proxy, "POST", "/x", {}, b"a" * BODY_LIMIT))["body"]) == BODY_LIMIT


@pytest.mark.django_db(transaction=True)
def test_a_clients_own_forwarded_addresses_do_not_escape_the_servers_per_address_limit(
        proxies, live_campaign, tmp_path) -> None:
    """The server trusts loopback as its proxy and limits 2 claims a second per address. Sent to it directly
    (from a trusted peer), five different X-Forwarded-For are five addresses; through nginx they are all the
    client's own address, which nginx sets in their place."""
    server = Server(tmp_path / "server.log", env={"COUPONS_RATE_LIMIT_IP_PER_SECOND": "2",
                                                  "COUPONS_TRUSTED_PROXY_HOPS": "1",
                                                  "COUPONS_TRUSTED_PROXIES": "127.0.0.1/32"})
    try:
        proxy = proxies(server.port)
        campaign = live_campaign(total_stock=100, per_user_limit=1)
        path = f"/api/v1/campaigns/{campaign.pk}/claim"

        def five(through: str) -> Callable[[int], list[str]]:
            def run(attempt: int) -> list[str]:
                answers = []
                for i in range(5):
                    headers = shopper(f"{through}{attempt}-{i}", **{"X-Forwarded-For": f"198.51.100.{i}"})
                    if through == "proxy":
                        answer = call(proxy, "POST", path, headers, b"{}")
                    else:
                        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
                        connection.request("POST", path, body=b"{}", headers=headers)
                        response = connection.getresponse()
                        answer = Answer(response.status, response.headers, response.read())
                        connection.close()
                    answers.append(answer.json()["status"])
                return answers
            return run

        direct = in_one_second(five("direct"))
        proxied = in_one_second(five("proxy"))
    finally:
        server.stop()
    assert direct == ["claimed"] * 5
    assert proxied == ["claimed", "claimed", "rate_limited", "rate_limited", "rate_limited"]


def test_http2_is_negotiated(proxy) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is missing")
    result = subprocess.run([curl, "--http2", "-s", "--cacert", str(proxy.certificate.cert), "-o", "/dev/null",
                             "-w", "%{http_version} %{http_code}", f"https://127.0.0.1:{proxy.https_port}/healthz"],
                            capture_output=True, text=True, timeout=30)
    assert result.stdout == "2 200", result.stderr


def test_plain_http_is_redirected_to_https(proxy) -> None:
    for port in (proxy.http_port, proxy.https_port):  # the HTTP port, and plain HTTP sent to the HTTPS port
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/api/v1/campaigns?x=1", headers={"Host": "shop.example"})
        response = connection.getresponse()
        response.read()
        connection.close()
        assert (response.status, response.headers["Location"]) == (301, "https://shop.example/api/v1/campaigns?x=1")


def test_metrics_and_admin_answer_only_the_allowed_addresses(server, proxy, proxies) -> None:
    for path in ("/metrics", "/admin/", "/admin/login/", "/admin", "/%61dmin/", "//metrics"):
        assert_refusal(call(proxy, "GET", path, source="127.0.0.2"), 404, "not_found")
    assert call(proxy, "GET", "/metrics").status == 200  # the default list: 127.0.0.1 alone
    assert call(proxy, "GET", "/admin/login/").status == 200
    assert call(proxy, "GET", "/healthz", source="127.0.0.2").status == 200  # the rest is public
    opened = proxies(server.port, PROXY_PRIVATE_ALLOW="127.0.0.2/32")
    assert call(opened, "GET", "/metrics", source="127.0.0.2").status == 200
    assert_refusal(call(opened, "GET", "/metrics"), 404, "not_found")


def test_a_moved_console_is_private_where_it_moved(proxies, tmp_path) -> None:
    """web with DJANGO_ADMIN_URL=ops-7f3a/, the proxy rendered from the same value (compose gives both)."""
    server = Server(tmp_path / "server.log", env={"DJANGO_ADMIN_URL": "ops-7f3a/"})
    try:
        proxy = proxies(server.port, PROXY_ADMIN_URL="ops-7f3a/")
        for path in ("/ops-7f3a/", "/ops-7f3a/login/", "/ops-7f3a", "/%6Fps-7f3a/login/", "//ops-7f3a/login/",
                     "/x/../ops-7f3a/login/",
                     # Public here once resolved, the console's there (web does not resolve them): refused.
                     "/ops-7f3a/../healthz", "/ops-7f3a/%2E%2E/healthz", "/ops-7f3a%2F..%2Fhealthz",
                     "/ops-7f3a/./login/%2e%2e/%2e%2e/healthz?a=1"):
            assert_refusal(call(proxy, "GET", path, source="127.0.0.2"), 404, "not_found")
        # A query is not a path, and a segment of dots and more is a name: web answers them.
        assert call(proxy, "GET", "/healthz?next=/../x", source="127.0.0.2").status == 200
        assert call(proxy, "GET", "/api/v1/campaigns/..1", source="127.0.0.2").json()["detail"] == (
            "Not an id: ids are positive integers.")
        login = call(proxy, "GET", "/ops-7f3a/login/")  # from the allowed address
        assert login.status == 200 and b'name="password"' in login.body
        assert call(proxy, "GET", "/admin/login/").status == 404  # nothing is there any more: web's own 404
    finally:
        server.stop()


def test_a_body_over_64_kib_is_the_proxys_413_in_the_contracts_form(echo_proxy) -> None:
    by_length = call(echo_proxy, "POST", "/x", {"Content-Type": "application/json"}, b"a" * (BODY_LIMIT + 1))
    assert_refusal(by_length, 413, "payload_too_large")
    chunked = call(echo_proxy, "POST", "/x", {}, iter([b"a" * BODY_LIMIT, b"a"]))
    assert_refusal(chunked, 413, "payload_too_large")


def passed_on(answer: Answer, length: int) -> None:
    """The echo server was handed the request with its whole length (it reads no body over its 64 KiB)."""
    assert handed(answer)["headers"]["content-length"] == [str(length)]


def test_the_grants_api_and_the_consoles_upload_take_larger_bodies_and_no_other_route(echo_proxy) -> None:
    """The routes of config/body_limits.py have the server's limits here too: the grants API 1 MiB, the console's
    grant upload COUPONS_GRANTS_MAX_FILE_BYTES and its form (64 MiB by default); any other route 64 KiB."""
    body = b"a" * 600_000
    passed_on(call(echo_proxy, "POST", "/api/v1/campaigns/7/grants", {"Content-Type": "application/json"}, body),
              600_000)
    passed_on(call(echo_proxy, "POST", "/admin/grants/grantbatch/upload/7/", {}, b"a" * 2_000_000), 2_000_000)
    for path in ("/api/v1/carts/validate", "/api/v1/campaigns/7/claim", "/api/v1/campaigns/7/grants/x",
                 "/api/v1/campaigns/grants", "/admin/coupons/codebatch/campaign/7/import/",
                 "/x/grants/grantbatch/upload/7/"):
        assert_refusal(call(echo_proxy, "POST", path, {}, body), 413, "payload_too_large")
    assert_refusal(call(echo_proxy, "POST", "/api/v1/campaigns/7/grants", {}, b"a" * (1024 * 1024 + 1)), 413,
                   "payload_too_large")
    # the upload is as private as the rest of the console
    assert_refusal(call(echo_proxy, "POST", "/admin/grants/grantbatch/upload/7/", {}, body, source="127.0.0.2"),
                   404, "not_found")


def test_the_uploads_limit_follows_the_consoles_path_and_the_files_size(proxies, echo) -> None:
    proxy = proxies(echo.port, PROXY_ADMIN_URL="ops-7f3a/", PROXY_GRANTS_MAX_FILE_BYTES="700000")
    path = "/ops-7f3a/grants/grantbatch/upload/7/"
    passed_on(call(proxy, "POST", path, {}, b"a" * (700_000 + 65_536)), 700_000 + 65_536)
    assert_refusal(call(proxy, "POST", path, {}, b"a" * (700_000 + 65_537)), 413, "payload_too_large")
    assert_refusal(call(proxy, "POST", "/admin/grants/grantbatch/upload/7/", {}, b"a" * 600_000), 413,
                   "payload_too_large")  # no longer the console's


def test_the_uploads_limit_is_the_file_and_64_kib_and_nothing_but_a_number_is_accepted() -> None:
    assert grant_upload_max_body("67108864").stdout == str(64 * 1024 * 1024 + 65536)
    assert entry_point_script("PROXY_GRANT_UPLOAD_MAX_BODY").stdout == "67174400"  # unset: the default
    for bad in ("", "64m", "012", "1e9", "-1", "1 2", "9" * 16):
        refused = grant_upload_max_body(bad)
        assert refused.returncode == 1 and "is not a number of bytes" in refused.stderr, bad


@pytest.mark.django_db(transaction=True)
def test_a_600_kb_grants_call_is_granted_through_the_proxy(proxies, live_campaign, tmp_path) -> None:
    key = "proxy-" + "k" * 32
    server = Server(tmp_path / "server.log", env={"COUPONS_SERVICE_API_KEYS": key})
    try:
        proxy = proxies(server.port)
        campaign = live_campaign(total_stock=10_000, per_user_limit=1)
        body = json.dumps({"batch": "crm-600k", "user_ids": [f"{i:058d}" for i in range(10_000)]}).encode()
        assert 600_000 < len(body) < 1024 * 1024
        answer = call(proxy, "POST", f"/api/v1/campaigns/{campaign.pk}/grants",
                      {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}, body)
        counts = answer.json()
        assert (answer.status, counts["status"], counts.get("granted")) == (200, "granted", 10_000), counts
        assert_refusal(call(proxy, "POST", "/api/v1/carts/validate", shopper("ann"), b"a" * 600_000), 413,
                       "payload_too_large")
    finally:
        server.stop()


def test_heads_the_server_would_refuse_are_refused_in_the_contracts_form(echo_proxy) -> None:
    # One field or a request line over the proxy's 15 KiB buffers, or a head over their 61 KiB: the proxy's;
    # 300 small fields fit its buffers: the server's 431 (at most 100 fields), passed on.
    assert_refusal(call(echo_proxy, "GET", "/x", {"X-Big": "a" * 16_000}), 431, "invalid_request")
    assert_refusal(call(echo_proxy, "GET", "/x", {f"X-F{i}": "a" * 1000 for i in range(62)}), 431, "invalid_request")
    assert_refusal(call(echo_proxy, "GET", "/" + "a" * 16_000), 414, "invalid_request")
    assert_refusal(call(echo_proxy, "GET", "/x", {f"X-F{i}": "a" for i in range(300)}), 431, "invalid_request")
    # What the server accepts and a browser sends passes: a 14 KB cookie, 56 KB of fields.
    assert handed(call(echo_proxy, "GET", "/x", {"Cookie": "a" * 14_000}))["headers"]["cookie"] == ["a" * 14_000]
    assert len(handed(call(echo_proxy, "GET", "/x", {f"X-F{i}": "a" * 1000 for i in range(56)}))["headers"]) > 56


def test_an_ipv6_client_is_limited_by_its_64_and_over_ipv6_loopback(proxies, tmp_path_factory) -> None:
    """The proxy's limits key an IPv6 client by its /64. Loopback has one IPv6 address, so the test (and only
    it) has nginx take the client's address from a field, X-Test-Client (realip, from loopback alone), and
    also listen on [::1] for a real IPv6 connection."""
    def edit(conf: str, https_port: int) -> str:
        conf = conf.replace("http {\n", "http {\n    set_real_ip_from 127.0.0.1;\n    set_real_ip_from ::1;\n"
                                         "    real_ip_header X-Test-Client;\n", 1)
        return conf.replace(f"listen 127.0.0.1:{https_port} ssl http2 default_server;",
                            f"listen 127.0.0.1:{https_port} ssl http2 default_server;\n"
                            f"        listen [::1]:{https_port} ssl http2 default_server;", 1)

    echo = Echo(tmp_path_factory.mktemp("echo6") / "echo.log")
    try:
        limited = proxies(echo.port, edit, PROXY_REQUEST_RATE="1r/m", PROXY_REQUEST_BURST="2")

        def from_(client: str) -> int:
            answer = call(limited, "GET", "/x", {"X-Test-Client": client})
            if answer.status == 200:
                assert handed(answer)["headers"]["x-forwarded-for"] == [client]  # the address, not the /64
            return answer.status

        rotating = [from_(f"2001:db8:1:2::{i:x}") for i in range(1, 6)]  # one /64, five addresses
        other_64 = from_("2001:db8:1:3::1")
        ipv4 = [from_(f"198.51.100.{i}") for i in range(1, 5)]  # IPv4: each address its own

        context = limited.certificate.context()
        context.check_hostname = False  # the certificate names 127.0.0.1, not ::1 (its chain is still checked)
        over_ipv6 = []
        for _ in range(4):
            connection = http.client.HTTPSConnection("::1", limited.https_port, context=context, timeout=10,
                                                     source_address=("::1", 0))
            connection.request("GET", "/x")
            response = connection.getresponse()
            over_ipv6.append((response.status, response.read()))
            connection.close()
    finally:
        stop_group(echo.proc)
    assert rotating == [200, 200, 200, 429, 429]  # one at the rate, two of burst: then the /64 is limited
    assert other_64 == 200 and ipv4 == [200] * 4
    assert [status for status, _ in over_ipv6] == [200, 200, 200, 429]
    assert json.loads(over_ipv6[0][1])["headers"].count(["x-forwarded-for", "::1"]) == 1


@pytest.mark.django_db(transaction=True)
def test_claims_over_the_proxys_claim_rate_are_a_429_with_retry_after(server, proxies, live_campaign) -> None:
    limited = proxies(server.port, PROXY_CLAIM_RATE="1r/s", PROXY_CLAIM_BURST="2")
    campaign = live_campaign(total_stock=100)
    path = f"/api/v1/campaigns/{campaign.pk}/claim"
    connection = limited.connect()  # one keep-alive connection: the limit is per address, not per connection
    answers = []
    started = time.monotonic()
    for i in range(6):
        connection.request("POST", path, body=b"{}", headers=shopper(f"r{i}"))
        response = connection.getresponse()
        answers.append(Answer(response.status, response.headers, response.read()))
    connection.close()
    assert time.monotonic() - started < 1, "too slow a machine for a rate of one a second"
    assert [a.status for a in answers[:3]] == [200, 200, 200]  # one at the rate, two of burst
    assert all(a.json()["status"] == "claimed" for a in answers[:3])
    for refused in answers[3:]:
        body = assert_refusal(refused, 429, "rate_limited")
        assert refused.headers["Retry-After"] == "1" and "address" in body["detail"]  # the proxy's, not the server's
    assert call(limited, "GET", f"/api/v1/campaigns/{campaign.pk}").status == 200  # other routes: their own rate


@pytest.mark.django_db(transaction=True)
def test_the_public_reads_are_microcached_for_a_second_and_answer_304(proxy, live_campaign) -> None:
    """docs/api.md's reads around a sale: one request a path a second reaches web, `remaining` follows after it,
    and the copy's ETag answers a matching If-None-Match with a 304."""
    campaign = live_campaign(total_stock=5)
    path = f"/api/v1/campaigns/{campaign.pk}"
    time.sleep(2 - time.time() % 1)  # at the start of a whole second: the copy lives until that second ends
    first = call(proxy, "GET", path)
    second = call(proxy, "GET", path)
    assert first.status == second.status == 200 and first.body == second.body
    assert first.headers["X-Cache-Status"] == "MISS" and second.headers["X-Cache-Status"] == "HIT"
    assert second.headers["Cache-Control"] == "public, max-age=1" and second.headers["ETag"] == first.headers["ETag"]
    revalidated = call(proxy, "GET", path, {"If-None-Match": first.headers["ETag"]})
    assert revalidated.status == 304 and revalidated.body == b""

    assert call(proxy, "POST", f"{path}/claim", shopper("ann"), b"{}").json()["status"] == "claimed"  # not cached
    assert call(proxy, "GET", path).json()["remaining"] in (4, 5)  # the copy until its second ends, or fresh
    time.sleep(1.6)  # the proxy's copy (to the end of its second) and the worker's half second
    assert call(proxy, "GET", path).json()["remaining"] == 4
    listed = call(proxy, "GET", "/api/v1/campaigns?x=1")
    assert listed.status == 200 and listed.headers["X-Cache-Status"] in ("MISS", "EXPIRED")
    unknown = call(proxy, "GET", "/api/v1/campaigns/424242")
    assert unknown.status == 404 and unknown.json()["status"] == "not_found"
