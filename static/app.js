// specwatch: page wiring shared by every page.
// - one EventSource on /api/v1/stream; each "tick" is re-dispatched as a `sw-tick` event on <body>
//   (htmx parts refresh with hx-trigger="sw-tick from:body", timeline.js listens too);
// - buttons with data-post / data-delete, and forms with class json-form, talk to the JSON API and show
//   the server's message when it refuses.
"use strict";

(function () {
  const dot = document.getElementById("live-dot");
  let source = null;
  let last = null;

  function setDot(state, text) {
    if (!dot) return;
    dot.className = "live-dot " + state;
    dot.textContent = text;
    dot.title = "live updates: " + text;
  }

  function connect() {
    source = new EventSource("/api/v1/stream");
    source.addEventListener("open", () => setDot("on", "live"));
    source.addEventListener("error", () => setDot("off", "reconnecting…"));  // EventSource retries by itself
    source.addEventListener("tick", (ev) => {
      setDot("on", "live");
      let data = null;
      try { data = JSON.parse(ev.data); } catch (e) { return; }
      const previous = last;
      last = data;
      if (previous === null) return;  // the first tick only says where we are
      document.body.dispatchEvent(new CustomEvent("sw-tick", { detail: { now: data, before: previous } }));
    });
  }
  window.addEventListener("pagehide", () => source && source.close());

  async function errorText(resp) {
    try {
      const body = await resp.json();
      if (typeof body.detail === "string") return body.detail;
      if (Array.isArray(body.detail)) return body.detail.map((d) => (d.loc || []).slice(1).join(".") + ": " + d.msg).join("; ");
    } catch (e) { /* not JSON */ }
    return resp.status + " " + resp.statusText;
  }

  async function send(method, url, body) {
    const opts = { method, headers: { Accept: "application/json" } };
    // with access control on, changes made from a logged-in browser carry the session's CSRF token
    const csrf = document.cookie.split("; ").find((c) => c.startsWith("specwatch_csrf="));
    if (csrf) opts.headers["X-CSRF-Token"] = decodeURIComponent(csrf.split("=")[1]);
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const resp = await fetch(url, opts);
    if (!resp.ok) throw new Error(await errorText(resp));
    return resp.status === 204 ? null : resp.json();
  }
  window.swSend = send;

  document.addEventListener("click", async (ev) => {
    const btn = ev.target.closest("[data-post],[data-delete]");
    if (!btn) return;
    if (btn.dataset.confirm && !window.confirm(btn.dataset.confirm)) return;
    btn.disabled = true;
    const msg = btn.parentElement.querySelector(".form-msg");
    const say = (text, cls) => { if (msg) { msg.textContent = text; msg.className = "form-msg " + cls; } else if (cls === "error") window.alert(text); };
    try {
      const result = btn.dataset.post ? await send("POST", btn.dataset.post) : await send("DELETE", btn.dataset.delete);
      if (btn.hasAttribute("data-stay")) {  // e.g. "send test": show the answer, keep the page
        btn.disabled = false;
        const failed = result && result.ok === false;
        say(failed ? "not delivered" + (result.http_status ? " (HTTP " + result.http_status + ")" : "") : "ok" + (result && result.http_status ? " (HTTP " + result.http_status + ")" : ""), failed ? "error" : "ok");
        return;
      }
      window.location.reload();
    } catch (e) {
      btn.disabled = false;
      say(e.message, "error");
    }
  });

  // A silence form says what to mute with a "scope": only the fields of that scope are sent.
  const SCOPES = { kind: ["kind", "launch_id"], rank: ["rank", "launch_id"], launch: ["launch_id"] };

  function formBody(form) {
    const out = {};
    for (const [k, v] of new FormData(form).entries()) {
      if (v === "") continue;
      out[k] = /^\d+$/.test(v) && k.endsWith("_id") ? Number(v) : v;
    }
    if (out.scope) {
      const keep = SCOPES[out.scope] || [];
      for (const k of ["kind", "rank", "launch_id", "host"]) if (!keep.includes(k)) delete out[k];
      delete out.scope;
    }
    return out;
  }

  document.addEventListener("submit", async (ev) => {
    const form = ev.target.closest("form.json-form");
    if (!form) return;
    ev.preventDefault();
    const msg = form.querySelector(".form-msg");
    const say = (text, cls) => { if (msg) { msg.textContent = text; msg.className = "form-msg " + cls; } };
    say("…", "");
    try {
      const result = await send("POST", form.getAttribute("action"), formBody(form));
      if (form.dataset.showToken && result && result.token) {
        const box = document.getElementById("new-token");
        box.querySelector(".host").textContent = result.host;
        box.querySelector(".token").textContent = result.token;
        box.hidden = false;
        say("created", "ok");
        form.reset();
        return;
      }
      say("done", "ok");
      if (form.dataset.reload) window.location.reload();
    } catch (e) {
      say(e.message, "error");
    }
  });

  connect();
})();
