// A session's Audit tab beside its Chat: the records of that session (GET /v1/audit?session=),
// newest first, for tokens that may read the audit log; a plain message for those that may not.

import { describeError } from "./api.js";
import { row } from "./audit.js";
import { $, h, clear } from "./dom.js";

const COLUMNS = ["seq", "ts", "kind", "action", "tool", "object", "decision", "rule",
  "exit_code"];

export class SessionAudit {
  constructor() {
    this.api = null;
    this.canAudit = false;
    this.session = null;
    this.tab = "chat";
    this.tabs = [$("#tab-chat"), $("#tab-audit")];
    for (const button of this.tabs) {
      button.addEventListener("click", () => this.select(button.dataset.tab));
      // Arrow keys move between the two tabs (the WAI-ARIA tabs pattern).
      button.addEventListener("keydown", (ev) => {
        if (ev.key !== "ArrowLeft" && ev.key !== "ArrowRight") return;
        ev.preventDefault();
        const other = this.tabs.find((b) => b !== button);
        other.focus();
        this.select(other.dataset.tab);
      });
    }
  }

  // At sign-in: the API and whether this token may read the audit log.
  use(api, canAudit) {
    this.api = api;
    this.canAudit = canAudit;
    this.show(null);
  }

  // A session was opened (null: none): its tabs, starting on the chat.
  show(session) {
    this.session = session;
    $("#chat-tabs").hidden = !session;
    this.select("chat");
  }

  select(tab) {
    this.tab = tab;
    for (const button of this.tabs) {
      const on = button.dataset.tab === tab;
      button.setAttribute("aria-selected", on ? "true" : "false");
      button.tabIndex = on ? 0 : -1;
    }
    $(".chat").dataset.tab = tab;
    $("#session-audit").hidden = tab !== "audit";
    if (tab === "audit") this.load();
  }

  async load() {
    const status = $("#session-audit-status");
    const body = clear($("#session-audit-rows"));
    if (!this.session) return;
    $("#session-audit .table-wrap").hidden = !this.canAudit; // no empty table to read
    if (!this.canAudit) {
      status.textContent = "Your token's role may not read the audit log. An auditor's or " +
        "an admin's token shows this session's records here.";
      return;
    }
    const id = this.session.id;
    status.textContent = "Loading…";
    let records;
    try {
      const query = new URLSearchParams({ session: id, limit: "500" });
      records = await this.api.get(`/v1/audit?${query}`);
    } catch (err) {
      status.textContent = `Could not read the audit log: ${describeError(err)}`;
      return;
    }
    if (!this.session || this.session.id !== id || this.tab !== "audit") return;
    const rows = Array.isArray(records) ? records.slice().reverse() : [];
    for (const record of rows) body.append(row(record, COLUMNS));
    status.textContent = rows.length
      ? `${rows.length} record${rows.length === 1 ? "" : "s"} of this session, newest first`
      : "No records for this session yet.";
    const refresh = h("button", { type: "button", class: "subtle", text: "Refresh" });
    refresh.addEventListener("click", () => this.load());
    status.append(" ", refresh);
  }
}
