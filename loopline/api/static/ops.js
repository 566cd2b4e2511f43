// The operator's view: each service's backlog and rate, what waits for a human across the
// deployment (answered here), failed runs by stage, dead letters (replay, drop), and the
// threads with their runs. Reads /ui/api/ops/* and the Agent Server API. Needs shared.js.
"use strict";

const REFRESH_MS = 2000;
const ops = { lastRead: null, timer: null, answering: new Set() };

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

function cell(row, text, className) {
  const td = el("td", className, text === undefined || text === null ? "" : String(text));
  row.append(td);
  return td;
}

function when(epoch) {
  return epoch ? new Date(epoch * 1000).toLocaleTimeString() : "";
}

// ---- Services ---------------------------------------------------------------------

function handledPerSecond(name, service, now) {
  const read = service.streams.reduce((sum, s) => sum + (s.entries_read || 0), 0);
  const before = ops.lastRead ? ops.lastRead.counts[name] : undefined;
  const rate = before === undefined ? null : (read - before) / ((now - ops.lastRead.at) / 1000);
  return { read, rate };
}

function renderServices(report) {
  const now = Date.now();
  const counts = {};
  const body = $("services").querySelector("tbody");
  body.replaceChildren();
  for (const [name, service] of Object.entries(report.services)) {
    const { read, rate } = handledPerSecond(name, service, now);
    counts[name] = read;
    const row = el("tr");
    row.dataset.service = name;
    cell(row, name);
    cell(row, service.live);
    cell(row, service.streams.reduce((sum, s) => sum + (s.lag || 0), 0), "backlog");
    cell(row, service.streams.reduce((sum, s) => sum + (s.pending || 0), 0), "pending");
    cell(row, rate === null ? "…" : rate.toFixed(1), "rate");
    cell(row, (report.failing.by_stage || {})[name] || 0, "failing");
    body.append(row);
  }
  ops.lastRead = { at: now, counts };
  const tasks = report.tasks;
  $("tasks-line").textContent = tasks
    ? `tasks running: ${tasks.running} ${JSON.stringify(tasks.running_by_phase)}; ` +
      `dead letters: ${report.dlq.length}`
    : `dead letters: ${report.dlq.length}`;
}

// ---- Waiting for a human ----------------------------------------------------------

function waitingKind(item) {
  const request = item.request || {};
  if (request.type === "tool_approval") return "per_call";
  if (Array.isArray(request.action_requests)) return "batched";
  return "answer";
}

async function send(taskId, body) {
  ops.answering.add(taskId);
  try {
    await api("POST", `/ui/api/ops/approvals/${encodeURIComponent(taskId)}`, body);
    showError("");
  } catch (error) {
    showError(error.message);
  } finally {
    ops.answering.delete(taskId);
    refresh();
  }
}

function decisionCards(item) {
  const kind = waitingKind(item);
  const actions = actionsOf({ value: item.request }).map((a) => ({ ...a, decision: null }));
  const cards = actions.map((action) =>
    approvalCard(action, (card, choice, args, message) => {
      try {
        action.decision = decisionOf(action, choice, args, message);
      } catch (error) {
        showError(`the edited arguments are not JSON: ${error.message}`);
        return;
      }
      card.querySelector(".buttons").replaceChildren(el("span", "decided", DECIDED[choice]));
      if (!actions.every((a) => a.decision)) return;
      const decisions = kind === "per_call"
        ? { [item.request.tool_call_id]: actions[0].decision }
        : actions.map((a) => a.decision);
      send(item.task_id, { decisions });
    }),
  );
  return cards;
}

function answerCard(item) {
  const card = el("div", "approval");
  card.append(el("pre", "request", JSON.stringify(item.request, null, 1)));
  const value = el("textarea", "answer");
  value.setAttribute("aria-label", "answer (JSON)");
  value.placeholder = "the interrupt's answer, as JSON";
  const button = el("button", "approve", "Answer");
  button.type = "button";
  button.addEventListener("click", () => {
    let parsed;
    try {
      parsed = JSON.parse(value.value);
    } catch (error) {
      showError(`the answer is not JSON: ${error.message}`);
      return;
    }
    send(item.task_id, { answers: { [item.interrupt_id]: parsed } });
  });
  card.append(value, el("div", "buttons"));
  card.querySelector(".buttons").append(button);
  return card;
}

function renderWaiting(items) {
  $("waiting-count").textContent = String(items.length);
  const box = $("waiting");
  // cards stay as they are while their task waits: an edit being typed survives a refresh
  const wanted = new Map(items.map((i) => [`${i.task_id}|${i.interrupt_id}`, i]));
  for (const group of box.querySelectorAll("[data-key]")) {
    if (wanted.has(group.dataset.key)) wanted.delete(group.dataset.key);
    else group.remove();
  }
  for (const [key, item] of wanted) {
    const group = el("div", "waiting-task");
    group.dataset.key = key;
    group.dataset.task = item.task_id;
    group.append(el("div", "note", `task ${item.task_id} · step ${item.step} · ${item.node || "?"}`));
    if (waitingKind(item) === "answer") group.append(answerCard(item));
    else group.append(...decisionCards(item));
    box.append(group);
  }
  box.querySelector(".empty")?.remove();
  if (!items.length) box.append(el("p", "empty", "nothing waits"));
}

