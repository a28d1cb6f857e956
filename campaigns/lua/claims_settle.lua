--[[
Settle a batch of claims PostgreSQL holds, in one step (orders/settle.py): acknowledge their ledger entries, write
their settled records and renew the bucket's coupon template. One command for the batch, not one a claim: the
drain's Python packed a SET per claim (~20 us of its CPU a claim, as much as the rest of the drain).

KEYS[1] ledger    stream  the bucket's ledger
KEYS[2] template  string  the bucket's coupon template (campaigns/claim_settled.py)
KEYS[3..] settled string  a record's key, one per record
ARGV[1] the drain's consumer group; ARGV[2] ms a record and the template live; ARGV[3] the template;
ARGV[4] how many entries; ARGV[5..4+n] their entry ids; then the records, in KEYS[3..]'s order

A record that answers never replaces a "?" (NX): a coupon changed since the drain read it marked it first.
Returns how many entries were acknowledged.
--]]
local keep = ARGV[2]
local n = tonumber(ARGV[4])
local acked = 0
for first = 5, 4 + n, 1000 do  -- unpack() within Lua's stack
  acked = acked + redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, first, math.min(first + 999, 4 + n)))
end
redis.call('SET', KEYS[2], ARGV[3], 'PX', keep)
for i = 3, #KEYS do
  local record = ARGV[2 + n + i]
  if record == '?' then
    redis.call('SET', KEYS[i], record, 'PX', keep)
  else
    redis.call('SET', KEYS[i], record, 'PX', keep, 'NX')
  end
end
return acked
