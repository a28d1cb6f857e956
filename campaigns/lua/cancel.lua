--[[
Give a cancelled claim's coupon back: stock +1 and the shopper's count -1, once per claim id.
This script is the only code that ever increases a campaign's stock.

KEYS[1] stock      string  coupons left
KEYS[2] users      hash    user id -> coupons this user claimed
KEYS[3] cancelled  set     claim ids already given back (holds "" so that it exists and expires)
KEYS[4] group      hash    only for a campaign of a group: user id -> coupons held of all its campaigns (-1 here
                           too; a missing one is left missing: the rebuild restores it)
ARGV[1] claim id (validated by the caller)
ARGV[2] user id of the claim

Returns 1 when the stock was returned now, 0 when this claim had been given back before (nothing
changed), -1 when the campaign has no stock in Redis (nothing changed).
--]]
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('SADD', KEYS[3], ARGV[1]) == 0 then
  return 0
end
redis.call('INCR', KEYS[1])
if tonumber(redis.call('HINCRBY', KEYS[2], ARGV[2], -1)) < 0 then
  redis.call('HSET', KEYS[2], ARGV[2], 0)
end
if KEYS[4] and redis.call('EXISTS', KEYS[4]) == 1 and tonumber(redis.call('HINCRBY', KEYS[4], ARGV[2], -1)) < 0 then
  redis.call('HSET', KEYS[4], ARGV[2], 0)
end
return 1
