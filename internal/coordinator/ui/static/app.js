// nodemgr dashboard: live updates over one Server-Sent Events stream,
// confirmations, the session-expiry warning and log following. The pages
// work without it; it only keeps them current.
(function () {
  "use strict";
  var body = document.body;
  var csrf = body.dataset.csrf;
  if (body.dataset.page === "login") return;

  // ---- confirmations: every action form names what it is about to do.
  var dialog = document.getElementById("confirm");
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!form.dataset || !form.dataset.confirm || !dialog) return;
    ev.preventDefault();
    document.getElementById("confirm-text").textContent = form.dataset.confirm;
    dialog.returnValue = "";
    dialog.onclose = function () { if (dialog.returnValue === "ok") form.submit(); };
    dialog.showModal();
  });

  // ---- live updates
  var live = {
    ids: [],        // ids received, in order (bounded): tests check for gaps
    last: Number(body.dataset.since || 0),
    paused: false,
    pending: {},    // the latest event per element while paused
    source: null,
  };
  window.nodemgrLive = live;
  var button = document.getElementById("live");

  function setButton(state, label) {
    if (!button) return;
    button.className = "live " + state;
    button.querySelector(".label").textContent = label;
  }

  function each(sel, fn) { Array.prototype.forEach.call(document.querySelectorAll(sel), fn); }
  function cssEscape(s) { return window.CSS && CSS.escape ? CSS.escape(s) : s.replace(/"/g, '\\"'); }

  var badges = {
    info: ["open", "running", "executing", "busy"],
    ok: ["online", "finished", "ready", "idle", "complete"],
    warn: ["suspect", "closed", "pending", "preparing", "cleanup", "shuttingdown"],
    bad: ["offline", "failed", "cancelled"],
  };
  function badgeClass(s) {
    s = String(s || "").toLowerCase();
    for (var k in badges) if (badges[k].indexOf(s) >= 0) return "badge b-" + k;
    return "badge b-muted";
  }
  function setBadge(el, text) {
    if (el.textContent !== text) { el.textContent = text; el.className = badgeClass(text); }
  }
  function flashRow(el) {
    var tr = el.closest("tr");
    if (!tr) return;
    tr.classList.remove("flash"); void tr.offsetWidth; tr.classList.add("flash");
  }

  function applyNode(n) {
    each('[data-node="' + cssEscape(n.id) + '"]', function (el) {
      var st = el.querySelector("[data-status]");
      if (st) { setBadge(st, n.status); st.title = n.reason || ""; }
      var ag = el.querySelector("[data-agent]");
      if (ag) ag.textContent = n.agent_state || "—";
      flashRow(el);
    });
  }

  function applySuite(s) {
    var c = Object.assign({}, s.counts), total = s.total || 0;
    c.run_now = c.running - (c.held || 0); // running counts the held (prefetched) too
    var ended = c.finished + c.failed + c.cancelled;
    each('[data-suite="' + cssEscape(s.id) + '"]', function (el) {
      var st = el.querySelector("[data-state]");
      if (st) setBadge(st, s.state);
      el.querySelectorAll("[data-percent]").forEach(function (e) { e.textContent = s.percent; });
      el.querySelectorAll("[data-total]").forEach(function (e) { e.textContent = total; });
      el.querySelectorAll("[data-ended]").forEach(function (e) { e.textContent = ended; });
      el.querySelectorAll("[data-k]").forEach(function (e) { e.textContent = c[e.dataset.k]; });
      el.querySelectorAll("svg.progress").forEach(function (svg) { drawBar(svg, c, total); });
      if (s.state === "complete" || s.state === "cancelled") {
        el.querySelectorAll("#cancel-suite, #close-suite").forEach(function (b) { b.closest("form").remove(); });
      }
      flashRow(el);
    });
    suiteRate(s, ended);
  }

  function drawBar(svg, c, total) {
    var parts = [["s-ok", c.finished], ["s-bad", c.failed], ["s-muted", c.cancelled], ["s-run", c.running]];
    var x = 0;
    parts.forEach(function (p) {
      var r = svg.querySelector("rect." + p[0]);
      var w = total > 0 ? p[1] * 100 / total : 0;
      if (r) { r.setAttribute("x", x.toFixed(2)); r.setAttribute("width", w.toFixed(2)); }
      x += w;
    });
  }

  // The suite page's rate: tasks ended per second between live updates.
  var rateSeen = null;
  function suiteRate(s, ended) {
    var el = document.getElementById("suite-rate");
    if (!el || !el.closest('[data-suite="' + cssEscape(s.id) + '"]')) return;
    var now = Date.now();
    if (rateSeen && now > rateSeen.at) {
      var r = (ended - rateSeen.ended) * 1000 / (now - rateSeen.at);
      el.textContent = r.toFixed(1) + " tasks/s";
    }
    rateSeen = { at: now, ended: ended };
  }

  // ---- panels: what the events do not carry (failures, task rows,
  // attempts, containers) the server renders again. A panel marked
  // data-refresh="suite:ID" or "node:ID" is fetched anew, with the page,
  // after an event about that suite or node, at most every two seconds;
  // every panel also every 15 s, for what changes without an event.
  var refresh = { busy: false, again: false, last: Date.now() };
  function refreshPanels() {
    if (!document.querySelector("[data-refresh][id]")) return;
    if (live.paused) { refresh.stale = true; return; }
    if (refresh.busy) { refresh.again = true; return; }
    refresh.busy = true;
    setTimeout(function () {
      fetch(location.href, { credentials: "same-origin", headers: { "X-Nodemgr-Refresh": "1" } })
        .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          each("[data-refresh][id]", function (el) {
            var fresh = doc.getElementById(el.id);
            if (fresh && fresh.innerHTML !== el.innerHTML) el.innerHTML = fresh.innerHTML;
          });
        })
        .catch(function () { /* the next event or tick tries again */ })
        .then(function () {
          refresh.busy = false;
          refresh.last = Date.now();
          if (refresh.again) { refresh.again = false; refreshPanels(); }
        });
    }, Math.max(0, refresh.last + 2000 - Date.now()));
  }
  function refreshFor(kind, id) {
    if (document.querySelector('[data-refresh="' + kind + ":" + cssEscape(id) + '"]')) refreshPanels();
  }
  setInterval(function () {
    if (document.visibilityState === "visible" && Date.now() - refresh.last >= 15000) refreshPanels();
  }, 5000);

  // ---- times: "28s ago" keeps counting.
  function agoText(at, now) {
    var d = (now - at) / 1000;
    if (d < 0) return "just now";
    if (d < 60) return Math.floor(d) + "s ago";
    if (d < 3600) return Math.floor(d / 60) + "m ago";
    if (d < 48 * 3600) return Math.floor(d / 3600) + "h ago";
    return new Date(at).toISOString().slice(0, 10);
  }
  function tickAgo() {
    var now = Date.now();
    each("time[data-ago]", function (el) {
      var at = Date.parse(el.getAttribute("datetime"));
      if (!isNaN(at)) { var t = agoText(at, now); if (el.textContent !== t) el.textContent = t; }
    });
  }
  setInterval(function () { if (!live.paused) tickAgo(); }, 1000);

  function apply(type, data) {
    if (type === "node") { applyNode(data); refreshFor("node", data.id); }
    else if (type === "suite") { applySuite(data); refreshFor("suite", data.id); }
    else if (type === "rate") { var r = document.getElementById("rate"); if (r) r.textContent = data.per_second.toFixed(1); }
  }

  function received(ev) {
    var id = Number(ev.lastEventId);
    if (id) {
      live.last = id;
      live.ids.push(id);
      if (live.ids.length > 5000) live.ids.splice(0, 1000);
    }
    var data = JSON.parse(ev.data);
    if (live.paused) {
      live.pending[ev.type + ":" + (data.id || "")] = { type: ev.type, data: data };
      setButton("paused", "Paused · " + Object.keys(live.pending).length + " new");
      return;
    }
    apply(ev.type, data);
  }

  function connect(since) {
    var src = new EventSource("/ui/events?since=" + since);
    live.source = src;
    ["node", "suite", "rate"].forEach(function (t) { src.addEventListener(t, received); });
    src.addEventListener("reset", function () {
      // Events were lost past what the server keeps: show the truth again.
      if (!live.paused) location.reload();
    });
    src.addEventListener("session", function (ev) {
      src.close();
      showGone(JSON.parse(ev.data).error);
    });
    src.onopen = function () { if (!live.paused) setButton("on", "Live"); };
    src.onerror = function () { if (!live.paused) setButton("down", "Reconnecting…"); };
  }

  // reconnect drops the stream and opens a new one after the last event
  // seen, as the browser does by itself after a network error.
  live.reconnect = function () {
    if (live.source) live.source.close();
    connect(live.last);
  };
  live.drop = function () { if (live.source) live.source.close(); setButton("down", "Disconnected"); };

  if (button) {
    button.addEventListener("click", function () {
      live.paused = !live.paused;
      if (live.paused) { setButton("paused", "Paused"); return; }
      var p = live.pending; live.pending = {};
      Object.keys(p).forEach(function (k) { apply(p[k].type, p[k].data); });
      if (refresh.stale) { refresh.stale = false; refreshPanels(); }
      setButton("on", "Live");
    });
  }
  connect(live.last);

  // ---- session expiry: warn ahead, renew in place, or log in and come back.
  var expires = Number(body.dataset.expires || 0);
  var banner = document.getElementById("expiry");
  function showGone(msg) {
    var g = document.getElementById("gone");
    if (!g) return;
    g.textContent = (msg || "Your session ended.") + " ";
    var a = document.createElement("a");
    a.href = "/ui/login?return=" + encodeURIComponent(location.pathname + location.search);
    a.textContent = "Log in again";
    g.appendChild(a);
    g.hidden = false;
    if (banner) banner.hidden = true;
  }
  function tick() {
    if (!expires) return;
    var left = expires - Date.now();
    if (left <= 0) { showGone("Your session ended."); return; }
    var total = expires - (window.performance ? performance.timeOrigin : Date.now());
    var warnAt = Math.max(30000, Math.min(5 * 60000, total * 0.2));
    if (left < warnAt && banner) {
      banner.hidden = false;
      var s = Math.round(left / 1000);
      document.getElementById("expiry-left").textContent = s >= 120 ? Math.round(s / 60) + " minutes" : s + " seconds";
    }
  }
  setInterval(tick, 1000);
  tick();
  var renew = document.getElementById("renew");
  if (renew) {
    renew.addEventListener("submit", function (ev) {
      ev.preventDefault();
      fetch("/ui/renew", { method: "POST", headers: { "X-CSRF-Token": csrf }, body: new FormData(renew), credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : r.text().then(function (t) { throw new Error(t); }); })
        .then(function (j) { expires = j.expires; banner.hidden = true; renew.reset(); })
        .catch(function (e) { showGone(e.message); });
    });
  }

  // ---- following a log
  var log = document.getElementById("log");
  if (log && log.dataset.complete !== "true") {
    var follow = document.getElementById("follow");
    var status = document.getElementById("log-status");
    log.scrollTop = log.scrollHeight;
    var timer = setInterval(function () {
      if (!follow.checked || live.paused) return;
      var q = log.dataset.query + "&after=" + encodeURIComponent(log.dataset.cursor || "");
      fetch("/ui/logs/more?" + q, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : r.text().then(function (t) { throw new Error(t); }); })
        .then(function (j) {
          if (j.text) {
            var atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 20;
            log.textContent += j.text;
            if (atEnd) log.scrollTop = log.scrollHeight;
          }
          if (j.cursor) log.dataset.cursor = j.cursor;
          if (j.complete) {
            clearInterval(timer);
            log.dataset.complete = "true";
            follow.parentNode.remove();
            status.textContent = "The attempt ended: this is all of its output.";
            return;
          }
          status.textContent = "Following: new lines appear every two seconds.";
        })
        .catch(function (e) { status.textContent = "Could not read more: " + e.message; });
    }, 2000);
  }
})();
