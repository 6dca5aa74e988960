// An assistant reply in the conversation: a collapsible thinking section and the streamed
// answer, rendered as sanitised Markdown at most once a frame.

import { h } from "./dom.js";
import { renderMarkdown } from "./markdown.js";

const STOP_REASONS = {
  cancelled: "Stopped by a person.",
  max_iterations: "Stopped: the step limit was reached.",
  stalled: "Stopped: the agent repeated itself.",
  too_long: "Stopped: the answer was too long.",
};

// An assistant reply: a collapsible thinking section and the streamed answer text.
export class Reply {
  constructor() {
    this.thinking = null;
    this.thinkingText = null;
    this.text = h("div", { class: "text markdown" });
    this.raw = ""; // the answer's Markdown source
    this.frame = 0;
    this.el = h("div", { class: "msg assistant streaming", "aria-busy": "true" },
      h("span", { class: "who", text: "Agent" }), this.text);
    this.closed = false;
    this.finished = false;
  }

  addThinking(delta, finished = false) {
    if (!this.thinking) {
      this.thinkingText = h("div", { class: "thinking-text" });
      this.thinking = h("details", { class: "thinking", open: !finished },
        h("summary", { text: finished ? "Thinking" : "Thinking…" }), this.thinkingText);
      this.el.insertBefore(this.thinking, this.text);
    }
    this.thinkingText.textContent += String(delta ?? "");
  }

  endThinking() {
    if (!this.thinking) return;
    this.thinking.open = false;
    this.thinking.querySelector("summary").textContent = "Thinking";
  }

  addText(delta) {
    this.endThinkingIfOpen();
    this.raw += String(delta ?? "");
    // Re-render the Markdown at most once a frame while the answer streams in.
    if (!this.frame) {
      this.frame = requestAnimationFrame(() => {
        this.frame = 0;
        this.render();
      });
    }
  }

  setText(text) {
    this.raw = String(text ?? "");
    this.render();
  }

  render() {
    if (this.frame) {
      cancelAnimationFrame(this.frame);
      this.frame = 0;
    }
    this.text.replaceChildren(renderMarkdown(this.raw));
  }

  pause() {
    // A tool card comes next: later text goes into a new reply block below it.
    this.closed = true;
    if (this.frame) this.render();
    this.dropIfEmpty();
  }

  dropIfEmpty() {
    if (!this.thinking && !this.raw) this.el.remove();
  }

  finish(content, reason) {
    if (typeof content === "string" && content) this.setText(content);
    else if (this.frame) this.render();
    const why = STOP_REASONS[reason];
    if (why) this.el.append(h("p", { class: "stop-reason", text: why }));
    this.finished = true;
    this.done();
  }

  endThinkingIfOpen() {
    if (this.thinking && this.thinking.open) this.endThinking();
  }

  done() {
    this.closed = true;
    if (this.frame) this.render();
    this.endThinkingIfOpen();
    this.el.classList.remove("streaming");
    this.el.removeAttribute("aria-busy");
    this.dropIfEmpty();
  }
}
