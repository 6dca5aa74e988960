// The web client's entry point: sign-in, finding out what the token may do, and wiring the
// sessions, conversation, files, approvals and audit views together. The selected session is
// in the URL (`#/sessions/<id>`), so reload, back/forward and links keep it.

import { Api, ApiError, describeError, tokenStore } from "./api.js";
import { AuditView } from "./audit.js";
import { wireInputs } from "./composer.js";
import { $, clear, toast } from "./dom.js";
import { FilesPanel, imageUrl, writtenImages } from "./files.js";
import { PendingApprovals } from "./pending_approvals.js";
import { ProcessesPanel } from "./processes.js";
import { SharesList } from "./published.js";
import { SessionAudit } from "./session_audit.js";
import { SessionHead } from "./session_head.js";
import { SessionsPanel } from "./sessions.js";
import { EventStream } from "./sse.js";
import { Timeline } from "./timeline.js";
import { TurnUndo } from "./turn_undo.js";

const SESSION_HASH = /^#\/sessions\/([^/?#]+)$/;

// The session named by the URL, or null.
function sessionInUrl() {
  const match = SESSION_HASH.exec(location.hash);
  if (!match) return null;
  try {
    return decodeURIComponent(match[1]);
  } catch {
    return null;
  }
}

// The live-stream indicator: connecting|open|reconnecting|failed (`status`: why it failed).
function showConnection(state, status) {
  const conn = $("#conn");
  conn.dataset.state = state;
  conn.textContent = {
    connecting: "Connecting…", open: "Live", reconnecting: "Reconnecting…",
    failed: `Disconnected (${status})`,
  }[state] || state;
}

function sessionHash(id) {
  return `#/sessions/${encodeURIComponent(id)}`;
}

