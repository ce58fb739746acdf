-- wrk script: batch POSTs of 1,000 timers each to punctual.
--   wrk -t2 -c8 -d10s --latency -s perf/load/batch.lua http://127.0.0.1:7480
-- timers/s = requests/s x 1000. Each thread cycles over 64 prebuilt bodies with distinct keys,
-- so the first 64 requests per thread insert and later ones replace (both are a full
-- schedule in the wheel). Timers are due in 10 minutes: none fires during the run.
local bodies = {}
local n = 0
local headers = { ["Content-Type"] = "application/json" }
local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  for b = 1, 64 do
    local items = {}
    for i = 1, 1000 do
      items[i] = string.format('{"key":"b%s-%d-%d","delay_ms":600000,"payload":{"i":%d}}', tid, b, i, i)
    end
    bodies[b] = '{"timers":[' .. table.concat(items, ",") .. ']}'
  end
end

function request()
  n = n % 64 + 1
  return wrk.format("POST", "/v1/timers/bench", headers, bodies[n])
end

function done(summary, latency, requests)
  io.write(string.format("timers/s: %.0f (non-2xx: %d)\n",
    summary.requests / (summary.duration / 1e6) * 1000, summary.errors.status))
end
