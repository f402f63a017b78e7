// Datum's page: ask for a bearer token once (kept in sessionStorage, this tab only),
// then fetch the server-rendered overview with it and refresh it every few seconds.
(() => {
  "use strict";
  const KEY = "datum.token";
  const app = document.getElementById("app");
  const form = document.getElementById("token-form");
  const status = document.getElementById("status");
  const forget = document.getElementById("forget");
  const every = Math.max(1, Number(document.body.dataset.refresh) || 10) * 1000;

  function signedOut(message) {
    sessionStorage.removeItem(KEY);
    form.hidden = false;
    forget.hidden = true;
    status.textContent = message;
  }

  async function load() {
    const token = sessionStorage.getItem(KEY);
    if (!token) return signedOut("not signed in");
    let r;
    try {
      r = await fetch("/ui/overview", { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
    } catch (e) {
      status.textContent = "server unreachable; retrying";
      return;
    }
    if (r.status === 401) return signedOut("that token is not known to this server");
    if (!r.ok) {
      const body = await r.json().catch(() => null);
      status.textContent = (body && body.issues && body.issues[0].message) || "HTTP " + r.status;
      return;
    }
    app.innerHTML = await r.text(); // server-rendered and escaped by Jinja2
    form.hidden = true;
    forget.hidden = false;
    status.textContent = "updated " + new Date().toLocaleTimeString();
  }

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
