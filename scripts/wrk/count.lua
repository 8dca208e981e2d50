-- wrk script for scripts/flood: POST /deduct/<strategy> for one product, each request
-- with a request_id of its own (<prefix>-<thread>-<n>), and the answers counted by
-- status. A client that never backs off: a 429 is followed at once by the next request.
-- Arguments after `--`: strategy, product id, id prefix. Prints "status CODE COUNT"
-- lines at the end, summed over the threads.
local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  strategy = args[1] or "atomic-sql"
  product = args[2] or "1"
  prefix = args[3] or "flood"
  counter = 0
  codes = {}
end

function request()
  counter = counter + 1
  local body = string.format('{"product_id": %s, "request_id": "%s-%d-%d"}', product, prefix, tid, counter)
  return wrk.format("POST", "/deduct/" .. strategy, {["Content-Type"] = "application/json"}, body)
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
  io.write(string.format("errors %d\n", summary.errors.connect + summary.errors.read
    + summary.errors.write + summary.errors.status + summary.errors.timeout))
end
