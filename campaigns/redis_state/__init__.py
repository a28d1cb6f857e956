"""A campaign's state in Redis: key names, the clients, the Lua scripts and their Python wrappers.

    keys.py      key names (the hash tag {c<id>}, a bucket's {c<id>.<b>}), a shopper's bucket, ledger refs
    clients.py   the process's clients: sync, one auto-pipelined per event loop, the short-timeout recovery one
    lua.py       the script loader (campaigns/lua/): EVALSHA, replica acks (replicated)
    claim.py     the claim: the script's call and reply, its steps (ClaimFlow), its outcome, run_flow(_async)
    buckets.py   a campaign's bucket count, each bucket's share, moves of stock between buckets
    recovery.py  a lost reply's stored answer, the void of a claim whose outcome is unknown, Redis's clock
    state.py     a campaign's state as a whole: load, rebuild, restock, add stock, extend, pause, remaining
    codes.py     a codes campaign's shared code: takes and give-backs
    groups.py    a group's hash (coupons held of all its campaigns): read with its campaigns' counts, restored
    reset.py     reset_redis_client: forget the clients and everything learnt through them

Each process-wide cache lives in one module (the clients and _this_thread in clients.py, the registered scripts
in lua.py, the clock offset in recovery.py, the bucket counts and empty buckets in buckets.py, the key names in
keys.py); reset_redis_client forgets them all. The names below are the package's face, the same as when it was
one module: `from campaigns.redis_state import X` and `redis_state.X` read them.
"""

from core.errors import StoreUnavailable

from .buckets import (
    EMPTY_FOR_SECONDS,
    bucket_counts,
    bucket_shares,
    buckets_of,
    finish_moves,
    forget_bucket_counts,
    forget_empty_buckets,
    move_counts,
    move_counts_of,
    move_stock,
    pending_moves,
    received_moves,
    remember_buckets,
    split_stock,
)
from .claim import (
    CLAIM_STATUSES,
    ClaimCall,
    ClaimCode,
    ClaimFlow,
    ClaimOutcome,
    claim_audience,
    claim_call,
    claim_reply,
    claim_result,
    own_answer_field,
    run_claim,
    run_claim_async,
    run_flow,
    run_flow_async,
)
from .clients import async_client, redis_client
from .codes import (
    TakeCode,
    code_uses_of,
    code_uses_of_async,
    codes_snapshot,
    run_code_give_back,
    run_code_take,
    run_code_takes,
)
from .groups import group_held, group_home, group_key, group_restore, group_snapshot
from .keys import (
    DRAIN_GROUP,
    MAX_BUCKETS,
    CampaignKeys,
    bucket_of,
    campaign_keys,
    claim_id_of,
    key_digest,
    ledger_ref,
    remember_group,
    split_ref,
)
from .lua import LUA_DIR, replicated, run_async, run_each, scripts
from .recovery import (
    DEADLINE_MARGIN_MS,
    OWN_ANSWER_KEEP_MS,
    RECOVERY_BUDGET_SECONDS,
    RECOVERY_PAUSE_SECONDS,
    UNREADABLE,
    ClaimOutcomeUnknown,
    VoidNotConfirmed,
    redis_now_ms,
    run_void,
)
from .reset import reset_redis_client
from .state import (
    RestockResult,
    clear_drain_trigger,
    compare_and_set,
    load_state,
    remaining_many,
    replace_claim_records,
    restore_answers,
    run_add_stock,
    run_extend,
    run_restock,
    set_paused,
    to_ms,
)

__all__ = [
    "CLAIM_STATUSES", "CampaignKeys", "ClaimCall", "ClaimCode", "ClaimFlow", "ClaimOutcome", "ClaimOutcomeUnknown",
    "DEADLINE_MARGIN_MS", "DRAIN_GROUP", "EMPTY_FOR_SECONDS", "LUA_DIR", "MAX_BUCKETS", "OWN_ANSWER_KEEP_MS",
    "RECOVERY_BUDGET_SECONDS", "RECOVERY_PAUSE_SECONDS", "RestockResult", "StoreUnavailable", "TakeCode", "UNREADABLE",
    "VoidNotConfirmed", "async_client", "bucket_counts", "bucket_of", "bucket_shares", "buckets_of", "campaign_keys",
    "claim_audience", "claim_call", "claim_id_of", "claim_reply", "claim_result", "clear_drain_trigger", "code_uses_of",
    "code_uses_of_async", "codes_snapshot", "compare_and_set", "finish_moves", "forget_bucket_counts",
    "forget_empty_buckets", "group_held", "group_home", "group_key", "group_restore", "group_snapshot", "key_digest",
    "ledger_ref", "load_state", "move_counts", "move_counts_of", "move_stock", "own_answer_field", "pending_moves",
    "received_moves", "redis_client", "redis_now_ms", "remaining_many", "remember_buckets", "remember_group",
    "replace_claim_records", "replicated", "reset_redis_client", "restore_answers", "run_add_stock", "run_async",
    "run_claim", "run_claim_async", "run_each", "run_code_give_back", "run_code_take", "run_code_takes", "run_extend",
    "run_flow", "run_flow_async", "run_restock", "run_void", "scripts", "set_paused", "split_ref", "split_stock",
    "to_ms",
]
