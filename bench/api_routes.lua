-- wrk script of bench/api_routes.py: one API route, each request as a shopper of a token file.
-- usage: wrk -t2 -c50 -d8s -s bench/api_routes.lua URL -- name=value ...
--   method=GET|POST   path=/api/v1/...   body=TEXT (none: no body)
--   shoppers=FILE     thread t reads FILE.<t>: "user token [x [y]]" a line (tokens signed by
--                     bench.common.shopper_token); none: no X-User-Id/X-Token. A file per thread, read whole before
--                     the load: wrk starts a thread's load as soon as its own init is done, while the next thread
--                     still reads.
--   pick=random|next  random: a random line each request; next: the lines in order (wrapping around, counted:
--                     the lines are orders or coupons that can be used once)
--   orders=PREFIX     each request a new order id PREFIX<thread>-<n>, with an Idempotency-Key of its own
--   record=FILE       write "user token order [x]" of each request to FILE.<thread> (a later run's shoppers=FILE;
--                     x the line's own x: a claimed coupon's code, so that the later run finds coupon and order)
--   rate=R threads=T connections=C
--                     paced: R requests/s over the T threads, each thread on a schedule of its own (slots T/R s
--                     apart from a random first offset); a connection that comes free waits for the next slot
--                     (wrk's delay()), or sends at once if that slot has passed (counted: late). Without LuaJIT's
--                     ffi (no clock), each request of a connection waits C/R s, its first a random part of it.
--                     wrk's latency counts from the actual send, not from the slot.
-- In path and body, {x} is the line's third field, {y} its fourth, {order} the request's new order id.
-- At the end it prints "api_routes: requests R wrapped W reused U late L latemax M pacing P status S:N ...
-- code C:N ..."
-- (summed over the threads; latemax the most a paced send was behind its slot, ms): the HTTP statuses, and the
-- business "code" of the JSON answers (a route's answer can be 200 and still not the path meant to be measured,
-- e.g. a confirm of an order that holds nothing). reused: requests sent after their thread's list wrapped.
local method, path, body = "GET", "/", nil
local users, tokens, xs, ys, n = {}, {}, {}, {}, 0
local pick_next, prefix, record = false, nil, nil
local cursor, counter = 0, 0
local templated_path, templated_body = false, false
local interval, slot, now_ms = nil, nil, nil  -- paced: ms between a thread's slots, the next slot, the clock
local fixed_delay, firsts = nil, 0             -- paced without a clock: the wait, the first requests left
requests, wrapped, reused, late, latemax = 0, 0, 0, 0, 0  -- globals: done() reads them with thread:get()
pacing = "none"  -- paced: "slots" (the clock's schedule) or "fixed" (no clock)
statuses, codes = {}, {}
local threads, created = {}, 0

function setup(thread)
  thread:set("tid", created)
  created = created + 1
  table.insert(threads, thread)
end

local function clock()
  local ok, ffi = pcall(require, "ffi")
  if not ok then return nil end
  pcall(ffi.cdef, "typedef struct { long tv_sec; long tv_nsec; } api_routes_ts;"
                  .. " int clock_gettime(int, api_routes_ts *);")
  local ts = ffi.new("api_routes_ts")
  return function()
    ffi.C.clock_gettime(1, ts)  -- CLOCK_MONOTONIC
    return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
  end
end

function init(args)
  local opt = {}
  for _, arg in ipairs(args) do
    local k, v = arg:match("^([%w_]+)=(.*)$")
    if k then opt[k] = v end
  end
  method = opt.method or "GET"
  path = opt.path or "/"
  body = opt.body
  pick_next = opt.pick == "next"
  prefix = opt.orders
  templated_path = path:find("{", 1, true) ~= nil
  templated_body = body ~= nil and (body:find("{x}", 1, true) or body:find("{y}", 1, true)
                                    or body:find("{order}", 1, true)) ~= nil
  if opt.shoppers then
    local file = opt.shoppers .. "." .. tid
    for line in io.lines(file) do
      local u, t, x, y = line:match("^(%S+)%s+(%S+)%s*(%S*)%s*(%S*)$")
      if u then n = n + 1; users[n] = u; tokens[n] = t; xs[n] = x; ys[n] = y end
    end
    if n == 0 then error("api_routes.lua: no shopper lines in " .. file) end
  end
  if opt.record then  -- line-buffered: wrk exits without closing its threads' Lua states
    record = assert(io.open(opt.record .. "." .. tid, "w"))
    record:setvbuf("line")
  end
  math.randomseed(os.time() * 13 + tid)
  delay = nil  -- wrk sends at once unless the script has a delay() after init (paced runs only)
  if opt.rate then
    local rate, nthreads = tonumber(opt.rate), tonumber(opt.threads or "1")
    local connections = tonumber(opt.connections or "50")
    now_ms = clock()
    if now_ms then
      interval, pacing = 1000 * nthreads / rate, "slots"
    else
      pacing = "fixed"
      fixed_delay, firsts = 1000 * connections / rate, math.ceil(connections / nthreads)
    end
    delay = paced
  end
end

function paced()
  if interval then
    local now = now_ms()
    if slot == nil then slot = now + math.random() * interval end
    local wait = slot - now
    slot = slot + interval
    if wait < 0 then
      late = late + 1
      if -wait > latemax then latemax = -wait end
      return 0
    end
    return math.floor(wait + 0.5)
  end
  if firsts > 0 then firsts = firsts - 1; return math.floor(math.random() * fixed_delay) end
  return math.floor(fixed_delay + 0.5)
end

local function fill(text, x, y, order)
  return (text:gsub("{x}", x or ""):gsub("{y}", y or ""):gsub("{order}", order or ""))
end

function request()
  requests = requests + 1
  local headers = {}
  local i, order
  if n > 0 then
    if pick_next then
      cursor = cursor + 1
      if cursor > n then cursor = 1; wrapped = wrapped + 1 end
      if wrapped > 0 then reused = reused + 1 end
      i = cursor
    else
      i = math.random(n)
    end
    headers["X-User-Id"] = users[i]
    headers["X-Token"] = tokens[i]
  end
  if prefix then
    counter = counter + 1
    order = prefix .. tid .. "-" .. counter
    headers["Idempotency-Key"] = "k" .. order
    if record then
      local x = i and xs[i] or ""
      record:write(users[i], " ", tokens[i], " ", order, x ~= "" and " " .. x or "", "\n")
    end
  end
  local p, b = path, body
  if templated_path then p = fill(path, i and xs[i], i and ys[i], order) end
  if b ~= nil then
    headers["Content-Type"] = "application/json"
    if templated_body then b = fill(body, i and xs[i], i and ys[i], order) end
  end
  return wrk.format(method, p, headers, b)
end

function response(status, headers, text)
  statuses[status] = (statuses[status] or 0) + 1
  local code = text and text:match('^{"code":(%d+)')
  if code == nil and text then code = text:match('"code":%s*(%d+)') end
  code = code or "-"
  codes[code] = (codes[code] or 0) + 1
end

function done(summary, latency, reqs)
  local r, w, u, l, lm, s, c = 0, 0, 0, 0, 0, {}, {}
  local pacing_of = threads[1] and threads[1]:get("pacing") or "none"
  for _, thread in ipairs(threads) do
    r = r + thread:get("requests")
    w = w + thread:get("wrapped")
    u = u + thread:get("reused")
    l = l + thread:get("late")
    lm = math.max(lm, thread:get("latemax"))
    for k, v in pairs(thread:get("statuses")) do s[k] = (s[k] or 0) + v end
    for k, v in pairs(thread:get("codes")) do c[k] = (c[k] or 0) + v end
  end
  local out = string.format("api_routes: requests %d wrapped %d reused %d late %d latemax %.1f pacing %s",
                            r, w, u, l, lm, pacing_of)
  for k, v in pairs(s) do out = out .. string.format(" status %s:%d", tostring(k), v) end
  for k, v in pairs(c) do out = out .. string.format(" code %s:%d", tostring(k), v) end
  io.write(out .. "\n")
end
