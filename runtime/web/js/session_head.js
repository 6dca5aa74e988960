// The open session's heading: its title (from the first message, or the id), Rename (PATCH
// {title}: Enter saves, Escape cancels), and the profiles it may switch to with the active
// one selected (GET .../profiles, PATCH {profile}). A title is untrusted: set as text only.

import { describeError } from "./api.js";
import { $, h, clear, toast } from "./dom.js";

export function sessionLabel(session) {
  return session.title || `Session ${session.id.slice(-6)}`;
}

export class SessionHead {
  constructor({ onChanged }) {
    this.api = null; // set at sign-in (use)
    this.onChanged = onChanged; // (session) after a rename or a switch the server accepted
    this.session = null;
    this.form = $("#rename-form");
    this.input = $("#rename-input");
    this.select = $("#session-profile");
    $("#rename-open").addEventListener("click", () => this.startRename());
    $("#rename-cancel").addEventListener("click", () => this.endRename());
    this.input.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape") {
        ev.preventDefault();
        this.endRename();
      }
    });
    this.form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.rename();
    });
    this.select.addEventListener("change", () => this.switchTo(this.select.value));
  }

  use(api) {
    this.api = api;
    this.show(null);
  }

  url() {
    return `/v1/sessions/${encodeURIComponent(this.session.id)}`;
  }

  show(session) {
    this.session = session;
    this.endRename({ focus: false });
    $("#rename-open").hidden = !session;
    $("#profile-box").hidden = !session;
    this.render();
    if (session) this.loadProfiles();
  }

  render() {
    const session = this.session;
    $("#chat-title").textContent = session ? sessionLabel(session) : "Choose or create a session";
    if (session && !this.select.querySelector(`option[value="${CSS.escape(session.profile)}"]`)) {
      this.options([{ name: session.profile, active: true }]);
    }
    if (session) this.select.value = session.profile;
  }

  options(profiles) {
    clear(this.select);
    for (const p of profiles) {
      this.select.append(h("option", { value: p.name, text: p.name,
        title: p.description || null }));
    }
  }

  async loadProfiles() {
    const id = this.session.id;
    try {
      const profiles = await this.api.get(`${this.url()}/profiles`);
      if (!this.session || this.session.id !== id || !Array.isArray(profiles)) return;
      if (profiles.length) this.options(profiles);
      this.render();
    } catch {
      // the active profile stays shown on its own
    }
  }

  // The server said the profile changed (profile_changed, or our own switch).
  profileChanged(profile) {
    if (!this.session) return;
    this.session.profile = profile;
    this.render();
  }

  async switchTo(profile) {
    const session = this.session;
    if (!session || profile === session.profile) return;
    this.select.disabled = true;
    try {
      const updated = await this.api.request("PATCH", this.url(), { json: { profile } });
      session.profile = updated.profile;
      toast(`This session now runs under the profile ${updated.profile}.`);
      this.onChanged(session);
    } catch (err) {
      toast(`Could not switch the profile: ${describeError(err)}`, "error");
    } finally {
      this.select.disabled = false;
      this.render();
    }
  }

  startRename() {
    if (!this.session) return;
    this.input.value = this.session.title || "";
    this.form.hidden = false;
    $("#chat-title").hidden = true;
    $("#rename-open").hidden = true;
    this.input.focus();
    this.input.select();
  }

  endRename({ focus = true } = {}) {
    const open = !this.form.hidden;
    this.form.hidden = true;
    $("#chat-title").hidden = false;
    $("#rename-open").hidden = !this.session;
    if (open && focus) $("#rename-open").focus();
  }

  async rename() {
    const session = this.session;
    const title = this.input.value.trim();
    if (!session || !title) return;
    try {
      const updated = await this.api.request("PATCH", this.url(), { json: { title } });
      session.title = updated.title;
      this.endRename();
      this.render();
      this.onChanged(session);
    } catch (err) {
      toast(`Could not rename the session: ${describeError(err)}`, "error");
    }
  }

  // After the first message: the server titled the session from it.
  async refreshTitle() {
    const session = this.session;
    if (!session || session.title) return;
    try {
      const fresh = await this.api.get(this.url());
      if (fresh.title && this.session === session) {
        session.title = fresh.title;
        this.render();
        this.onChanged(session);
      }
    } catch {
      // the list shows it on its next refresh
    }
  }
}
