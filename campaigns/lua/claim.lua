--[[
Claim one coupon of a campaign: every check, then every change, in one atomic step.

KEYS[1] meta    hash    starts_ms, ends_ms, paused ("0"/"1"), limit (per-user limit), rate (claims/s admitted),
                        drain: until when (ms, Redis's clock) a drain trigger sent after a claim is pending; the
                        drain deletes it (orders.tasks.drain_campaign), so the next claim sends a trigger again
KEYS[2] stock   string  coupons left
KEYS[3] users   hash    user id -> coupons this user claimed
KEYS[4] ledger  stream  claims awaiting the drain into PostgreSQL (field u = user id, k = key digest)
KEYS[5] second  hash    this second's claims (redis_state.CampaignKeys.second): the rate counters "c" (the
                        campaign's, always counted), "u:<user id>" and "i:<ip>" (only where there is a limit), and
                        the answers "a:<token>" = "<code>:<ledger id>" of the claims made without an
                        Idempotency-Key; it expires ARGV[8] ms after its first claim
KEYS[6] idem    string  only for a claim with the shopper's Idempotency-Key: its answer
                        "<code>:<ledger id>:<token>[:<told>]", read first (a replay) and written last; <told> is
                        "d" once a repeat of the key was told it, or with replica acks the repeats' tokens
                        "+<token>..." (each told once its WAIT confirmed it), after an "o" once the request
                        that made the claim gave up (void.lua)
ARGV[1] user id (validated by the caller)
ARGV[2] deadline, milliseconds in Redis's clock: after it the caller has given up (answered 503), so the
        claim must not happen (a Redis frozen, then resumed, would otherwise run a claim nobody was told of)
ARGV[3] the answer's field "a:<token>" in KEYS[5], or with KEYS[6] this request's token (stored with the
        answer): a lost reply's outcome can be read afterwards, and only this request may void its claim (void.lua)
ARGV[4] claims one shopper may send per second (0: not limited)   ARGV[5] "u:<user id>", the shopper's counter
ARGV[6] claims one client IP may send per second (0: not limited)  ARGV[7] "i:<ip>", the IP's counter
ARGV[8] how long the second's hash lives (and so its answers), milliseconds
ARGV[9] how long a drain trigger counts as pending, milliseconds
ARGV[10] with KEYS[6]: the digest of the shopper's Idempotency-Key, kept in the ledger entry (field k) and so in
         PostgreSQL, from where a rebuilt Redis restores the answer of a claim made with a key
ARGV[11] with KEYS[6]: how long its answer is kept, milliseconds
ARGV[12] with KEYS[6]: "1" when an answer is told only once replicas confirmed it (COUPONS_REDIS_REPLICA_ACKS)
ARGV[13] only for a campaign split into buckets (redis_state.bucket_of; ARGV[10] to ARGV[12] are then always
         there, "", 0 and 0 without KEYS[6]): the bucket count the caller assumed; meta's "buckets" must say the same
ARGV[14] "1": a shopper this bucket could serve but for its stock gets -5 "dry" (nothing changed, nothing
         counted or stored) instead of sold_out: the caller moves stock here from another bucket and asks again

Returns {code, ledger_id, flags}
  code       0 claimed, 1 limit_reached, 2 sold_out, 3 not_started, 4 ended, 5 paused,
             -1 the campaign has no (complete) state in Redis: nothing was changed
             -3 too late: Redis ran the script after the caller's deadline: nothing was changed
             -4 another bucket count (ledger_id holds meta's): nothing was changed, ask the right bucket
             -5 dry (only with ARGV[14]): nothing was changed
             -2 rate limited (the campaign, the shopper or the IP sent too many this second): nothing else
                was changed, and no answer is stored
  ledger_id  the stream entry id of the claim ("" unless claimed)
  flags      bit 1: this answer is a replay of an earlier one; bit 2: the caller must send a drain trigger

What it costs Redis is mostly its redis.call()s, about 1 us each, and the keys it creates (docs/design.md,
"What the claim script costs"): so a claim made without an Idempotency-Key reads meta and stock, counts in the
second's hash (fields, not keys of their own: one expiry a second), checks and counts the per-user limit in one
HINCRBY (taken back at once, in this same step, when it is over), and writes its answer as a field.
--]]
local call = redis.call
-- The deadline is checked in Redis's own clock (one TIME): the client's could not see Redis run late.
local clock = call('TIME')
local now_ms = clock[1] * 1000 + clock[2] / 1000
if now_ms > tonumber(ARGV[2]) then
  return {-3, '', 0}
end

local idem = KEYS[6]
if idem then  -- a claim made without a key has a fresh token: its answer is never there before it runs
  local previous = call('GET', idem)
  if previous and previous ~= 'void' then
    local code, ledger_id, token, told = string.match(previous, '^([^:]*):([^:]*):?([^:]*):?([^:]*)$')
    if code == '0' and told ~= 'd' then
      -- Told from here on (':d': void.lua leaves the claim standing); with replica acks (ARGV[12] '1') this
      -- repeat is told only once WAIT confirmed it, so it joins the repeats in flight instead ('+<token>'),
      -- from which one not confirmed takes itself out again (void.lua)
      told = ARGV[12] == '1' and told .. '+' .. ARGV[3] or 'd'
      call('SET', idem, code .. ':' .. ledger_id .. ':' .. token .. ':' .. told, 'KEEPTTL')
    end
    return {tonumber(code), ledger_id, 1}
  end
end

local meta = call('HMGET', KEYS[1], 'starts_ms', 'ends_ms', 'paused', 'limit', 'rate', 'drain', 'buckets')
local stock = call('GET', KEYS[2])
if not meta[1] or not meta[2] or not meta[4] or not stock then
  return {-1, '', 0}
end
if (meta[7] or '1') ~= (ARGV[13] or '1') then
  return {-4, meta[7] or '1', 0}
end
if ARGV[14] == '1' and tonumber(stock) < 1 and now_ms >= tonumber(meta[1]) and now_ms < tonumber(meta[2])
    and meta[3] ~= '1' and tonumber(call('HGET', KEYS[3], ARGV[1]) or '0') < tonumber(meta[4]) then
  return {-5, '', 0}
end

-- Rate limits: this second's counters (one counted only where there is a limit, the campaign's always: its first
-- count creates the hash, which then gets its expiry); a replay above is never limited.
local second = KEYS[5]
local n = call('HINCRBY', second, 'c', 1)
if n == 1 then
  call('PEXPIRE', second, ARGV[8])
end
local limit = tonumber(meta[5] or '0')
if (limit > 0 and n > limit)
    or (ARGV[4] ~= '0' and call('HINCRBY', second, ARGV[5], 1) > tonumber(ARGV[4]))
    or (ARGV[6] ~= '0' and call('HINCRBY', second, ARGV[7], 1) > tonumber(ARGV[6])) then
  return {-2, '', 0}
end

local code = 0
local ledger_id = ''
local flags = 0
local users = KEYS[3]
local user = ARGV[1]
if now_ms < tonumber(meta[1]) then
  code = 3
elseif now_ms >= tonumber(meta[2]) then
  code = 4
elseif meta[3] == '1' then
  code = 5
elseif tonumber(stock) < 1 then
  code = tonumber(call('HGET', users, user) or '0') >= tonumber(meta[4]) and 1 or 2
elseif call('HINCRBY', users, user, 1) > tonumber(meta[4]) then
  call('HINCRBY', users, user, -1)  -- at the limit already: taken back in this same atomic step
  code = 1
else
  call('DECR', KEYS[2])
  if idem and ARGV[10] ~= '' then
    ledger_id = call('XADD', KEYS[4], '*', 'u', user, 'k', ARGV[10])
  else
    ledger_id = call('XADD', KEYS[4], '*', 'u', user)
  end
  if not meta[6] or now_ms >= tonumber(meta[6]) then  -- no drain trigger pending: the caller sends one
    call('HSET', KEYS[1], 'drain', math.floor(now_ms) + ARGV[9])
    flags = 2
  end
end
if idem then
  call('SET', idem, code .. ':' .. ledger_id .. ':' .. ARGV[3], 'PX', ARGV[11])
else
  call('HSET', second, ARGV[3], code .. ':' .. ledger_id)
end
return {code, ledger_id, flags}
