'use strict';
// The official OpenAI Node SDK against a running Narwhal, as a user runs it
// (issue 14, "Clients as users run them"). run.sh starts narwhal-sim and
// Narwhal and passes, through the environment:
//   NARWHAL_URL      Narwhal's base URL (http://127.0.0.1:PORT)
//   NARWHAL_API_KEY  a key Narwhal accepts (server.api_keys_env)
//   NARWHAL_MODEL    the served model
//   NARWHAL_ENGINES  the simulated engines' URLs, comma separated
// Narwhal runs with plugins.admission.max_inflight 1 and no queue, so a
// second request while one is in flight is refused with 429 and Retry-After,
// and a reservation that a cancelled stream failed to release shows as a
// refusal of the next request.
// Prints one TAP line per scenario and "N passed, N failed" at the end; exits
// non-zero when any failed.

const assert = require('node:assert/strict');
const OpenAI = require('openai');

const baseURL = `${process.env.NARWHAL_URL}/v1`;
const apiKey = process.env.NARWHAL_API_KEY;
const model = process.env.NARWHAL_MODEL;
const engines = (process.env.NARWHAL_ENGINES || '').split(',').filter(Boolean);
if (!process.env.NARWHAL_URL || !apiKey || !model || engines.length === 0) {
  console.error('scenarios.js: NARWHAL_URL, NARWHAL_API_KEY, NARWHAL_MODEL and NARWHAL_ENGINES must be set (run.sh sets them)');
  process.exit(2);
}

// Every HTTP attempt the SDK makes through a client built here: status,
// Retry-After, the SDK's own retry counter and when it was sent/answered.
// onResponse may hold a response back before the SDK sees it.
function recordingFetch(log, onResponse) {
  return async (url, init) => {
    const headers = new Headers(init && init.headers);
    const entry = { sent: Date.now(), retryCount: headers.get('x-stainless-retry-count') };
    const response = await fetch(url, init);
    entry.status = response.status;
    entry.retryAfter = response.headers.get('retry-after');
    if (onResponse) await onResponse(response);
    entry.returned = Date.now();
    log.push(entry);
    return response;
  };
}

// maxRetries 0 by default: a scenario that is refused or fails must show it,
// not be rescued by the SDK's retries. Each call is bounded by timeout.
function client(options = {}) {
  return new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 20000, ...options });
}

async function getJSON(url) {
  const r = await fetch(url, { signal: AbortSignal.timeout(5000) });
  return { status: r.status, body: await r.json() };
}

// Poll (bounded) until check() holds; returns the last value seen.
async function waitFor(what, check, deadlineMs = 5000) {
  const end = Date.now() + deadlineMs;
  let last;
  for (;;) {
    last = await check();
    if (last.ok) return last;
    if (Date.now() > end) assert.fail(`${what}: not reached within ${deadlineMs} ms (last: ${JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// Nothing admitted in Narwhal, nothing resident on the engines it sees, and
// nothing running on any simulated engine.
async function fleetIdle() {
  const state = await getJSON(`${process.env.NARWHAL_URL}/narwhal/state`);
  const admitted = state.body.admission.admitted_now;
  const resident = state.body.engines.map((e) => e.resident_prefill + e.resident_decode);
  const running = [];
  for (const e of engines) {
    const text = await (await fetch(`${e}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
    const m = text.match(/^vllm:num_requests_running(?:\{[^}]*\})? ([0-9.e+]+)$/m);
    running.push(m ? Number(m[1]) : NaN);
  }
  return {
    ok: admitted === 0 && resident.every((n) => n === 0) && running.every((n) => n === 0),
    admitted, resident, running,
  };
}

const scenarios = [];
function scenario(name, fn) {
  scenarios.push({ name, fn });
}

scenario('models.list names the served model', async () => {
  const ids = [];
  for await (const m of client().models.list()) ids.push(m.id);
  assert.deepEqual(ids, [model]);
});

scenario('completions, not streamed: text, usage, finish_reason and the request id', async () => {
  const c = await client().completions.create(
    { model, prompt: 'Narwhals are', max_tokens: 8 },
    { headers: { 'X-Request-Id': 'sdk-completion-1' } },
  );
  assert.equal(c.object, 'text_completion');
  assert.equal(c.choices.length, 1);
  assert.ok(c.choices[0].text.length > 0, 'empty text');
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.completion_tokens, 8);
  assert.ok(c.usage.prompt_tokens > 0);
  assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + 8);
  assert.equal(c._request_id, 'sdk-completion-1');
});

