// mur ui: keeps a page current. The server renders every page (escaped there); this script only
// listens to the page's event stream and, when records were appended, fetches the page's
// fragment again and puts it in place. A task's live text (its answer as it streams, its
// question) comes as `text` events and goes in with textContent, never as markup; it is kept
// here too, so a fragment fetched since shows it again. It reads no token: the cookie is HttpOnly.
// Actions (a task for the entry, an answer, cancel, stop) are POSTs a person's click or key
// sends, with the page token the server wrote into the page; their outcome goes in the status
// line, as text. What is typed in a form survives the fragment's reloads.
"use strict";
(function () {
  const status = document.getElementById("act-status");
  const tokenMeta = document.querySelector('meta[name="mur-page-token"]');
  const pageToken = tokenMeta ? tokenMeta.content : "";
  function say(text, outcome) {
    if (!status) return;
    status.textContent = text;
    status.dataset.outcome = outcome;
  }
  function described(j) {
    if (j.lines) return j.lines.join("; ");
    if (j.task && j.task.id) return "task " + j.task.id + (j.task.state ? " " + j.task.state : "");
    return "done";
  }
  async function act(path, payload, control) {
    if (control) control.disabled = true;
    say("…", "busy");
    try {
      const reply = await fetch(path, {
        method: "POST",
        credentials: "same-origin",
        cache: "no-store",
        headers: { "Content-Type": "application/json", "X-Mur-Page-Token": pageToken },
        body: JSON.stringify(payload || {}),
      });
      let j = null;
      try { j = await reply.json(); } catch (e) { j = null; }
      if (reply.ok && j && j.ok) {
        say(described(j), "ok");
        return true;
      }
      say(j && j.code ? j.code + ": " + j.message + (j.hint ? " (hint: " + j.hint + ")" : "")
        : "the action was refused (HTTP " + reply.status + ")", "error");
    } catch (e) {
      say("mur ui did not answer", "error");
    } finally {
      if (control) control.disabled = false;
    }
    return false;
  }
  document.addEventListener("submit", async function (ev) {
    const form = ev.target.closest("form[data-act]");
    if (!form) return;
    ev.preventDefault();
    const area = form.querySelector("textarea");
    const text = area ? area.value : "";
    if (!text.trim()) { say("write something to send first", "error"); return; }
    if (await act(form.dataset.act, { text: text }, form.querySelector("button")) && area) {
      const again = document.querySelector('form[data-act="' + form.dataset.act + '"] textarea');
      if (again) again.value = "";
      drafts.delete(form.dataset.act);
    }
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.key !== "Enter" || !(ev.ctrlKey || ev.metaKey)) return;
    const form = ev.target.closest && ev.target.closest("form[data-act]");
    if (form) { ev.preventDefault(); form.requestSubmit(); }
  });
  // Buttons that ask for a second press (stop), pressed once: kept across reloads too.
  const armed = new Set();
  function arm(button) {
    button.dataset.armed = "1";
    button.textContent = button.dataset.confirm;
  }
  document.addEventListener("click", function (ev) {
    const button = ev.target.closest("button[data-act]");
    if (!button) return;
    if (button.dataset.confirm && !armed.has(button.dataset.act)) {
      armed.add(button.dataset.act);
      arm(button);
      return;
    }
    armed.delete(button.dataset.act);
    act(button.dataset.act, {}, button);
  });
  // What is typed in the page's forms, by form, kept across the fragment's reloads.
  const drafts = new Map();
  document.addEventListener("input", function (ev) {
    const form = ev.target.closest && ev.target.closest("form[data-act]");
    if (form && ev.target.tagName === "TEXTAREA") drafts.set(form.dataset.act, ev.target.value);
  });

  // The list's filter: a row shows when its text holds every word typed (any case).
  function filterRows() {
    const input = document.getElementById("filter");
    if (!input) return;
    const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    let shown = 0;
    const rows = document.querySelectorAll("tr.formation");
    for (const row of rows) {
      const text = (row.textContent + " " + row.dataset.formation).toLowerCase();
      row.hidden = !words.every(w => text.includes(w));
      if (!row.hidden) shown++;
    }
    const count = document.getElementById("filter-count");
    if (count) count.textContent = words.length ? shown + " of " + rows.length : "";
  }
  document.addEventListener("input", function (ev) {
    if (ev.target.id === "filter") filterRows();
  });

  const main = document.getElementById("live");
  if (!main || !main.dataset.events || !main.dataset.fragment) return;
  const GONE = "the answer text is no longer available: the formation has ended";
  const CUT = "the text shown stops at 64 KiB";
  // The newest text event of each task, at most 256 tasks (the server keeps no more).
  const texts = new Map();
  function show(t) {
    for (const el of main.querySelectorAll(".live[data-task]")) {
      if (el.dataset.task !== t.task) continue;
      const q = el.querySelector(".question");
      const pre = el.querySelector(".stream");
      const note = el.querySelector(".note");
      if (q) { q.textContent = t.question || ""; q.hidden = !t.question; }
      if (pre) pre.textContent = t.text || "";
      if (note) {
        const says = t.gone ? GONE : (t.cut ? CUT : "");
        note.textContent = says;
        note.hidden = !says;
      }
      el.dataset.state = t.state || "";
    }
  }
  function onText(ev) {
    let t;
    try { t = JSON.parse(ev.data); } catch (e) { return; }
    if (!t || typeof t.task !== "string") return;
    texts.delete(t.task);
    texts.set(t.task, t);
    if (texts.size > 256) texts.delete(texts.keys().next().value);
    show(t);
    main.dataset.texts = String(Number(main.dataset.texts || "0") + 1);
  }
  let busy = false;
  let again = false;
  async function reload() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const reply = await fetch(main.dataset.fragment, { credentials: "same-origin", cache: "no-store" });
      if (reply.ok) {
        // The fragment is the server's escaped rendering; the live texts go back in as text.
        const active = document.activeElement;
        const focus = active && active.closest && main.contains(active)
          ? (active.closest("[data-act]") || {}).dataset : null;
        const focusAct = focus ? focus.act : null;
        const focusArea = active && active.tagName === "TEXTAREA";
        const open = [...main.querySelectorAll("details[id]")].filter(d => d.open).map(d => d.id);
        const filter = document.getElementById("filter");
        const filterValue = filter ? filter.value : "";
        const filterFocused = filter && document.activeElement === filter;
        main.innerHTML = await reply.text();
        for (const id of open) {
          const d = document.getElementById(id);
          if (d && main.contains(d)) d.open = true;
        }
        for (const t of texts.values()) show(t);
        const newFilter = document.getElementById("filter");
        if (newFilter && filterValue) { newFilter.value = filterValue; }
        if (newFilter && filterFocused) newFilter.focus();
        filterRows();
        for (const button of main.querySelectorAll("button[data-confirm]")) {
          if (armed.has(button.dataset.act)) arm(button);
        }
        for (const [act, text] of drafts) {
          const area = main.querySelector('form[data-act="' + act + '"] textarea');
          if (area) area.value = text;
        }
        if (focusAct) {
          const back = main.querySelector('[data-act="' + focusAct + '"]');
          const target = back && (focusArea ? back.querySelector("textarea") : back);
          if (target) target.focus();
        }
        main.dataset.updates = String(Number(main.dataset.updates || "0") + 1);
      }
    } catch (e) {
      // The server went away; the event stream reconnects when it is back.
    } finally {
      busy = false;
      if (again) { again = false; reload(); }
    }
  }
  const events = new EventSource(main.dataset.events);
  events.addEventListener("change", reload);
  events.addEventListener("text", onText);
  events.addEventListener("open", function () { document.body.dataset.live = "open"; });
  events.addEventListener("error", function () { document.body.dataset.live = "retrying"; });
})();
