// One session's conversation: user and assistant messages (answers rendered as sanitised
// Markdown), streamed thinking (collapsible), tool cards, approval prompts and the runtime's
// notices (with a live "preparing the model" state), built from the session's events. Items
// carry their time so history and replayed events land in order.

import { ApprovalPrompts } from "./approval_prompts.js";
import { ToolCard } from "./cards.js";
import { h } from "./dom.js";
import { NoticeCard } from "./notice_card.js";
import { QuestionCards } from "./questions.js";
import { Reply } from "./reply.js";

export class Timeline {
  constructor({ onDecide, onChange, loadImage, findWritten = null, onTurn = () => {},
    onTurnEnd = () => {}, onAnswer = async () => {} }) {
    this.questions = new QuestionCards({ onAnswer }); // the agent's ask_user questions
    this.onTurn = onTurn; // (running: boolean) when an agent turn starts or ends
    this.onTurnEnd = onTurnEnd; // (turn id, slot element at its end): e.g. its undo control
    this.turnEnds = new Map(); // turn id -> that slot
    this.loadImage = loadImage; // workspace path -> Promise of a blob URL
    this.findWritten = findWritten; // (since, until) -> Promise of files changed in between
    this.onChange = onChange; // called when tool results may have changed files
    this.el = h("div", {
      class: "timeline", role: "log", "aria-live": "polite", "aria-label": "Conversation",
      tabindex: "0",
    });
    this.empty = h("p", { class: "empty", text: "No messages yet. Ask the agent, or run code below." });
    this.el.append(this.empty);
    this.cards = new Map(); // exec_id -> ToolCard
    this.byCall = new Map(); // an agent's call_id -> ToolCard (sub-agents' steps nest there)
    this.openCards = []; // cards without an exec_id, matched by tool name
    this.approvals = new ApprovalPrompts({ onDecide });
    this.reply = null; // the assistant reply being streamed
    this.split = false; // tool cards split the current turn's text into blocks
    this.running = false; // an agent turn is streaming
    this.skipTurns = new Set();
    this.historyExecs = new Set();
    this.prep = null; // the notice card of a turn that has produced nothing yet
    this.turnOutput = false; // the running turn has shown something of its own
  }

  newCard(tool, args, execId, startTs) {
    return new ToolCard({ tool, args, execId, startTs, loadImage: this.loadImage,
      findWritten: this.findWritten });
  }

  place(node, ts) {
    this.empty.remove();
    // Without a server time (the user's own message, a local notice) an item goes last.
    const last = this.el.lastElementChild;
    const when = typeof ts === "number" && Number.isFinite(ts) ? ts
      : (last && Number(last.dataset.ts)) || 0;
    node.dataset.ts = String(when);
    let before = null;
    for (let child = this.el.lastElementChild; child; child = child.previousElementSibling) {
      if (Number(child.dataset.ts) <= when) break;
      before = child;
    }
    this.el.insertBefore(node, before);
    if (!before) node.scrollIntoView({ block: "end" });
  }

  // -- history ---------------------------------------------------------------------------

  // Finished turns come from the stored conversation; their replayed events are skipped.
  // A turn still running shows its user message from here and the rest from its events.
  loadHistory(messages) {
    const finished = new Set();
    const ends = new Map(); // turn id -> when it ended
    for (const msg of messages) {
      const meta = msg.meta || {};
      if (meta.stop_reason || meta.error) {
        finished.add(msg.turn_id);
        ends.set(msg.turn_id, toSeconds(msg.created_at));
      }
    }
    const calls = new Map(); // tool call id -> {arguments, ts of the message that asked}
    for (const msg of messages) {
      const ts = toSeconds(msg.created_at);
      if (msg.role === "user") {
        this.userMessage(msg.content, ts);
        continue;
      }
      if (!finished.has(msg.turn_id)) continue;
      if (msg.role === "assistant") {
        for (const call of msg.tool_calls || []) calls.set(call.id, { args: call.arguments, ts });
        const meta = msg.meta || {};
        if (msg.content || msg.thinking) {
          const reply = new Reply();
          if (msg.thinking) reply.addThinking(msg.thinking, true);
          reply.finish(msg.content || "", meta.stop_reason);
          this.place(reply.el, ts);
        } else if (meta.error) {
          this.place(h("p", { class: "notice error", text: meta.message || meta.error }), ts);
        }
      } else if (msg.role === "tool") {
        const meta = msg.meta || {};
        const call = calls.get(msg.tool_call_id) || {};
        const card = this.newCard(msg.tool_name, call.args, meta.exec_id, call.ts);
        card.finish({ ...meta, output: msg.content }, ts);
        if (meta.exec_id) {
          this.cards.set(meta.exec_id, card);
          this.historyExecs.add(meta.exec_id);
        }
        this.place(card.el, ts);
      }
    }
    for (const [turnId, ts] of ends) this.turnEnd(turnId, ts);
    this.skipTurns = finished;
  }

