"""In-process CPU per claim of two checkouts, interleaved: the claim's door (orders.door.claim_response) called
in a process of its own, without a web server, wrk or sockets in the way: on a shared host a steadier figure of
what the claim path itself costs than a web server's rate.

    .venv/bin/python bench/claim_cpu.py --old ../base [--new .] [--rounds 6] [--claims 20000]

Each round runs a child process per checkout (the order alternates: ABBA), from that checkout (its own code, this
.venv's Python), against the same stores (DATABASE_URL / REDIS_URL, or embedded servers under var/bench/), each
child measuring with time.process_time():
- sold_out: a campaign this process saw sell out, answered from its sold-out flag (no Redis);
- selling: fresh shoppers' claims of a campaign that never sells out (stock 10,000,000, limit 1), 100 at once on
  one event loop, each running the claim script through the loop's pipelined Redis client.
The campaigns are preheated again by each child (a store another session flushed is loaded again). Prints each
round's pair and the median ratio new/old of each figure. Both checkouts must share the database schema (this
script migrates with --new's code).
"""
from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if "--child" not in sys.argv:  # a child imports its checkout's code alone (common puts this one on the path)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import common
    from common import log


def child(campaign: int, sold_out: int, claims: int, tag: str) -> dict[str, float]:
    """In a checkout's process: CPU us per claim, sold_out (the flag's answer) and selling (the script)."""
    import asyncio
    import io

    import django

    django.setup()
    from django.core.management import call_command

    from core.auth import mint_token
    from orders.door import claim_response
    from orders.sold_out import SOLD_OUT_FOR_SECONDS, sold_out_until
    from webserver.interface import Request

    for preheated in (campaign, sold_out):
        call_command("preheat", str(preheated), stdout=io.StringIO(), stderr=io.StringIO())

    def request(campaign_id: int, user: str) -> Request:
        headers = [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"bench"), (b"x-user-id", user.encode()),
                   (b"x-token", mint_token(user, ttl=3600).encode()), (b"content-type", b"application/json"),
                   (b"content-length", b"2"), (b"accept", b"*/*")]
        return Request("POST", f"/api/v1/campaigns/{campaign_id}/claim", b"", headers, b"{}", "127.0.0.1",
                       ("127.0.0.1", 8000))

    async def one(r: Request) -> Any:
        answer = claim_response(r, r.path.split("/")[4])
        return answer if isinstance(answer, tuple) else await answer

    async def run(requests: list[Request]) -> list[Any]:
        answers: list[Any] = []
        for i in range(0, len(requests), 100):
            answers += await asyncio.gather(*(one(r) for r in requests[i:i + 100]))
        return answers

    def statuses(answers: list[Any]) -> set[str]:
        return {json.loads(a[2])["status"] if a[0] == 200 else str(a[0]) for a in answers}

    async def main() -> dict[str, float]:
        figures = {}
        flagged = request(sold_out, f"s{tag}")
        await run([request(sold_out, f"f{tag}{i}") for i in range(3)])  # sold out: the flag is up
        for _ in range(2000):
            await one(flagged)
        spent = 0.0
        for _ in range(0, claims, 1000):  # the flag lasts half a second: raised again (untimed) every 1000
            sold_out_until[sold_out] = time.monotonic() + SOLD_OUT_FOR_SECONDS
            t = time.process_time()
            for _ in range(1000):
                answer = claim_response(flagged, str(sold_out))
            spent += time.process_time() - t
        figures["sold_out"] = spent / (claims // 1000 * 1000) * 1e6
        assert isinstance(answer, tuple) and statuses([answer]) == {"sold_out"}, answer
        assert statuses(await run([request(campaign, f"w{tag}{i}") for i in range(2000)])) == {"claimed"}
        shoppers = [request(campaign, f"m{tag}{i}") for i in range(claims)]
        t = time.process_time()
        answers = await run(shoppers)
        figures["selling"] = (time.process_time() - t) / claims * 1e6
        assert statuses(answers) == {"claimed"}, statuses(answers)
        return figures

    return asyncio.run(main())


def create_campaign(env: dict[str, str], checkout: Path, stock: int) -> int:
    """`manage.py campaign_create --publish` of `checkout`; return the campaign id from its JSON line."""
    out = common.run_step("campaign_create", common.manage(
        "campaign_create", "--name", "bench", "--stock", str(stock), "--per-user-limit", "1", "--publish"),
        {**env, "PYTHONPATH": str(checkout)}, cwd=checkout)
    campaign = int(json.loads(out.stdout.decode().strip().splitlines()[-1])["id"])
    log(f"campaign {campaign}: stock {stock}, per-user limit 1, published")
    return campaign


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, help="the checkout before the change")
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the checkout after it (this one)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--claims", type=int, default=20_000, help="claims measured per figure and child (20000)")
    parser.add_argument("--child", nargs=3, type=int, metavar=("SELLING", "SOLD_OUT", "ROUND"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        selling, sold_out, round_ = args.child
        print(json.dumps(child(selling, sold_out, args.claims, f"{round_}x{secrets.token_hex(3)}")))
        return 0
    if args.old is None:
        parser.error("--old is required")
    common.set_name("claim_cpu")
    sides = {"old": args.old.resolve(), "new": args.new.resolve()}
    stores = common.start_stores()
    env = common.child_env(stores, secrets.token_hex(16))
    figures: dict[str, dict[str, list[float]]] = {side: {"sold_out": [], "selling": []} for side in sides}
    try:
        common.run_step("migrate", [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], env,
                        cwd=sides["new"])
        selling, sold_out = (create_campaign(env, sides["new"], stock) for stock in (10_000_000, 1))
        for n in range(1, args.rounds + 1):
            order = ["old", "new"] if n % 2 else ["new", "old"]
            for side in order:
                out = common.run_step(f"{side} round {n}", [
                    sys.executable, str(Path(__file__).resolve()), "--claims", str(args.claims),
                    "--child", str(selling), str(sold_out), str(n)], {**env, "PYTHONPATH": str(sides[side])},
                    cwd=sides[side])
                result = json.loads(out.stdout.decode().strip().splitlines()[-1])
                for name, value in result.items():
                    figures[side][name].append(value)
                log(f"round {n} {side}: sold_out {result['sold_out']:.2f} us, selling {result['selling']:.2f} us")
    finally:
        stores.stop()
    for name in ("sold_out", "selling"):
        old, new = figures["old"][name], figures["new"][name]
        ratios = [b / a for a, b in zip(old, new, strict=True)]
        log(f"{name}: CPU us per claim old {[round(v, 1) for v in old]}, new {[round(v, 1) for v in new]}; "
            f"medians {statistics.median(old):.1f} -> {statistics.median(new):.1f}, "
            f"median of the rounds' new/old {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
