// A run of every kind of request, including clients that leave mid-stream and mid-generation, then SIGTERM: the
// server must answer each, and exit 0. In the sanitizer build this is the check that kt-server's own code has no
// memory errors and leaks nothing (LeakSanitizer runs at exit and makes the exit status non-zero). Node's fetch
// only, no npm packages.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { post, startServer, waitForGauge } from "./server.mjs";

const KEY = "mix-key";
const auth = { Authorization: `Bearer ${KEY}` };
let server;

before(async () => {
  server = await startServer(["--api-key", KEY, "-np", "2", "--queue", "4", "--body-limit", "4096", "--ping-ms", "5"]);
});

after(async () => {
  const { code, signal } = await server.stop();
  assert.equal(signal, null, server.stderr);
  assert.equal(code, 0, server.stderr);
  assert.doesNotMatch(server.stderr, /Sanitizer/);
});

// Reads a response body until `bytes` have come, then drops the connection.
async function readThenAbort(path, body, bytes) {
  const controller = new AbortController();
  const res = await fetch(server.url + path, {
    method: "POST", headers: { "Content-Type": "application/json", ...auth }, body: JSON.stringify(body),
    signal: controller.signal,
  });
  const reader = res.body.getReader();
  let got = 0;
  while (got < bytes) {
    const { value, done } = await reader.read();
    if (done) break;
    got += value.length;
  }
  controller.abort();
  return res.status;
}

test("every kind of request, then a clean exit", async () => {
  const chat = (extra) => ({ messages: [{ role: "user", content: "And God said" }], max_tokens: 12, ...extra });
  for (let round = 0; round < 3; ++round) {
    assert.equal((await post(server, "/v1/chat/completions", chat({ seed: round }), auth)).status, 200);
    assert.equal((await post(server, "/v1/chat/completions", chat({ stream: true, stream_options: { include_usage: true } }), auth)).status, 200);
    assert.equal((await post(server, "/v1/completions", { prompt: "Thus saith", max_tokens: 8, stop: ["\n", "LORD"] }, auth)).status, 200);
    assert.equal((await post(server, "/v1/completions", { prompt: [4094, 296], max_tokens: 8, stream: true }, auth)).status, 200);
    assert.equal((await post(server, "/tokenize", { content: "In the beginning" }, auth)).status, 200);
    assert.equal((await post(server, "/detokenize", { tokens: [296, 387] }, auth)).status, 200);
    assert.equal((await post(server, "/detokenize", { tokens: [99999] }, auth)).status, 400);
    assert.equal((await post(server, "/v1/chat/completions", "{not json", auth)).status, 400);
    assert.equal((await post(server, "/v1/chat/completions", { messages: [{ role: "user", content: 1 }] }, auth)).status, 400);
    assert.equal((await post(server, "/v1/chat/completions", chat({ n: 3 }), auth)).status, 400);
    assert.equal((await post(server, "/v1/completions", { prompt: "x".repeat(5000) }, auth)).status, 413);
    assert.equal((await post(server, "/v1/completions", { prompt: "word ".repeat(700) }, auth)).status, 400);
    assert.equal((await post(server, "/v1/chat/completions", chat({}), { Authorization: "Bearer wrong" })).status, 401);
    assert.equal((await fetch(server.url + "/v1/models", { headers: auth })).status, 200);
    assert.equal((await fetch(server.url + "/metrics", { headers: auth })).status, 200);
    assert.equal((await fetch(server.url + "/")).status, 200);
    assert.equal((await fetch(server.url + "/chat.js")).status, 200);
    assert.equal((await fetch(server.url + "/nothing", { headers: auth })).status, 404);
    // Clients that leave: mid-stream, and while a non-streamed reply is being generated.
    assert.equal(await readThenAbort("/v1/chat/completions", chat({ max_tokens: 400, ignore_eos: true, stream: true }), 600), 200);
    const gone = new AbortController();
    const pending = fetch(server.url + "/v1/completions", {
      method: "POST", headers: { "Content-Type": "application/json", ...auth }, signal: gone.signal,
      body: JSON.stringify({ prompt: "And", max_tokens: 400, ignore_eos: true }),
    }).catch((e) => e.name);
    await new Promise((r) => setTimeout(r, 20));
    gone.abort();
    assert.equal(await pending, "AbortError");
  }
  // Concurrent streams beyond the two sequences, some of them left behind.
  await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2
    ? readThenAbort("/v1/completions", { prompt: "And", max_tokens: 200, ignore_eos: true, stream: true }, 300)
    : post(server, "/v1/completions", { prompt: "And", max_tokens: 40, stream: true }, auth).then((r) => r.status))));
  await waitForGauge(server, "kt_requests_running", 0, auth);
  await waitForGauge(server, "kt_requests_queued", 0, auth);
});