scenario('chat, not streamed: an assistant message and usage', async () => {
  const c = await client().chat.completions.create({
    model,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Where do narwhals live?' }],
    max_tokens: 8,
  });
  assert.equal(c.object, 'chat.completion');
  assert.equal(c.choices[0].message.role, 'assistant');
  assert.ok(c.choices[0].message.content.length > 0, 'empty content');
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.completion_tokens, 8);
  assert.ok(c._request_id, 'no X-Request-Id');
});

scenario('completions, streamed with include_usage: every token, then one usage chunk', async () => {
  const stream = await client().completions.create({
    model, prompt: 'Narwhals are', max_tokens: 12, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  const usage = [];
  let afterUsage = 0;
  for await (const chunk of stream) {
    if (usage.length) afterUsage++;
    if (chunk.usage) usage.push(chunk.usage);
    for (const ch of chunk.choices) {
      text += ch.text;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.ok(text.length > 0, 'no text streamed');
  assert.equal(finish, 'length');
  assert.equal(usage.length, 1, 'expected exactly one usage chunk');
  assert.equal(afterUsage, 0, 'chunks after the usage chunk');
  assert.equal(usage[0].completion_tokens, 12);
  assert.equal(usage[0].total_tokens, usage[0].prompt_tokens + 12);
});

scenario('chat, streamed: deltas join into the answer; no usage unless asked', async () => {
  const stream = await client().chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 10, stream: true,
  });
  let content = '';
  let role = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.ok(!chunk.usage, 'usage without stream_options.include_usage');
    const d = chunk.choices[0] && chunk.choices[0].delta;
    if (d && d.role) role = d.role;
    if (d && d.content) content += d.content;
  }
  assert.ok(chunks >= 10, `only ${chunks} chunks for 10 tokens`);
  assert.equal(role, 'assistant');
  assert.ok(content.length > 0, 'no content streamed');
});

scenario('chat stream helper: finalChatCompletion assembles the stream, with usage', async () => {
  const runner = client().chat.completions.stream({
    model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 6, stream_options: { include_usage: true },
  });
  let deltas = '';
  runner.on('content', (delta) => { deltas += delta; });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, deltas);
  assert.ok(deltas.length > 0);
  assert.equal(final.choices[0].finish_reason, 'length');
  assert.equal(final.usage.completion_tokens, 6);
});

// Each error must come back as the SDK's APIError subclass for its status,
// with Narwhal's envelope (code, param, type) and without a retry.
async function expectError(call, Cls, status, fields, options = {}) {
  const log = [];
  const c = client({ maxRetries: 2, fetch: recordingFetch(log), ...options });
  const err = await call(c).then(
    () => assert.fail('the request succeeded'),
    (e) => e,
  );
  assert.ok(err instanceof Cls, `expected ${Cls.name}, got ${err.constructor.name}: ${err.message}`);
  assert.equal(err.status, status);
  for (const [k, v] of Object.entries(fields)) assert.equal(err[k], v, `error.${k}`);
  assert.ok(err.requestID, 'no X-Request-Id on the error');
  assert.equal(log.length, 1, `a ${status} was retried: ${JSON.stringify(log)}`);
}

scenario('errors: a bad max_tokens is a BadRequestError with the envelope, not retried', async () => {
  await expectError((c) => c.completions.create({ model, prompt: 'x', max_tokens: -5 }),
    OpenAI.BadRequestError, 400, { code: 'invalid_value', param: 'max_tokens', type: 'invalid_request_error' });
});

scenario('errors: a bad streamed chat request throws before any chunk', async () => {
  await expectError((c) => c.chat.completions.create({
    model, messages: [{ role: 'robot', content: 'x' }], max_tokens: 4, stream: true,
  }), OpenAI.BadRequestError, 400, { code: 'invalid_value', param: 'messages[0].role' });
});

scenario('errors: an unknown model is a NotFoundError', async () => {
  await expectError((c) => c.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 4 }),
    OpenAI.NotFoundError, 404, { code: 'model_not_found', param: 'model' });
});

