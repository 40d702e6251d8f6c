-- wrk script: non-streaming completions against one narwhal-sim engine.
-- MAX_TOKENS (environment) sets max_tokens; default 16.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local max_tokens = tonumber(os.getenv("MAX_TOKENS") or "16")
wrk.body = string.format(
  '{"model":"opt-13b-a100","prompt":"Summarise the history of the lighthouse in two lines.",' ..
  '"max_tokens":%d,"stream":false}', max_tokens)

function response(status, headers, body)
  if status ~= 200 then
    error("unexpected status " .. status)
  end
end
