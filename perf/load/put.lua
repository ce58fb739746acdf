-- wrk script: keep-alive single-timer PUTs (upserts) to punctual.
--   wrk -t2 -c64 -d10s --latency -s perf/load/put.lua http://127.0.0.1:7480
-- Keys cycle over 1,000,000 per thread, so the first pass inserts (201) and later passes
-- replace (200). Each timer is due in 10 minutes, so none fires during the run.
-- PUNCTUAL_DELAY_MS=N (env) makes each connection pause N ms between requests, to load the
-- server at a chosen fraction of its peak (connections x 1000 / N requests/s at most).
local counter = 0
local threads = {}
local pause = tonumber(os.getenv("PUNCTUAL_DELAY_MS") or "0")
local body = '{"delay_ms":600000,"payload":{"order":8812,"note":"close if unpaid"}}'
local headers = { ["Content-Type"] = "application/json" }

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function request()
  counter = (counter + 1) % 1000000
  return wrk.format("PUT", "/v1/timers/bench/t" .. tid .. "-" .. counter, headers, body)
end

if pause > 0 then
  function delay()
    return pause
  end
end

function done(summary, latency, requests)
  local non2xx = summary.errors.status
  io.write(string.format("non-2xx: %d, socket errors: connect %d read %d write %d timeout %d\n",
    non2xx, summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout))
end
