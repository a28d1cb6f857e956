"""The shopper token check alone (core.auth.authenticate), in process: microseconds a call for a default-key token
and, where the checkout has storefront keys, a storefront key's token (its key held in memory as the keyring holds
it). Run it under two checkouts to compare (issue 39: the claim's check within 5% of before):

    DJANGO_SETTINGS_MODULE=config.settings.test PYTHONPATH=/path/to/old .venv/bin/python bench/token_check.py
    DJANGO_SETTINGS_MODULE=config.settings.test PYTHONPATH=. .venv/bin/python bench/token_check.py

Each figure is the best of --rounds rounds of --calls calls (the least disturbed by the machine's other work)."""
from __future__ import annotations

import argparse
import json
import time
import timeit

import django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    django.setup()
    from core import auth

    figures: dict[str, float] = {}
    token = auth.mint_token("shopper-0001", ttl=600)
    figures["default_key_us"] = best(lambda: auth.authenticate("shopper-0001", token), args)
    if hasattr(auth, "SigningKey"):
        key = auth.SigningKey.of(key_id="sf_bench", storefront_id=1, channels=frozenset({"web"}),
                                 secret="a-storefront-secret-of-some-length-0123456789")
        auth.use_storefront_keys({"sf_bench": key}.get)
        keyed = auth.mint_token("shopper-0001", ttl=600, key=key)
        figures["storefront_key_us"] = best(lambda: auth.authenticate("shopper-0001", keyed), args)
    print(json.dumps(figures))


def best(call: object, args: argparse.Namespace) -> float:
    timer = timeit.Timer(call, timer=time.perf_counter)  # type: ignore[arg-type]
    return round(min(timer.repeat(repeat=args.rounds, number=args.calls)) / args.calls * 1e6, 3)


if __name__ == "__main__":
    main()
