// What the two pages share: the gateway's API from the browser (the x-api-key the tab
// keeps goes with every call) and the cards that answer LangChain's human-in-the-loop
// requests (approve, edit, reject, respond).
"use strict";

const KEY_STORE = "loopline-api-key";
const $ = (id) => document.getElementById(id);
const DECIDED = { approve: "approved", edit: "edited", reject: "rejected", respond: "responded" };

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function headers(json) {
  const found = {};
  const key = sessionStorage.getItem(KEY_STORE);
  if (key) found["x-api-key"] = key;
  if (json) found["content-type"] = "application/json";
  return found;
}

async function request(method, path, body) {
  const init = { method, headers: headers(body !== undefined) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (!response.ok) {
    const text = await response.text();
    const hint = response.status === 401 ? " (enter the API key above)" : "";
    throw new Error(`${method} ${path}: ${response.status} ${text}${hint}`);
  }
  return response;
}

async function api(method, path, body) {
  return (await request(method, path, body)).json();
}

function actionsOf(interrupt) {
  const value = interrupt.value || {};
  if (value.type === "tool_approval") {
    // per_call: one gated call per interrupt, answered with one decision by its id
    const allowed = ["approve", "edit", "reject", "respond"];
    return [{ name: value.name, args: value.args, description: value.description, allowed }];
  }
  const configs = new Map((value.review_configs || []).map((c) => [c.action_name, c]));
  return (value.action_requests || []).map((action) => ({
    name: action.name,
    args: action.args,
    description: action.description,
    allowed: (configs.get(action.name) || {}).allowed_decisions || ["approve", "reject"],
  }));
}

function approvalCard(action, onPick) {
  const card = el("div", "approval");
  card.dataset.tool = action.name;
  card.append(el("div", "name", `${action.name}`));
  if (action.description) card.append(el("div", "description", action.description));
  const args = el("textarea", "args");
  args.value = JSON.stringify(action.args, null, 1);
  args.rows = Math.min(8, args.value.split("\n").length);
  args.setAttribute("aria-label", "arguments");
  const message = el("input", "message");
  message.placeholder = "message (reject: why; respond: the answer)";
  message.setAttribute("aria-label", "message");
  const buttons = el("div", "buttons");
  for (const kind of action.allowed) {
    const button = el("button", kind, kind[0].toUpperCase() + kind.slice(1));
    button.type = "button";
    button.dataset.decision = kind;
    button.addEventListener("click", () => onPick(card, kind, args, message));
    buttons.append(button);
  }
  card.append(args, message, buttons);
  return card;
}

function decisionOf(action, kind, args, message) {
  if (kind === "approve") return { type: "approve" };
  if (kind === "edit") {
    return { type: "edit", edited_action: { name: action.name, args: JSON.parse(args.value) } };
  }
  if (kind === "respond") return { type: "respond", message: message.value };
  return message.value ? { type: "reject", message: message.value } : { type: "reject" };
}
