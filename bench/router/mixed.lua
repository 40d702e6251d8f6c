-- wrk script for bench/router/soak.sh: a steady mix of requests through
-- Narwhal, cycling through a fixed list of 20 (one wrk thread, so the mix
-- is exact):
--    8  completions, non-streaming, max_tokens 16
--    6  completions, streaming, max_tokens 64
--    2  chat completions, non-streaming, max_tokens 16
--    2  chat completions, streaming, max_tokens 32
--    2  invalid requests (no prompt; max_tokens -1): Narwhal must answer 4xx
-- response() cannot tell which request an answer belongs to, so answers
-- are judged by shape: 2xx must be a finished completion or a stream ending
-- with [DONE] without an error event; 4xx must carry an error envelope
-- (expected for 2 in 20); anything else (5xx, 4xx without an envelope, bad
-- 2xx) is a failure. done() prints:
--   NWB responses=N ok=N rejected=N unexpected=N bad=N
local H = { ["Content-Type"] = "application/json" }
local model = '"model":"opt-13b-a100"'
local function completion(tokens, stream)
  return wrk.format("POST", "/v1/completions", H, string.format(
    '{%s,"prompt":"Tell me about lighthouses and the people who kept them.","max_tokens":%d,"stream":%s}',
    model, tokens, stream and "true" or "false"))
end
local function chat(tokens, stream)
  return wrk.format("POST", "/v1/chat/completions", H, string.format(
    '{%s,"messages":[{"role":"user","content":"Write a haiku about the sea."}],"max_tokens":%d,"stream":%s}',
    model, tokens, stream and "true" or "false"))
end
local list = {
  completion(16, false), completion(64, true), completion(16, false), completion(64, true),
  chat(16, false), completion(16, false), completion(64, true), chat(32, true),
  completion(16, false), wrk.format("POST", "/v1/completions", H, '{' .. model .. ',"max_tokens":4}'),
  completion(16, false), completion(64, true), completion(16, false), chat(16, false),
  completion(64, true), completion(16, false), chat(32, true), completion(64, true),
  completion(16, false),
  wrk.format("POST", "/v1/completions", H, '{' .. model .. ',"prompt":"x","max_tokens":-1}'),
}
local i = 0
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  responses = 0; ok = 0; rejected = 0; unexpected = 0; bad = 0
end

function request()
  i = i % #list + 1
  return list[i]
end

local tail = "data: [DONE]\n\n"
local function say(what, status, body)
  if unexpected + bad <= 5 then
    io.stderr:write(what .. " " .. status .. ": " .. string.sub(body or "", 1, 200) .. "\n")
  end
end

function response(status, headers, body)
  responses = responses + 1
  body = body or ""
  if status >= 200 and status <= 299 then
    if string.sub(body, -#tail) == tail then
      if string.find(body, 'data: {"error"', 1, true) then
        bad = bad + 1; say("in-band error", status, body)
      else
        ok = ok + 1
      end
    elseif string.find(body, '"finish_reason":"length"', 1, true) then
      ok = ok + 1
    else
      bad = bad + 1; say("bad 2xx body", status, body)
    end
  elseif status >= 400 and status <= 499 and string.find(body, '"error"', 1, true) then
    rejected = rejected + 1
  else
    unexpected = unexpected + 1; say("unexpected status", status, body)
  end
end

function done(summary, latency, requests)
  local t = { responses = 0, ok = 0, rejected = 0, unexpected = 0, bad = 0 }
  for _, th in ipairs(threads) do
    for k, _ in pairs(t) do t[k] = t[k] + (th:get(k) or 0) end
  end
  io.write(string.format("NWB responses=%d ok=%d rejected=%d unexpected=%d bad=%d\n",
    t.responses, t.ok, t.rejected, t.unexpected, t.bad))
end
