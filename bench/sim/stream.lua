-- wrk script: streamed completions (SSE) against one narwhal-sim engine.
-- Each response carries MAX_TOKENS token events plus the [DONE] event;
-- events/s = requests/s * (MAX_TOKENS + 1). Default MAX_TOKENS 100.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local max_tokens = tonumber(os.getenv("MAX_TOKENS") or "100")
wrk.body = string.format(
  '{"model":"opt-13b-a100","prompt":"Write a long story about a lighthouse keeper.",' ..
  '"max_tokens":%d,"stream":true}', max_tokens)

function response(status, headers, body)
  if status ~= 200 then
    error("unexpected status " .. status)
  end
end
