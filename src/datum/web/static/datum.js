// Datum's page: ask for a bearer token once (kept in sessionStorage, this tab only),
// then fetch the server-rendered overview (or a host's page) with it and refresh it every few seconds.
// Each section folds (a <details class="fold">): open where the screen is wide, closed on a phone, so its
// first screen is what needs a human and the rest a tap away; whatever the viewer opens or closes stays so.
// When the server cannot be reached the page greys out and says since when; what is
// shown is then what the server last said, and the banner says when that was.
(() => {
  "use strict";
  const KEY = "datum.token";
  const app = document.getElementById("app");
  const form = document.getElementById("token-form");
  const status = document.getElementById("status");
  const forget = document.getElementById("forget");
  const banner = document.getElementById("stale");
  const every = Math.max(1, Number(document.body.dataset.refresh) || 10) * 1000;
  const opened = new Map(); // details id -> open, where the viewer left it other than by default (survives refreshes)
  let lastGood = null; // when the shown data arrived
  let failingSince = null; // first failed refresh since then

  const view = document.body.dataset.view || "/ui/overview"; // the fragment this shell shows
  // A phone, as the stylesheet decides it (one breakpoint: its --narrow), not a second width written here.
  const narrow = () => getComputedStyle(document.documentElement).getPropertyValue("--narrow").trim() === "1";

  // The server renders a section open; a fold is closed by default on a phone. The viewer's choice wins.
  function unfold() {
    const small = narrow();
    for (const d of app.querySelectorAll("details[id]")) {
      const byDefault = d.open && !(small && d.classList.contains("fold"));
      d.dataset.byDefault = byDefault ? "open" : "closed";
      d.open = opened.has(d.id) ? opened.get(d.id) : byDefault;
    }
  }

  // A link's target shown: its section's fold and every details around it opened (the toggles are recorded).
  function reveal(target) {
    const own = target.matches("details") ? target : target.querySelector(":scope > details.fold");
    for (let d = own || target.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) {
      d.open = true;
    }
  }

  // One time format on the page, the server's: UTC, with its zone.
  const clock = (d) => d.toISOString().slice(11, 19) + " UTC";

  function signedOut(message) {
    sessionStorage.removeItem(KEY);
    form.hidden = false;
    forget.hidden = true;
    status.textContent = message;
  }

  function stale(why) {
    failingSince = failingSince || new Date();
    document.body.classList.add("stale");
    banner.hidden = false;
    banner.textContent = `${why} since ${clock(failingSince)}` +
      (lastGood ? `: this is what it said at ${clock(lastGood)}, and it may have changed.` : ".") + " Retrying.";
    status.textContent = "stale";
  }

  function fresh() {
    failingSince = null;
    lastGood = new Date();
    document.body.classList.remove("stale");
    banner.hidden = true;
    status.textContent = "updated " + clock(lastGood);
  }

  async function load() {
    const token = sessionStorage.getItem(KEY);
    if (!token) return signedOut("not signed in");
    let r;
    try {
      r = await fetch(view + location.search, { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
    } catch (e) {
      return stale("The server is unreachable");
    }
    if (r.status === 401) return signedOut("that token is not known to this server");
    if (!r.ok) {
      const body = await r.json().catch(() => null);
      return stale((body && body.issues && body.issues[0].message) || "The server answers HTTP " + r.status);
    }
    const html = await r.text(); // server-rendered and escaped by Jinja2
    app.innerHTML = html;
    unfold();
    if (location.hash && !app.dataset.jumped) { // a link to a detail, opened before the data came
      app.dataset.jumped = "1";
      const target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
      if (target) { reveal(target); target.scrollIntoView(); }
    }
    form.hidden = true;
    forget.hidden = false;
    fresh();
  }

  app.addEventListener("toggle", (ev) => {
    const d = ev.target;
    if (!d.id) return;
    if (d.open === (d.dataset.byDefault === "open")) opened.delete(d.id);
    else opened.set(d.id, d.open);
  }, true);
  // a link to a section or an item inside closed ones opens them (before the browser scrolls there)
  app.addEventListener("click", (ev) => {
    const a = ev.target.closest("a[href^='#']");
    if (!a) return;
    const target = document.getElementById(decodeURIComponent(a.getAttribute("href").slice(1)));
    if (target) reveal(target);
  });
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, form.elements.token.value.trim());
    form.elements.token.value = "";
    load();
  });
  forget.addEventListener("click", () => { app.innerHTML = ""; signedOut("not signed in"); });
  load();
  setInterval(load, every);
})();
