// The page to watch and steer runs: the gateway's own API from the browser.
// Runs stream over SSE read from fetch streams (so x-api-key goes with them);
// approvals are answered with command.resume; todos and context edits come from
// /ui/api/.../activity (LangGraph's values carry the messages only). Needs shared.js.
"use strict";

const MODES = ["messages-tuple", "updates"];

const page = {
  thread: null, // thread id
  runId: null, // the run whose todos and edits are shown
  bubbles: new Map(), // AI message id -> its element
  calls: new Map(), // tool call id -> the element showing it and its result
  pending: [], // waiting interrupts: {interrupt, actions: [{...decision}]}
  busy: false,
};

// ---- Server-Sent Events from a fetch stream -------------------------------------

async function* frames(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const frame = parseFrame(block);
      if (frame) yield frame;
    }
  }
}

function parseFrame(block) {
  const frame = { event: "message", id: null, data: "" };
  for (const line of block.split("\n")) {
    const colon = line.indexOf(":");
    if (colon <= 0) continue; // a comment or an empty line
    const field = line.slice(0, colon);
    const value = line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") frame.event = value;
    else if (field === "id") frame.id = value;
    else if (field === "data") frame.data += value;
  }
  frame.data = frame.data ? JSON.parse(frame.data) : null;
  return frame;
}

// ---- Rendering ------------------------------------------------------------------

function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((b) => (typeof b === "string" ? b : b.text || "")).join("");
}

function addBubble(kind, text) {
  const node = el("div", `msg ${kind}`);
  node.append(el("span", "who", kind === "human" ? "you" : "agent"), el("span", "text", text));
  $("messages").append(node);
  node.scrollIntoView({ block: "end" });
  return node;
}

function aiBubble(id) {
  let node = page.bubbles.get(id);
  if (!node) {
    node = addBubble("ai", "");
    node.dataset.messageId = id;
    page.bubbles.set(id, node);
  }
  return node;
}

function onChunk(chunk, meta, seen) {
  const node = aiBubble(chunk.id);
  const text = node.querySelector(".text");
  if (!seen.has(chunk.id) || meta.loopline_reset) {
    text.textContent = ""; // a stream replays a message from its start; a retry restarts it
    seen.add(chunk.id);
  }
  text.textContent += textOf(chunk.content);
  node.classList.add("streaming");
}

function onAiMessage(message) {
  const node = aiBubble(message.id);
  node.classList.remove("streaming");
  const text = textOf(message.content);
  node.querySelector(".text").textContent = text;
  node.hidden = !text;
  if (message.tool_calls && message.tool_calls.length) addStep(message.tool_calls);
}

function addStep(calls) {
  if (calls.every((call) => page.calls.has(call.id))) {
    // a resumed run shows the reply as decided: edited arguments replace the asked ones
    for (const call of calls) {
      page.calls.get(call.id).querySelector("code").textContent = JSON.stringify(call.args);
    }
    return;
  }
  const step = el("div", "step");
  step.append(el("div", "label", "tool calls"));
  for (const call of calls) {
    const row = el("div", "call");
    row.dataset.tool = call.name;
    row.append(el("span", "name", call.name), " ", el("code", "", JSON.stringify(call.args)));
    row.append(el("div", "result pending", "waiting…"));
    step.append(row);
    page.calls.set(call.id, row);
    if (call.name === "write_todos" && Array.isArray(call.args.todos)) {
      renderTodos(call.args.todos); // as asked; the todos service's answer follows
    }
  }
  $("messages").append(step);
  step.scrollIntoView({ block: "end" });
}

function onToolMessage(message) {
  const row = page.calls.get(message.tool_call_id);
  if (!row) return;
  const result = row.querySelector(".result");
  result.className = `result${message.status === "error" ? " error" : ""}`;
  result.textContent = `→ ${shortened(textOf(message.content))}`;
}

// A long tool result is cut for reading; the whole of it is in the thread's state.
function shortened(text) {
  const limit = 500;
  return text.length <= limit ? text : `${text.slice(0, limit)}… (${text.length} characters)`;
}

function renderMessages(messages) {
  for (const message of messages) {
    if (message.type === "human") addBubble("human", textOf(message.content));
    else if (message.type === "ai") onAiMessage(message);
    else if (message.type === "tool") onToolMessage(message);
  }
}

function renderTodos(todos) {
  const list = $("todos");
  list.replaceChildren();
  if (!todos || !todos.length) {
    list.append(el("li", "empty", "no todo list yet"));
    return;
  }
  for (const todo of todos) {
    const item = el("li", "", todo.content);
    item.dataset.status = todo.status;
    list.append(item);
  }
}

