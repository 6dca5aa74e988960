// The audit view (auditor and admin tokens): filters by session, tool and since, the records
// as a table, and the chain's verify status.

import { describeError } from "./api.js";
import { h, clear, formatTime, shortId } from "./dom.js";

// `action` is "exec" for executions, else the state change (session.create, file.write, …)
// and `object` what it touched (a path, a session, a token id, a tool name).
const COLUMNS = [
  ["seq", "Seq"], ["ts", "Time"], ["kind", "Kind"], ["action", "Action"],
  ["session", "Session"], ["tool", "Tool"], ["object", "Object"], ["decision", "Decision"],
  ["rule", "Rule"], ["exit_code", "Exit"], ["duration_ms", "ms"], ["exec_id", "Exec"],
  ["hash", "Hash"],
];

export class AuditView {
  constructor(root, api) {
    this.api = api;
    this.form = root.querySelector("#audit-filters");
    this.body = root.querySelector("#audit-rows");
    this.status = root.querySelector("#audit-status");
    this.verifyBox = root.querySelector("#verify-status");
    this.verifyButton = root.querySelector("#verify-button");
    this.form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.load();
    });
    this.verifyButton.addEventListener("click", () => this.verify());
  }

  async show() {
    await Promise.all([this.load(), this.verify()]);
  }

  filters() {
    const params = new URLSearchParams();
    for (const name of ["session", "tool", "since"]) {
      const value = this.form.elements[name].value.trim();
      if (value) params.set(name, value);
    }
    params.set("limit", "500");
    return params;
  }

  async load() {
    this.status.textContent = "Loading…";
    let records;
    try {
      records = await this.api.get(`/v1/audit?${this.filters()}`);
    } catch (err) {
      clear(this.body);
      this.status.textContent = `Could not read the audit log: ${describeError(err)}`;
      return;
    }
    clear(this.body);
    const rows = Array.isArray(records) ? records.slice().reverse() : [];
    for (const record of rows) this.body.append(row(record));
    this.status.textContent = rows.length
      ? `${rows.length} record${rows.length === 1 ? "" : "s"}, newest first` : "No records match.";
  }

  async verify() {
    this.verifyBox.className = "verify pending";
    this.verifyBox.textContent = "Verifying the hash chain…";
    try {
      const report = await this.api.get("/v1/audit/verify");
      if (report.ok) {
        this.verifyBox.className = "verify ok";
        this.verifyBox.textContent = `Chain verified: ${report.records} records intact.`;
      } else {
        this.verifyBox.className = "verify bad";
        this.verifyBox.textContent = `Chain BROKEN at record ${report.first_bad_seq} ` +
          `(${report.records} records checked).`;
      }
    } catch (err) {
      this.verifyBox.className = "verify bad";
      this.verifyBox.textContent = `Verification failed: ${describeError(err)}`;
    }
  }

  filterSession(sessionId) {
    this.form.elements.session.value = sessionId || "";
  }
}

// One record as a table row (`columns`: which of COLUMNS' keys, in order).
export function row(record, columns = COLUMNS.map(([key]) => key)) {
  const tr = h("tr", { class: `kind-${safeClass(record.kind)}` });
  for (const key of columns) {
    let value = record[key];
    let title = null;
    if (value === null || value === undefined || value === "") value = null;
    else if (key === "ts") value = formatTime(value);
    else if (key === "hash" || key === "session" || key === "exec_id") {
      title = value == null ? null : String(value);
      value = key === "hash" && typeof value === "string" ? value.slice(0, 12) : shortId(value);
    }
    tr.append(h(key === "seq" ? "th" : "td", {
      scope: key === "seq" ? "row" : null, title, text: value == null ? "—" : String(value),
    }));
  }
  return tr;
}

function safeClass(value) {
  return String(value || "other").replace(/[^a-z_]/g, "");
}
