// Whatever a model writes, kt-server answers 200 with valid JSON and valid UTF-8: a random-weight model with
// Qwen3's real vocabulary (151,643 byte-level BPE tokens: pieces of multi-byte characters, control tokens,
// bytes that are not UTF-8 on their own) sampled hot, streamed and not, with and without stop strings.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { post, startServer } from "./server.mjs";

let server, dir;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "kt-any-text-"));
  const model = join(dir, "noise.gguf");
  const synth = spawnSync(process.env.KT_SYNTH_EXE, ["-o", model, "--arch", "qwen3moe", "--layers", "1", "--hidden", "64",
    "--heads", "4", "--heads-kv", "2", "--head-dim", "16", "--experts", "4", "--experts-used", "2", "--expert-ff", "32",
    "--type", "q8_0", "--vocab-from", join(process.env.KT_TESTDATA_DIR, "tokenizer/qwen3.gguf")], { encoding: "utf8" });
  assert.equal(synth.status, 0, synth.stderr);
  server = await startServer(["-m", model, "-c", "512", "-np", "4"]);
});

after(async () => {
  if (server) assert.equal((await server.stop()).code, 0, server.stderr);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// Well-formed UTF-8 round-trips through TextDecoder in fatal mode; JSON.parse already turned \u escapes into text.
const wellFormed = (text) => {
  new TextDecoder("utf-8", { fatal: true }).decode(new TextEncoder().encode(text));
  return !/[\uD800-\uDFFF]/.test(text.replace(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g, ""));
};

test("hot sampling over a real vocabulary: always 200, valid JSON, valid UTF-8, streamed text equal to whole", async () => {
  let replacements = 0;
  for (let seed = 1; seed <= 6; ++seed) {
    const body = { messages: [{ role: "user", content: "你好, 世界 🌍" }], max_tokens: 60, ignore_eos: true,
      temperature: 2, top_k: 0, top_p: 1, min_p: 0, seed, stop: seed % 2 ? ["\uFFFD", "的"] : undefined };
    const whole = await post(server, "/v1/chat/completions", body);
    assert.equal(whole.status, 200, whole.text);
    const text = whole.json.choices[0].message.content;
    assert.ok(wellFormed(text));
    replacements += (text.match(/\uFFFD/g) || []).length;
    const streamed = await post(server, "/v1/chat/completions", { ...body, stream: true });
    assert.equal(streamed.status, 200);
    const events = streamed.text.split("\n\n").filter((e) => e.startsWith("data: "));
    assert.equal(events.at(-1), "data: [DONE]");
    const deltas = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)).choices[0]?.delta?.content ?? "");
    for (const d of deltas) assert.ok(wellFormed(d));
    assert.equal(deltas.join(""), text);
  }
  console.log(`U+FFFD in the replies: ${replacements}`);
});
