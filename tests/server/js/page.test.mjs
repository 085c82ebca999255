// The chat page in a real browser: Debian's chromium, headless, driven by playwright-core. It loads the page,
// sets a system prompt and sampling settings, sends a message, reads the streamed reply, stops a long one with
// the Stop button, and uses an API key.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { chromium } from "playwright-core";

import { startServer } from "./server.mjs";

const CHROMIUM = process.env.KT_CHROMIUM || "/usr/bin/chromium";
const KEY = "page-key";
let server, context, profile;

before(async () => {
  server = await startServer(["--api-key", KEY, "--request-log", "-"]);
  profile = mkdtempSync(join(tmpdir(), "kt-chromium-"));  // a fresh profile every run
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
});

after(async () => {
  if (context) await context.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
  if (server) assert.equal((await server.stop()).code, 0, server.stderr);
});

describe("the chat page", () => {
  test("streams a reply into the conversation, with the system prompt and settings it was given", async () => {
    const page = await context.newPage();
    const failures = [];
    page.on("pageerror", (e) => failures.push(e.message));
    page.on("requestfailed", (r) => failures.push(r.url() + " " + r.failure()?.errorText));
    await page.goto(server.url + "/");
    // Without the key the page says it needs one.
    await page.waitForFunction(() => document.getElementById("model").textContent.includes("API key"));
    await page.fill("#api_key", KEY);
    await page.dispatchEvent("#api_key", "change");
    await page.waitForFunction(() => document.getElementById("model").textContent === "kt-tiny-moe");

    await page.fill("#system", "In the beginning God created the heaven and the earth.");
    await page.fill("#temperature", "0");
    await page.fill("#max_tokens", "24");
    // Count the reply's updates on screen while it streams: a streamed reply grows delta by delta.
    await page.evaluate(() => {
      window.streamedUpdates = 0;
      new MutationObserver((records) => {
        for (const r of records) {
          if (r.target.classList?.contains("content") && r.target.parentElement.classList.contains("streaming") &&
              r.target.textContent.length > 0) ++window.streamedUpdates;
        }
      }).observe(document.getElementById("conversation"), { childList: true, subtree: true });
    });
    await page.fill("#input", "And God said");
    await page.click("#send");
    const bubble = page.locator(".message.assistant[data-finish]");
    await bubble.waitFor();
    assert.ok(["stop", "length"].includes(await bubble.getAttribute("data-finish")));
    const reply = await bubble.locator(".content").textContent();
    assert.ok(reply.trim().length > 0);
    assert.match(await page.textContent("#status"), /finished \((stop|length)\): \d+ prompt tokens, \d+ generated/);
    assert.equal(await page.locator(".message.user .content").textContent(), "And God said");
    assert.ok(await page.evaluate(() => window.streamedUpdates) >= 2, "the reply appeared piece by piece");

    // The same request through the API gives the same text: the page sent what it showed (greedy, 24 tokens).
    const api = await fetch(server.baseURL + "/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ messages: [{ role: "system", content: "In the beginning God created the heaven and the earth." },
        { role: "user", content: "And God said" }], temperature: 0, max_tokens: 24, top_p: 0.95, top_k: 40, min_p: 0.05 }),
    });
    assert.equal((await api.json()).choices[0].message.content, reply);
    assert.deepEqual(failures, []);
    await page.close();
  });

  test("Stop ends a long reply; the server cancels it and the page can go on", async () => {
    const page = await context.newPage();
    await page.goto(server.url + "/");
    await page.fill("#api_key", KEY);
    await page.dispatchEvent("#api_key", "change");
    await page.waitForFunction(() => document.getElementById("model").textContent === "kt-tiny-moe");
    await page.fill("#max_tokens", "100000");  // as long as the context allows
    await page.fill("#stop_strings", "");
    // Stop is pressed the moment the first words show (from the page itself: the tiny model writes a whole
    // reply faster than a click from outside the browser could land).
    await page.evaluate(() => {
      const observer = new MutationObserver(() => {
        const m = document.querySelector(".message.assistant.streaming .content");
        if (m && m.textContent.length > 0) {
          observer.disconnect();
          document.getElementById("stop").click();
        }
      });
      observer.observe(document.getElementById("conversation"), { childList: true, subtree: true });
    });
    await page.fill("#input", "Thus saith the LORD");
    await page.click("#send");
    await page.locator('.message.assistant[data-finish="stopped"]').waitFor();
    assert.equal(await page.textContent("#status"), "stopped");
    assert.equal(await page.isDisabled("#send"), false);

    await page.fill("#max_tokens", "8");
    await page.fill("#input", "Amen");
    await page.click("#send");
    await page.locator(".message.assistant[data-finish]").nth(1).waitFor();
    assert.ok(["stop", "length"].includes(await page.locator(".message.assistant").nth(1).getAttribute("data-finish")));
    await page.close();
  });
});
