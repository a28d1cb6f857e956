--[[
Count n codes a request is about to look up against one counter of this minute, unless that passes its limit
(coupons/guard.py): the check and the count are one step, so requests running at once can never all pass a
check before any of them is counted. Run once per counter (the shopper's, the address's: two slots on a cluster).

KEYS[1] the counter  string  e.g. cr:code-misses:alice:29416712 or cr:code-misses-ip:203.0.113.7:29416712
ARGV[1] n            the codes about to be looked up, e.g. 1 (a use) or 5 (a cart's codes)
ARGV[2] the limit    e.g. 20 (COUPONS_CODE_MISSES_PER_MINUTE) or 100 (..._PER_IP_PER_MINUTE)
ARGV[3] seconds      the counter's time to live, e.g. 120 (two windows)
ARGV[4] known        codes known to stand for something (a live shared code), e.g. 1 or 0: checked with the n
                     (the request is refused as if they were counted) but not counted, as they would be given back

Returns the counter after the take (n or more; with n 0, the counter), or -1 when n + known more would pass the
limit (nothing changed).
--]]
local n = tonumber(ARGV[1])
local counter = tonumber(redis.call('GET', KEYS[1]) or '0')
if counter + n + tonumber(ARGV[4] or '0') > tonumber(ARGV[2]) then
  return -1
end
if n == 0 then
  return counter
end
local counted = redis.call('INCRBY', KEYS[1], n)
redis.call('EXPIRE', KEYS[1], ARGV[3])
return counted
