// The gateway's flow from @langchain/langgraph-sdk (JavaScript): assistants, a thread, a
// run streamed token by token, a run waited for, an interrupt answered with
// command.resume, the thread's state. Prints one JSON object for the Python test to check.
// Usage: node langgraph_sdk_flow.mjs GATEWAY_URL (the SDK resolved from this folder's
// node_modules, installed by the test).
import { Client } from "@langchain/langgraph-sdk";

const client = new Client({ apiUrl: process.argv[2] });
const input = (text) => ({ messages: [{ role: "user", content: text }] });

const assistants = (await client.assistants.search()).map((a) => a.assistant_id).sort();
const thread = await client.threads.create();
const events = [];
let tokens = "";
for await (const part of client.runs.stream(thread.thread_id, "agent", {
  input: input("hello"),
  streamMode: ["messages-tuple", "values"],
})) {
  events.push(part.event);
  if (part.event === "messages") tokens += part.data[0].content;
}
const waited = await client.runs.wait(thread.thread_id, "agent", { input: input("hello again") });

const gated = await client.threads.create();
const asked = await client.runs.wait(gated.thread_id, "gated", { input: input("gated") });
const waiting = await client.threads.getState(gated.thread_id);
const resumed = await client.runs.wait(gated.thread_id, "gated", {
  command: { resume: { decisions: [{ type: "approve" }] } },
});
const after = await client.threads.getState(gated.thread_id);

console.log(
  JSON.stringify({
    assistants,
    events,
    tokens,
    waited: waited.messages.map((m) => m.content),
    interrupt: asked.__interrupt__,
    waitingNext: waiting.next,
    waitingInterrupts: waiting.interrupts,
    resumed: resumed.messages.map((m) => m.type),
    answer: resumed.messages[resumed.messages.length - 1].content,
    afterNext: after.next,
  }),
);