scenario('errors: a wrong API key is an AuthenticationError', async () => {
  await expectError((c) => c.completions.create({ model, prompt: 'x', max_tokens: 4 }),
    OpenAI.AuthenticationError, 401, { code: 'invalid_api_key' }, { apiKey: 'not-a-key' });
});

// One stream holds the only admission slot; meanwhile a client without
// retries gets the 429 as a RateLimitError, and a client with retries waits
// the Retry-After Narwhal sent and then succeeds.
scenario('429: refused with Retry-After; the SDK reports it, or honours it and retries to success', async () => {
  const holder = await client().completions.create({
    model, prompt: 'hold the slot', max_tokens: 96, stream: true,
  });
  const it = holder[Symbol.asyncIterator]();
  assert.equal((await it.next()).done, false, 'the holding stream ended at once');
  const drain = (async () => { for (;;) if ((await it.next()).done) return; })();
  drain.catch(() => {}); // awaited below; a failure before that is reported there

  const err = await client().completions.create({ model, prompt: 'x', max_tokens: 4 }).then(
    () => assert.fail('admitted beside the holding stream: is max_inflight 1?'), (e) => e);
  assert.ok(err instanceof OpenAI.RateLimitError, `got ${err.constructor.name}: ${err.message}`);
  assert.equal(err.status, 429);
  const retryAfter = Number(err.headers.get('retry-after'));
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1, `Retry-After: ${err.headers.get('retry-after')}`);

  // The first refusal is held back until the holder is done, so that the
  // retry, not chance, decides the outcome.
  const log = [];
  const retrying = client({
    maxRetries: 2,
    fetch: recordingFetch(log, async (r) => { if (r.status === 429) await drain; }),
  });
  const c = await retrying.completions.create({ model, prompt: 'x', max_tokens: 4 });
  assert.equal(c.usage.completion_tokens, 4);
  assert.deepEqual(log.map((e) => [e.status, e.retryCount]), [[429, '0'], [200, '1']]);
  const waited = log[1].sent - log[0].returned;
  // The SDK's own first backoff is at most 500 ms; Retry-After makes it wait
  // the whole seconds Narwhal asked for.
  assert.ok(waited >= Number(log[0].retryAfter) * 1000 - 50,
    `retried after ${waited} ms, Retry-After was ${log[0].retryAfter}`);
  assert.ok(waited < 10000, `retried after ${waited} ms`);
});

scenario('cancellation mid-stream: AbortController ends it; the fleet is freed and the next request served', async () => {
  const controller = new AbortController();
  const stream = await client().chat.completions.create(
    { model, messages: [{ role: 'user', content: 'a long story' }], max_tokens: 1500, stream: true },
    { signal: controller.signal },
  );
  let chunks = 0;
  const started = Date.now();
  try {
    for await (const chunk of stream) {
      if (chunk.choices[0] && chunk.choices[0].delta.content) chunks++;
      if (chunks === 3) controller.abort();
    }
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIUserAbortError, `got ${e.constructor.name}: ${e.message}`);
  }
  // Events already read in the same socket read may still be handed out.
  assert.ok(chunks >= 3 && chunks < 20, `${chunks} chunks: the stream went on after the abort`);
  assert.ok(Date.now() - started < 10000, 'the stream ran on after the abort');
  // Narwhal's reservation and the engines' work are released promptly
  // (docs/api.md: a client that leaves has its engine calls cancelled).
  await waitFor('Narwhal and the engines idle after the abort', fleetIdle);
  const health = await getJSON(`${process.env.NARWHAL_URL}/narwhal/health`);
  assert.equal(health.status, 200);
  const c = await client().chat.completions.create({ model, messages: [{ role: 'user', content: 'next' }], max_tokens: 4 });
  assert.equal(c.usage.completion_tokens, 4);
});

async function main() {
  let passed = 0;
  let failed = 0;
  console.log(`1..${scenarios.length}`);
  for (const [i, s] of scenarios.entries()) {
    const t0 = Date.now();
    try {
      await s.fn();
      passed++;
      console.log(`ok ${i + 1} - ${s.name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`not ok ${i + 1} - ${s.name}`);
      console.log(`# ${String(e && e.stack || e).split('\n').join('\n# ')}`);
    }
  }
  console.log(`openai-node: ${passed} passed, ${failed} failed`);
  process.exitCode = failed === 0 ? 0 : 1;
}

main();
