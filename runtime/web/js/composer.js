// What a person sends to the open session: a message to the agent (with pasted or dropped
// images; Enter sends), "Stop" for the running turn, and a direct run (code_exec, terminal
// or kernel_exec; Ctrl+Enter runs). `app` is the web client's App: its api, open session
// (`active`: {session, timeline}) and session head.

import { describeError } from "./api.js";
import { Attachments } from "./attachments.js";
import { $, toast } from "./dom.js";

export function wireInputs(app) {
  wireComposer(app);
  wireStop(app);
  wireRunBox(app);
}

function wireComposer(app) {
  const form = $("#composer");
  const input = $("#message-input");
  const attachments = new Attachments({ form, input, list: $("#attachments"),
    onProblem: (text) => toast(text, "error") });
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const view = app.active;
    const images = view ? attachments.take() : [];
    const content = input.value.trim() || (images.length ? "(see the image)" : "");
    if (!content || !view) return;
    input.value = "";
    view.timeline.userMessage(images.length ? `${content}\n[${images.length} image(s)]`
      : content);
    try {
      await app.api.post(`/v1/sessions/${encodeURIComponent(view.session.id)}/messages`,
        images.length ? { content, images } : { content });
      if (app.active === view) app.head.refreshTitle(); // titled by its first message
    } catch (err) {
      const text = `The message was not accepted: ${describeError(err)}`;
      view.timeline.notice(text);
      toast(text, "error");
    }
  });
}

function wireStop(app) {
  $("#stop-turn").addEventListener("click", async () => {
    const view = app.active;
    if (!view) return;
    try {
      await app.api.del(`/v1/sessions/${encodeURIComponent(view.session.id)}/turn`);
      toast("The agent was stopped.");
    } catch (err) {
      toast(`Could not stop the agent: ${describeError(err)}`, "error");
    }
  });
}

function wireRunBox(app) {
  const form = $("#run-form");
  const code = $("#run-code");
  code.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const view = app.active;
    const text = code.value;
    if (!view || !text.trim()) return;
    const choice = $("#run-tool").value;
    let body = { tool: "code_exec", args: { language: choice, code: text } };
    if (choice === "terminal") body = { tool: "terminal", args: { command: text } };
    if (choice === "kernel") body = { tool: "kernel_exec", args: { code: text } };
    const timeout = Number($("#run-timeout").value);
    if (timeout > 0) body.timeout_s = timeout;
    try {
      const result = await app.api.post(
        `/v1/sessions/${encodeURIComponent(view.session.id)}/exec`, body);
      // The event stream normally finished the card already; this covers a stream gap.
      view.timeline.handle({ type: "tool_result", tool: body.tool, ...result });
    } catch (err) {
      toast(`${body.tool}: ${describeError(err)}`, "error");
    }
  });
}
