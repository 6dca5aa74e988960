// Approval prompts in the conversation: what the policy asks a person about (tool, reason,
// rule, arguments), Approve / Deny, and the decision once made (here or elsewhere).

import { h, capitalize, formatTime } from "./dom.js";

export class ApprovalPrompts {
  constructor({ onDecide }) {
    this.onDecide = onDecide; // (approvalId, "approve"|"deny") -> Promise
    this.approvals = new Map(); // approval id -> prompt element
  }

  // The prompt element for an `approval_required` event (null when shown already).
  prompt(event) {
    const id = event.approval_id || event.id;
    if (typeof id !== "string" || this.approvals.has(id)) return null;
    const status = h("p", { class: "approval-status", role: "status" });
    const approve = h("button", { type: "button", class: "primary", text: "Approve" });
    const deny = h("button", { type: "button", class: "danger", text: "Deny" });
    const buttons = h("div", { class: "actions" }, approve, deny);
    const args = JSON.stringify(event.args ?? {}, null, 2);
    const node = h("section", {
      class: "card approval", "aria-label": `Approval needed for ${event.tool}`,
      dataset: { approvalId: id },
    },
    h("h3", { text: `Approval needed: ${event.tool}` }),
    h("p", { class: "reason", text: event.reason || "The policy asks a person first." }),
    event.rule ? h("p", { class: "rule", text: `Rule: ${event.rule}` }) : null,
    h("pre", { text: args }),
    event.expires_at ? h("p", { class: "meta", text: `Expires ${formatTime(event.expires_at)}` })
      : null,
    buttons, status);
    const decide = async (decision) => {
      approve.disabled = true;
      deny.disabled = true;
      status.textContent = decision === "approve" ? "Approving…" : "Denying…";
      try {
        const result = await this.onDecide(id, decision);
        this.decided(id, result.status, result.decided_by);
      } catch (err) {
        status.textContent = err.message || String(err);
        approve.disabled = false;
        deny.disabled = false;
      }
    };
    approve.addEventListener("click", () => decide("approve"));
    deny.addEventListener("click", () => decide("deny"));
    this.approvals.set(id, node);
    if (event.status && event.status !== "pending") {
      this.decided(id, event.status, event.decided_by);
    }
    return node;
  }

  decided(id, status, by) {
    const node = this.approvals.get(id);
    if (!node) return;
    node.classList.add("decided", status === "approved" ? "approved" : "denied");
    const actions = node.querySelector(".actions");
    if (actions) actions.remove();
    node.querySelector(".approval-status").textContent =
      `${capitalize(status || "decided")}${by ? ` by ${by}` : ""}`;
  }
}
