-- wrk script: streamed completions (SSE), through a proxy or straight to one
-- narwhal-sim engine (bench/router/run.sh).
-- MAX_TOKENS (environment) sets max_tokens; default 200. Each complete
-- response carries MAX_TOKENS token events plus the final "data: [DONE]"
-- event (MAX_TOKENS + 1 "data:" lines); run.sh counts relayed events/s as
-- requests/s x MAX_TOKENS (token events only).
--
-- Checks, none of which aborts the run:
--   non2xx   status outside 2xx;
--   bad      a 2xx stream that does not end with "data: [DONE]" (cut off)
--            or carries an in-band error event, or (in the sampled
--            responses) does not hold exactly MAX_TOKENS + 1 events;
--   checked  responses whose events were counted: one in SAMPLE (default
--            16), to keep wrk's own CPU low (it shares a core with the
--            simulator).
-- done() prints: NWB responses=N non2xx=N bad=N checked=N
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local max_tokens = tonumber(os.getenv("MAX_TOKENS") or "200")
local sample = tonumber(os.getenv("SAMPLE") or "16")
wrk.body = string.format(
  '{"model":"opt-13b-a100","prompt":"Write a long story about a lighthouse keeper.",' ..
  '"max_tokens":%d,"stream":true}', max_tokens)

local tail = "data: [DONE]\n\n"
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

local function complain(what, body)
  bad = bad + 1
  if bad <= 3 then
    io.stderr:write(what .. ": " .. string.sub(body or "", 1, 200) .. " ... " ..
                    string.sub(body or "", -200) .. "\n")
  end
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
  if not body or string.sub(body, -#tail) ~= tail then
    complain("stream not terminated by [DONE]", body)
    return
  end
  if responses % sample == 0 then
    checked = checked + 1
    local _, events = string.gsub(body, "data: ", "")
    local _, errors = string.gsub(body, 'data: {"error"', "")
    if events ~= max_tokens + 1 or errors > 0 then
      complain(string.format("stream with %d events (%d errors), expected %d",
                             events, errors, max_tokens + 1), body)
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