  // A finished turn's slot, placed after its last item; `onTurnEnd` fills it (or not).
  turnEnd(turnId, ts) {
    if (!turnId || this.turnEnds.has(turnId)) return;
    const slot = h("div", { class: "turn-end", hidden: true, dataset: { turnId } });
    this.turnEnds.set(turnId, slot);
    this.place(slot, ts);
    this.onTurnEnd(turnId, slot);
  }

  userMessage(text, ts) {
    const node = h("div", { class: "msg user" },
      h("span", { class: "who", text: "You" }),
      h("div", { class: "text", text: String(text ?? "") }));
    this.place(node, ts);
  }

  // -- events ----------------------------------------------------------------------------

  handle(event) {
    const type = event.type;
    const ts = typeof event.ts === "number" ? event.ts : undefined;
    // Shown from history already (exec_output carries the exec id, not the turn id).
    if (event.turn_id && this.skipTurns.has(event.turn_id)) return;
    if (event.exec_id && this.historyExecs.has(event.exec_id)) return;
    switch (type) {
      case "stream_start":
        if (event.backend && event.backend !== this.lastBackend) {
          this.lastBackend = event.backend;  // say which model serves, once per change
          this.notice(`Model: ${event.model || "?"} (${event.backend})`, ts);
        }
        this.startReply(ts);
        this.split = false;
        this.prep = null;
        this.turnOutput = false;
        this.setRunning(true);
        break;
      case "thinking_delta":
        this.outputStarted();
        this.ensureReply(ts).addThinking(deltaOf(event));
        break;
      case "thinking_end":
        if (this.reply) this.reply.endThinking();
        break;
      case "stream_delta":
        this.outputStarted();
        this.ensureReply(ts).addText(deltaOf(event));
        break;
      case "stream_end":
        this.outputStarted();
        // The final text is authoritative unless tool cards split this turn's text.
        this.ensureReply(ts).finish(this.split ? null : event.content, event.stop_reason);
        this.reply = null;
        this.split = false;
        this.setRunning(false);
        this.onChange();
        this.turnEnd(event.turn_id, ts);
        break;
      case "tool_call":
        this.outputStarted();
        this.toolCall(event, ts);
        break;
      case "exec_output":
        this.cardFor(event, ts).appendOutput(event.stream === "stderr" ? "stderr" : "stdout",
          event.data);
        break;
      case "tool_result":
        this.cardFor(event, ts).finish(event, ts);
        this.onChange();
        break;
      case "approval_required":
        this.approvalPrompt(event, ts);
        break;
      case "approval_decided":
        this.approvalDecided(event.approval_id, event.status, event.decided_by);
        break;
      case "question": {
        const card = this.questions.card(event);
        if (card) this.place(card, ts);
        break;
      }
      case "question_answered":
        this.questions.ended(event.question_id, event.status);
        break;
      case "error":
        if (!event.exec_id) this.outputStarted(true);
        this.errorNote(event, ts);
        if (!event.exec_id) {
          this.setRunning(false);
          this.turnEnd(event.turn_id, ts);
        }
        break;
      case "resync":
        this.notice(`${event.missed} earlier events were no longer available.`, ts);
        break;
      case "notice":
        this.runtimeNotice(event, ts);
        break;
      case "subagent": {
        // a sub-agent's step, shown inside the spawn_agent card that started it
        const card = this.byCall.get(event.parent_call);
        const inner = event.event || {};
        if (!card) break;
        if (inner.type === "tool_call" && inner.call_id) this.byCall.set(inner.call_id, card);
        card.subagentStep(inner);
        break;
      }
      case "profile_changed":
        this.notice(`Profile: ${event.previous} → ${event.profile} (from the next step).`, ts);
        break;
      default:
        break;
    }
  }

