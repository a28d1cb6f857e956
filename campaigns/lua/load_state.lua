--[[
Load (preheat) or refresh a campaign's state in Redis and set when its keys expire.

KEYS[1] meta    hash    starts_ms, ends_ms, paused, limit, total, rate
KEYS[2] stock   string  coupons left
KEYS[3] users   hash    user id -> coupons claimed (filled by the caller before a rebuild); it holds the
                        field "" (never a user id) so that it exists, and expires, before the first claim
KEYS[4] ledger  stream  claims awaiting the drain
KEYS[5] cancelled set   claim ids whose stock was given back (holds "" so that it exists and expires)
KEYS[6..8] (a grab campaign's) moves, sent, received: its moves of stock between buckets (move_out.lua), which
        expire with the rest
ARGV[1] starts_ms   ARGV[2] ends_ms   ARGV[3] paused "0"/"1"   ARGV[4] per-user limit   ARGV[5] total stock
ARGV[6] expire_at_ms: absolute expiry of every key (the campaign's end plus a grace period)
ARGV[7] stock to set when the stock key is missing, or "" to leave a missing stock missing
ARGV[8] consumer group of the drain
ARGV[9] last ledger id already persisted ("0-0" if none): a new stream never issues ids at or below it
ARGV[10] claims the campaign admits per second (its rate limit; of a campaign split into buckets, this bucket's part)
ARGV[11] the campaign's bucket count (redis_state.bucket_of), kept in meta's "buckets"
ARGV[12] with ARGV[7]: this bucket's share of the stock (meta's "share", moved with the stock between buckets;
         verify_campaign's per-bucket balance), "" for ARGV[7] itself
ARGV[13] "1": a campaign only operators grant (kind grant), kept in meta's "grant" (claim.lua: shoppers see no state)
ARGV[14] "1": a campaign of a group (its keys in the group's slot, keys.py): KEYS[#KEYS] is the group's hash (user
         id -> coupons held of all the group's campaigns), created holding "" where this load creates the stock
         and it is missing (a rebuild restores it first, from PostgreSQL); its expiry is only ever moved later (GT:
         the group's campaigns end apart). A refresh never creates it: a group hash lost alone is rebuilt.
ARGV[15] the campaign's audience tags ",vip,gold," and ARGV[16] its channels ",web,app," ("": anyone), kept in
         meta's "tags" and "channels" (claim.lua: a shopper must carry one of each list that is not empty)

Returns {stock_created (0/1), stock (or -1 when missing)}
--]]
-- Check first: a campaign that lost its stock is not half-loaded here (the caller rebuilds it instead).
if ARGV[7] == '' and redis.call('EXISTS', KEYS[2]) == 0 then
  return {0, -1}
end

local nkeys, held = #KEYS, nil
if ARGV[14] == '1' then
  held, nkeys = KEYS[#KEYS], #KEYS - 1
end

local function id_parts(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end

local function id_less(a, b)
  local a_ms, a_seq = id_parts(a)
  local b_ms, b_seq = id_parts(b)
  return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end

redis.call('HSET', KEYS[1], 'starts_ms', ARGV[1], 'ends_ms', ARGV[2], 'paused', ARGV[3],
           'limit', ARGV[4], 'total', ARGV[5], 'rate', ARGV[10], 'buckets', ARGV[11], 'grant', ARGV[13] or '0',
           'tags', ARGV[15] or '', 'channels', ARGV[16] or '')
redis.call('HSETNX', KEYS[3], '', '0')
redis.call('SADD', KEYS[5], '')

local created = 0
if ARGV[7] ~= '' and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], ARGV[7])
  redis.call('HSET', KEYS[1], 'share', ARGV[12] ~= '' and ARGV[12] or ARGV[7])
  created = 1
  if held then
    redis.call('HSETNX', held, '', '0')
  end
end

if redis.call('EXISTS', KEYS[4]) == 0 then
  redis.call('XGROUP', 'CREATE', KEYS[4], ARGV[8], '$', 'MKSTREAM')
else
  -- The stream exists: make sure the group does too, delivering everything already in it.
  local ok = redis.pcall('XGROUP', 'CREATE', KEYS[4], ARGV[8], '0')
  if type(ok) == 'table' and ok.err and not string.find(ok.err, 'BUSYGROUP', 1, true) then
    return redis.error_reply(ok.err)
  end
end
-- Never let the stream issue an id at or below one already persisted (a rebuilt, empty stream would).
if ARGV[9] ~= '0-0' then
  local info = redis.call('XINFO', 'STREAM', KEYS[4])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' and id_less(info[i + 1], ARGV[9]) then
      redis.call('XSETID', KEYS[4], ARGV[9])
    end
  end
end

for i = 1, nkeys do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('PEXPIREAT', KEYS[i], ARGV[6])
  end
end
if held and redis.call('EXISTS', held) == 1 and redis.call('PEXPIREAT', held, ARGV[6], 'GT') == 0 and
    redis.call('PTTL', held) == -1 then
  redis.call('PEXPIREAT', held, ARGV[6])
end
local stock = redis.call('GET', KEYS[2])
return {created, stock and tonumber(stock) or -1}
