-- wrk script for scripts/flash-wrk: POST /deduct/<strategy> for one product, every
-- request with a request_id of its own (<prefix>-<thread>-<n>), so no request is a
-- retry of another. Arguments after `--`: strategy, product id, id prefix.
-- The threads, for a script that builds on this one (scripts/wrk/count.lua).
threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  strategy = args[1] or "batched"
  product = args[2] or "1"
  prefix = args[3] or "wrk"
  counter = 0
end

function request()
  counter = counter + 1
  local body = string.format('{"product_id": %s, "request_id": "%s-%d-%d"}', product, prefix, tid, counter)
  return wrk.format("POST", "/deduct/" .. strategy, {["Content-Type"] = "application/json"}, body)
end
