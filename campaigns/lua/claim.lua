--[[
Claim one coupon of a campaign: every check, then every change, in one atomic step.

KEYS[1] meta    hash    starts_ms, ends_ms, paused ("0"/"1"), limit (per-user limit), rate (claims/s admitted),
                        drain: until when (ms, Redis's clock) a drain trigger sent after a claim is pending; the
                        drain deletes it (orders.tasks.drain_campaign), so the next claim sends a trigger again
KEYS[2] stock   string  coupons left
KEYS[3] users   hash    user id -> coupons this user claimed
KEYS[4] ledger  stream  claims awaiting the drain into PostgreSQL (field u = user id, k = key digest, s = storefront)
KEYS[5] second  hash    this second's claims (redis_state.CampaignKeys.second): the rate counters "c" (the
                        campaign's, always counted), "u:<user id>" and "i:<ip>" (only where there is a limit), and
                        the answers "a:<token>" = "<code>:<ledger id>" of the claims made without an
                        Idempotency-Key; it expires ARGV[8] ms after its first claim
KEYS[6] idem    string  only for a claim with the shopper's Idempotency-Key: its answer
                        "<code>:<ledger id>:<token>[:<told>]", read first (a replay) and written last; <told> is
                        "d" once a repeat of the key was told it, or with replica acks the repeats' tokens
                        "+<token>..." (each told once its WAIT confirmed it), after an "o" once the request
                        that made the claim gave up (void.lua)
KEYS[#KEYS] group  hash  only for a campaign of a group (with ARGV[16]; KEYS[6] when there is no Idempotency-Key): the
                        group's coupons held, user id -> coupons of all the group's campaigns (keys.py, the group's
                        slot; it holds "", and its absence is no state: a lost one is rebuilt first)
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
ARGV[11] with KEYS[6]: how long its answer is kept, milliseconds: a claim's (COUPONS_IDEMPOTENCY_TTL_SECONDS,
         24 h); a refusal's at most REFUSAL_KEEP_MS (5 minutes, below)
ARGV[12] with KEYS[6]: "1" when an answer is told only once replicas confirmed it (COUPONS_REDIS_REPLICA_ACKS)
ARGV[13] only for a campaign split into buckets (redis_state.bucket_of; ARGV[10] to ARGV[12] are then always
         there, "", 0 and 0 without KEYS[6]): the bucket count the caller assumed; meta's "buckets" must say the same
ARGV[14] "1": a shopper this bucket could serve but for its stock gets -5 "dry" (nothing changed, nothing
         counted or stored) instead of sold_out: the caller moves stock here from another bucket and asks again
ARGV[15] "1": an operator's grant (grants/, always with KEYS[6]; ARGV[13] and ARGV[14] then always there): the
         window's start and the rate limits do not apply, nothing is counted in KEYS[5], only a grant's answer is
         kept under KEYS[6] (a refusal's is not: a batch resumed after a pause decides again); without it, a campaign
         only operators grant (meta's "grant" "1") answers -1, as a campaign Redis does not know
ARGV[16] only for a campaign of a group (ARGV[10] to ARGV[15] then always there): the group's limit, the most
         coupons of all its campaigns one shopper holds; over it 23 group_limit_reached, nothing changed. Without
         it, the campaign's keys given are its home when it is grouped (keys.home_of): -6 tells the caller
ARGV[17] only for a shopper with audience tags or a storefront's channels (ARGV[10] to ARGV[16] then always there,
         ARGV[16] "" without a group): ",<tag>,<tag>,|,<channel>,": a campaign with audience tags or channels
         (meta's "tags", "channels", load_state.lua) admits a shopper carrying one of each list it has; others get
         15 not_eligible, nothing changed (a grant is the operator's choice of shoppers: never refused so)
ARGV[18] only for a shopper whose token a storefront's key signed (ARGV[10] to ARGV[17] then always there, ARGV[17]
         "|" without tags or channels): the storefront's id, written into the ledger entry (field s) and so onto
         the claim in PostgreSQL (orders/drain.py); the default key's claims pass none and write none

Returns "<code>:<ledger_id>:<flags>" (one string: a table reply costs Redis ~1.3 us more; parsed by
redis_state.claim_reply)
  code       0 claimed, 1 limit_reached, 2 sold_out, 3 not_started, 4 ended, 5 paused,
             -1 the campaign has no (complete) state in Redis: nothing was changed
             -3 too late: Redis ran the script after the caller's deadline: nothing was changed
             -4 another bucket count (ledger_id holds meta's): nothing was changed, ask the right bucket
             -5 dry (only with ARGV[14]): nothing was changed
             -6 the campaign is of a group (its keys given were its home, without ARGV[16]): ledger_id holds the
                group's name in hex, flags its limit: nothing was changed, ask the group's keys
             23 group_limit_reached (only with ARGV[16]), 15 not_eligible (meta's "tags" or "channels")
             -2 rate limited (the campaign, the shopper or the IP sent too many this second): nothing else
                was changed, and no answer is stored
  ledger_id  the stream entry id of the claim ("" unless claimed)
  flags      bit 1: this answer is a replay of an earlier one; bit 2: the caller must send a drain trigger

What it costs Redis is mostly its redis.call()s, about 1 us each, and the fields it creates (docs/design.md,
"What the claim script costs"): so a claim made without an Idempotency-Key reads meta and stock, reads this
second's counters in one HMGET, checks and counts the per-user limit in one HINCRBY (taken back at once, in this
same step, when it is over), and writes the second's counters with its answer in one HSET. Numbers are read
from strings once each (x + 0: tonumber() converts twice) and answers are built from strings (a number turned
into a string costs ~0.5 us).
--]]
local call = redis.call
-- A refusal (limit_reached, sold_out, not_started, ended, paused) under an Idempotency-Key is kept 5 minutes, not
-- the claim's 24 h: long enough for the retries of one click, while a key sent again later (a client that reuses
-- its key, or retries from before the start) is decided again, and Redis holds no day of refusals (docs/api.md).
local REFUSAL_KEEP_MS = 300000
-- The deadline is checked in Redis's own clock (one TIME): the client's could not see Redis run late.
local clock = call('TIME')
local now_ms = clock[1] * 1000 + clock[2] / 1000
if now_ms > ARGV[2] + 0 then
  return '-3::0'
end

-- a campaign of a group: its group's hash (false: no group, nothing paid; ARGV[16] "" with ARGV[17] alone)
local held = (ARGV[16] or '') ~= '' and KEYS[#KEYS]
local idem = KEYS[6]
if idem == held then  -- grouped, without an Idempotency-Key
  idem = nil
end
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
    return code .. ':' .. ledger_id .. ':1'
  end
end

local meta = call('HMGET', KEYS[1], 'starts_ms', 'ends_ms', 'paused', 'limit', 'rate', 'drain', 'buckets', 'grant',
                  'tags', 'channels')
local stock = call('GET', KEYS[2])
local starts, ends, limit = meta[1], meta[2], meta[4]
local grant = ARGV[15] == '1'
-- a campaign of a group: the group's hash read once, its "" (there, or no state) and the shopper's coupons held
local group = held and call('HMGET', held, '', ARGV[1])
if not starts or not ends or not limit or not stock or (meta[8] == '1' and not grant) or (group and not group[1]) then
  if not starts and not held then  -- perhaps a grouped campaign's home: its name and limit, in hex, to the caller
    local home = call('HMGET', KEYS[1], 'group', 'group_limit')
    if home[1] then
      return '-6:' .. string.gsub(home[1], '.', function(c) return string.format('%02x', string.byte(c)) end) ..
        ':' .. home[2]
    end
  end
  return '-1::0'
end
local buckets = meta[7] or '1'
if buckets ~= (ARGV[13] or '1') then
  return '-4:' .. buckets .. ':0'
end
starts, ends, limit, stock = starts + 0, ends + 0, limit + 0, stock + 0
local open = (grant or now_ms >= starts) and now_ms < ends and meta[3] ~= '1'
local users, user = KEYS[3], ARGV[1]
if ARGV[14] == '1' and stock < 1 and open and (call('HGET', users, user) or 0) + 0 < limit then
  return '-5::0'
end

-- Rate limits: this second's counters, read in one HMGET and written with the answer in one HSET below (the
-- campaign's "c" always, the shopper's and the IP's only where there is a limit; the first count creates the
-- hash, which then gets its expiry); a replay above is never limited. As if each were counted in turn: one over
-- its limit stops the count there (the campaign's, then the shopper's, then the IP's).
local second = KEYS[5]
local shopper, ip = not grant and ARGV[4] ~= '0', not grant and ARGV[6] ~= '0'
local seen = grant and {} or call('HMGET', second, 'c', ARGV[5], ARGV[7])
local n, u, i = (seen[1] or 0) + 1, (seen[2] or 0) + 1, (seen[3] or 0) + 1
local rate = (meta[5] or 0) + 0
local over_c = not grant and rate > 0 and n > rate
local over_u = not over_c and shopper and u > ARGV[4] + 0
local limited = over_c or over_u or (ip and i > ARGV[6] + 0)

-- Whether the shopper carries one of the names of `wanted` (a campaign's ",a,b," or nothing: anyone) in `have`.
local function admits(wanted, have)
  if not wanted or wanted == '' then
    return true
  end
  for name in string.gmatch(wanted, '[^,]+') do
    if string.find(have, ',' .. name .. ',', 1, true) then
      return true
    end
  end
  return false
end
local eligible = true
if not grant and ((meta[9] or '') ~= '' or (meta[10] or '') ~= '') then  -- only a campaign that asks pays for it
  local audience = ARGV[17] or '|'
  local bar = string.find(audience, '|', 1, true)
  eligible = admits(meta[9], string.sub(audience, 1, bar - 1)) and admits(meta[10], string.sub(audience, bar + 1))
end

local answer, flags = '-2:', '0'  -- "<code>:<ledger id>", and the reply's flags
-- What the one HSET below writes: the counters counted (a rate-limited claim's only up to the one over its
-- limit) and one more field: the answer of a claim made without a key (its field "a:<token>"); a claim with a key
-- keeps its answer under the key, and a rate-limited one has none: their HSET names "c" twice (the last counts)
local with_u, with_i, field, value = shopper, ip, 'c', n
if limited then
  with_u, with_i = not over_c and shopper, not over_c and not over_u and ip
else
  local code, ledger_id = '0', ''
  if not open then
    code = now_ms < starts and not grant and '3' or now_ms >= ends and '4' or '5'
  elseif not eligible then
    code = '15'  -- neither tag nor channel the campaign asks for: nothing counted
  elseif group and (group[2] or 0) + 0 >= ARGV[16] + 0 then
    code = '23'  -- the shopper holds the group's limit (first after the window, as code_take.lua): nothing counted
  elseif stock < 1 then
    code = (call('HGET', users, user) or 0) + 0 >= limit and '1' or '2'
  elseif call('HINCRBY', users, user, 1) > limit then
    call('HINCRBY', users, user, -1)  -- at the limit already: taken back in this same atomic step
    code = '1'
  else
    if held then
      call('HINCRBY', held, user, 1)
    end
    call('DECR', KEYS[2])
    local storefront = ARGV[18]
    if idem and ARGV[10] ~= '' then
      if storefront then
        ledger_id = call('XADD', KEYS[4], '*', 'u', user, 'k', ARGV[10], 's', storefront)
      else
        ledger_id = call('XADD', KEYS[4], '*', 'u', user, 'k', ARGV[10])
      end
    elseif storefront then
      ledger_id = call('XADD', KEYS[4], '*', 'u', user, 's', storefront)
    else
      ledger_id = call('XADD', KEYS[4], '*', 'u', user)
    end
    local drain = meta[6]
    if not drain or now_ms >= drain + 0 then  -- no drain trigger pending: the caller sends one
      call('HSET', KEYS[1], 'drain', math.floor(now_ms) + ARGV[9])
      flags = '2'
    end
  end
  answer = code .. ':' .. ledger_id
  if grant then  -- only a grant is kept under its key: a refusal (paused, sold out) is decided again when sent again
    if code == '0' then
      call('SET', idem, answer .. ':' .. ARGV[3], 'PX', ARGV[11])
    end
  elseif idem then
    local keep = ARGV[11] + 0
    if code ~= '0' and keep > REFUSAL_KEEP_MS then
      keep = REFUSAL_KEEP_MS
    end
    call('SET', idem, answer .. ':' .. ARGV[3], 'PX', keep)
  else
    field, value = ARGV[3], answer
  end
end
if grant then  -- counted in no second: its answer is under its key
  return answer .. ':' .. flags
elseif with_u and with_i then
  call('HSET', second, 'c', n, ARGV[5], u, ARGV[7], i, field, value)
elseif with_u then
  call('HSET', second, 'c', n, ARGV[5], u, field, value)
elseif with_i then
  call('HSET', second, 'c', n, ARGV[7], i, field, value)
else
  call('HSET', second, 'c', n, field, value)
end
if n == 1 then
  call('PEXPIRE', second, ARGV[8])
end
return answer .. ':' .. flags
