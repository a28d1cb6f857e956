-- wrk script of bench/api_routes.py: one API route, each request as a shopper of a token file.
-- usage: wrk -t2 -c50 -d8s -s bench/api_routes.lua URL -- name=value ...
--   method=GET|POST   path=/api/v1/...   body=TEXT (none: no body)
--   shoppers=FILE     thread t reads FILE.<t>: "user token [x]" a line (tokens signed by bench.common.shopper_token);
--                     none: no X-User-Id/X-Token. A file per thread, read whole before the load: wrk starts a
--                     thread's load as soon as its own init is done, while the next thread still reads.
--   pick=random|next  random: a random line each request; next: the lines in order (wrapping around, counted:
--                     the lines are orders that can be finished once)
--   orders=PREFIX     each request a new order id PREFIX<thread>-<n>, with an Idempotency-Key of its own
--   record=FILE       write "user token order" of each request to FILE.<thread> (a later run's shoppers=FILE)
-- In path and body, {x} is the line's third field and {order} the request's new order id.
-- At the end it prints "api_routes: requests R wrapped W status S:N ... code C:N ..." (summed over the threads):
-- the HTTP statuses, and the business "code" of the JSON answers (a route's answer can be 200 and still not
-- the path meant to be measured, e.g. a confirm of an order that holds nothing).
local method, path, body = "GET", "/", nil
local users, tokens, xs, n = {}, {}, {}, 0
local pick_next, prefix, record = false, nil, nil
local cursor, counter = 0, 0
local templated_path, templated_body = false, false
requests, wrapped = 0, 0     -- globals: done() reads them with thread:get()
statuses, codes = {}, {}
local threads, created = {}, 0

function setup(thread)
  thread:set("tid", created)
  created = created + 1
  table.insert(threads, thread)
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
  templated_body = body ~= nil and (body:find("{x}", 1, true) or body:find("{order}", 1, true)) ~= nil
  if opt.shoppers then
    local file = opt.shoppers .. "." .. tid
    for line in io.lines(file) do
      local u, t, x = line:match("^(%S+)%s+(%S+)%s*(%S*)$")
      if u then n = n + 1; users[n] = u; tokens[n] = t; xs[n] = x end
    end
    if n == 0 then error("api_routes.lua: no shopper lines in " .. file) end
  end
  if opt.record then  -- line-buffered: wrk exits without closing its threads' Lua states
    record = assert(io.open(opt.record .. "." .. tid, "w"))
    record:setvbuf("line")
  end
  math.randomseed(os.time() * 13 + tid)
end

local function fill(text, x, order)
  return (text:gsub("{x}", x or ""):gsub("{order}", order or ""))
end

function request()
  requests = requests + 1
  local headers = {}
  local i, order
  if n > 0 then
    if pick_next then
      cursor = cursor + 1
      if cursor > n then cursor = 1; wrapped = wrapped + 1 end
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
    if record then record:write(users[i], " ", tokens[i], " ", order, "\n") end
  end
  local p, b = path, body
  if templated_path then p = fill(path, i and xs[i], order) end
  if b ~= nil then
    headers["Content-Type"] = "application/json"
    if templated_body then b = fill(body, i and xs[i], order) end
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
  local r, w, s, c = 0, 0, {}, {}
  for _, thread in ipairs(threads) do
    r = r + thread:get("requests")
    w = w + thread:get("wrapped")
    for k, v in pairs(thread:get("statuses")) do s[k] = (s[k] or 0) + v end
    for k, v in pairs(thread:get("codes")) do c[k] = (c[k] or 0) + v end
  end
  local out = string.format("api_routes: requests %d wrapped %d", r, w)
  for k, v in pairs(s) do out = out .. string.format(" status %s:%d", tostring(k), v) end
  for k, v in pairs(c) do out = out .. string.format(" code %s:%d", tostring(k), v) end
  io.write(out .. "\n")
end
