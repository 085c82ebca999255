// kt-server through the official openai package, as an application would use it: models, chat and completions,
// streamed and not, the stream helper, usage, determinism with a seed, stop strings, and every error the client
// turns into a typed exception. The model is the one kt ships (examples/kt-tiny-moe) with its own chat template.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import OpenAI from "openai";

import { post, startServer, waitForGauge } from "./server.mjs";

const KEY = "test-key-123";
let server, client;

before(async () => {
  server = await startServer(["--api-key", KEY, "-np", "2", "--queue", "8", "--body-limit", "65536", "--alias", "tiny"]);
  client = new OpenAI({ baseURL: server.baseURL, apiKey: KEY, maxRetries: 0 });
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, "kt-server exits 0 after SIGTERM:\n" + server.stderr);
});

const auth = () => ({ Authorization: `Bearer ${KEY}` });
const tokenCount = async (content, add_special) =>
  (await post(server, "/tokenize", { content, add_special }, auth())).json.tokens.length;

describe("models", () => {
  test("the served model is listed under its alias", async () => {
    const models = [];
    for await (const m of client.models.list()) models.push(m);
    assert.equal(models.length, 1);
    assert.equal(models[0].id, "tiny");
    assert.equal(models[0].object, "model");
    const one = await client.models.retrieve("tiny");
    assert.equal(one.id, "tiny");
    await assert.rejects(client.models.retrieve("gpt-4"), (e) => e instanceof OpenAI.NotFoundError);
  });
});

describe("chat completions", () => {
  test("a reply, with usage counted from the prompt the template renders", async () => {
    const r = await client.chat.completions.create({
      model: "tiny", messages: [{ role: "user", content: "And God said" }], max_tokens: 12, temperature: 0,
    });
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.object, "chat.completion");
    assert.equal(r.model, "tiny");
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, "assistant");
    assert.ok(r.choices[0].message.content.length > 0);
    assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
    // The template puts the user's text on a line of its own, after BOS.
    assert.equal(r.usage.prompt_tokens, await tokenCount("And God said\n", true));
    assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 12);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    if (r.choices[0].finish_reason === "length") assert.equal(r.usage.completion_tokens, 12);
  });

  test("a stream: one id, the role first, content deltas, a finish reason, then the usage chunk", async () => {
    const stream = await client.chat.completions.create({
      model: "tiny", messages: [{ role: "system", content: "Thus saith the LORD" }, { role: "user", content: "Hear me" }],
      max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const ids = new Set(chunks.map((c) => c.id));
    assert.equal(ids.size, 1);
    assert.equal(chunks[0].choices[0].delta.role, "assistant");
    const usage = chunks.at(-1);
    assert.deepEqual(usage.choices, []);
    assert.ok(usage.usage.completion_tokens >= 1);
    const finish = chunks.at(-2);
    assert.ok(["stop", "length"].includes(finish.choices[0].finish_reason));
    for (const c of chunks.slice(0, -2)) assert.equal(c.choices[0].finish_reason, null);
    for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null);
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
    assert.ok(text.length > 0);
    assert.equal(usage.usage.prompt_tokens, await tokenCount("Thus saith the LORD\nHear me\n", true));
  });

  test("the stream helper assembles the same completion as the stream's deltas", async () => {
    const body = { model: "tiny", messages: [{ role: "user", content: "In the beginning" }], max_tokens: 20, seed: 5 };
    const runner = client.chat.completions.stream(body);
    let deltas = "";
    runner.on("content", (delta) => { deltas += delta; });
    const final = await runner.finalChatCompletion();
    assert.equal(final.choices[0].message.role, "assistant");
    assert.equal(final.choices[0].message.content, deltas);
    assert.ok(["stop", "length"].includes(final.choices[0].finish_reason));
    assert.ok(deltas.length > 0);
  });

  test("streamed text equals non-streamed text for the same seed, greedy and sampled", async () => {
    for (const sampling of [{ temperature: 0, seed: 1 }, { temperature: 1.0, top_p: 0.9, seed: 42 }]) {
      const body = { model: "tiny", messages: [{ role: "user", content: "And the king said" }], max_tokens: 40, ...sampling };
      const whole = await client.chat.completions.create(body);
      const stream = await client.chat.completions.create({ ...body, stream: true });
      let text = "", finish = null;
      for await (const c of stream) {
        text += c.choices[0]?.delta?.content ?? "";
        finish = c.choices[0]?.finish_reason ?? finish;
      }
      assert.equal(text, whole.choices[0].message.content, JSON.stringify(sampling));
      assert.equal(finish, whole.choices[0].finish_reason);
      const again = await client.chat.completions.create(body);
      assert.equal(again.choices[0].message.content, whole.choices[0].message.content);
    }
  });

  test("a stop string ends the reply before it, also when it spans tokens, streamed or not", async () => {
    const body = { model: "tiny", messages: [{ role: "user", content: "And God said" }], max_tokens: 40, temperature: 0,
      ignore_eos: true };
    const full = (await client.chat.completions.create(body)).choices[0].message.content;
    // A stop string from the middle of the reply that straddles a word boundary, so it spans tokens.
    const at = full.indexOf(" ", 8);
    assert.ok(at > 0 && at + 4 <= full.length, full);
    const stop = full.slice(at - 2, at + 3);
    const cut = full.slice(0, full.indexOf(stop));
    const r = await client.chat.completions.create({ ...body, stop: [stop, "never appears"] });
    assert.equal(r.choices[0].message.content, cut);
    assert.equal(r.choices[0].finish_reason, "stop");
    let streamed = "";
    for await (const c of await client.chat.completions.create({ ...body, stop, stream: true }))
      streamed += c.choices[0]?.delta?.content ?? "";
    assert.equal(streamed, cut);
  });

  test("max_tokens and ignore_eos: exactly that many tokens, finish_reason length", async () => {
    const r = await client.chat.completions.create({
      model: "tiny", messages: [{ role: "user", content: "Amen" }], max_completion_tokens: 30, ignore_eos: true,
    });
    assert.equal(r.usage.completion_tokens, 30);
    assert.equal(r.choices[0].finish_reason, "length");
  });
});