function renderEdits(edits) {
  const list = $("edits");
  list.replaceChildren();
  if (!edits.length) list.append(el("li", "empty", "none"));
  for (const edit of edits) {
    const cleared = edit.cleared_tool_call_ids.length;
    const text =
      `step ${edit.step}: ${edit.strategy} cleared ${cleared} tool result(s)` +
      `${edit.cleared_inputs ? " and inputs" : ""}, ` +
      `${edit.tokens_before} → ${edit.tokens_after} tokens`;
    list.append(el("li", "", text));
  }
}

function setStatus(status, text) {
  const node = $("status");
  node.dataset.status = status;
  node.textContent = text || status;
}

function showError(message) {
  const node = $("error");
  node.hidden = !message;
  node.textContent = message || "";
}

function setBusy(busy) {
  page.busy = busy;
  $("send").disabled = busy || page.pending.length > 0;
  for (const button of document.querySelectorAll(".approval button")) button.disabled = busy;
}

// ---- Approvals (HumanInTheLoopMiddleware) ---------------------------------------

function showApprovals(interrupts) {
  page.pending = interrupts.map((interrupt) => ({
    interrupt,
    actions: actionsOf(interrupt).map((action) => ({ ...action, decision: null })),
  }));
  const box = $("approvals");
  box.replaceChildren();
  for (const asked of page.pending) {
    for (const action of asked.actions) {
      box.append(approvalCard(action, (card, kind, args, message) => decide(card, action, kind, args, message)));
    }
  }
  $("approvals-panel").hidden = page.pending.length === 0;
  if (page.pending.length) setStatus("waiting", "waiting for approval");
  setBusy(page.busy);
}

function decide(card, action, kind, args, message) {
  try {
    action.decision = decisionOf(action, kind, args, message);
  } catch (error) {
    showError(`the edited arguments are not JSON: ${error.message}`);
    return;
  }
  showError("");
  card.querySelector(".buttons").replaceChildren(el("span", "decided", DECIDED[kind]));
  if (page.pending.every((a) => a.actions.every((x) => x.decision))) sendDecisions();
}

function resumeValue() {
  const [only] = page.pending;
  const batched = (asked) => asked.interrupt.value && asked.interrupt.value.type !== "tool_approval";
  if (page.pending.length === 1 && batched(only)) {
    return { decisions: only.actions.map((a) => a.decision) };
  }
  const byId = {};
  for (const asked of page.pending) {
    byId[asked.interrupt.id] = batched(asked)
      ? { decisions: asked.actions.map((a) => a.decision) }
      : asked.actions[0].decision;
  }
  return byId;
}

async function sendDecisions() {
  const resume = resumeValue();
  page.pending = [];
  $("approvals").replaceChildren();
  $("approvals-panel").hidden = true;
  await runStream({ command: { resume } });
}

// ---- Runs -----------------------------------------------------------------------

async function ensureThread() {
  if (page.thread) return page.thread;
  const thread = await api("POST", "/threads", {});
  setThread(thread.thread_id);
  return page.thread;
}

function setThread(threadId) {
  page.thread = threadId;
  $("thread-id").textContent = threadId || "new";
  const url = new URL(location.href);
  if (threadId) url.searchParams.set("thread", threadId);
  else url.searchParams.delete("thread");
  const assistant = $("assistant").value;
  if (assistant) url.searchParams.set("assistant", assistant);
  history.replaceState(null, "", url);
}

async function runStream(body) {
  showError("");
  setBusy(true);
  setStatus("running");
  try {
    const threadId = await ensureThread();
    const response = await request("POST", `/threads/${threadId}/runs/stream`, {
      assistant_id: $("assistant").value,
      stream_mode: MODES,
      ...body,
    });
    await follow(response, threadId);
  } catch (error) {
    setStatus("error");
    showError(error.message);
  } finally {
    setBusy(false);
  }
}

// Reads a run's stream to its end; a dropped connection is joined again with the last
// event id seen (the gateway then sends every later frame once).
async function follow(response, threadId) {
  const seen = new Set();
  let lastId = null;
  let ended = false;
  for (let attempt = 0; !ended && attempt < 5; attempt++) {
    try {
      for await (const frame of frames(response)) {
        if (frame.id) lastId = frame.id;
        if (frame.event === "end") ended = true;
        else onFrame(frame, seen);
      }
    } catch (error) {
      if (!page.runId) throw error;
    }
    if (!ended && page.runId) {
      const path = `/threads/${threadId}/runs/${page.runId}/stream?` +
        MODES.map((m) => `stream_mode=${m}`).join("&");
      const extra = lastId ? { "last-event-id": lastId } : {};
      response = await fetch(path, { headers: { ...headers(false), ...extra } });
    }
  }
  await Promise.all([refreshActivity(), fillResults(threadId)]);
  if ($("status").dataset.status === "running") setStatus("done");
}

