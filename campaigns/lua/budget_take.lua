--[[
Take an amount of money from a campaign's budget if it fits in what is left: whole or nothing, never a part
(docs/api.md, "Grants, budgets, groups"). Run by a reserve or redeem once its discount is known, before its
coupon's change is written (coupons/budget.py); budget_give_back.lua gives it back if that write fails.

KEYS[1] budget  string  what is left of the budget, in the currency's minor units (cents)
ARGV[1] the amount, in minor units (an integer > 0, validated by the caller)

Returns {1, left after} taken, {0, left} does not fit (nothing changed), {-1, 0} no state (nothing changed).
--]]
local left = redis.call('GET', KEYS[1])
if not left then
  return {-1, 0}
end
left = tonumber(left)
local amount = tonumber(ARGV[1])
if amount > left then
  return {0, left}
end
return {1, redis.call('DECRBY', KEYS[1], amount)}
