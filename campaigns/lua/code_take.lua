--[[
Take one use of a codes campaign's shared code for one use (a shopper's order): every check first, then every
change, in one atomic step. The use's coupon is written to PostgreSQL afterwards (coupons.services); if that
fails, code_give_back.lua gives the use back.

KEYS[1] meta   hash    starts_ms, ends_ms, paused, limit (uses per shopper), as load_state.lua writes them
KEYS[2] uses   string  uses left (the campaign's stock)
KEYS[3] users  hash    user id -> uses this shopper holds
KEYS[4] takes  set     one member per use holding a unit: "<coupon claim id>/<user id>" (holds "")
ARGV[1] user id (validated by the caller)
KEYS[5] group  hash    only for a campaign of a group (with ARGV[3]): user id -> coupons held of all the group's
                       campaigns (keys.py; it holds "": its absence is no state)
ARGV[1] user id (validated by the caller)
ARGV[2] the use's member (built by the caller from validated ids)
ARGV[3] with KEYS[5]: the group's limit

Returns 0 taken now, 6 already taken by this use (nothing changed), 1 limit_reached, 2 sold_out,
3 not_started, 4 ended, 5 paused, 23 group_limit_reached, -1 no state in Redis (nothing changed).
--]]
if redis.call('SISMEMBER', KEYS[4], ARGV[2]) == 1 then
  return 6
end
local meta = redis.call('HMGET', KEYS[1], 'starts_ms', 'ends_ms', 'paused', 'limit')
local uses = redis.call('GET', KEYS[2])
local held = KEYS[5]
if not meta[1] or not meta[2] or not meta[4] or not uses or redis.call('EXISTS', KEYS[4]) == 0
    or (held and redis.call('EXISTS', held) == 0) then
  return -1
end
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
if now_ms < tonumber(meta[1]) then
  return 3
elseif now_ms >= tonumber(meta[2]) then
  return 4
elseif meta[3] == '1' then
  return 5
elseif held and tonumber(redis.call('HGET', held, ARGV[1]) or '0') >= tonumber(ARGV[3]) then  -- as claim.lua
  return 23
elseif tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0') >= tonumber(meta[4]) then
  return 1
elseif tonumber(uses) < 1 then
  return 2
end
redis.call('DECR', KEYS[2])
redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
redis.call('SADD', KEYS[4], ARGV[2])
if held then
  redis.call('HINCRBY', held, ARGV[1], 1)
end
return 0
