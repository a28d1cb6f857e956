--[[
Take back a claim whose request gave up: Redis ran it, but froze (or the connection died) before the reply
reached the caller, who answered 503 ("nothing was changed") once its deadline had passed and it still could
not read the answer. Sent by that caller when Redis answers again; the claim itself is then cancelled through
the ordinary cancel path (orders.claim.claim_cancel: the coupon, if issued, revoked; the stock returned once).

KEYS[1] the claim's answer: its Idempotency-Key's string "<code>:<ledger id>:<token>[:d]", or the hash of the
        claim's second, whose field "a:<token>" holds "<code>:<ledger id>" (a claim made without a key)
ARGV[1] the token of the request that gave up: only the claim that request made is taken back

Returns {1, ledger id} when the claim must be cancelled now (the answer is 'void' from here on: a repeat of the
key is decided anew), {0, ''} when there is nothing to take back: the claim never ran (no answer), it was not a
claim, it is another request's (an earlier one with the same key, told directly), or its answer was already
given to a repeat of the key (claim.lua marks it ':d') and so stands.
--]]
if redis.call('TYPE', KEYS[1]).ok == 'hash' then
  local field = 'a:' .. ARGV[1]
  local answer = redis.call('HGET', KEYS[1], field)
  local code, ledger_id = string.match(answer or '', '^([^:]*):([^:]*)$')
  if code ~= '0' then
    return {0, ''}
  end
  redis.call('HSET', KEYS[1], field, 'void')
  return {1, ledger_id}
end
local answer = redis.call('GET', KEYS[1])
if not answer or answer == 'void' then
  return {0, ''}
end
local code, ledger_id, token, told = string.match(answer, '^([^:]*):([^:]*):?([^:]*):?([^:]*)$')
if code ~= '0' or told == 'd' or token == '' or token ~= ARGV[1] then
  return {0, ''}
end
redis.call('SET', KEYS[1], 'void', 'KEEPTTL')
return {1, ledger_id}
