// Approvals waiting across the tenant's sessions: polled from `GET /v1/approvals`; those of
// the open session are shown as prompts in its conversation, the others as links in the
// sidebar ("Waiting for approval") that open their session.

import { $, h, clear } from "./dom.js";

const APPROVAL_POLL_MS = 5000;

export class PendingApprovals {
  // active: () -> the open session's view ({session, timeline}) or null;
  // select: (session id) -> opens that session.
  constructor({ active, select }) {
    this.active = active;
    this.select = select;
    this.api = null;
    this.pending = [];
    this.timer = null;
  }

  start(api) {
    this.api = api;
    this.poll();
  }

  stop() {
    clearTimeout(this.timer);
    this.api = null;
    this.pending = [];
  }

  async poll() {
    clearTimeout(this.timer);
    if (!this.api) return;
    try {
      this.pending = await this.api.get("/v1/approvals");
    } catch {
      this.pending = [];
    }
    this.render();
    this.timer = setTimeout(() => this.poll(), APPROVAL_POLL_MS);
  }

  render() {
    const pending = Array.isArray(this.pending) ? this.pending : [];
    const box = $("#pending");
    const list = clear($("#pending-list"));
    const active = this.active();
    const elsewhere = [];
    for (const approval of pending) {
      if (active && approval.session === active.session.id) {
        active.timeline.approvalPrompt({ ...approval, approval_id: approval.id },
          approval.created_at);
      } else {
        elsewhere.push(approval);
      }
    }
    box.hidden = elsewhere.length === 0;
    for (const approval of elsewhere) {
      const open = h("button", { type: "button", class: "link",
        text: `${approval.tool} in session …${String(approval.session).slice(-6)}` });
      open.addEventListener("click", () => this.select(approval.session));
      list.append(h("li", {}, open));
    }
  }
}
