// kt-server's serving benchmark: N streams at once through the official openai client, for N = 1, 8, 32, 64,
// 100, next to kt-run's single-sequence decode on the same file and the roofline of the same run.
//
//   node serve_bench.mjs --bin BUILD/bin -m MODEL [--streams 1,8,32,64,100] [-n 64] [-t THREADS] [-c 512]
//                        [--reps 1] [--out PREFIX]
//
// One kt-server (-np = the largest N, so every stream is admitted at once) serves all runs. For each N: N chat
// requests with different short prompts are sent at the same moment, streamed, each generating -n tokens
// (ignore_eos, so every stream is as long as the others; temperature 0.8 with its own seed, so the streams route
// to different experts as real users' do). Reported:
//   TTFT    request sent to first content delta, median and 95th percentile over the N streams (client side);
//   decode  the server's kt_generated_tokens_total (counted as tokens are handed out), polled every 50 ms: its
//           rise over the window in which all N streams were decoding (after the last first token, up to the first
//           finish), divided by the window; per stream = decode / N;
//   e2e     all completion tokens / (last finish - first request), prefill included;
//   failed  requests that did not end with finish_reason "length" and -n completion tokens.
// The single-sequence reference is kt-run -p "<a short prompt>" -n N --ignore-eos, its "generated" rate (decode
// only). The roofline (read bandwidth, int8 peak) comes from kt-bench, measured right before the runs.
import { spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";

import OpenAI from "openai";

function options() {
  const o = { bin: "build/bin", model: "", streams: [1, 8, 32, 64, 100], n: 64, threads: 0, ctx: 512, reps: 1, out: "" };
  const a = process.argv.slice(2);
  for (let i = 0; i < a.length; i += 2) {
    const v = a[i + 1];
    if (a[i] === "--bin") o.bin = v;
    else if (a[i] === "-m") o.model = v;
    else if (a[i] === "--streams") o.streams = v.split(",").map(Number);
    else if (a[i] === "-n") o.n = Number(v);
    else if (a[i] === "-t") o.threads = Number(v);
    else if (a[i] === "-c") o.ctx = Number(v);
    else if (a[i] === "--reps") o.reps = Number(v);
    else if (a[i] === "--out") o.out = v;
    else throw new Error(`unknown option ${a[i]}`);
  }
  if (!o.model) throw new Error("usage: node serve_bench.mjs --bin BUILD/bin -m MODEL [--streams 1,8,32] [-n 64]");
  return o;
}

const load = () => loadavg().map((l) => l.toFixed(2)).join(" ");
const percentile = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))];
};

function run(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed:\n${r.stderr}`);
  return r;
}

async function startServer(o, parallel) {
  const args = ["-m", o.model, "--port", "0", "-np", String(parallel), "--queue", String(parallel), "-c", String(o.ctx),
    "-t", String(o.threads)];
  const proc = spawn(`${o.bin}/kt-server`, args, { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  const port = await new Promise((resolve, reject) => {
    proc.stderr.setEncoding("utf8").on("data", (t) => {
      stderr += t;
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(stderr);
      if (m) resolve(Number(m[1]));
    });
    proc.on("exit", (code) => reject(new Error(`kt-server exited ${code}:\n${stderr}`)));
  });
  return { proc, url: `http://127.0.0.1:${port}`, stderr: () => stderr };
}

async function generatedTokens(url) {
  const text = await (await fetch(url + "/metrics")).text();
  return Number(/^kt_generated_tokens_total (\d+)$/m.exec(text)[1]);
}

// N streams at once; returns the measurements of one run.
async function streams(server, client, N, o, rep) {
  const samples = [];  // [time ms, generated tokens] from /metrics
  let polling = true;
  const poller = (async () => {
    while (polling) {
      samples.push([performance.now(), await generatedTokens(server.url)]);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: N }, async (_, i) => {
    const sent = performance.now();
    let first = null, finish = null, usage = null;
    try {
      const stream = await client.chat.completions.create({
        model: "bench", stream: true, stream_options: { include_usage: true }, max_tokens: o.n, ignore_eos: true,
        temperature: 0.8, seed: 1000 * rep + i,
        messages: [{ role: "user", content: `Request ${i} of ${N}: write a short note about the number ${i + 7 * rep}.` }],
      });
      for await (const c of stream) {
        if (first === null && c.choices[0]?.delta?.content) first = performance.now();
        finish = c.choices[0]?.finish_reason ?? finish;
        if (c.usage) usage = c.usage;
      }
    } catch (e) {
      return { sent, failed: String(e) };
    }
    const done = performance.now();
    const failed = finish !== "length" || !usage || usage.completion_tokens !== o.n ? `finish ${finish}` : null;
    return { sent, first, done, usage, failed };
  }));
  polling = false;
  await poller;
  const ok = results.filter((r) => !r.failed);
  const ttft = ok.map((r) => (r.first - r.sent) / 1000);
  // The window in which every stream was decoding, and the server's token count over the samples inside it.
  const start = Math.max(...ok.map((r) => r.first)), end = Math.min(...ok.map((r) => r.done));
  const inside = samples.filter(([t]) => t >= start && t <= end);
  let decode = NaN;
  if (inside.length >= 2) {
    const [ta, na] = inside[0], [tb, nb] = inside.at(-1);
    decode = (nb - na) / ((tb - ta) / 1000);
  }
  const tokens = ok.reduce((s, r) => s + r.usage.completion_tokens, 0);
  const e2e = tokens / ((Math.max(...ok.map((r) => r.done)) - t0) / 1000);
  return {
    N, failed: results.length - ok.length, failures: results.filter((r) => r.failed).map((r) => r.failed),
    ttft_p50: percentile(ttft, 0.5), ttft_p95: percentile(ttft, 0.95), decode, e2e,
    window_s: (end - start) / 1000, window_samples: inside.length,
  };
}

