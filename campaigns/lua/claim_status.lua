--[[
Read what GET /claims/{id} needs of Redis, in one step: the claim's settled record, and its ledger entry's
shopper unless the record answers (then the bucket's coupon template, which renders it). Changes nothing.

KEYS[1] settled  string  the claim's settled record ("<shopper>\n<code>\n<valid from us>\n<expires at us>", or
                         "?": ask PostgreSQL), written by whoever settled the claim (orders/settle.py)
KEYS[2] ledger   stream  the claim's campaign (bucket) ledger
KEYS[3] template string  the bucket's coupon template (JSON), written with the records
ARGV[1] the claim's ledger entry id ("1764470000000-0")

Returns {record, false, template or false} when the record answers; {record or false, shopper} when the entry is
in the ledger and the record is "?" or absent (shopper "" when the entry names none); {record or false, false} when
the ledger has no such entry (trimmed, or never claimed).
--]]
local settled = redis.call('GET', KEYS[1])
if settled and settled ~= '?' then
  return {settled, false, redis.call('GET', KEYS[3])}
end
local entry = redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[1])[1]
if not entry then
  return {settled, false}
end
local fields = entry[2]
for i = 1, #fields, 2 do
  if fields[i] == 'u' then
    return {settled, fields[i + 1]}
  end
end
return {settled, ''}
