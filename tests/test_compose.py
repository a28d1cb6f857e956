"""docker-compose.yml and the Dockerfile run exactly the processes `make run` runs (devstack/), every
long-running service has a health check, and the compose file is valid against the Compose specification.

No Docker engine runs here: the commands themselves are run by the rest of the suite (the web server fixture
and the worker tests use devstack's commands), so keeping these equal keeps the deployment tested."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import devstack

from .conftest import ROOT

IMAGE_STATIC_ROOT = "/app/var/static"  # settings.STATIC_ROOT inside the image (WORKDIR /app)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def in_image(command: list[str]) -> list[str]:
    """A devstack command as the image runs it: listening on every interface, static files from the image."""
    return [IMAGE_STATIC_ROOT if part == str(devstack.STATIC_ROOT) else part for part in command]


def test_the_web_service_runs_devstacks_web_command_behind_the_proxy(compose) -> None:
    services = compose["services"]
    web = services["web"]
    assert web["command"] == in_image(devstack.web_command(8000, host="0.0.0.0"))
    # Only the proxy publishes ports: web is reached on 8000 inside the edge network.
    assert "ports" not in web and web["expose"] == ["8000"]
    assert services["proxy"]["ports"] == ["80:80", "443:443"]
    assert services["proxy"]["environment"]["PROXY_UPSTREAM"] == "web:8000"
    assert {name for name, service in services.items() if service.get("ports")} == {"proxy", "flower"}
    assert services["flower"]["ports"] == ["127.0.0.1:5555:5555"]


def test_web_trusts_forwarded_headers_from_the_edge_network_alone(compose) -> None:
    """The proxy reaches web on `edge`, whose fixed subnet is web's COUPONS_TRUSTED_PROXIES; only the two of them
    are on it (the stores are on `backend`)."""
    services, env = compose["services"], compose["services"]["web"]["environment"]
    subnet = compose["networks"]["edge"]["ipam"]["config"][0]["subnet"]
    assert env["COUPONS_TRUSTED_PROXIES"] == subnet == "${COUPONRUSH_EDGE_SUBNET:-172.31.240.0/24}"
    assert env["COUPONS_TRUSTED_PROXY_HOPS"] == "1"
    assert env["DJANGO_HTTPS"] == "${DJANGO_HTTPS:-true}" and env["DJANGO_SECURE_SSL_REDIRECT"] == "false"
    assert {name for name, service in services.items() if "edge" in service.get("networks", [])} == {"web", "proxy"}
    assert {name for name, service in services.items() if "backend" in service.get("networks", [])} == (
        set(services) - {"proxy", "certs"})


def test_the_proxy_waits_for_its_certificate_and_web(compose) -> None:
    services = compose["services"]
    proxy, certs = services["proxy"], services["certs"]
    assert proxy["image"].startswith("nginx:") and certs["restart"] == "no"
    assert proxy["depends_on"]["certs"]["condition"] == "service_completed_successfully"
    assert proxy["depends_on"]["web"]["condition"] == "service_healthy"
    assert "proxy-certs:/certs" in certs["volumes"] and "proxy-certs:/certs:ro" in proxy["volumes"]
    script = certs["command"][-1]
    assert script.startswith("test -s /certs/tls.crt") and "apk add --no-cache openssl" in script
    for mount in proxy["volumes"]:  # the configuration files the proxy mounts are the repository's
        source = mount.split(":")[0]
        if source.startswith("./"):
            assert (ROOT / source).exists(), source


def test_the_worker_and_beat_services_run_devstacks_commands(compose) -> None:
    assert compose["services"]["worker"]["command"] == devstack.worker_command()
    assert compose["services"]["beat"]["command"] == devstack.beat_command()


def test_the_images_default_command_is_the_web_command() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = re.search(r"^CMD (\[.*?\])\s*$", dockerfile.replace("\\\n", ""), re.M | re.S)
    assert cmd is not None
    assert json.loads(cmd.group(1)) == in_image(devstack.web_command(8000, host="0.0.0.0"))


def test_every_long_running_service_has_a_health_check(compose) -> None:
    services = compose["services"]
    long_running = {name for name, service in services.items() if service.get("restart") != "no"}

    assert long_running == {"postgres", "redis", "web", "proxy", "worker", "beat", "flower"}
    assert {name for name in long_running if not services[name].get("healthcheck", {}).get("test")} == set()
    assert "celery -A config inspect ping -d celery@$$HOSTNAME" in services["worker"]["healthcheck"]["test"][1]


def test_flower_is_optional_behind_its_profile_and_the_worker_exposes_its_metrics_port(compose) -> None:
    services = compose["services"]
    assert services["flower"]["profiles"] == ["flower"]
    assert [name for name, s in services.items() if s.get("profiles")] == ["flower"]
    assert services["worker"]["environment"]["COUPONRUSH_WORKER_METRICS_PORT"] == "9808"
    assert services["web"]["environment"]["PROMETHEUS_MULTIPROC_DIR"]  # emptied by deploy/entrypoint.sh


def test_redis_keeps_an_append_only_file(compose) -> None:
    command = compose["services"]["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"


def test_the_health_check_scripts_say_unhealthy_when_nothing_answers() -> None:
    port = "1"  # nothing listens there
    for kind in ("web", "flower"):
        result = subprocess.run([sys.executable, "deploy/healthcheck.py", kind, port], cwd=ROOT, timeout=30)
        assert result.returncode == 1


def test_the_web_health_check_passes_against_the_real_server(http_server) -> None:
    port = http_server.rsplit(":", 1)[1]
    result = subprocess.run([sys.executable, "deploy/healthcheck.py", "web", port], cwd=ROOT, timeout=30)
    assert result.returncode == 0


def test_the_compose_file_is_valid_against_the_compose_specification() -> None:
    checker = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    if not Path(checker).exists():
        pytest.skip("check-jsonschema is not installed (it is in the dev extra)")
    result = subprocess.run([checker, "--builtin-schema", "vendor.compose-spec", "docker-compose.yml"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