const o = options();
const log = [];
const say = (line) => { console.log(line); log.push(line); };
say(`# kt-server serving benchmark, ${new Date().toISOString()}`);
say(`# machine: ${cpus()[0].model}, ${cpus().length} logical CPUs, ${(totalmem() / 2 ** 30).toFixed(1)} GiB`);
say(`# model: ${o.model}; ${o.n} tokens per stream; -c ${o.ctx}; threads ${o.threads || "one per physical core"}`);
say(`# load average before: ${load()}`);

// The roofline of this run (kt-bench measures it before its test) and kt-bench's own tg for reference.
const bench = run(`${o.bin}/kt-bench`, ["-m", o.model, "-p", "0", "-n", String(o.n), "-r", "3", "-t", String(o.threads)]);
for (const line of (bench.stdout + bench.stderr).split("\n")) if (/roofline|tg\d+/.test(line)) say(`# kt-bench: ${line.trim()}`);

// kt-run: one sequence, decode only.
const ktRun = [];
for (let r = 0; r < 3; ++r) {
  const out = run(`${o.bin}/kt-run`, ["-m", o.model, "-p", "Write a short note about the number seven.", "-n",
    String(o.n), "--ignore-eos", "--temp", "0.8", "-s", String(r + 1), "-t", String(o.threads)]);
  const m = /generated: \d+ tokens in [\d.]+ s \(([\d.]+) tokens\/s\)/.exec(out.stderr);
  ktRun.push(Number(m[1]));
}
const ktRunRate = percentile(ktRun, 0.5);
say(`# kt-run single-sequence decode: ${ktRun.map((x) => x.toFixed(2)).join(", ")} tokens/s (median ${ktRunRate.toFixed(2)})`);

const server = await startServer(o, Math.max(...o.streams));
const client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 3600 * 1000 });
const rows = [];
try {
  // One warm-up stream: the first request pays for first-touch page faults of the weights.
  await streams(server, client, 1, { ...o, n: 8 }, 99);
  for (const N of o.streams) {
    for (let rep = 0; rep < o.reps; ++rep) {
      const before = load();
      const r = await streams(server, client, N, o, rep);
      r.load = `${before} -> ${load()}`;
      rows.push(r);
      say(`# N=${N} rep ${rep}: decode ${r.decode.toFixed(1)} tok/s over ${r.window_s.toFixed(2)} s (${r.window_samples} samples), ` +
        `TTFT p50 ${r.ttft_p50.toFixed(3)} s p95 ${r.ttft_p95.toFixed(3)} s, failed ${r.failed}${r.failed ? " " + r.failures.slice(0, 3).join("; ") : ""}, load ${r.load}`);
    }
  }
} finally {
  server.proc.kill("SIGTERM");
}
const oneStream = rows.find((r) => r.N === 1)?.decode;
say("");
say("| streams | decode tok/s (aggregate) | per stream | vs 1 stream | vs kt-run | e2e tok/s | TTFT p50 s | TTFT p95 s | failed | load average |");
say("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
for (const r of rows) {
  say(`| ${r.N} | ${r.decode.toFixed(1)} | ${(r.decode / r.N).toFixed(2)} | ${oneStream ? (r.decode / oneStream).toFixed(2) + "x" : "-"} | ` +
    `${(r.decode / ktRunRate).toFixed(2)}x | ${r.e2e.toFixed(1)} | ${r.ttft_p50.toFixed(3)} | ${r.ttft_p95.toFixed(3)} | ${r.failed} | ${r.load} |`);
}
say(`| kt-run (1 sequence) | ${ktRunRate.toFixed(1)} | | | 1.00x | | | | | |`);
say(`# load average after: ${load()}`);
if (o.out) {
  writeFileSync(`${o.out}.md`, log.join("\n") + "\n");
  writeFileSync(`${o.out}.csv`, "streams,decode_tok_s,e2e_tok_s,ttft_p50_s,ttft_p95_s,failed,window_s,load\n" +
    rows.map((r) => [r.N, r.decode.toFixed(2), r.e2e.toFixed(2), r.ttft_p50.toFixed(4), r.ttft_p95.toFixed(4), r.failed,
      r.window_s.toFixed(3), `"${r.load}"`].join(",")).join("\n") + "\n");
}
