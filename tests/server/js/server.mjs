// Starting and stopping a real kt-server for the tests: a child process on a free loopback port, with the
// flags a test asks for. Its standard error is kept for the failure messages.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";

export const SERVER_EXE = process.env.KT_SERVER_EXE;
export const TINY_MODEL = process.env.KT_TINY_MOE;
if (!SERVER_EXE || !TINY_MODEL) throw new Error("set KT_SERVER_EXE and KT_TINY_MOE (ctest does)");

export class Server {
  constructor(proc) {
    this.proc = proc;
    this.stderr = "";
    this.exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
  }

  get url() { return `http://127.0.0.1:${this.port}`; }
  get baseURL() { return `${this.url}/v1`; }

  // Resident memory of the server process, in kB.
  rssKb() {
    const status = readFileSync(`/proc/${this.proc.pid}/status`, "utf8");
    return Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]);
  }

  // SIGTERM, then the exit status (a drain ends with code 0).
  async stop() {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill("SIGTERM");
    return this.exited;
  }
}

// Starts kt-server with `args` (the tiny model unless -m is given) and resolves once it listens.
export async function startServer(args = [], { env = {} } = {}) {
  const full = [...(args.includes("-m") ? [] : ["-m", TINY_MODEL]), "--port", "0", ...args];
  const proc = spawn(SERVER_EXE, full, { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, ...env } });
  const server = new Server(proc);
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("kt-server did not start in 60 s:\n" + server.stderr)), 60000);
    proc.stderr.setEncoding("utf8");
    proc.stderr.on("data", (text) => {
      server.stderr += text;
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(server.stderr);
      if (m && !server.port) {
        server.port = Number(m[1]);
        clearTimeout(timer);
        resolve();
      }
    });
    proc.on("exit", (code) => { clearTimeout(timer); reject(new Error(`kt-server exited with ${code}:\n${server.stderr}`)); });
  });
  return server;
}

// POST a JSON body (or raw text) and return {status, headers, json, text}.
export async function post(server, path, body, headers = {}) {
  const res = await fetch(server.url + path, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, json, text };
}

// Polls /metrics until a gauge has the wanted value (the server finishes cancelled sequences asynchronously).
export async function waitForGauge(server, name, value, headers = {}, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    const res = await fetch(server.url + "/metrics", { headers });
    last = await res.text();
    const m = new RegExp(`^${name} (\\S+)$`, "m").exec(last);
    if (m && Number(m[1]) === value) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${name} never became ${value}:\n${last}`);
}
