-- wrk script: non-streaming completions, through a proxy or straight to
-- one narwhal-sim engine (bench/router/run.sh).
-- MAX_TOKENS (environment) sets max_tokens; default 16. PACE_MS: below.
--
-- Every response is checked, and nothing aborts the run: non-2xx answers
-- and 2xx answers that are not a finished completion are counted, and done()
-- prints one machine-readable line that run.sh uses to mark the cell invalid:
--   NWB responses=N non2xx=N bad=N checked=N
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local max_tokens = tonumber(os.getenv("MAX_TOKENS") or "16")
-- PACE_MS (environment): each connection waits this long before each
-- request, which holds the rate near connections * 1000 / PACE_MS req/s
-- whatever the proxy's speed (the "paced" mode of run.sh).
local pace_ms = tonumber(os.getenv("PACE_MS") or "0")
if pace_ms > 0 then
  function delay()
    return pace_ms
  end
end
wrk.body = string.format(
  '{"model":"opt-13b-a100","prompt":"Summarise the history of the lighthouse in two lines.",' ..
  '"max_tokens":%d,"stream":false}', max_tokens)

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  responses = 0
  non2xx = 0
  bad = 0
  checked = 0
end

function response(status, headers, body)
  responses = responses + 1
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
    if non2xx <= 3 then
      io.stderr:write("non-2xx " .. status .. ": " .. string.sub(body or "", 1, 300) .. "\n")
    end
    return
  end
  -- A finished completion names its finish reason; an error envelope or a
  -- cut-off body does not. A plain find on ~370 bytes costs next to nothing.
  checked = checked + 1
  if not body or not string.find(body, '"finish_reason":"length"', 1, true) then
    bad = bad + 1
    if bad <= 3 then
      io.stderr:write("bad 2xx body: " .. string.sub(body or "", 1, 300) .. "\n")
    end
  end
end

function done(summary, latency, requests)
  local r, n, b, c = 0, 0, 0, 0
  for _, t in ipairs(threads) do
    r = r + (t:get("responses") or 0)
    n = n + (t:get("non2xx") or 0)
    b = b + (t:get("bad") or 0)
    c = c + (t:get("checked") or 0)
  end
  io.write(string.format("NWB responses=%d non2xx=%d bad=%d checked=%d\n", r, n, b, c))
end
