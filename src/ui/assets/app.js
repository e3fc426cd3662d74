// mur ui: keeps a page current. The server renders every page (escaped there); this script only
// listens to the page's event stream and, when records were appended, fetches the page's
// fragment again and puts it in place. A task's live text (its answer as it streams, its
// question) comes as `text` events and goes in with textContent, never as markup; it is kept
// here too, so a fragment fetched since shows it again. It reads no token: the cookie is HttpOnly.
"use strict";
(function () {
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
        main.innerHTML = await reply.text();
        for (const t of texts.values()) show(t);
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
