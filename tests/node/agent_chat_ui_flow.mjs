// The calls agent-chat-ui makes through @langchain/langgraph-sdk's useStream, made here
// with the same client and options (useStream's submit, its reconnect on reload, its
// history fetch; the chat's thread list): a thread made with metadata, a run streamed
// with streamResumable and onDisconnect "continue" and its run id taken from the
// response, the page "reloaded" mid-run (the stream aborted), the run joined again from
// the last event id, the history of 10 states, the threads searched by graph id.
// Prints one JSON object for the Python test to check.
// Usage: node agent_chat_ui_flow.mjs GATEWAY_URL
import { Client } from "@langchain/langgraph-sdk";

const client = new Client({ apiUrl: process.argv[2] });
const input = (text) => ({ messages: [{ type: "human", content: text }] });

const thread = await client.threads.create({ metadata: { graph_id: "agent" } });
let runId;
let lastEventId;
const before = [];
const reload = new AbortController();
try {
  for await (const part of client.runs.stream(thread.thread_id, "agent", {
    input: input("slow"),
    streamMode: ["values", "updates", "messages-tuple"],
    streamResumable: true,
    onDisconnect: "continue",
    signal: reload.signal,
    onRunCreated(params) {
      runId = params.run_id;
    },
  })) {
    before.push(part.event);
    lastEventId = part.id;
    if (part.event === "updates") reload.abort(); // the page reloads mid-run
  }
} catch (error) {
  if (error.name !== "AbortError") throw error;
}
const after = [];
let tokens = "";
for await (const part of client.runs.joinStream(thread.thread_id, runId, { lastEventId })) {
  after.push(part.event);
  if (part.event === "messages" && part.data[0].type !== "tool") tokens += part.data[0].content;
}
const history = await client.threads.getHistory(thread.thread_id, { limit: 10 });
const listed = await client.threads.search({ metadata: { graph_id: "agent" }, limit: 100 });
const state = await client.threads.getState(thread.thread_id);

console.log(
  JSON.stringify({
    runId,
    lastEventId,
    before,
    after,
    tokens,
    history: history.map((h) => ({ next: h.next, count: h.values.messages?.length ?? 0 })),
    listed: listed.some((t) => t.thread_id === thread.thread_id),
    listedMetadata: listed.find((t) => t.thread_id === thread.thread_id)?.metadata,
    answer: state.values.messages[state.values.messages.length - 1].content,
  }),
);
