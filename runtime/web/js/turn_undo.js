// "Undo this turn's file changes". An agent turn that changed files left a snapshot of the
// session taken before its first change (`turn-<turn id>`; the server keeps the last 10).
// Each finished turn has a slot at its end (the timeline makes it); the turns whose snapshot
// is still there show the control. Undo asks once more, inline, then restores the snapshot
// (the files become those from before the turn: its changes and later ones are gone) and
// the files view refreshes.

import { describeError } from "./api.js";
import { h, clear } from "./dom.js";
import { SessionListing } from "./session_listing.js";

const PREFIX = "turn-";

// The session's snapshots are the listing (a failed listing offers nothing: an older
// server, no access); the turns' slots show what it holds.
export class TurnUndo extends SessionListing {
  constructor({ api, sessionId, onRestored }) {
    super(api);
    this.session = sessionId;
    this.onRestored = onRestored; // after a restore: refresh what shows the files
    this.slots = new Map(); // turn id -> its slot element
    this.snapshots = new Map(); // turn id -> snapshot id
  }

  base() {
    return `/v1/sessions/${encodeURIComponent(this.session)}/snapshots`;
  }

  attach(turnId, slot) {
    this.slots.set(turnId, slot);
    this.renderSlot(turnId);
    this.refreshSoon();
  }

  render(rows) {
    this.snapshots = new Map();
    for (const row of rows) {
      if (typeof row.name === "string" && row.name.startsWith(PREFIX)) {
        this.snapshots.set(row.name.slice(PREFIX.length), String(row.id));
      }
    }
    for (const turnId of this.slots.keys()) this.renderSlot(turnId);
  }

  renderSlot(turnId) {
    const slot = this.slots.get(turnId);
    if (!slot || slot.dataset.state) return; // asking, restoring or done: leave it
    const snapshot = this.snapshots.get(turnId);
    clear(slot);
    slot.hidden = !snapshot;
    if (!snapshot) return;
    const button = h("button", { type: "button", class: "subtle undo-turn",
      text: "Undo this turn's file changes",
      title: "Put the session's files back as they were before this turn" });
    button.addEventListener("click", () => this.ask(slot, turnId, snapshot));
    slot.append(button);
    if (!slot.nextElementSibling) slot.scrollIntoView({ block: "end" }); // the latest turn
  }

  ask(slot, turnId, snapshot) {
    slot.dataset.state = "asking";
    const yes = h("button", { type: "button", class: "danger", text: "Undo file changes" });
    const no = h("button", { type: "button", text: "Cancel" });
    yes.addEventListener("click", () => this.restore(slot, turnId, snapshot));
    no.addEventListener("click", () => {
      slot.dataset.state = "";
      this.renderSlot(turnId);
    });
    clear(slot).append(h("span", { class: "undo-question", text: "Put the files back as " +
      "they were before this turn? Changes made since, by this turn and later ones, are lost." }),
    yes, no);
    yes.focus();
  }

  async restore(slot, turnId, snapshot) {
    slot.dataset.state = "restoring";
    for (const button of slot.querySelectorAll("button")) button.disabled = true;
    try {
      await this.api.post(`${this.base()}/${encodeURIComponent(snapshot)}/restore`);
    } catch (err) {
      slot.dataset.state = "";
      this.renderSlot(turnId);
      slot.append(h("span", { class: "undo-error", role: "alert",
        text: `Undo failed: ${describeError(err)}` }));
      return;
    }
    slot.dataset.state = "restored";
    clear(slot).append(h("span", { class: "undo-done", role: "status",
      text: "Files put back as they were before this turn." }));
    this.onRestored();
  }
}
