-- wrk script: POST claims to one campaign with a controlled share of repeated shoppers.
-- usage: wrk -t2 -c100 -d10s -s bench/claim_mix.lua URL -- CAMPAIGN_ID TOKENS_FILE REPEAT OFFSET THREADS
--   TOKENS_FILE  one "user token" pair a line (../shared/reference/wrk/tokens.py's format)
--   REPEAT       probability that a request comes from a shopper this thread has already sent (e.g. 0.15)
--   OFFSET       first line of the file to use: give each run on the same campaign a fresh range
--   THREADS      wrk's -t: thread i takes the lines OFFSET+i, OFFSET+i+THREADS, ... as its fresh shoppers
-- At the end it prints "claim_mix: requests R repeats P fresh F exhausted E maxfresh M" (summed over the threads):
-- the measured share of requests from an already-seen shopper is P / R; F fresh shoppers were used, at most M
-- by one thread (the next run on the same campaign starts at OFFSET + THREADS * M).
local users, tokens, n = {}, {}, 0
local path
local repeat_p = 0.15
local next_fresh = 1
requests, repeats, fresh, exhausted = 0, 0, 0, 0  -- globals: done() reads them with thread:get()
local threads = {}
local counter = 0

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  path = "/api/v1/campaigns/" .. args[1] .. "/claim"
  repeat_p = tonumber(args[3] or "0.15")
  local offset = tonumber(args[4] or "0")
  local nthreads = tonumber(args[5] or "1")
  local line_no = 0
  for line in io.lines(args[2]) do
    if line_no >= offset and (line_no - offset) % nthreads == tid then
      local u, t = line:match("^(%S+)%s+(%S+)$")
      if u then n = n + 1; users[n] = u; tokens[n] = t end
    end
    line_no = line_no + 1
  end
  math.randomseed(os.time() * 7 + tid)
end

function request()
  local i
  requests = requests + 1
  if next_fresh > 1 and math.random() < repeat_p then
    i = math.random(next_fresh - 1)
    repeats = repeats + 1
  else
    if next_fresh > n then
      exhausted = exhausted + 1
      i = math.random(n)
    else
      i = next_fresh
      next_fresh = next_fresh + 1
      fresh = fresh + 1
    end
  end
  return wrk.format("POST", path, {["X-User-Id"] = users[i], ["X-Token"] = tokens[i],
                                   ["Content-Type"] = "application/json"}, "{}")
end

function done(summary, latency, reqs)
  local r, p, f, e, m = 0, 0, 0, 0, 0
  for _, thread in ipairs(threads) do
    r = r + thread:get("requests")
    p = p + thread:get("repeats")
    f = f + thread:get("fresh")
    e = e + thread:get("exhausted")
    m = math.max(m, thread:get("fresh"))
  end
  io.write(string.format("claim_mix: requests %d repeats %d fresh %d exhausted %d maxfresh %d\n", r, p, f, e, m))
end
