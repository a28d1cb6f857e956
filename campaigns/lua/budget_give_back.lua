--[[
Give an amount of money back to a campaign's budget (a release, a lapsed hold, a use whose write failed after
its take: coupons/budget.py). Nothing when the budget is not in Redis: the next use loads what is left from
PostgreSQL, where the change giving it back is committed already.

KEYS[1] budget  string  what is left of the budget, in minor units
ARGV[1] the amount, in minor units (an integer > 0)

Returns what is left after, or -1 no state (nothing changed).
--]]
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
return redis.call('INCRBY', KEYS[1], ARGV[1])
