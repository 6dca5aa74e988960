// The agent's questions to the user (`ask_user`): a card with the question and either one
// button per offered option or a text field; answering posts it, and the card shows the end
// (answered, expired, or withdrawn when the turn was cancelled).

import { h, formatTime } from "./dom.js";

const ENDED = { answered: "Answered", expired: "Nobody answered in time", cancelled: "Withdrawn" };

export class QuestionCards {
  constructor({ onAnswer }) {
    this.onAnswer = onAnswer; // (questionId, answer) -> Promise
    this.cards = new Map(); // question id -> { node, status, controls }
  }

  card(event) {
    const id = event.question_id;
    if (typeof id !== "string" || this.cards.has(id)) return null;
    const status = h("p", { class: "question-status", role: "status" });
    const controls = h("div", { class: "actions" });
    const send = async (answer) => {
      for (const control of controls.querySelectorAll("button, input")) control.disabled = true;
      status.textContent = "Sending…";
      try {
        await this.onAnswer(id, answer);
        this.ended(id, "answered", answer);
      } catch (err) {
        status.textContent = err.message || String(err);
        for (const control of controls.querySelectorAll("button, input")) control.disabled = false;
      }
    };
    if (Array.isArray(event.options) && event.options.length) {
      for (const option of event.options) {
        const button = h("button", { type: "button", class: "option", text: String(option) });
        button.addEventListener("click", () => send(String(option)));
        controls.append(button);
      }
    } else {
      const input = h("input", { type: "text", "aria-label": "Your answer", maxlength: "8000",
        placeholder: "Your answer" });
      const button = h("button", { type: "button", class: "primary", text: "Answer" });
      const submit = () => { if (input.value.trim()) send(input.value); };
      button.addEventListener("click", submit);
      input.addEventListener("keydown", (e) => { if (e.key === "Enter") submit(); });
      controls.append(input, button);
    }
    const node = h("section", { class: "card question", "aria-label": "Question from the agent",
      dataset: { questionId: id } },
    h("h3", { text: "The agent asks" }),
    h("p", { class: "question-text", text: String(event.question ?? "") }),
    event.expires_at ? h("p", { class: "meta", text: `Open until ${formatTime(event.expires_at)}` })
      : null,
    controls, status);
    this.cards.set(id, { node, status, controls });
    return node;
  }

  ended(id, how, answer = null) {
    const found = this.cards.get(id);
    if (!found) return;
    // the event and this page's own answer may arrive in either order: the answer's text wins
    if (found.node.classList.contains("ended") && answer === null) return;
    found.node.classList.add("ended");
    found.controls.hidden = true;
    const said = ENDED[how] || how;
    found.status.textContent = answer !== null ? `${said}: ${answer}` : said;
  }
}
