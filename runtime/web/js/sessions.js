// The session list of the caller's tenant, creating a session with a chosen profile, and
// deleting one (asks once more).

import { describeError } from "./api.js";
import { h, clear, formatTime, toast } from "./dom.js";

export class SessionsPanel {
  constructor(root, api, { onSelect, onDeleted, onCreated = () => {} }) {
    this.api = api;
    this.onCreated = onCreated;
    this.onSelect = onSelect;
    this.onDeleted = onDeleted;
    this.list = root.querySelector("#session-list");
    this.form = root.querySelector("#new-session-form");
    this.profile = root.querySelector("#profile-input");
    this.current = null;
    this.sessions = [];
    this.form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.create();
    });
  }

  // The profiles a new session may take (GET /v1/profiles), the default one selected; if they
  // cannot be read, the one choice left is the server's default.
  async loadProfiles() {
    let profiles = [];
    try {
      profiles = await this.api.get("/v1/profiles");
    } catch {
      return;
    }
    if (!Array.isArray(profiles) || !profiles.length) return;
    clear(this.profile);
    for (const p of profiles) {
      const label = p.description ? `${p.name} — ${p.description}` : p.name;
      this.profile.append(h("option", { value: p.name, text: label }));
      if (p.active) this.profile.value = p.name;
    }
  }

  async refresh() {
    try {
      const sessions = await this.api.get("/v1/sessions");
      this.sessions = Array.isArray(sessions) ? sessions : [];
    } catch (err) {
      toast(`Could not list sessions: ${describeError(err)}`, "error");
      return this.sessions;
    }
    this.sessions.sort((a, b) => (b.created_at || 0) - (a.created_at || 0));
    this.render();
    return this.sessions;
  }

  render() {
    clear(this.list);
    if (!this.sessions.length) {
      this.list.append(h("li", { class: "empty", text: "No sessions yet." }));
    }
    for (const session of this.sessions) {
      const label = session.title || `Session ${session.id.slice(-6)}`;
      const open = h("button", {
        type: "button", class: "session-open",
        "aria-current": session.id === this.current ? "true" : null,
        dataset: { sessionId: session.id },
      },
      h("span", { class: "session-title", text: label }),
      h("span", { class: "session-meta",
        text: `${session.profile} · ${formatTime(session.created_at)}` }));
      open.addEventListener("click", () => this.select(session.id));
      const remove = h("button", { type: "button", class: "danger subtle icon",
        "aria-label": `Delete ${label}`, title: "Delete session", text: "✕" });
      remove.addEventListener("click", () => this.confirmDelete(remove, session));
      remove.addEventListener("keydown", (ev) => {
        if (ev.key === "Escape") disarm(remove); // "Delete?" taken back
      });
      this.list.append(h("li", { class: "session" }, open, remove));
    }
  }

  // A session renamed or switched in the heading: its entry in the list follows.
  update(session) {
    const known = this.sessions.find((s) => s.id === session.id);
    if (known) Object.assign(known, { title: session.title, profile: session.profile });
    this.render();
  }

  select(id) {
    this.current = id;
    this.render();
    return this.onSelect(this.sessions.find((s) => s.id === id) || { id });
  }

  async create() {
    const profile = this.profile.value;
    const button = this.form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const session = await this.api.post("/v1/sessions", profile ? { profile } : {});
      await this.refresh();
      await this.select(session.id);
      this.onCreated(session);
    } catch (err) {
      toast(`Could not create a session: ${describeError(err)}`, "error");
    } finally {
      button.disabled = false;
    }
  }

  confirmDelete(button, session) {
    if (button.dataset.armed !== "1") {
      button.dataset.armed = "1";
      button.textContent = "Delete?";
      button.classList.remove("subtle", "icon");
      setTimeout(() => disarm(button), 5000);
      return;
    }
    this.remove(session);
  }

  async remove(session) {
    try {
      await this.api.del(`/v1/sessions/${encodeURIComponent(session.id)}`);
    } catch (err) {
      toast(`Could not delete the session: ${describeError(err)}`, "error");
      return;
    }
    if (this.current === session.id) this.current = null;
    this.onDeleted(session.id);
    await this.refresh();
  }
}

function disarm(button) {
  if (!button.isConnected || button.dataset.armed !== "1") return;
  button.dataset.armed = "";
  button.textContent = "✕";
  button.classList.add("subtle", "icon");
}
