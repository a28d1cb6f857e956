--[[
Extend a running campaign's end: move the cached end and the expiry of every state key together.
Every check first, then every change, in one atomic step.

KEYS[1] meta      hash    starts_ms, ends_ms, paused, limit, total
KEYS[2] stock     string  coupons left
KEYS[3] users     hash    user id -> coupons claimed
KEYS[4] ledger    stream  claims awaiting the drain
KEYS[5] cancelled set     claim ids whose stock was given back
KEYS[6..8] moves, sent, received: the bucket's moves of stock (move_out.lua, move_in.lua)
ARGV[1] old_ends_ms       the end PostgreSQL held before this extension (what meta must still say)
ARGV[2] new_ends_ms       the new end
ARGV[3] new_expire_at_ms  absolute expiry of every key (the new end plus the grace period)

Returns {code, ends_ms}, ends_ms being meta's end after the call (-1 when meta is missing)
  1   extended: meta's ends_ms set to new_ends_ms, every existing key expires at new_expire_at_ms
  0   already: meta held new_ends_ms before the call (a repeat); the expiries were applied again
  -1  no state: meta is missing; nothing was changed
  -2  conflict: meta's ends_ms is neither old_ends_ms nor new_ends_ms (someone else moved it);
      nothing was changed
  -3  refused: new_ends_ms is not later than old_ends_ms; nothing was changed
--]]
local ends = redis.call('HGET', KEYS[1], 'ends_ms')
if not ends then
  return {-1, -1}
end
local current = tonumber(ends)
local old_ends = tonumber(ARGV[1])
local new_ends = tonumber(ARGV[2])

local code
if current == new_ends then
  code = 0
elseif new_ends <= old_ends then
  return {-3, current}
elseif current ~= old_ends then
  return {-2, current}
else
  code = 1
end

if code == 1 then
  redis.call('HSET', KEYS[1], 'ends_ms', ARGV[2])
end
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('PEXPIREAT', KEYS[i], ARGV[3])
  end
end
return {code, new_ends}