class App {
  constructor() {
    this.api = null;
    this.role = null;
    this.views = new Map(); // session id -> {timeline, stream, lastEventId, session}
    this.active = null;
    this.approvals = new PendingApprovals({ active: () => this.active,
      select: (id) => this.sessions?.select(id) });
    this.replaceUrlOnce = false; // the next opened session replaces the URL (no new entry)
    $("#signin-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.signIn($("#token-input").value.trim());
    });
    $("#signout").addEventListener("click", () => this.signOut("Signed out."));
    for (const button of document.querySelectorAll("#nav button")) {
      button.addEventListener("click", () => this.showView(button.dataset.view));
    }
    this.head = new SessionHead({ onChanged: (session) => this.sessions?.update(session) });
    this.sessionAudit = new SessionAudit();
    wireInputs(this);
    // Back/forward (or an edited URL) between sessions: open the one the URL names.
    window.addEventListener("hashchange", () => this.followUrl());
  }

  async followUrl() {
    const id = sessionInUrl();
    if (!id || !this.sessions || !this.api) return;
    if (this.active && this.active.session.id === id) return;
    const known = () => this.sessions.sessions.some((s) => s.id === id);
    if (!known()) await this.sessions.refresh(); // made in another tab since?
    if (known()) {
      this.sessions.select(id);
    } else {
      toast("That session does not exist (or is not yours).", "error");
      if (this.active) this.setUrl(this.active.session.id, { replace: true });
    }
  }

  // pushState, not location.hash: it adds a history entry without a hashchange event.
  setUrl(id, { replace = false } = {}) {
    const url = id ? sessionHash(id) : `${location.pathname}${location.search}`;
    if (id && location.hash === url) return;
    if (replace) history.replaceState(null, "", url);
    else history.pushState(null, "", url);
  }

  async start() {
    const saved = tokenStore.get();
    if (saved) await this.signIn(saved, { quiet: true });
    else this.showSignIn();
  }

  // -- sign-in and roles -------------------------------------------------------------------

  showSignIn(message = "") {
    for (const id of ["workspace", "audit", "nav", "role", "signout", "conn"]) {
      $(`#${id}`).hidden = true;
    }
    $("#signin").hidden = false;
    $("#signin-error").textContent = message;
    $("#token-input").focus();
  }

  async signIn(token, { quiet = false } = {}) {
    const error = $("#signin-error");
    if (!token) {
      error.textContent = "Enter a token.";
      return;
    }
    const api = new Api(token);
    error.textContent = quiet ? "" : "Checking…";
    let canWork = false;
    let canAudit = false;
    try {
      [canWork, canAudit] = await Promise.all([
        allowed(api.get("/v1/sessions")), allowed(api.get("/v1/audit/verify")),
      ]);
    } catch (err) {
      tokenStore.clear();
      this.showSignIn(err instanceof ApiError && err.status === 401
        ? "That token was not accepted." : `Sign-in failed: ${describeError(err)}`);
      return;
    }
    if (!canWork && !canAudit) {
      tokenStore.clear();
      this.showSignIn("This token may neither use sessions nor read the audit log.");
      return;
    }
    tokenStore.set(token);
    this.api = api;
    this.role = canWork && canAudit ? "admin" : canWork ? "user" : "auditor";
    $("#token-input").value = "";
    error.textContent = "";
    $("#signin").hidden = true;
    $("#main").focus(); // the signed-in page starts here for keyboard and screen readers
    $("#signout").hidden = false;
    const role = $("#role");
    role.hidden = false;
    role.textContent = `Signed in · ${this.role}`;
    const nav = $("#nav");
    nav.hidden = !(canWork && canAudit);
    $("#nav-workspace").hidden = !canWork;
    $("#nav-audit").hidden = !canAudit;
    this.audit = canAudit ? new AuditView($("#audit"), api) : null;
    this.head.use(api);
    this.sessionAudit.use(api, canAudit);
    if (canWork) {
      this.files = new FilesPanel($("#workspace"), api);
      this.shares = new SharesList($("#workspace aside.files"), api);
      this.processes = new ProcessesPanel($("#workspace aside.files"), api);
      this.sessions = new SessionsPanel($("#workspace"), api, {
        onSelect: (session) => this.openSession(session),
        onDeleted: (id) => this.dropSession(id),
        onCreated: () => $("#message-input").focus(), // the next thing to do
      });
      this.sessions.loadProfiles();
      const sessions = await this.sessions.refresh();
      this.showView("workspace");
      const wanted = sessionInUrl();
      const named = wanted && sessions.find((s) => s.id === wanted);
      if (wanted && !named) {
        toast("The session in the address does not exist (or is not yours).", "error");
      }
      const first = named || sessions[0];
      if (first) {
        this.replaceUrlOnce = true; // opening the page is not a step back can undo
        this.sessions.select(first.id);
      } else if (wanted) {
        this.setUrl(null, { replace: true });
      }
      this.approvals.start(api);
    } else {
      this.showView("audit");
    }
  }

  signOut(message) {
    for (const view of this.views.values()) view.stream?.stop();
    this.views.clear();
    this.active = null;
    clear($("#timeline-slot"));
    this.approvals.stop();
    tokenStore.clear();
    this.api = null;
    this.sessions = null;
    this.head.show(null);
    this.sessionAudit.show(null);
    this.setUrl(null, { replace: true });
    this.showSignIn(message);
  }

  showView(name) {
    $("#workspace").hidden = name !== "workspace";
    $("#audit").hidden = name !== "audit";
    for (const button of document.querySelectorAll("#nav button")) {
      button.setAttribute("aria-current", button.dataset.view === name ? "page" : "false");
    }
    if (name === "audit" && this.audit) {
      if (this.active) this.audit.filterSession("");
      this.audit.show();
    }
  }

  // -- sessions and their event streams ----------------------------------------------------

  async openSession(session) {
    if (this.active && this.active.session.id === session.id) return;
    if (this.active) {
      this.active.stream?.stop();
      this.active.stream = null;
      showConnection("connecting"); // not the old session's "Live" while this one loads
    }
    let view = this.views.get(session.id);
    if (!view) {
      view = { session, lastEventId: 0, stream: null, timeline: new Timeline({
        onDecide: (id, decision) => this.api.post(`/v1/approvals/${encodeURIComponent(id)}`,
          { decision }),
        onAnswer: (id, answer) => this.api.post(`/v1/sessions/${encodeURIComponent(session.id)}`
          + `/questions/${encodeURIComponent(id)}`, { answer }),
        onChange: () => {
          this.files.refreshSoon();
          this.shares.refreshSoon();
        },
        loadImage: (path, type) => imageUrl(this.api, session.id, path, type),
        findWritten: (since, until) => writtenImages(this.api, session.id, since, until),
        onTurn: (running) => {
          if (this.active === view) $("#stop-turn").hidden = !running;
        },
        onTurnEnd: (turnId, slot) => view.undo.attach(turnId, slot),
      }), undo: new TurnUndo({ api: this.api, sessionId: session.id, onRestored: () => {
        if (this.active === view) this.files.refresh();
      } }) };
      this.views.set(session.id, view);
      await this.loadHistory(view);
    }
    this.active = view;
    this.setUrl(session.id, { replace: Boolean(this.replaceUrlOnce) });
    this.replaceUrlOnce = false;
    this.head.show(view.session);
    this.sessionAudit.show(view.session);
    clear($("#timeline-slot")).append(view.timeline.el);
    $("#stop-turn").hidden = !view.timeline.running;
    $("#composer").hidden = false;
    $("#runbox").hidden = false;
    $("#upload-form").hidden = false;
    this.files.show(session.id);
    this.shares.show(session.id);
    this.processes.show(session.id);
    this.connect(view);
    this.approvals.render();
  }

  async loadHistory(view) {
    try {
      const messages = await this.api.get(
        `/v1/sessions/${encodeURIComponent(view.session.id)}/messages`);
      if (Array.isArray(messages)) view.timeline.loadHistory(messages);
    } catch {
      // no history (or no chat on this server): the event replay still shows tool runs
    }
  }

  connect(view) {
    const conn = $("#conn");
    conn.hidden = false;
    view.stream = new EventStream({
      url: `/v1/sessions/${encodeURIComponent(view.session.id)}/events`,
      token: this.api.token,
      lastEventId: view.lastEventId,
      onEvent: (event, id) => {
        if (id !== null) view.lastEventId = id;
        view.timeline.handle(event);
        if (event.type.startsWith("process_") && this.active === view) {
          this.processes.handle(event);  // a session's background processes, live
        }
        if (event.type === "approval_required" || event.type === "approval_decided") {
          this.approvals.poll();
        }
        if (event.type === "profile_changed") {  // switch_profile: the active profile
          view.session.profile = event.profile;
          if (this.active === view) this.head.profileChanged(event.profile);
          this.sessions?.update(view.session);
        }
      },
      onState: (state, status) => {
        if (this.active !== view) return;
        showConnection(state, status);
        if (state === "failed" && status === 401) this.signOut("The token is no longer valid.");
      },
    }).start();
  }

  dropSession(id) {
    const view = this.views.get(id);
    if (view) view.stream?.stop();
    this.views.delete(id);
    if (this.active && this.active.session.id === id) {
      this.active = null;
      this.setUrl(null, { replace: true });
      clear($("#timeline-slot"));
      this.head.show(null);
      this.sessionAudit.show(null);
      $("#composer").hidden = true;
      $("#runbox").hidden = true;
      $("#upload-form").hidden = true;
      $("#stop-turn").hidden = true;
      $("#conn").hidden = true;
    }
  }

}

// true for 2xx, false for 403; anything else (401, network) is thrown.
async function allowed(promise) {
  try {
    await promise;
    return true;
  } catch (err) {
    if (err instanceof ApiError && err.status === 403) return false;
    throw err;
  }
}

new App().start();
