"""The claim through the compose proxy (deploy/nginx/) against the web server directly, interleaved.

    .venv/bin/python bench/proxy_bench.py [--rounds 3] [--duration 8] [--connections 100]

One web server (the run command's, `python -m config.server --workers 2`) and, in front of it on loopback,
nginx with the compose template rendered as the image renders it (compose's PROXY_ values, loopback ports, a
self-signed certificate made here, the rate and connection limits raised out of the way: the bench measures
what the proxy costs, not its refusals). Each round loads the server directly (http://) and through nginx
(https://, TLS, HTTP/1.1 keep-alive) with wrk -t2 -c100 and the shared claim.lua, in alternating order (ABBA),
each run with shoppers of its own on a campaign that never sells out, so every claim runs the claim script.
No Celery worker: the claim path alone. Stores: DATABASE_URL / REDIS_URL, or embedded servers under var/bench/.

Prints each round's pair and the median ratio (through nginx / direct), and writes
bench/results/proxy-<timestamp>.json. Needs nginx (apt-get install nginx), openssl and wrk.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import BASE_DIR, BENCH_VAR, CLAIM_LUA, LOG_DIR, RESULTS_DIR, log  # noqa: E402

TEMPLATE = BASE_DIR / "deploy" / "nginx" / "templates" / "nginx.conf.template"
ALLOW_SCRIPT = BASE_DIR / "deploy" / "nginx" / "19-couponrush-private-allow.envsh"
OUT_OF_THE_WAY = {"PROXY_REQUEST_RATE": "1000000r/s", "PROXY_REQUEST_BURST": "1000000",
                  "PROXY_CLAIM_RATE": "1000000r/s", "PROXY_CLAIM_BURST": "1000000",
                  "PROXY_CONNECTIONS_PER_CLIENT": "60000"}


def nginx_conf(folder: Path, https_port: int, http_port: int, upstream: int) -> Path:
    """The compose proxy's nginx.conf: compose's PROXY_ values (defaults for ${X:-default}), then these."""
    proxy = yaml.safe_load((BASE_DIR / "docker-compose.yml").read_text())["services"]["proxy"]
    env = {}
    for name, value in proxy["environment"].items():
        default = re.fullmatch(r"\$\{\w+:-(.*)\}", str(value))
        env[name] = default.group(1) if default else str(value)
    cert, key = folder / "c.pem", folder / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
                    "-days", "2", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    env.update(PROXY_HTTPS_LISTEN=f"127.0.0.1:{https_port}", PROXY_HTTP_LISTEN=f"127.0.0.1:{http_port}",
               PROXY_UPSTREAM=f"127.0.0.1:{upstream}", PROXY_TLS_CERTIFICATE=str(cert),
               PROXY_TLS_CERTIFICATE_KEY=str(key), PROXY_PID_FILE=str(folder / "nginx.pid"),
               PROXY_TEMP_DIR=str(folder), **OUT_OF_THE_WAY)
    derived = ("PROXY_PRIVATE_ALLOW_RULES", "PROXY_ADMIN_LOCATION", "PROXY_GRANT_UPLOAD_MAX_BODY")  # the script's
    values = subprocess.run(
        ["sh", "-c", f'. "{ALLOW_SCRIPT}" && printf "%s\\0" ' + " ".join(f'"${name}"' for name in derived)],
        check=True, capture_output=True, text=True, env={"PATH": os.environ["PATH"], **env}).stdout.split("\0")
    env.update(zip(derived, values, strict=False))
    text = re.sub(r"\$(?:\{(\w+)\}|(\w+))", lambda m: env.get(m.group(1) or m.group(2), m.group(0)),
                  TEMPLATE.read_text())  # envsubst of the PROXY_ names, as the image's entry point does
    conf = folder / "nginx.conf"
    conf.write_text(text)
    return conf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of each wrk run (8)")
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--shoppers", type=int, default=400_000, help="shoppers per run (400000)")
    args = parser.parse_args(argv)
    common.set_name("proxy")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        raise common.BenchError("nginx is not installed: apt-get install -y nginx")
    common.install_signal_handlers()
    stores = common.start_stores()
    secret = secrets.token_hex(16)
    env = common.child_env(stores, secret)
    procs = common.Processes()
    folder = Path(tempfile.mkdtemp(prefix="couponrush-proxy-bench-"))
    folder.chmod(0o755)  # nginx's workers (nobody, under a root master) read and write under it
    try:
        common.run_step("migrate", common.manage("migrate", "--noinput", "-v", "0"), env)
        campaign = common.create_campaign(env, 10_000_000)
        port, https_port, http_port = common.free_port(), common.free_port(), common.free_port()
        procs.start("web", common.web_argv(port, 2, []), env)
        common.wait_until("web", lambda: common.http_ok(f"http://127.0.0.1:{port}/healthz"), procs)
        conf = nginx_conf(folder, https_port, http_port, port)
        procs.start("nginx", [nginx, "-c", str(conf), "-p", f"{folder}/", "-e", str(folder / "error.log"),
                              "-g", "daemon off;"], env)
        time.sleep(0.5)
        procs.check_alive()
        urls = {"direct": f"http://127.0.0.1:{port}", "nginx": f"https://127.0.0.1:{https_port}"}
        rounds: list[dict[str, Any]] = []
        for i in range(args.rounds):
            order = ["direct", "nginx"] if i % 2 == 0 else ["nginx", "direct"]
            row: dict[str, Any] = {"round": i + 1, "order": order}
            for name in order:
                tokens = common.write_tokens(BENCH_VAR / "proxy-tokens.txt", args.shoppers, secret,
                                             prefix=f"{name[0]}{i:02d}x")
                figures = common.run_wrk(f"proxy {name} r{i + 1}", urls[name], threads=2,
                                         connections=args.connections, duration=args.duration, script=CLAIM_LUA,
                                         script_args=[str(campaign), str(tokens)])
                row[name] = {key: figures.get(key) for key in ("requests_per_s", "p50_ms", "p99_ms", "non_2xx",
                                                               "socket_errors")}
                procs.check_alive()
            row["ratio"] = round(row["nginx"]["requests_per_s"] / row["direct"]["requests_per_s"], 3)
            rounds.append(row)
            log(f"round {i + 1}: direct {row['direct']['requests_per_s']:,.0f}/s, "
                f"nginx {row['nginx']['requests_per_s']:,.0f}/s ({row['ratio']})")
        report = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "revision": common.git_revision(),
                  "duration_s": args.duration, "connections": args.connections, "cpus": os.cpu_count(),
                  "nginx": subprocess.run([nginx, "-v"], capture_output=True, text=True).stderr.strip(),
                  "rounds": rounds, "median_ratio": statistics.median(r["ratio"] for r in rounds)}
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        out = RESULTS_DIR / f"proxy-{datetime.now(UTC):%Y%m%d-%H%M%S}.json"
        out.write_text(json.dumps(report, indent=2))
        print("| round | order | direct claims/s | p99 ms | through nginx claims/s | p99 ms | nginx/direct |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for r in rounds:
            print(f"| {r['round']} | {'-'.join(r['order'])} | {r['direct']['requests_per_s']:,.0f} | "
                  f"{r['direct']['p99_ms']} | {r['nginx']['requests_per_s']:,.0f} | {r['nginx']['p99_ms']} | "
                  f"{r['ratio']} |")
        print(f"median nginx/direct: {report['median_ratio']} ({common.rel(out)}; logs in {common.rel(LOG_DIR)})")
        return 0
    except common.BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        procs.stop_all()
        stores.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
