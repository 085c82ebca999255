// kt-server's bytes on the wire, read with curl: the SSE framing, the headers a reverse proxy needs, pings while
// a request waits, CORS, the drain on SIGTERM, and clients too slow to send their requests. No npm packages: node
// and curl only.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import net from "node:net";
import { after, before, describe, test } from "node:test";

import { post, startServer, waitForGauge } from "./server.mjs";

const CURL = process.env.KT_CURL || "curl";
let server;

// Runs curl with `args` and resolves with its whole output (headers and body with -i). onFirstData is called
// when the first bytes of the response have come.
function curl(args, onFirstData = () => {}) {
  return new Promise((resolve, reject) => {
    const p = spawn(CURL, ["-sS", "-N", ...args]);
    let out = "", err = "";
    p.stdout.setEncoding("utf8").on("data", (t) => {
      if (out === "") onFirstData();
      out += t;
    });
    p.stderr.setEncoding("utf8").on("data", (t) => { err += t; });
    p.on("error", reject);
    p.on("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`curl exited ${code}: ${err}`))));
  });
}

const streamArgs = (url, body) => ["-i", "-H", "Content-Type: application/json", "-d", JSON.stringify(body), url];

// curl -i output as the header block (each line ending in CRLF) and the body (chunked encoding already undone).
function split(out) {
  const end = out.indexOf("\r\n\r\n");
  return { head: out.slice(0, end + 2), body: out.slice(end + 4) };
}

// The JSON of a stream's data events.
const dataChunks = (body) => body.split("\n\n").filter((e) => e.startsWith("data: {")).map((e) => JSON.parse(e.slice(6)));

before(async () => {
  server = await startServer(["-np", "1", "--ping-ms", "20", "--cors-origin", "http://page.example"]);
});

after(async () => {
  if (server) assert.equal((await server.stop()).code, 0, server.stderr);
});

describe("Server-Sent Events, byte by byte", () => {
  test("headers, data lines, the role first, one finish, then [DONE] and the end of the chunked body", async () => {
    const out = await curl(streamArgs(server.url + "/v1/chat/completions", {
      messages: [{ role: "user", content: "And God said" }], max_tokens: 8, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    }));
    const { head, body } = split(out);
    assert.match(head, /^HTTP\/1\.1 200 OK\r\n/);
    assert.match(head, /\r\nContent-Type: text\/event-stream\r\n/i);
    assert.match(head, /\r\nX-Accel-Buffering: no\r\n/i);
    assert.match(head, /\r\nCache-Control: no-cache\r\n/i);
    assert.match(head, /\r\nTransfer-Encoding: chunked\r\n/i);
    // Every event is "data: <one line>\n\n" (or a ": ping" comment); the stream ends with [DONE].
    assert.ok(body.endsWith("data: [DONE]\n\n"), JSON.stringify(body.slice(-80)));
    const events = body.split("\n\n").filter((e) => e !== "");
    for (const e of events) assert.match(e, /^(data: [^\n]+|: ping)$/);
    const data = events.filter((e) => e.startsWith("data: ")).map((e) => e.slice(6));
    assert.equal(data.at(-1), "[DONE]");
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    assert.equal(new Set(chunks.map((c) => c.id)).size, 1);
    assert.deepEqual(chunks[0].choices[0].delta, { role: "assistant", content: "" });
    assert.equal(chunks.filter((c) => c.choices.length && c.choices[0].finish_reason !== null).length, 1);
    assert.deepEqual(chunks.at(-1).choices, []);
    assert.equal(chunks.at(-1).usage.completion_tokens, 8);
  });

  test("a request that waits for a sequence gets ': ping' comments until its tokens come", async () => {
    // One sequence: a long request holds it, so the second waits in the queue, pinged every 20 ms.
    const long = post(server, "/v1/completions", { prompt: "And God said", max_tokens: 480, ignore_eos: true });
    await waitForGauge(server, "kt_requests_running", 1);
    const out = await curl(streamArgs(server.url + "/v1/completions", {
      prompt: "Thus saith", max_tokens: 4, stream: true,
    }));
    assert.equal((await long).status, 200);
    const { body } = split(out);
    const firstData = body.indexOf("data: ");
    assert.ok(body.indexOf(": ping\n\n") >= 0 && body.indexOf(": ping\n\n") < firstData, JSON.stringify(body.slice(0, 200)));
    assert.ok(body.endsWith("data: [DONE]\n\n"));
  });

  test("errors before the stream are plain JSON with their status, not events", async () => {
    const out = await curl(["-i", "-H", "Content-Type: application/json", "-d", "{\"stream\": true}",
      server.url + "/v1/chat/completions"]);
    assert.match(out, /^HTTP\/1\.1 400 Bad Request\r\n/);
    assert.match(out, /\r\nContent-Type: application\/json\r\n/i);
    assert.equal(JSON.parse(split(out).body).error.param, "messages");
  });
});

describe("CORS", () => {
  test("an allowed origin gets its preflight answered and its origin echoed; another gets nothing", async () => {
    const pre = await curl(["-i", "-X", "OPTIONS", "-H", "Origin: http://page.example",
      "-H", "Access-Control-Request-Method: POST", "-H", "Access-Control-Request-Headers: authorization,content-type",
      server.url + "/v1/chat/completions"]);
    assert.match(pre, /^HTTP\/1\.1 204 /);
    assert.match(pre, /\r\nAccess-Control-Allow-Origin: http:\/\/page\.example\r\n/i);
    assert.match(pre, /\r\nAccess-Control-Allow-Headers: authorization,content-type\r\n/i);
    assert.match(pre, /\r\nAccess-Control-Allow-Methods: GET, POST, OPTIONS\r\n/i);
    const get = await curl(["-i", "-H", "Origin: http://page.example", server.url + "/v1/models"]);
    assert.match(get, /\r\nAccess-Control-Allow-Origin: http:\/\/page\.example\r\n/i);
    const other = await curl(["-i", "-H", "Origin: http://elsewhere.example", server.url + "/v1/models"]);
    assert.doesNotMatch(other, /Access-Control-Allow-Origin/i);
  });
});

describe("SIGTERM", () => {
  test("stops accepting, lets the stream in flight finish cleanly, exits 0", async () => {
    const own = await startServer(["-np", "2"]);
    // SIGTERM once the stream has begun.
    const streaming = curl(streamArgs(own.url + "/v1/completions", {
      prompt: "And God said", max_tokens: 480, ignore_eos: true, stream: true,
    }), () => own.proc.kill("SIGTERM"));
    const out = await streaming;
    assert.ok(out.endsWith("data: [DONE]\n\n"), JSON.stringify(out.slice(-120)));
    const chunks = dataChunks(split(out).body);
    assert.equal(chunks.at(-1).choices[0].finish_reason, "length");
    const { code } = await own.exited;
    assert.equal(code, 0, own.stderr);
    assert.match(own.stderr, /SIGTERM: draining/);
    await assert.rejects(fetch(own.url + "/health"));  // nothing listens any more
  });

  test("with --drain-seconds 0 a long stream is cut short, and still ends with a finish and [DONE]", async () => {
    const own = await startServer(["-np", "1", "--drain-seconds", "0"]);
    const body = { prompt: "And God said", max_tokens: 480, ignore_eos: true, stream: true,
      stream_options: { include_usage: true } };
    const streaming = curl(streamArgs(own.url + "/v1/completions", body), () => own.proc.kill("SIGTERM"));
    const out = await streaming;
    assert.ok(out.endsWith("data: [DONE]\n\n"), JSON.stringify(out.slice(-120)));
    const chunks = dataChunks(split(out).body);
    assert.equal(chunks.at(-2).choices[0].finish_reason, "length");
    assert.ok(chunks.at(-1).usage.completion_tokens < 480, `${chunks.at(-1).usage.completion_tokens} tokens`);
    assert.equal((await own.exited).code, 0, own.stderr);
  });
});

// A raw connection that writes `first`, then every `everyMs` the piece that next(i, ms) returns for the i-th tick, ms
// after `first`, until it returns null (then it ends its side). Resolves with what the server sent and when (ms
// after `first`) the server closed the connection.
function slowClient(port, first, next, everyMs) {
  return new Promise((resolve) => {
    const sock = net.connect(port, "127.0.0.1");
    const start = Date.now();
    let got = "", timer = null, tick = 0;
    sock.setEncoding("utf8");
    sock.on("connect", () => {
      sock.write(first);
      timer = setInterval(() => {
        const piece = next(tick++, Date.now() - start);
        if (piece !== null) return void sock.write(piece);
        clearInterval(timer);
        sock.end();
      }, everyMs);
    });
    sock.on("data", (t) => { got += t; });
    sock.on("error", () => {});  // writing after the server closed: EPIPE or ECONNRESET
    sock.on("close", () => { clearInterval(timer); resolve({ got, ms: Date.now() - start }); });
  });
}

// For slowClient: `piece` again and again for `forMs`.
const repeatFor = (piece, forMs) => (_, ms) => (ms < forMs ? piece : null);

describe("clients too slow to send a request", () => {
  // One connection thread: a client that trickles its headers would hold it, and every other client would wait,
  // for as long as it keeps trickling (httplib bounds each read, not the request).
  test("one that trickles its headers gets 408 at its deadline, and the others are served meanwhile", async () => {
    const own = await startServer(["--request-timeout", "1", "--http-threads", "1"]);
    try {
      const slow = slowClient(own.port, "GET /health HTTP/1.1\r\nHost: x\r\n", repeatFor("X-Slow: 1\r\n", 8000), 200);
      await new Promise((r) => setTimeout(r, 200));
      const t0 = Date.now();
      const health = await fetch(own.url + "/health");
      assert.equal(health.status, 200);
      assert.ok(Date.now() - t0 < 5000, `the other client waited ${Date.now() - t0} ms`);
      const { got, ms } = await slow;
      assert.ok(ms < 5000, `the trickling client held its connection for ${ms} ms`);
      assert.match(got, /^HTTP\/1\.1 408 /);
      assert.match(got, /\r\nConnection: close\r\n/);
      const error = JSON.parse(got.slice(got.indexOf("\r\n\r\n") + 4)).error;
      assert.equal(error.code, "request_timeout");
      assert.match(error.message, /within its time: 1 s from its first byte/);
    } finally {
      await own.stop();
    }
  });

  test("one that never finishes its request line gets a bare 408", async () => {
    const own = await startServer(["--request-timeout", "1"]);
    try {
      const { got, ms } = await slowClient(own.port, "GET /hea", repeatFor("a", 8000), 200);
      assert.ok(ms < 5000, `held for ${ms} ms`);
      assert.match(got, /^HTTP\/1\.1 408 Request Timeout\r\n/);
      assert.match(got, /Connection: close/);
    } finally {
      await own.stop();
    }
  });

  test("a body that keeps coming at a modest rate is read to its end, past the bare deadline", async () => {
    const own = await startServer(["--request-timeout", "1"]);
    try {
      // 96 KiB in 8 KiB pieces every 150 ms: 1.8 s, with 6 s of deadline earned by 16 KiB/s.
      const text = "and the earth was without form ".repeat(3200).slice(0, 96 * 1024 - 40);
      const body = Buffer.from(JSON.stringify({ content: text }));
      const head = `POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n` +
        `Content-Length: ${body.length}\r\n\r\n`;
      const piece = (i) => (i * 8192 < body.length ? body.subarray(i * 8192, (i + 1) * 8192) : null);
      const { got, ms } = await slowClient(own.port, head, piece, 150);
      assert.ok(ms > 1500, `answered after ${ms} ms: the body was not read slowly`);
      assert.match(got, /^HTTP\/1\.1 200 /, got.slice(0, 300));
      assert.ok(JSON.parse(got.slice(got.indexOf("\r\n\r\n") + 4)).tokens.length > 1000);
    } finally {
      await own.stop();
    }
  });
});