  setRunning(running) {
    this.running = running;
    this.onTurn(running);
  }

  startReply(ts) {
    if (this.reply) this.reply.done();
    this.reply = new Reply();
    this.place(this.reply.el, ts);
    return this.reply;
  }

  ensureReply(ts) {
    if (this.reply && !this.reply.closed) return this.reply;
    if (this.reply && !this.reply.finished) this.split = true; // a card came between
    return this.startReply(ts);
  }

  toolCall(event, ts) {
    if (event.exec_id && this.cards.has(event.exec_id)) return;
    if (this.reply) this.reply.pause(); // text after the card starts a new block
    const card = this.newCard(event.tool, event.args, event.exec_id, ts);
    if (event.exec_id) this.cards.set(event.exec_id, card);
    else this.openCards.push(card);
    if (event.call_id) this.byCall.set(event.call_id, card);
    this.place(card.el, ts);
    return card;
  }

  cardFor(event, ts) {
    if (event.exec_id && this.cards.has(event.exec_id)) return this.cards.get(event.exec_id);
    const index = this.openCards.findIndex((c) => c.tool === event.tool && !c.finished);
    if (index >= 0) {
      const card = this.openCards[index];
      if (event.type === "tool_result") this.openCards.splice(index, 1);
      if (event.exec_id) this.cards.set(event.exec_id, card);
      return card;
    }
    // Its tool_call was missed (joined late): make the card now.
    return this.toolCall({ tool: event.tool || "tool", args: {}, exec_id: event.exec_id }, ts);
  }

  approvalPrompt(event, ts) {
    const node = this.approvals.prompt(event);
    if (node) this.place(node, ts);
  }

  approvalDecided(id, status, by) {
    this.approvals.decided(id, status, by);
  }

  errorNote(event, ts) {
    if (event.exec_id && this.cards.has(event.exec_id)) {
      this.cards.get(event.exec_id).fail(event.message || event.code || "error");
      return;
    }
    if (this.reply) {
      this.reply.done();
      this.reply = null;
    }
    const text = event.message || event.error || event.code || "The agent stopped with an error.";
    this.place(h("p", { class: "notice error", role: "alert", text: String(text) }), ts);
  }

  notice(text, ts) {
    this.place(h("p", { class: "notice", text }), ts);
  }

  // `notice` {message, phase?, progress?}: the runtime telling how the answer is served, e.g.
  // that the embedded model is being installed and loaded. While the turn has shown nothing
  // else, notices update one "preparing" card with a spinner; its first output ends it.
  runtimeNotice(event, ts) {
    const waiting = this.running && !this.turnOutput;
    if (this.prep && waiting) {
      this.prep.update(event);
      return;
    }
    const card = new NoticeCard(event, waiting);
    const reply = this.reply;
    if (waiting && reply && !reply.closed && !reply.raw && !reply.thinking) {
      // The answer has not begun: the card goes above its (hidden) empty block.
      card.el.dataset.ts = reply.el.dataset.ts;
      reply.el.before(card.el);
      reply.el.hidden = true;
    } else {
      this.place(card.el, ts);
    }
    if (waiting) this.prep = card;
  }

  outputStarted(failed = false) {
    this.turnOutput = true;
    if (this.reply) this.reply.el.hidden = false;
    if (this.prep) {
      this.prep.end(failed);
      this.prep = null;
    }
  }
}

function deltaOf(event) {
  for (const key of ["delta", "content", "text", "data"]) {
    if (typeof event[key] === "string") return event[key];
  }
  return "";
}

function toSeconds(value) {
  if (typeof value === "number") return value > 1e12 ? value / 1000 : value;
  const parsed = Date.parse(value);
  return Number.isNaN(parsed) ? -Infinity : parsed / 1000;
}
