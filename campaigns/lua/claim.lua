--[[
Claim one coupon of a campaign: every check first, then every change, in one atomic step.

KEYS[1] meta    hash    starts_ms, ends_ms, paused ("0"/"1"), limit (per-user limit)
KEYS[2] stock   string  coupons left
KEYS[3] users   hash    user id -> coupons this user claimed
KEYS[4] ledger  stream  claims awaiting the drain into PostgreSQL (field u = user id, k = key digest)
KEYS[5] idem    string  the stored answer "<code>:<ledger id>" for this (user, Idempotency-Key)
KEYS[6] drain   string  flag: a drain trigger is already pending for this campaign
KEYS[7] rate    string  claims this second for the campaign (limit: meta 'rate')
KEYS[8] rate    string  claims this second by this shopper (limit ARGV[5])
KEYS[9] rate    string  claims this second from this client IP (limit ARGV[6], 0 = no limit)
ARGV[1] user id (validated by the caller)
ARGV[2] "1": KEYS[5] is read (a replay) and written (the answer); the caller passes the shopper's
        Idempotency-Key, or a key of the request's own so a lost reply's outcome can be read afterwards
ARGV[3] how long the answer is kept, milliseconds
ARGV[4] how long the drain-trigger flag lives, milliseconds
ARGV[5] claims one shopper may send per second
ARGV[6] claims one client IP may send per second (0: not limited)
ARGV[7] deadline, milliseconds in Redis's clock: after it the caller has given up (answered 503), so the
        claim must not happen (a Redis frozen, then resumed, would otherwise run a claim nobody was told of)
ARGV[9] this request's token: stored with the answer "<code>:<ledger id>:<token>[:d]" (":d" once a repeat of
        the key was told it), so that only this request may void its claim (void.lua)
ARGV[8] the digest of the shopper's Idempotency-Key ("" without one): kept in the ledger entry (field k) and
        so in PostgreSQL, from where a rebuilt Redis restores the answer of a claim made with a key

Returns {code, ledger_id, flags}
  code       0 claimed, 1 limit_reached, 2 sold_out, 3 not_started, 4 ended, 5 paused,
             -1 the campaign has no (complete) state in Redis: nothing was changed
             -3 too late: Redis ran the script after the caller's deadline: nothing was changed
             -2 rate limited (the campaign, the shopper or the IP sent too many this second): nothing else
                was changed, and the answer is not stored under the Idempotency-Key
  ledger_id  the stream entry id of the claim ("" unless claimed)
  flags      bit 1: this answer is a replay of an earlier one; bit 2: the caller must send a drain trigger
--]]
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
if now_ms > tonumber(ARGV[7]) then
  return {-3, '', 0}
end

if ARGV[2] == '1' then
  local previous = redis.call('GET', KEYS[5])
  -- 'void': the request that made this claim gave up (503) and void.lua took the claim back: decide anew.
  if previous and previous ~= 'void' then
    local code, ledger_id, token, told = string.match(previous, '^([^:]*):([^:]*):?([^:]*):?([^:]*)$')
    if code == '0' and told ~= 'd' then
      -- told now: a void sent by a request that gave up on this answer may no longer take the claim back
      redis.call('SET', KEYS[5], code .. ':' .. ledger_id .. ':' .. token .. ':d', 'KEEPTTL')
    end
    return {tonumber(code), ledger_id, 1}
  end
end

local meta = redis.call('HMGET', KEYS[1], 'starts_ms', 'ends_ms', 'paused', 'limit', 'rate')
local stock = redis.call('GET', KEYS[2])
if not meta[1] or not meta[2] or not meta[4] or not stock then
  return {-1, '', 0}
end

-- Rate limits: one counter per second each (they expire after two), kept only where there is a limit; a
-- replay above is never limited.
local function over(key, limit)
  if limit <= 0 then
    return false
  end
  local n = redis.call('INCR', key)
  if n == 1 then
    redis.call('PEXPIRE', key, 2000)
  end
  return n > limit
end
if over(KEYS[7], tonumber(meta[5] or '0')) or over(KEYS[8], tonumber(ARGV[5])) or over(KEYS[9], tonumber(ARGV[6])) then
  return {-2, '', 0}
end

local code = 0
if now_ms < tonumber(meta[1]) then
  code = 3
elseif now_ms >= tonumber(meta[2]) then
  code = 4
elseif meta[3] == '1' then
  code = 5
elseif tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0') >= tonumber(meta[4]) then
  code = 1
elseif tonumber(stock) < 1 then
  code = 2
end

local ledger_id = ''
local flags = 0
if code == 0 then
  redis.call('DECR', KEYS[2])
  redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
  if (ARGV[8] or '') ~= '' then
    ledger_id = redis.call('XADD', KEYS[4], '*', 'u', ARGV[1], 'k', ARGV[8])
  else
    ledger_id = redis.call('XADD', KEYS[4], '*', 'u', ARGV[1])
  end
  if redis.call('SET', KEYS[6], '1', 'NX', 'PX', ARGV[4]) then
    flags = 2
  end
end
if ARGV[2] == '1' then
  redis.call('SET', KEYS[5], code .. ':' .. ledger_id .. ':' .. (ARGV[9] or ''), 'PX', ARGV[3])
end
return {code, ledger_id, flags}
