--[[
An operator adds coupons to a running campaign: stock and the cached total grow together.

KEYS[1] meta   hash    holds total
KEYS[2] stock  string  coupons left
ARGV[1] how many coupons to add (a positive integer, validated by the caller)

Returns the new stock, or -1 when the campaign has no stock in Redis (nothing changed).
--]]
if redis.call('EXISTS', KEYS[2]) == 0 or redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
redis.call('HINCRBY', KEYS[1], 'total', ARGV[1])
if redis.call('HEXISTS', KEYS[1], 'share') == 1 then  -- this bucket's share (load_state.lua) grows with it
  redis.call('HINCRBY', KEYS[1], 'share', ARGV[1])
end
return redis.call('INCRBY', KEYS[2], ARGV[1])