describe("completions", () => {
  test("text and token prompts, streamed and not", async () => {
    const r = await client.completions.create({ model: "tiny", prompt: "And God said", max_tokens: 10, temperature: 0 });
    assert.equal(r.object, "text_completion");
    assert.match(r.id, /^cmpl-/);
    assert.ok(r.choices[0].text.length > 0);
    assert.equal(r.usage.prompt_tokens, await tokenCount("And God said", true));

    const ids = (await post(server, "/tokenize", { content: "And God said", add_special: true }, auth())).json.tokens;
    const byIds = await client.completions.create({ model: "tiny", prompt: ids, max_tokens: 10, temperature: 0 });
    assert.equal(byIds.choices[0].text, r.choices[0].text);

    const stream = await client.completions.create({
      model: "tiny", prompt: "And God said", max_tokens: 10, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    });
    let text = "", usage = null;
    for await (const c of stream) {
      text += c.choices[0]?.text ?? "";
      if (c.usage) usage = c.usage;
    }
    assert.equal(text, r.choices[0].text);
    assert.equal(usage.completion_tokens, r.usage.completion_tokens);
  });
});

describe("errors", () => {
  test("a wrong or missing key: 401", async () => {
    const wrong = new OpenAI({ baseURL: server.baseURL, apiKey: "nope", maxRetries: 0 });
    await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
    await assert.rejects(
      wrong.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "x" }] }),
      (e) => e instanceof OpenAI.AuthenticationError && e.code === "invalid_api_key");
    const none = await fetch(server.url + "/v1/models");
    assert.equal(none.status, 401);
    assert.equal(none.headers.get("www-authenticate"), "Bearer");
    // The page and the health check need no key.
    assert.equal((await fetch(server.url + "/health")).status, 200);
    assert.equal((await fetch(server.url + "/")).status, 200);
  });

  test("malformed bodies and wrong fields: 400 naming the field", async () => {
    await assert.rejects(
      client.chat.completions.create({ model: "tiny", messages: [{ role: "wizard", content: "x" }] }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === "messages[0].role");
    await assert.rejects(
      client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "x" }], temperature: "hot" }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === "temperature");
    await assert.rejects(
      client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "x" }], n: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === "n");
    await assert.rejects(client.completions.create({ model: "tiny" }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === "prompt");
    for (const body of ["{", "[]", "not json", ""]) {
      const r = await post(server, "/v1/chat/completions", body, auth());
      assert.equal(r.status, 400, body);
      assert.equal(r.headers.get("content-type"), "application/json");
      assert.equal(r.json.error.type, "invalid_request_error");
      assert.ok(r.json.error.message.length > 0);
    }
    const big = await post(server, "/v1/completions", { prompt: "x".repeat(70000) }, auth());
    assert.equal(big.status, 413);
    assert.equal(big.json.error.code, "request_too_large");
    const missing = await post(server, "/v1/nothing", {}, auth());
    assert.equal(missing.status, 404);
    assert.equal(missing.json.error.code, "not_found");
  });

  test("a prompt longer than the context: 400 before any stream byte", async () => {
    const long = "And it came to pass ".repeat(200);  // about 1000 tokens; the context holds 512
    await assert.rejects(
      client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: long }], stream: true }),
      (e) => e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded" && e.param === "messages");
    await assert.rejects(client.completions.create({ model: "tiny", prompt: long }),
      (e) => e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded");
    await assert.rejects(client.completions.create({ model: "tiny", prompt: [1, 2, 99999] }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === "prompt[2]");
  });

  test("aborting mid-stream cancels the sequence; the server goes on", async () => {
    const generated = async () => Number(/^kt_generated_tokens_total (\d+)$/m.exec(
      await (await fetch(server.url + "/metrics", { headers: auth() })).text())[1]);
    await waitForGauge(server, "kt_requests_running", 0, auth());
    const before = await generated();
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { model: "tiny", messages: [{ role: "user", content: "And God said" }], max_tokens: 500, ignore_eos: true, stream: true },
      { signal: controller.signal });
    let chunks = 0;
    // The client stops reading as it aborts: asked for more after an abort, the openai client's iterator hands out
    // chunks it had already read and has been seen to wait for ever after them (see load.test.mjs).
    for await (const _ of stream) {
      if (++chunks === 3) {
        controller.abort();
        break;
      }
    }
    assert.equal(chunks, 3);
    await waitForGauge(server, "kt_requests_running", 0, auth());
    // The sequence was cancelled, not decoded to its 500 tokens for nobody.
    const spent = (await generated()) - before;
    assert.ok(spent >= 2 && spent < 500, `${spent} tokens generated`);
    const r = await client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "Amen" }], max_tokens: 4 });
    assert.ok(r.choices[0].message.content !== undefined);
  });
});

