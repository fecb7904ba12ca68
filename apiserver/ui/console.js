// raftlock console: reads GET /v1/events (server-sent events, one a second)
// with fetch, so that the token can go in a header, and draws the page from
// it. Everything the page shows is put in with textContent: keys and
// metadata are never read as HTML.
"use strict";

const TOKEN_KEY = "raftlock-token";
const TOKEN_HEADER = "X-Raftlock-Token";
const $ = (id) => document.getElementById(id);

let who = null;            // GET /v1/whoami: the token's name and rules, longest prefix first
let lastEvent = null;      // the latest ConsoleEvent
let receivedAt = 0;        // when it came, by this browser's clock
let detailKey = null;      // the key whose detail is open
let stream = null;         // AbortController of the running stream
let prefix = "";

function headers(extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  const t = sessionStorage.getItem(TOKEN_KEY);
  if (t) h[TOKEN_HEADER] = t;
  return h;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function keyOf(info) {
  if (info.key_b64) return { label: "base64:" + info.key_b64, raw: null, b64: info.key_b64 };
  return { label: info.key || "", raw: info.key || "", b64: null };
}

function setConn(state, text) {
  const c = $("conn");
  c.className = "conn conn-" + state;
  c.textContent = text;
}

function showError(id, text) {
  const e = $(id);
  e.hidden = !text;
  e.textContent = text || "";
}

async function errorText(resp) {
  try {
    const body = await resp.json();
    if (body && body.error) return body.error.code + ": " + body.error.message;
  } catch (_) { /* not JSON */ }
  return "HTTP " + resp.status;
}

// --- the stream ---------------------------------------------------------

async function run() {
  for (;;) {
    const ctl = new AbortController();
    stream = ctl;
    try {
      const q = prefix ? "?prefix=" + encodeURIComponent(prefix) : "";
      const resp = await fetch("../v1/events" + q, { headers: headers({ Accept: "text/event-stream" }), signal: ctl.signal, cache: "no-store" });
      if (resp.status === 401) {
        setConn("bad", "token needed");
        showError("error", await errorText(resp) + " — type the API token above.");
        await waitForRetry(ctl, 0);
        continue;
      }
      if (!resp.ok) {
        setConn("bad", "error");
        showError("error", await errorText(resp));
        await waitForRetry(ctl, 3000);
        continue;
      }
      showError("error", "");
      loadRights();
      await readEvents(resp.body.getReader(), ctl);
    } catch (e) {
      if (!ctl.signal.aborted) {
        setConn("wait", "reconnecting");
      }
    }
    if (!ctl.signal.aborted) await waitForRetry(ctl, 1000);
  }
}

// waitForRetry waits ms, or until the stream is restarted (new token or prefix); ms 0 waits for that only.
function waitForRetry(ctl, ms) {
  return new Promise((resolve) => {
    if (ctl.signal.aborted) return resolve();
    ctl.signal.addEventListener("abort", resolve, { once: true });
    if (ms > 0) setTimeout(resolve, ms);
  });
}

function restart() {
  if (stream) stream.abort();
}

async function readEvents(reader, ctl) {
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done || ctl.signal.aborted) return;
    buf += decoder.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      if (data) {
        lastEvent = JSON.parse(data);
        receivedAt = Date.now();
        setConn("live", "live");
        render();
      }
    }
  }
}

async function loadRights() {
  try {
    const resp = await fetch("../v1/whoami", { headers: headers(), cache: "no-store" });
    if (resp.ok) {
      who = await resp.json();
      $("who").textContent = "token " + who.name;
    }
  } catch (_) { /* keep the last */ }
}

// rightOn is the token's right on key: the rule with the longest prefix of
// key decides (whoami lists them longest first), as the node decides.
function rightOn(key) {
  for (const r of (who && who.rules) || []) {
    if (key.startsWith(r.prefix)) return r.right;
  }
  return "deny";
}

