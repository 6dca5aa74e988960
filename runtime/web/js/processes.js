// The open session's background processes, beside its files: each with its state, its
// output as it comes (from the session's `process_output` events, or read from the output log
// by offset when events were missed) and a Stop button while it runs.

import { describeError } from "./api.js";
import { h, clear, toast } from "./dom.js";
import { previewButtons } from "./previews.js";
import { SessionListing } from "./session_listing.js";

const SHOWN_CHARS = 64 * 1024; // what one process's output box keeps on screen

export class ProcessesPanel extends SessionListing {
  constructor(root, api) {
    super(api);
    this.list = h("ul", { class: "file-list process-list", id: "process-list" });
    this.el = h("section", { class: "processes", "aria-labelledby": "processes-title",
      hidden: true }, h("h3", { text: "Processes", id: "processes-title" }), this.list);
    root.append(this.el);
    this.items = new Map(); // process id -> {row, item, pre, next, state, stop}
  }

  base() {
    return `/v1/sessions/${encodeURIComponent(this.session)}/processes`;
  }

  show(sessionId) {
    if (sessionId !== this.session) {
      this.items.clear();
      clear(this.list);
    }
    super.show(sessionId);
  }

  render(rows) {
    this.el.hidden = rows.length === 0;
    for (const row of rows) this.upsert(row);
  }

  upsert(row) {
    let entry = this.items.get(row.id);
    if (!entry) {
      const pre = h("pre", { class: "process-output", "aria-label": `Output of ${row.id}` });
      const stop = h("button", { type: "button", class: "danger subtle", text: "Stop",
        "aria-label": `Stop ${row.name || row.command}` });
      stop.addEventListener("click", () => this.stop(row.id));
      const state = h("span", { class: "file-meta process-state" });
      const previews = previewButtons(this.api, this.session, row);
      const item = h("li", { class: "file process", dataset: { processId: row.id } },
        h("div", { class: "file-line" },
          h("span", { class: "file-name", text: row.name || row.command, title: row.command }),
          state),
        h("div", { class: "actions" }, ...previews, stop), pre);
      entry = { row, item, pre, next: 0, state, stop, previews, loading: false };
      this.items.set(row.id, entry);
      this.list.append(item);
      this.el.hidden = false;
      this.load(entry);
    }
    entry.row = row;
    entry.item.dataset.state = row.state;
    entry.state.textContent = row.state === "running"
      ? `running${row.ports && row.ports.length ? ` · ports ${row.ports.join(", ")}` : ""}`
      : `exited · ${row.reason} · code ${row.exit_code ?? "?"}`;
    entry.stop.hidden = row.state !== "running";
    for (const button of entry.previews) button.hidden = row.state !== "running";
  }

  // What the log holds from where the box is (when it was opened, or events were missed).
  async load(entry) {
    if (entry.loading) return;
    entry.loading = true;
    try {
      for (;;) {
        const got = await this.api.get(
          `${this.base()}/${encodeURIComponent(entry.row.id)}/output?since=${entry.next}`);
        if (!got || got.next === entry.next) break;
        this.write(entry, got.output, got.next);
        if (!got.output) break;
      }
    } catch {
      // the listing says what it can; output comes with the next events
    } finally {
      entry.loading = false;
    }
  }

  write(entry, text, next) {
    entry.next = next;
    const shown = entry.pre.textContent + text;
    entry.pre.textContent = shown.length > SHOWN_CHARS ? shown.slice(-SHOWN_CHARS) : shown;
    entry.pre.scrollTop = entry.pre.scrollHeight;
  }

  // A session event (only the open session's reach here).
  handle(event) {
    if (event.type === "process_started" && event.process) {
      this.upsert(event.process);
      return;
    }
    const entry = this.items.get(event.process_id);
    if (!entry) {
      this.refreshSoon();
      return;
    }
    if (event.type === "process_output") {
      if (entry.loading || event.next <= entry.next) return; // the log read covers it
      if (event.offset === entry.next) this.write(entry, event.data, event.next);
      else this.load(entry); // a gap: read it from the log
    } else if (event.type === "process_exited") {
      this.upsert({ ...entry.row, state: "exited", reason: event.reason,
        exit_code: event.exit_code });
      this.load(entry);
    }
  }

  async stop(id) {
    const entry = this.items.get(id);
    if (entry) entry.stop.disabled = true;
    try {
      await this.api.del(`${this.base()}/${encodeURIComponent(id)}`);
    } catch (err) {
      toast(`Stop failed: ${describeError(err)}`, "error");
    }
    if (entry) entry.stop.disabled = false;
    this.refresh();
  }
}
