--[[
Move stock out of a bucket of a campaign split into buckets (redis_state.move_stock), the first half of a move;
move_in.lua on the receiving bucket is the second. Stock is never created: what leaves here is recorded as a
pending move until the receiver holds it (then the caller deletes the record), so a move cut in half by a crash
is finished later (redis_state.finish_moves) and verify_campaign counts it as in transit meanwhile.

KEYS[1] meta   hash    share (this bucket's share of the campaign's stock), moved (moves out and in, a counter)
KEYS[2] stock  string  coupons left in this bucket
KEYS[3] moves  hash    pending moves out: move id -> "<to bucket>:<units>:<ms>"
KEYS[4] sent   hash    every move out: move id -> units (kept, for verify_campaign: docs/design.md, "Buckets")
ARGV[1] move id (unique)   ARGV[2] the receiving bucket

Takes half of the stock, at least one unit, so a dry bucket of a storm asks a donor a few times, not once per
claim. Returns {units taken, this bucket's move counter after}: units 0 when this bucket has none left, -1 when
it has no state (nothing changed). The counter lets the caller see later whether stock moved in since.
--]]
local stock = redis.call('GET', KEYS[2])
if not stock then
  return {-1, 0}
end
stock = tonumber(stock)
if stock < 1 then
  return {0, tonumber(redis.call('HGET', KEYS[1], 'moved') or '0')}
end
local units = math.ceil(stock / 2)
local clock = redis.call('TIME')
redis.call('DECRBY', KEYS[2], units)
redis.call('HINCRBY', KEYS[1], 'share', -units)
local moved = redis.call('HINCRBY', KEYS[1], 'moved', 1)
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2] .. ':' .. units .. ':' .. (clock[1] * 1000 + math.floor(clock[2] / 1000)))
redis.call('HSET', KEYS[4], ARGV[1], units)
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[3], ttl)
  redis.call('PEXPIRE', KEYS[4], ttl)
end
return {units, moved}