// ---- Failed runs, dead letters -------------------------------------------------------

function renderFailed(failed) {
  const byStage = {};
  const body = $("failed").querySelector("tbody");
  body.replaceChildren();
  for (const task of failed) {
    byStage[task.stage] = (byStage[task.stage] || 0) + 1;
    const row = el("tr");
    row.dataset.task = task.task_id;
    row.dataset.stage = task.stage;
    cell(row, task.stage, "stage");
    cell(row, task.task_id);
    cell(row, task.agent);
    cell(row, task.exception ? `${task.exception}: ${task.reason}` : task.reason, "reason");
    cell(row, when(task.at));
    body.append(row);
  }
  $("failed-by-stage").textContent = Object.entries(byStage)
    .map(([stage, n]) => `${stage}: ${n}`)
    .join(" · ");
}

function letterButton(label, className, action) {
  const button = el("button", className, label);
  button.type = "button";
  button.addEventListener("click", async () => {
    try {
      await action();
      showError("");
    } catch (error) {
      showError(error.message);
    }
    refresh();
  });
  return button;
}

function renderDeadLetters(letters) {
  $("dlq-count").textContent = String(letters.length);
  const body = $("dlq").querySelector("tbody");
  body.replaceChildren();
  for (const letter of letters) {
    const row = el("tr");
    row.dataset.entry = letter.id;
    const path = `/ui/api/ops/dead-letters/${encodeURIComponent(letter.id)}`;
    cell(row, letter.id);
    cell(row, letter.stream);
    cell(row, letter.task_id);
    cell(row, letter.error, "reason");
    cell(row, "").append(
      letterButton("Replay", "approve", () => api("POST", `${path}/replay`)),
      letterButton("Drop", "reject", () => api("DELETE", path)),
    );
    body.append(row);
  }
}

// ---- Threads and runs -----------------------------------------------------------------

async function searchThreads(event) {
  if (event) event.preventDefault();
  const query = { limit: 20 };
  const status = $("thread-status").value;
  if (status) query.status = status;
  const metadata = $("thread-metadata").value.trim();
  if (metadata) {
    try {
      query.metadata = JSON.parse(metadata);
    } catch (error) {
      showError(`the metadata filter is not JSON: ${error.message}`);
      return;
    }
  }
  try {
    renderThreads(await api("POST", "/threads/search", query));
    showError("");
  } catch (error) {
    showError(error.message);
  }
}

function renderThreads(threads) {
  const body = $("threads").querySelector("tbody");
  body.replaceChildren();
  for (const thread of threads) {
    const row = el("tr");
    row.dataset.thread = thread.thread_id;
    const link = el("a", "", thread.thread_id);
    link.href = `/ui?thread=${encodeURIComponent(thread.thread_id)}`;
    cell(row, "").append(link);
    cell(row, thread.status, "status-cell");
    cell(row, JSON.stringify(thread.metadata || {}));
    cell(row, thread.updated_at);
    const runs = cell(row, "…", "runs");
    body.append(row);
    api("GET", `/threads/${encodeURIComponent(thread.thread_id)}/runs?limit=10`)
      .then((found) => {
        runs.textContent = found.map((r) => `${r.run_id.slice(0, 8)} ${r.status}`).join("\n") || "none";
      })
      .catch((error) => {
        runs.textContent = error.message;
      });
  }
}

// ---- Reading it all -------------------------------------------------------------------

async function refresh() {
  try {
    const [report, waiting, failed, letters] = await Promise.all([
      api("GET", "/ui/api/ops/overview"),
      api("GET", "/ui/api/ops/approvals"),
      api("GET", "/ui/api/ops/failed"),
      api("GET", "/ui/api/ops/dead-letters"),
    ]);
    renderServices(report);
    renderWaiting(waiting.filter((item) => !ops.answering.has(item.task_id)));
    renderFailed(failed);
    renderDeadLetters(letters);
    $("updated").textContent = `read ${new Date().toLocaleTimeString()}`;
    $("updated").dataset.status = "done";
  } catch (error) {
    $("updated").dataset.status = "error";
    showError(error.message);
  }
}

function load() {
  $("api-key").value = sessionStorage.getItem(KEY_STORE) || "";
  $("api-key").addEventListener("change", () => {
    sessionStorage.setItem(KEY_STORE, $("api-key").value);
    refresh();
    searchThreads();
  });
  $("refresh").addEventListener("click", refresh);
  $("thread-search").addEventListener("submit", searchThreads);
  refresh();
  searchThreads();
  ops.timer = setInterval(refresh, REFRESH_MS);
}

document.addEventListener("DOMContentLoaded", load);
