// The runtime's notices in the conversation (`notice` events): the message, and a live
// "preparing the model" card with its phase and progress while a turn has shown nothing else.

import { h, capitalize } from "./dom.js";

// The runtime's notice: its message, and the phase and progress when the notice has them.
export class NoticeCard {
  constructor(event, waiting) {
    this.message = h("span", { class: "notice-message" });
    this.phase = h("span", { class: "phase", hidden: true });
    this.bar = h("progress", { max: "100", hidden: true, "aria-label": "Progress" });
    this.percent = h("span", { class: "percent", hidden: true });
    this.el = h("div", { class: `notice-card${waiting ? " preparing" : ""}`, role: "status",
      "aria-live": "polite" },
    h("span", { class: "spinner", "aria-hidden": "true" }),
    h("div", { class: "notice-body" }, this.message,
      h("div", { class: "notice-progress" }, this.phase, this.bar, this.percent)));
    this.update(event);
  }

  update(event) {
    const message = String(event.message ?? event.text ?? "");
    if (message) this.message.textContent = message;
    const phase = typeof event.phase === "string" ? event.phase : "";
    this.phase.hidden = !phase;
    this.phase.textContent = phase ? capitalize(phase.replace(/[_-]+/g, " ")) : "";
    this.el.dataset.phase = phase;
    const percent = percentOf(event);
    this.bar.hidden = percent === null;
    this.percent.hidden = percent === null;
    if (percent !== null) {
      this.bar.value = percent;
      this.percent.textContent = `${Math.round(percent)}%`;
    }
    if (/^(ready|done|finished)$/i.test(phase)) this.end(false);
    else if (/^(failed|error)$/i.test(phase)) this.end(true);
  }

  // The turn moved on: the model is ready (or the turn failed); the progress row says so.
  end(failed) {
    if (!this.el.classList.contains("preparing")) return;
    this.el.classList.remove("preparing");
    this.el.classList.add(failed ? "failed" : "ready");
    this.phase.hidden = false;
    this.phase.textContent = failed ? "Failed" : "Ready";
    this.bar.hidden = true;
    this.percent.hidden = true;
  }
}

// A notice's progress as a percentage, or null: `progress` as a fraction (0..1) or a
// percentage (1..100), or {done|completed|current, total}; also `done`/`total` beside it.
function percentOf(event) {
  let value = event.progress;
  if (value && typeof value === "object") {
    const done = value.done ?? value.completed ?? value.current;
    value = typeof done === "number" && value.total > 0 ? done / value.total : null;
  } else if (typeof value !== "number" && typeof event.done === "number" && event.total > 0) {
    value = event.done / event.total;
  }
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) return null;
  const percent = value <= 1 ? value * 100 : value;
  return Math.min(100, percent);
}
