// mur ui: keeps a page current. The server renders every page (escaped there); this script only
// listens to the page's event stream and, when records were appended, fetches the page's
// fragment again and puts it in place. It reads no token: the cookie is HttpOnly.
"use strict";
(function () {
  const main = document.getElementById("live");
  if (!main || !main.dataset.events || !main.dataset.fragment) return;
  let busy = false;
  let again = false;
  async function reload() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const reply = await fetch(main.dataset.fragment, { credentials: "same-origin", cache: "no-store" });
      if (reply.ok) {
        main.innerHTML = await reply.text();
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
  events.addEventListener("open", function () { document.body.dataset.live = "open"; });
  events.addEventListener("error", function () { document.body.dataset.live = "retrying"; });
})();
