// kt-server's chat page: a conversation with the served model through POST /v1/chat/completions, streamed as
// Server-Sent Events and read with fetch, so the reply appears as it is generated. Plain JavaScript, no
// libraries: the page works with nothing but kt-server.
"use strict";

const $ = (id) => document.getElementById(id);
const settingIds = ["system", "temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "stop_strings", "api_key"];

let history = [];      // {role, content} of the turns so far (the system prompt is added per request)
let controller = null; // the AbortController of the reply being streamed
let modelId = "";

// ---- settings, kept across visits

function loadSettings() {
  for (const id of settingIds) {
    const saved = localStorage.getItem("kt." + id);
    if (saved !== null) $(id).value = saved;
    $(id).addEventListener("change", () => localStorage.setItem("kt." + id, $(id).value));
  }
}

function numberSetting(id, parse) {
  const text = $(id).value.trim();
  if (text === "") return undefined;
  const value = parse(text);
  return Number.isFinite(value) ? value : undefined;
}

function requestBody() {
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...history);
  const body = { model: modelId, messages, stream: true, stream_options: { include_usage: true } };
  const fields = {
    temperature: numberSetting("temperature", parseFloat),
    top_p: numberSetting("top_p", parseFloat),
    top_k: numberSetting("top_k", (t) => parseInt(t, 10)),
    min_p: numberSetting("min_p", parseFloat),
    max_tokens: numberSetting("max_tokens", (t) => parseInt(t, 10)),
    seed: numberSetting("seed", (t) => parseInt(t, 10)),
  };
  for (const [k, v] of Object.entries(fields)) if (v !== undefined) body[k] = v;
  const stops = $("stop_strings").value.split(",").map((s) => s.trim()).filter((s) => s !== "");
  if (stops.length) body.stop = stops;
  return body;
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api_key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

// ---- the conversation on screen

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "message " + role;
  const label = document.createElement("span");
  label.className = "role";
  label.textContent = role;
  const content = document.createElement("span");
  content.className = "content";
  content.textContent = text;
  div.append(label, content);
  $("conversation").append(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

async function errorText(response) {
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) return body.error.message;
  } catch (e) { /* not JSON */ }
  return "HTTP " + response.status;
}

// ---- Server-Sent Events: "data: <json>" events separated by a blank line; ":" lines are comments (pings)

async function* sseEvents(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder("utf-8");
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart());
      if (data.length) yield data.join("\n");
    }
  }
}

async function send(text) {
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const bubble = addMessage("assistant", "");
  const content = bubble.querySelector(".content");
  bubble.classList.add("streaming");
  controller = new AbortController();
  setBusy(true);
  $("status").textContent = "waiting for the first token...";
  const started = performance.now();
  let firstToken = 0, reply = "", finish = null, usage = null;
  try {
    const response = await fetch("v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(requestBody()), signal: controller.signal,
    });
    if (!response.ok) throw new Error(await errorText(response));
    for await (const data of sseEvents(response.body)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) continue;
      if (choice.delta && choice.delta.content) {
        if (!firstToken) firstToken = performance.now();
        reply += choice.delta.content;
        content.textContent = reply;
        bubble.scrollIntoView({ block: "end" });
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    const seconds = (performance.now() - (firstToken || started)) / 1000;
    let status = "finished (" + (finish || "?") + ")";
    if (usage) {
      status += ": " + usage.prompt_tokens + " prompt tokens, " + usage.completion_tokens + " generated";
      if (usage.completion_tokens > 1 && seconds > 0) status += ", " + (usage.completion_tokens / seconds).toFixed(1) + " tokens/s";
    }
    $("status").textContent = status;
  } catch (e) {
    if (e.name === "AbortError") {
      finish = "stopped";
      $("status").textContent = "stopped";
    } else {
      bubble.classList.add("error");
      content.textContent = reply + (reply ? "\n" : "") + "Error: " + e.message;
      finish = "error";
      $("status").textContent = "error";
    }
  } finally {
    bubble.classList.remove("streaming");
    bubble.dataset.finish = finish || "none";
    controller = null;
    setBusy(false);
  }
  // The reply so far stays in the conversation, also when it was stopped.
  if (finish !== "error") history.push({ role: "assistant", content: reply });
  else history.pop();
}

async function connect() {
  try {
    const response = await fetch("v1/models", { headers: headers() });
    if (!response.ok) {
      $("model").textContent = response.status === 401 ? "the server needs an API key (see Settings)" : await errorText(response);
      return;
    }
    const models = await response.json();
    modelId = models.data && models.data.length ? models.data[0].id : "";
    $("model").textContent = modelId;
  } catch (e) {
    $("model").textContent = "cannot reach the server: " + e.message;
  }
}

loadSettings();
connect();
$("api_key").addEventListener("change", connect);
$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("new-chat").addEventListener("click", () => {
  if (controller) controller.abort();
  history = [];
  $("conversation").replaceChildren();
  $("status").textContent = "";
});
