-- wrk script for scripts/flood: scripts/wrk/deduct.lua's requests (one product, each
-- request with a request_id of its own), and the answers counted by status. A client
-- that never backs off: a 429 is followed at once by the next request. Arguments
-- after `--`: strategy, product id, id prefix. Prints "status CODE COUNT" lines at
-- the end, summed over the threads. Run from the repository's root.
dofile("scripts/wrk/deduct.lua")

local deduct_init = init

function init(args)
  deduct_init(args)
  codes = {}
end

function response(status, headers, body)
  codes[status] = (codes[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("codes")) do
      total[status] = (total[status] or 0) + n
    end
  end
  for status, n in pairs(total) do
    io.write(string.format("status %d %d\n", status, n))
  end
  io.write(string.format("seconds %.3f\n", summary.duration / 1e6))
  -- Every answer's latency (ms): the admitted ones' when there are few refusals.
  io.write(string.format("p50 %.1f\np99 %.1f\n", latency:percentile(50) / 1000, latency:percentile(99) / 1000))
  -- Requests with no HTTP answer: connect, read and write errors (wrk's errors.status
  -- counts answers of 400 and up, and errors.timeout answers slower than --timeout:
  -- both are counted above by status, not here).
  io.write(string.format("errors %d\n", summary.errors.connect + summary.errors.read
    + summary.errors.write))
end
