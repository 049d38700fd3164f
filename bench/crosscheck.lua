-- wrk script of bench/crosscheck: sends the raw requests of a file (written
-- by `loadgen requests`, or plain GETs), each once, in order; counts the
-- answers by status and body length; prints them as one JSON line.
--
--   wrk -t1 -c32 -d30s -s bench/crosscheck.lua URL -- FILE [MARKER]
--
-- Every request in the file ends with an empty line and has no body. When
-- the file runs out, the thread stops and later requests ask for a path no
-- server has (so they show as 404s instead of being sent twice). wrk itself
-- waits out its whole duration; when MARKER is given, the script creates
-- that file when the requests have run out, and the caller ends wrk early
-- with SIGINT (which still runs done()).

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  local f = assert(io.open(args[1], "rb"))
  local data = f:read("*a")
  f:close()
  marker = args[2]
  reqs = {}
  local at = 1
  while true do
    local e = string.find(data, "\r\n\r\n", at, true)
    if not e then break end
    reqs[#reqs + 1] = string.sub(data, at, e + 3)
    at = e + 4
  end
  data = nil
  sent = 0
  statuses = {}
  lengths = {}
  exhausted = 0
end

function request()
  sent = sent + 1
  local r = reqs[sent]
  if r then
    reqs[sent] = nil
    return r
  end
  exhausted = exhausted + 1
  if exhausted == 1 then
    wrk.thread:stop()
    if marker then
      local m = io.open(marker, "w")
      if m then m:close() end
    end
  end
  return "GET /crosscheck-ran-out-of-requests HTTP/1.1\r\nHost: x\r\n\r\n"
end

function response(status, headers, body)
  local s = tostring(status)
  statuses[s] = (statuses[s] or 0) + 1
  local l = tostring(#body)
  lengths[l] = (lengths[l] or 0) + 1
end

local function merge(into, from)
  for k, v in pairs(from) do
    into[k] = (into[k] or 0) + v
  end
end

local function object(t)
  local parts = {}
  for k, v in pairs(t) do
    parts[#parts + 1] = string.format('"%s":%d', k, v)
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

function done(summary, latency, requests)
  local st, ln, ex = {}, {}, 0
  for _, t in ipairs(threads) do
    merge(st, t:get("statuses"))
    merge(ln, t:get("lengths"))
    ex = ex + t:get("exhausted")
  end
  local e = summary.errors
  io.write(string.format(
    'CROSSCHECK {"requests":%d,"duration_us":%d,"statuses":%s,"lengths":%s,' ..
    '"exhausted":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p99":%d}}\n',
    summary.requests, summary.duration, object(st), object(ln), ex,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