describe("tokenize, detokenize, health, metrics", () => {
  test("tokenize and detokenize round-trip; ids outside the vocabulary are a 400", async () => {
    const t = await post(server, "/tokenize", { content: "In the beginning God created" }, auth());
    assert.equal(t.status, 200);
    assert.ok(t.json.tokens.length >= 4);
    const d = await post(server, "/detokenize", { tokens: t.json.tokens }, auth());
    assert.equal(d.json.content, "In the beginning God created");
    const bad = await post(server, "/detokenize", { tokens: [1, 4096] }, auth());
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, "tokens[1]");
  });

  test("health is 200 once loaded; metrics count requests and tokens", async () => {
    const h = await fetch(server.url + "/health");
    assert.deepEqual(await h.json(), { status: "ok" });
    const m = await (await fetch(server.url + "/metrics", { headers: auth() })).text();
    assert.match(m, /^# TYPE kt_requests_total counter$/m);
    assert.match(m, /^kt_requests_total\{route="chat",code="200"\} [1-9]\d*$/m);
    assert.match(m, /^kt_requests_total\{route="chat",code="400"\} [1-9]\d*$/m);
    assert.match(m, /^kt_generated_tokens_total [1-9]\d*$/m);
    assert.match(m, /^kt_time_to_first_token_seconds_count [1-9]\d*$/m);
    assert.match(m, /^kt_requests_queued 0$/m);
  });
});
