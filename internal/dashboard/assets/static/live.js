// pgflow-wasm dashboard: live updates and small conveniences. Everything works without it
// (pages are server-rendered); with it, a page follows its Server-Sent Events stream and
// re-fetches its live part (#live) when the server says what it shows has changed. If the
// stream cannot be kept open, the page polls instead.
(function () {
  'use strict';

  var main = document.getElementById('live');
  var conn = document.getElementById('conn');
  var stream = document.body.getAttribute('data-live');
  var downBanner = document.getElementById('db-down');
  var loadedAt = Date.now();
  var POLL_MS = 5000;
  var dbDown = false; // the server cannot read the database: the page is as last read

  function page() { return document.getElementById('page'); }

  // Durations of things still running and heartbeat ages tick without a reload. The
  // server's clock is the reference (data-now), so a skewed browser clock does not matter.
  function fmt(ms) {
    if (ms < 0) ms = 0;
    var s = ms / 1000;
    if (ms < 1000) return Math.floor(ms) + ' ms';
    if (s < 60) return s.toFixed(1) + ' s';
    if (s < 3600) return Math.floor(s / 60) + 'm ' + pad(Math.floor(s % 60)) + 's';
    if (s < 172800) return Math.floor(s / 3600) + 'h ' + pad(Math.floor(s / 60) % 60) + 'm';
    return Math.floor(s / 86400) + 'd ' + (Math.floor(s / 3600) % 24) + 'h';
  }
  function pad(n) { return n < 10 ? '0' + n : '' + n; }
  function tick() {
    var p = page();
    if (!p || dbDown) return; // a run's age is unknown while the database is away
    var now = Number(p.getAttribute('data-now')) + (Date.now() - loadedAt);
    var els = document.querySelectorAll('[data-since]');
    for (var i = 0; i < els.length; i++) {
      els[i].textContent = fmt(now - Number(els[i].getAttribute('data-since')));
    }
  }

  function setConn(state, title) {
    if (!conn) return;
    conn.className = 'conn ' + state;
    conn.title = 'live updates: ' + title;
  }

  // The server says it cannot read the database (the event stream, or a refresh's 503):
  // say so above the page, turn the dot red and stop the clocks until it can again.
  function unreachable(msg) {
    dbDown = true;
    document.body.classList.add('db-down');
    if (downBanner) {
      downBanner.textContent = msg.replace(/[.\s]*$/, '') + '. What the page shows is as last read; it updates by itself once the database is back.';
      downBanner.hidden = false;
    }
    setConn('down', 'the database is unreachable');
  }
  function reachable() {
    if (!dbDown) return;
    dbDown = false;
    document.body.classList.remove('db-down');
    if (downBanner) downBanner.hidden = true;
    setConn(es && es.readyState === EventSource.OPEN ? 'on' : 'off', es && es.readyState === EventSource.OPEN ? 'connected' : 'polling');
  }

  // refresh fetches the page's live part again and swaps it in, keeping what the reader
  // opened and typed.
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    var typing = document.activeElement && main.contains(document.activeElement) &&
      /^(TEXTAREA|INPUT|SELECT)$/.test(document.activeElement.tagName);
    if (typing) { again = true; setTimeout(function () { if (again) { again = false; refresh(); } }, 2000); return; }
    busy = true;
    fetch(location.href, { headers: { 'X-Live': '1' }, credentials: 'same-origin', cache: 'no-store' })
      .then(function (r) {
        if (r.status === 503) {
          return r.text().then(function (msg) { unreachable(msg.trim()); throw new Error('HTTP 503'); });
        }
        if (!r.ok) throw new Error('HTTP ' + r.status);
        return r.text();
      })
      .then(function (html) {
        reachable();
        var open = [], values = {};
        main.querySelectorAll('details[open][id]').forEach(function (d) { open.push(d.id); });
        main.querySelectorAll('textarea[id], input[id]').forEach(function (el) {
          if (el.value !== el.defaultValue) values[el.id] = el.value;
        });
        main.innerHTML = html; // the server escaped every value in it
        open.forEach(function (id) { var d = document.getElementById(id); if (d) d.open = true; });
        Object.keys(values).forEach(function (id) { var el = document.getElementById(id); if (el) el.value = values[id]; });
        loadedAt = Date.now();
        tick();
        document.dispatchEvent(new CustomEvent('pgflow:updated'));
      })
      .catch(function () { /* the next event or poll tries again */ })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  var es = null, poller = null, failures = 0;
  function startPolling() {
    if (!poller) poller = setInterval(refresh, POLL_MS);
  }
  function stopPolling() {
    if (poller) { clearInterval(poller); poller = null; }
  }
  function connect() {
    if (!stream) return;
    if (!window.EventSource) { setConn('off', 'polling'); startPolling(); return; }
    var p = page();
    var url = stream + (stream.indexOf('?') < 0 ? '?' : '&') + 'v=' + encodeURIComponent(p ? p.getAttribute('data-version') : '');
    es = new EventSource(url);
    es.addEventListener('change', refresh);
    es.addEventListener('unreachable', function (e) { unreachable(e.data); });
    es.addEventListener('reachable', function () { reachable(); refresh(); });
    es.onopen = function () { failures = 0; stopPolling(); if (!dbDown) setConn('on', 'connected'); };
    es.onerror = function () {
      failures++;
      setConn('off', 'reconnecting; polling meanwhile');
      startPolling();
      if (es.readyState === EventSource.CLOSED || failures > 5) {
        es.close();
        setTimeout(connect, 15000);
      }
    };
  }

  // Forms: confirm destructive actions; check JSON before sending it.
  document.addEventListener('submit', function (e) {
    var f = e.target;
    var question = f.getAttribute('data-confirm');
    if (question && !window.confirm(question)) { e.preventDefault(); return; }
    var ta = f.querySelector('textarea[data-json]');
    var out = f.querySelector('.js-json-error');
    if (!ta) return;
    try {
      JSON.parse(ta.value);
      if (out) out.hidden = true;
    } catch (err) {
      e.preventDefault();
      if (out) { out.textContent = 'Not valid JSON: ' + err.message; out.hidden = false; }
    }
  });

  // The runs page's filters apply as soon as one is chosen (the button stays for no script).
  document.addEventListener('change', function (e) {
    var f = e.target.form;
    if (f && f.classList.contains('filters')) f.submit();
  });

  setInterval(tick, 1000);
  tick();
  connect();
})();
