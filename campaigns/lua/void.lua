--[[
Take back a claim whose request gave up: Redis ran it, but froze (or the connection died) before the reply
reached the caller, who answered 503 ("nothing was changed") once its deadline had passed and it still could
not read the answer. Sent by that caller when Redis answers again; the claim itself is then cancelled through
the ordinary cancel path (orders.claim.claim_cancel: the coupon, if issued, revoked; the stock returned once).

KEYS[1] the claim's answer: its Idempotency-Key's string "<code>:<ledger id>:<token>[:<told>]" (claim.lua), or
        the hash of the claim's second, whose field "a:<token>" holds "<code>:<ledger id>" (a claim made without
        a key)
ARGV[1] the token of the request that gave up: only the claim that request made is taken back, or (replica
        acks) the repeat of its key that request was
ARGV[2] (replica acks, a run again) the ledger id an earlier run of this request took back without a replica
        confirming it: if that void holds here (the answer is 'void', or was decided anew since) it is
        returned again; if the answer still holds that claim, a failover lost the void and it is decided anew

Returns {1, ledger id} when the claim must be cancelled now (the answer is 'void' from here on: a repeat of the
key is decided anew), {0, ''} when there is nothing to take back: the claim never ran (no answer), it was not a
claim, it is another request's (an earlier one with the same key, told directly), its answer was already given
to a repeat of the key (claim.lua marks it ':d') and so stands, or (replica acks) a repeat of the key is in
flight or was told (<told> "+<token>..."). Then the request that made the claim leaves an "o" (it gave up), and
a repeat that was not confirmed (answered 503) takes its "+<token>" out: the last one out, after an "o",
takes the claim back; one that was told stays, and the claim with it.
--]]
local again = ARGV[2] or ''
if redis.call('TYPE', KEYS[1]).ok == 'hash' then
  local field = 'a:' .. ARGV[1]
  local answer = redis.call('HGET', KEYS[1], field)
  if again ~= '' and answer == 'void' then
    return {1, again}
  end
  local code, ledger_id = string.match(answer or '', '^([^:]*):([^:]*)$')
  if code ~= '0' then
    return {0, ''}
  end
  redis.call('HSET', KEYS[1], field, 'void')
  return {1, ledger_id}
end
local answer = redis.call('GET', KEYS[1])
if again ~= '' and answer and (answer == 'void' or string.match(answer, '^[^:]*:([^:]*)') ~= again) then
  return {1, again}
end
if not answer or answer == 'void' then
  return {0, ''}
end
local code, ledger_id, token, told = string.match(answer, '^([^:]*):([^:]*):?([^:]*):?([^:]*)$')
if code ~= '0' or told == 'd' then
  return {0, ''}
end
local caller = ARGV[1]
if token ~= '' and token == caller then  -- the request that made the claim gave up
  if not string.find(told, '+', 1, true) then
    redis.call('SET', KEYS[1], 'void', 'KEEPTTL')
    return {1, ledger_id}
  end
  if string.sub(told, 1, 1) ~= 'o' then  -- repeats are out: the last one unconfirmed takes the claim back
    redis.call('SET', KEYS[1], code .. ':' .. ledger_id .. ':' .. token .. ':o' .. told, 'KEEPTTL')
  end
  return {0, ''}
end
local repeat_of = '+' .. caller  -- a repeat of the key that was not confirmed (tokens: 32 hex characters each)
local at = string.find(told, repeat_of, 1, true)
if not at then
  return {0, ''}
end
told = string.sub(told, 1, at - 1) .. string.sub(told, at + #repeat_of)
if told == 'o' then
  redis.call('SET', KEYS[1], 'void', 'KEEPTTL')
  return {1, ledger_id}
end
redis.call('SET', KEYS[1], code .. ':' .. ledger_id .. ':' .. token .. ':' .. told, 'KEEPTTL')
return {0, ''}
