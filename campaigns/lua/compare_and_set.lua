--[[
Repair one counter of a campaign only if nobody changed it since it was read (reconciliation).

KEYS[1] the key: a string (stock) or a hash (per-user counts)
ARGV[1] the hash field, or "" for a string key
ARGV[2] the value read before ("" for missing)
ARGV[3] the value to set

Returns 1 when set, 0 when the value had changed meanwhile (nothing changed; the next cycle looks again).
--]]
local current
if ARGV[1] == '' then
  current = redis.call('GET', KEYS[1])
else
  current = redis.call('HGET', KEYS[1], ARGV[1])
end
if (current or '') ~= ARGV[2] then
  return 0
end
if ARGV[1] == '' then
  redis.call('SET', KEYS[1], ARGV[3], 'KEEPTTL')
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
return 1