// The results of calls from the thread's state: for a page that opened after the stream
// showed them (a rejected or answered call's tool message comes in the update of
// HumanInTheLoopMiddleware's node, with the reply).
async function fillResults(threadId) {
  if (!document.querySelector(".call .result.pending")) return;
  try {
    const state = await api("GET", `/threads/${threadId}/state`);
    for (const message of state.values.messages || []) {
      if (message.type === "tool") onToolMessage(message);
    }
  } catch (error) {
    showError(error.message);
  }
}

function onFrame(frame, seen) {
  const data = frame.data;
  if (frame.event === "metadata") {
    page.runId = data.run_id;
  } else if (frame.event === "messages") {
    const [message, meta] = data;
    if (message.type === "AIMessageChunk") onChunk(message, meta, seen);
  } else if (frame.event === "updates") {
    onUpdate(data);
  } else if (frame.event === "error") {
    setStatus("error");
    showError(`the run failed: ${data.message}`);
  }
}

function onUpdate(update) {
  for (const [node, value] of Object.entries(update)) {
    if (node === "__interrupt__") {
      showApprovals(value);
      continue;
    }
    for (const message of (value && value.messages) || []) {
      if (message.type === "ai") onAiMessage(message);
      else if (message.type === "tool") onToolMessage(message);
    }
    if (value && Array.isArray(value.todos)) renderTodos(value.todos);
  }
  refreshActivity();
  if (page.thread && !update.__interrupt__) fillResults(page.thread);
}

let activityAsked = null;
async function refreshActivity() {
  if (!page.thread || !page.runId) return;
  const path = `/ui/api/threads/${page.thread}/runs/${page.runId}/activity`;
  activityAsked = path;
  try {
    const found = await api("GET", path);
    if (activityAsked !== path) return; // another run's answer came late
    if (found.todos) renderTodos(found.todos);
    renderEdits(found.edits);
  } catch (error) {
    showError(error.message);
  }
}

// ---- Opening a thread, the controls ------------------------------------------------

async function openThread(threadId) {
  setThread(threadId);
  const state = await api("GET", `/threads/${threadId}/state`);
  renderMessages(state.values.messages || []);
  const [latest] = await api("GET", `/threads/${threadId}/runs?limit=1`);
  if (latest) {
    page.runId = latest.run_id;
    await refreshActivity();
  }
  if (latest && (latest.status === "running" || latest.status === "pending")) {
    await watchRun(threadId, latest.run_id);
  } else if (state.interrupts && state.interrupts.length) {
    showApprovals(state.interrupts);
  }
}

async function watchRun(threadId, runId) {
  setBusy(true);
  setStatus("running");
  try {
    const query = MODES.map((m) => `stream_mode=${m}`).join("&");
    const response = await request("GET", `/threads/${threadId}/runs/${runId}/stream?${query}`);
    await follow(response, threadId);
  } finally {
    setBusy(false);
  }
}

async function loadAssistants() {
  const select = $("assistant");
  const wanted = new URL(location.href).searchParams.get("assistant");
  const found = await api("POST", "/assistants/search", { limit: 100 });
  select.replaceChildren();
  for (const assistant of found) {
    const option = el("option", "", assistant.name || assistant.assistant_id);
    option.value = assistant.assistant_id;
    option.selected = assistant.assistant_id === wanted;
    select.append(option);
  }
}

function clearConversation() {
  page.bubbles.clear();
  page.calls.clear();
  page.pending = [];
  page.runId = null;
  $("messages").replaceChildren();
  $("approvals").replaceChildren();
  $("approvals-panel").hidden = true;
  renderTodos(null);
  renderEdits([]);
  setStatus("idle");
}

function wire() {
  $("api-key").value = sessionStorage.getItem(KEY_STORE) || "";
  $("api-key").onchange = (event) => {
    sessionStorage.setItem(KEY_STORE, event.target.value);
    load();
  };
  $("new-thread").onclick = () => {
    clearConversation();
    setThread(null);
  };
  $("composer").onsubmit = (event) => {
    event.preventDefault();
    const text = $("prompt").value.trim();
    if (!text || page.busy) return;
    $("prompt").value = "";
    addBubble("human", text);
    runStream({ input: { messages: [{ role: "human", content: text }] } });
  };
}

async function load() {
  showError("");
  try {
    await loadAssistants();
    clearConversation();
    const threadId = new URL(location.href).searchParams.get("thread");
    if (threadId) await openThread(threadId);
  } catch (error) {
    showError(error.message);
  }
}

wire();
load();