// An admin on a key may force-release it; keys that are not text have no button.
function mayForceRelease(k) {
  return k.raw !== null && rightOn(k.raw) === "admin";
}

// --- drawing ------------------------------------------------------------

function render() {
  const ev = lastEvent;
  if (!ev) return;
  renderCluster(ev.cluster);
  renderCounts(ev);
  renderLocks(ev);
  renderCharts(ev.history || []);
  renderLatencyWhere(ev.cluster);
  if (detailKey !== null) renderDetail();
}

// Commit latency is timed where entries are proposed: a follower's page
// says so and links to the leader's console when the leader tells its API
// address.
function renderLatencyWhere(st) {
  const where = $("c-latency-where");
  where.replaceChildren();
  if (!st || st.role === "leader") return;
  const leader = (st.members || []).find((m) => m.leader);
  const url = leader ? consoleURL(leader.api_addr) : null;
  if (!url) {
    where.textContent = "(timed on the leader only: open its console)";
    return;
  }
  const a = el("a", "open its console");
  a.href = url;
  where.append("(timed on the leader only: ", a, ")");
}

// consoleURL is the console of a node whose API is at addr, or null when
// addr is not an http(s) address.
function consoleURL(addr) {
  if (!addr) return null;
  let u;
  try {
    u = new URL(addr);
  } catch (e) {
    return null;
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") return null;
  return u.origin + u.pathname.replace(/\/+$/, "") + "/ui/";
}

function fmtMS(ms) {
  if (ms === undefined || ms === null) return "—";
  if (ms < 1000) return ms + " ms";
  const s = ms / 1000;
  if (s < 120) return s.toFixed(1) + " s";
  const m = s / 60;
  if (m < 120) return m.toFixed(1) + " min";
  return (m / 60).toFixed(1) + " h";
}

function renderCluster(st) {
  const body = $("members").tBodies[0];
  body.replaceChildren();
  if (!st) {
    $("node-id").textContent = "(not a cluster)";
    return;
  }
  $("node-id").textContent = st.node_id;
  $("node-role").textContent = st.role;
  $("leader-id").textContent = st.leader_id || "none known";
  $("term").textContent = st.term;
  for (const m of st.members || []) {
    const tr = el("tr");
    tr.dataset.member = m.id;
    const self = m.id === st.node_id;
    const role = m.leader ? "leader" : (self ? st.role : "follower");
    // Health and last contact: a member's own fields when the node reports
    // them, otherwise what this node knows of itself and the leader.
    let health = m.health || m.status;
    let contact = m.last_contact_ms !== undefined ? fmtMS(m.last_contact_ms) : (m.last_contact || "");
    if (!health) health = self ? (st.log_fault ? "log fault" : "ok") : (m.leader && st.leader_id ? "leading" : "—");
    if (!contact && self && st.raft && st.raft.last_contact) contact = st.raft.last_contact;
    tr.append(el("td", m.id + (self ? " (this node)" : "")), el("td", role), el("td", m.suffrage),
      el("td", health, ["ok", "leading", "alive", "healthy"].includes(health) ? "ok" : (health === "—" ? "" : "bad")),
      el("td", contact || "—"), el("td", m.api_addr || "—"), el("td", m.address),
      el("td", buildText(m), m.below_leader_level ? "version bad" : "version"));
    body.append(tr);
  }
}

// buildText is a member's raftlock version and the command level it reads,
// as it told them, and whether it reads less than the leader: the leader
// then refuses newer commands until it is upgraded.
function buildText(m) {
  let s = m.version || "unknown";
  s += m.level ? " (level " + m.level + ")" : " (level unknown)";
  if (m.below_leader_level) s += ": below the leader's level, upgrade it";
  return s;
}

// renderCounts shows the live sessions (a cluster node counts them) and the
// watches waiting on this node.
function renderCounts(ev) {
  $("sessions-box").hidden = ev.sessions === undefined;
  $("sessions").textContent = ev.sessions === undefined ? "" : ev.sessions;
  let w = String(ev.watches || 0);
  if (ev.store_watchers !== undefined) w += " (" + ev.store_watchers + " on the store)";
  $("watches").textContent = w;
}

// kindText describes what a held key is: a mutex, a semaphore with its
// holders and limit, or a read/write lock held by readers or its writer.
function kindText(l) {
  switch (l.kind) {
    case "semaphore": return "semaphore " + (l.holders || 0) + "/" + l.limit;
    case "rwlock": return l.shared ? "rwlock: " + (l.holders || 0) + " reader" + (l.holders === 1 ? "" : "s") : "rwlock: writer";
  }
  if (l.delayed) return "mutex: lock-delay";
  return l.set_keys || l.set_keys_b64 ? "mutex (multi-key set)" : "mutex";
}

// holdMode is one hold's mode: a reader or the writer of a read/write lock,
// a semaphore slot, or a slot nobody holds that a lock-delay keeps free.
function holdMode(l, h) {
  if (h.delayed) return "lock-delay: nobody holds it; free when it runs out";
  if (l.kind === "rwlock") return h.shared ? "reader" : "writer";
  return "slot";
}

function metaText(m) {
  if (m === undefined || m === null) return "";
  return typeof m === "string" ? m : JSON.stringify(m);
}

function setKeysText(l) {
  if (l.set_keys) return l.set_keys.join("  ");
  if (l.set_keys_b64) return l.set_keys_b64.map((k) => "base64:" + k).join("  ");
  return "";
}

function groupOf(label) {
  const i = label.indexOf("/");
  return i > 0 ? label.slice(0, i + 1) : "(no prefix)";
}

function renderLocks(ev) {
  const locks = (ev.locks && ev.locks.locks) || [];
  let problem = ev.locks_error ? ev.locks_error.code + ": " + ev.locks_error.message : "";
  if (!problem && ev.locks_stale && ev.cluster && !ev.cluster.leader_id) {
    problem = "No leader known: these are the locks as this node last saw them.";
  }
  showError("locks-error", problem);
  $("locks-more").hidden = !(ev.locks && ev.locks.more);
  $("lock-count").textContent = "(" + locks.length + (ev.locks && ev.locks.more ? "+" : "") + ")";
  const root = $("locks");
  root.replaceChildren();
  if (locks.length === 0) {
    root.append(el("p", prefix ? "No lock held under " + prefix + "." : "No lock held.", "note"));
    return;
  }
  const groups = new Map();
  for (const l of locks) {
    const k = keyOf(l);
    const g = groupOf(k.label);
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push([k, l]);
  }
  const showMeta = locks.some((l) => (l.metadata !== undefined && l.metadata !== null) || l.holds || l.delayed);
  for (const [g, items] of groups) {
    root.append(el("div", g + " · " + items.length, "group"));
    const table = el("table");
    const head = el("tr");
    const admin = items.some(([k]) => mayForceRelease(k));
    const cols = ["Key", "Token", "Remaining", "Waiting", "Kind"].concat(showMeta ? ["Metadata"] : [], admin ? [""] : []);
    for (const h of cols) head.append(el("th", h));
    table.append(el("thead"));
    table.tHead.append(head);
    const tb = el("tbody");
    for (const [k, l] of items) {
      const tr = el("tr");
      tr.dataset.key = k.label;
      const key = el("td", k.label, "key");
      key.title = "show this key";
      key.addEventListener("click", () => openDetail(k.label));
      const remaining = el("td", fmtMS(l.remaining_ms), "remaining");
      remaining.dataset.ms = l.remaining_ms;
      tr.append(key, el("td", l.token), remaining, el("td", l.waiters), el("td", kindText(l), "kind" + (l.delayed ? " delay" : "")));
      if (showMeta) tr.append(el("td", l.delayed ? "lock-delay: nobody holds it; free when it runs out" : metaText(l.metadata), l.delayed ? "delay" : ""));
      if (admin) {
        const td = el("td");
        if (mayForceRelease(k)) {
          const b = el("button", "force release", "danger");
          b.title = "end this lease whoever holds it; the next waiter gets the key";
          b.addEventListener("click", () => forceRelease(k));
          td.append(b);
        }
        tr.append(td);
      }
      tb.append(tr);
      tb.append(...holdRows(k, l, showMeta, cols.length));
    }
    table.append(tb);
    root.append(table);
  }
}

// holdRows are the rows under a key's: one per hold of a semaphore or
// read/write lock (its own token, time left, mode and metadata; never an
// owner), and a multi-key set's keys. The list may carry only the oldest
// few holds of a key (holders counts them all).
function holdRows(k, l, showMeta, ncols) {
  const rows = [];
  for (const h of l.holds || []) {
    const tr = el("tr", null, "hold");
    tr.dataset.holdOf = k.label;
    tr.dataset.token = h.token;
    const remaining = el("td", fmtMS(h.remaining_ms), "remaining");
    remaining.dataset.ms = h.remaining_ms;
    tr.append(el("td", "hold", "hold-label"), el("td", h.token), remaining, el("td", ""), el("td", holdMode(l, h), h.delayed ? "delay" : ""));
    if (showMeta) tr.append(el("td", h.delayed ? "" : metaText(h.metadata)));
    while (tr.children.length < ncols) tr.append(el("td"));
    rows.push(tr);
  }
  if (l.holds && l.holders > l.holds.length) {
    const tr = el("tr", null, "hold");
    const td = el("td", (l.holders - l.holds.length) + " more holds not listed (open the key to see them)", "hold-label");
    td.colSpan = ncols;
    tr.append(td);
    rows.push(tr);
  }
  const set = setKeysText(l);
  if (set) {
    const tr = el("tr", null, "set");
    tr.dataset.setOf = k.label;
    const td = el("td", "set: " + set);
    td.colSpan = ncols - 1;
    tr.append(el("td", "multi-key", "hold-label"), td);
    rows.push(tr);
  }
  return rows;
}

// Remaining times count down between events.
setInterval(() => {
  const gone = Date.now() - receivedAt;
  for (const td of document.querySelectorAll("td.remaining")) {
    td.textContent = fmtMS(Math.max(0, Number(td.dataset.ms) - gone));
  }
}, 250);

function chart(id, values, nowId, unit) {
  const svg = $(id);
  svg.replaceChildren();
  const ns = "http://www.w3.org/2000/svg";
  const n = values.length;
  $(nowId).textContent = n ? values[n - 1].toFixed(unit === "ms" ? 2 : 0) : "";
  if (n < 2) return;
  const max = Math.max(1e-9, ...values);
  const pts = values.map((v, i) => (i * 300 / (n - 1)).toFixed(1) + "," + (78 - v / max * 74).toFixed(1)).join(" ");
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", pts);
  svg.append(line);
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", "4");
  label.setAttribute("y", "12");
  label.setAttribute("font-size", "10");
  label.setAttribute("fill", "#667085");
  label.textContent = "max " + (unit === "ms" ? max.toFixed(2) : Math.round(max)) + " · " + n + " s";
  svg.append(label);
}

function renderCharts(h) {
  chart("chart-applied", h.map((s) => s.applied), "c-applied");
  chart("chart-latency", h.map((s) => s.commit_mean_us / 1000), "c-latency", "ms");
  chart("chart-ops", h.map((s) => s.ops), "c-ops");
}

// --- key detail and actions --------------------------------------------

function openDetail(label) {
  detailKey = label;
  $("detail").hidden = false;
  $("detail-key").textContent = label;
  renderDetail();
}

async function renderDetail() {
  const label = detailKey;
  const dl = $("detail-body");
  const q = label.startsWith("base64:") ? null : "?key=" + encodeURIComponent(label);
  if (q === null) {
    dl.replaceChildren(el("dt", "note"), el("dd", "keys that are not text are shown in the list only"));
    renderHolds({});
    return;
  }
  try {
    const resp = await fetch("../v1/inspect" + q, { headers: headers(), cache: "no-store" });
    if (label !== detailKey) return;
    if (!resp.ok) {
      dl.replaceChildren(el("dt", "error"), el("dd", await errorText(resp)));
      return;
    }
    const info = await resp.json();
    let held = info.locked ? "yes" : "no";
    if (info.delayed) held = "lock-delay: nobody holds it; free when it runs out";
    else if (info.reserved) held = "no: reserved for a multi-key acquire that waits for its other keys";
    const rows = [["held", held], ["fencing token", info.token || "—"],
      ["remaining", info.locked ? fmtMS(info.remaining_ms) : "—"], ["callers waiting", info.waiters]];
    if (info.locked) rows.push(["kind", kindText(info)]);
    if (info.kind === "semaphore") rows.push(["limit", info.limit]);
    if (info.kind && info.kind !== "mutex") rows.push(["holders", info.holders || 0]);
    if (info.metadata !== undefined) rows.push(["metadata", metaText(info.metadata)]);
    const set = setKeysText(info);
    if (set) rows.push(["multi-key set", set]);
    dl.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
    renderHolds(info);
    renderWaiters(label, q);
  } catch (e) {
    dl.replaceChildren(el("dt", "error"), el("dd", String(e)));
  }
}

// renderHolds lists a semaphore's or read/write lock's holds in the detail.
function renderHolds(info) {
  const holds = info.holds || [];
  $("detail-holds-box").hidden = holds.length === 0;
  $("detail-holds").replaceChildren(...holds.map((h) => {
    let text = "token " + h.token + " · " + holdMode(info, h) + " · " + fmtMS(h.remaining_ms) + " left";
    if (!h.delayed && metaText(h.metadata)) text += " · " + metaText(h.metadata);
    const li = el("li", text, h.delayed ? "delay" : "");
    li.dataset.token = h.token;
    return li;
  }));
}

async function renderWaiters(label, q) {
  const ol = $("detail-waiters");
  const resp = await fetch("../v1/waiters" + q, { headers: headers(), cache: "no-store" });
  if (label !== detailKey) return;
  if (!resp.ok) {
    ol.replaceChildren(el("li", await errorText(resp), "error"));
    return;
  }
  const body = await resp.json();
  if (!body.waiters.length) {
    ol.replaceChildren(el("li", "nobody waits", "note"));
    return;
  }
  ol.replaceChildren(...body.waiters.map((w) => {
    const li = el("li", "asks for " + fmtMS(w.ttl_ms) + ", waits at most " + fmtMS(w.wait_left_ms) + " more");
    li.dataset.position = w.position;
    return li;
  }));
}

async function forceRelease(k) {
  if (!confirm("Release " + k.label + " whoever holds it? The next waiter gets it.")) return;
  const resp = await fetch("../v1/force-release", { method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify({ key: k.raw }) });
  showError("locks-error", resp.ok ? "" : "force release: " + await errorText(resp));
}

// --- wiring ---------------------------------------------------------------

$("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const t = $("token").value.trim();
  if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
  $("token").value = "";
  $("token").placeholder = t ? "token set for this tab" : "API token (if the node needs one)";
  restart();
});
$("token-clear").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  $("token").placeholder = "API token (if the node needs one)";
  restart();
});
$("prefix-form").addEventListener("submit", (e) => {
  e.preventDefault();
  prefix = $("prefix").value;
  restart();
});
$("detail-close").addEventListener("click", () => { detailKey = null; $("detail").hidden = true; });
if (sessionStorage.getItem(TOKEN_KEY)) $("token").placeholder = "token set for this tab";
run();
