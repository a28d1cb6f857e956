--[[
Give back n codes code_lookups_take.lua counted that turned out to stand for something (coupons/guard.py): what
stays counted is the unknown ones. Never below 0, and never a counter that expired meanwhile (a DECRBY would
make it again, negative and without a time to live: more guesses next time, never fewer).

KEYS[1] the counter  string  the key the take counted on, e.g. cr:code-misses:alice:29416712
ARGV[1] n            the codes given back, e.g. 1

Returns the counter after (0 when it was gone: nothing changed).
--]]
local counted = tonumber(redis.call('GET', KEYS[1]) or '0')
if counted <= 0 then
  return 0
end
return redis.call('DECRBY', KEYS[1], math.min(tonumber(ARGV[1]), counted))
