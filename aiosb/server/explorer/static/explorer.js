// The Service Bus Explorer of aiosb serve: plain JavaScript, no build step, no outside
// network. Everything the server gives (names, properties, bodies) goes into the page
// as text nodes (el() and textContent), never as markup.
"use strict";

const state = {
  me: null,          // {key_name, rights, csrf}
  snapshot: null,    // the last event: {at, namespaces: [...]}
  history: {},       // "ns/path" -> [[epoch, in, out], ...]
  selected: null,    // {ns, path} of an entity, or {ns} of a namespace
  tab: "overview",
  peek: { sub: "active", from: 0, back: [], next: null, rows: [], chosen: null },
  events: null,
};
const HISTORY = 60;
const $ = (id) => document.getElementById(id);

// el("td", {class: "num"}, "text", child, ...): an element; strings become text nodes.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const can = (right) => !!state.me && state.me.rights.includes(right);

async function api(method, name, args) {
  const options = { method, credentials: "same-origin", headers: {} };
  let url = "api/" + name;
  if (method === "GET" || method === "DELETE") {
    const query = new URLSearchParams(args || {}).toString();
    if (query) url += "?" + query;
  } else {
    options.body = JSON.stringify(args || {});
    options.headers["Content-Type"] = "application/json";
  }
  if (method !== "GET") {
    if (state.me) options.headers["X-Aiosb-Csrf"] = state.me.csrf;
    if (name === "signin") options.headers["X-Aiosb-Explorer"] = "1";
  }
  const response = await fetch(url, options);
  let data = {};
  try { data = await response.json(); } catch (_) { /* an empty answer */ }
  if (response.status === 401 && name !== "signin") { signedOut(); }
  if (!response.ok) throw new Error(data.error || `${response.status} ${response.statusText}`);
  return data;
}

// -- signing in and out ---------------------------------------------------------------

async function start() {
  $("signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("signin-error").textContent = "";
    try {
      const me = await api("POST", "signin", { key_name: $("key-name").value, key: $("key").value });
      $("key").value = "";
      signedIn(me);
    } catch (error) {
      $("signin-error").textContent = error.message;
    }
  });
  $("signout").addEventListener("click", async () => {
    try { await api("POST", "signout"); } finally { signedOut(); }
  });
  try { signedIn(await api("GET", "me")); } catch (_) { signedOut(); }
}

function signedIn(me) {
  state.me = me;
  $("signin").hidden = true;
  $("app").hidden = false;
  $("signout").hidden = false;
  $("who").textContent = `${me.key_name} (${me.rights.join(", ")})`;
  listen();
}

function signedOut() {
  state.me = null;
  if (state.events) { state.events.close(); state.events = null; }
  // Nothing of the session stays in the page under the sign-in form (#48).
  state.snapshot = null;
  state.history = {};
  state.selected = null;
  state.tab = "overview";
  state.peek = { sub: "active", from: 0, back: [], next: null, rows: [], chosen: null };
  $("tree").replaceChildren();
  $("detail").replaceChildren(el("p", { class: "hint" }, "Choose a namespace or an entity."));
  if ($("confirm").open) $("confirm").close();
  $("live").classList.remove("on");
  $("app").hidden = true;
  $("signout").hidden = true;
  $("who").textContent = "";
  $("signin").hidden = false;
}

function listen() {
  if (state.events) state.events.close();
  const events = state.events = new EventSource("api/events");
  events.onopen = () => $("live").classList.add("on");
  events.onerror = () => {
    $("live").classList.remove("on");
    api("GET", "me").catch(() => {});  // a session gone (server restarted): sign in again
  };
  events.addEventListener("signedout", () => signedOut());
  events.onmessage = (message) => {
    const snapshot = JSON.parse(message.data);
    if (snapshot.history) {
      for (const [key, points] of Object.entries(snapshot.history)) state.history[key] = points;
    } else {
      for (const ns of snapshot.namespaces) {
        for (const entity of ns.entities) {
          if (!entity.rate) continue;
          const points = state.history[`${ns.name}/${entity.path}`] ||= [];
          points.push([snapshot.at, entity.rate[0], entity.rate[1]]);
          if (points.length > HISTORY) points.splice(0, points.length - HISTORY);
        }
      }
    }
    state.snapshot = snapshot;
    renderTree();
    refreshLive();
  };
}

// -- the tree of namespaces and entities ------------------------------------------------

function findNamespace(name) {
  return state.snapshot && state.snapshot.namespaces.find((n) => n.name === name);
}

function findEntity(ns, path) {
  const namespace = findNamespace(ns);
  return namespace && namespace.entities.find((e) => e.path === path);
}

function badges(entity) {
  const c = entity.counts;
  const out = [el("span", { class: "badge", title: "active", dataset: { count: "active" } }, c.active)];
  if (c.dead_letter) out.push(el("span", { class: "badge dl", title: "dead-lettered" }, c.dead_letter));
  if (entity.fragments && entity.fragments[0] < entity.fragments[1]) out.push(el("span", { class: "badge down" }, "down"));
  return out;
}

function renderTree() {
  const tree = $("tree");
  const wanted = [];
  for (const ns of state.snapshot.namespaces) {
    const faults = ns.faults ? ns.faults.length : 0;  // sent to Manage keys only
    wanted.push(["ns:" + ns.name, () => el("button", {
      class: "ns-head", type: "button", dataset: { namespace: ns.name },
      onclick: () => select({ ns: ns.name }),
    }), (node) => node.replaceChildren(
      el("span", {}, ns.name), el("span", { class: "kind" }, ns.tier),
      faults ? el("span", { class: "faulty" }, `${faults} fault${faults > 1 ? "s" : ""}`) : "")]);
    for (const entity of ns.entities) {
      const key = `${ns.name}/${entity.path}`;
      wanted.push(["e:" + key, () => el("button", {
        class: "entity" + (entity.kind === "subscription" ? " sub" : ""), type: "button",
        dataset: { entity: key }, onclick: () => select({ ns: ns.name, path: entity.path }),
      }), (node) => {
        const shown = entity.kind === "subscription" ? entity.path.split("/subscriptions/")[1] : entity.path;
        node.replaceChildren(el("span", { class: "name", title: entity.path },
          el("span", { class: "kind" }, entity.kind[0] + " "), shown),
        el("span", { class: "badges" }, badges(entity)));
        const chosen = state.selected && state.selected.ns === ns.name && state.selected.path === entity.path;
        node.classList.toggle("selected", !!chosen);
      }]);
    }
  }
  // Keyed: nodes stay (a click in flight lands), are added and removed as entities are.
  const existing = new Map([...tree.children].map((node) => [node.dataset.key, node]));
  const order = [];
  for (const [key, make, update] of wanted) {
    let node = existing.get(key);
    if (!node) { node = make(); node.dataset.key = key; }
    existing.delete(key);
    update(node);
    order.push(node);
  }
  for (const node of existing.values()) node.remove();
  order.forEach((node, i) => { if (tree.children[i] !== node) tree.insertBefore(node, tree.children[i] || null); });
}

function select(what) {
  state.selected = what;
  state.tab = what.path ? "overview" : "faults";
  state.peek = { sub: "active", from: 0, back: [], next: null, rows: [], chosen: null };
  renderTree();
  renderDetail();
}

// -- the detail of an entity or a namespace ------------------------------------------------

function renderDetail() {
  const detail = $("detail");
  const sel = state.selected;
  if (!sel) return;
  if (!sel.path) { detail.replaceChildren(...namespaceView(sel.ns)); return; }
  const entity = findEntity(sel.ns, sel.path);
  if (!entity) { detail.replaceChildren(el("p", { class: "hint" }, "This entity is gone.")); return; }
  const tabs = [["overview", "Overview"], ["messages", "Messages"], ["send", "Send"]];
  if (entity.kind === "topic") tabs.splice(1, 1);
  if (entity.kind === "subscription") { tabs.splice(2, 1); if (can("Manage")) tabs.push(["rules", "Rules"]); }
  if (entity.sessions) tabs.push(["sessions", "Sessions"]);
  if (!tabs.some(([id]) => id === state.tab)) state.tab = "overview";
  const body = el("div", { id: "tab-body" });
  detail.replaceChildren(
    el("div", { class: "kind" }, `${entity.kind} in ${sel.ns}`),
    el("h2", { id: "entity-title" }, entity.path),
    el("div", { id: "down" }),
    el("div", { class: "tabs", role: "tablist" }, tabs.map(([id, label]) => el("button", {
      type: "button", role: "tab", "aria-selected": String(state.tab === id), id: "tab-" + id,
      onclick: () => { state.tab = id; renderDetail(); },
    }, label))),
    body);
  const views = { overview: overviewView, messages: messagesView, send: sendView,
                  rules: rulesView, sessions: sessionsView };
  body.replaceChildren(...views[state.tab](sel.ns, entity));
  refreshLive();
}

// Parts of the page that follow the live events: counts, chart, settings, fault lists.
function refreshLive() {
  const sel = state.selected;
  if (!sel || !state.snapshot) return;
  if (!sel.path) { const list = $("fault-list"); if (list) fillFaults(list, sel.ns); return; }
  const entity = findEntity(sel.ns, sel.path);
  if (!entity) return;
  const down = $("down");
  const ns = findNamespace(sel.ns);
  if (down && ns.faults) {
    const faults = ns.faults.filter((f) => !f.entity || sel.path.toLowerCase() === f.entity ||
      sel.path.toLowerCase().startsWith(f.entity + "/"));
    const key = JSON.stringify(faults);
    if (down.dataset.shown !== key) {  // rebuilt only when they change: a click lands
      down.dataset.shown = key;
      down.replaceChildren(...faults.map((f) => el("div", { class: "down-banner row", dataset: { fault: f.id } },
        el("span", {}, `Fault ${f.id} on ${f.entity || "the namespace"}: ${f.kind} for ${f.operations.join(", ")}` +
          (f.fragment !== null ? ` (fragment ${f.fragment})` : "")),
        can("Manage") ? el("button", { type: "button", class: "plain", onclick: () =>
          api("DELETE", "faults", { ns: sel.ns, id: f.id }).catch((e) => { down.append(el("p", { class: "error" }, e.message)); }),
        }, "Heal") : "")));
    }
  }
  const counts = $("counts");
  if (counts) {
    const c = entity.counts;
    counts.replaceChildren(...[
      ["active", "Active", c.active], ["scheduled", "Scheduled", c.scheduled],
      ["deferred", "Deferred", c.deferred], ["dead_letter", "Dead-lettered", c.dead_letter],
      ["transfer", "Transfer", c.transfer],
      ["transfer_dead_letter", "Transfer dead-lettered", c.transfer_dead_letter],
      ["size", "Size", bytes(entity.size)],
    ].map(([id, label, n]) => el("div", { class: "count", dataset: { count: id } },
      el("div", { class: "n" }, n), el("div", { class: "l" }, label))));
  }
  const chart = $("chart");
  if (chart) drawChart(chart, state.history[`${sel.ns}/${sel.path}`] || [], entity.rate);
  const settings = $("settings");
  if (settings && entity.settings) {
    settings.replaceChildren(...Object.entries(entity.settings).map(([k, v]) =>
      el("tr", {}, el("th", {}, k.replaceAll("_", " ")), el("td", { class: "mono" }, v === null ? "—" : String(v)))));
  }
  const subs = $("sub-counts");
  if (subs) {
    for (const button of subs.querySelectorAll("button")) {
      const n = { active: entity.counts.active, scheduled: entity.counts.scheduled,
        deferred: entity.counts.deferred, deadletter: entity.counts.dead_letter }[button.dataset.sub];
      button.querySelector(".badge").textContent = n;
    }
  }
}

function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function overviewView(ns, entity) {
  const parts = [
    el("div", { class: "card" }, el("div", { id: "counts", class: "counts" })),
    el("div", { class: "card" },
      el("div", { class: "legend" }, el("span", { class: "in" }, "— in / s"),
        el("span", { class: "out" }, "— out / s"), el("span", { id: "rate-now" })),
      el("canvas", { id: "chart", class: "chart", width: 600, height: 140,
        "aria-label": "messages in and out per second, the last minute" })),
  ];
  if (can("Manage")) {
    const note = el("p", { class: "note" });
    const error = el("p", { class: "error" });
    parts.push(el("div", { class: "card row" },
      el("button", { type: "button", class: "danger", id: "outage", onclick: async () => {
        try {
          const made = await api("POST", "faults", { ns, entity: entity.path, kind: "unavailable" });
          note.textContent = `Fault ${made.id} injected: ${entity.path} is unavailable.`;
        } catch (e) { error.textContent = e.message; }
      } }, "Inject an outage"),
      el("button", { type: "button", class: "plain", id: "heal-entity", onclick: () => select({ ns }) },
        "Faults of the namespace…"), note, error));
  }
  if (entity.settings) {  // sent to Manage keys only, as REST gives descriptions
    parts.push(el("div", { class: "card" }, el("h3", {}, "Settings"),
      el("table", {}, el("tbody", { id: "settings" }))));
  } else {
    parts.push(el("p", { class: "hint", id: "manage-only" }, `The key ${state.me.key_name} has no Manage right: `
      + "its settings, rules and faults are not shown."));
  }
  return parts;
}

function drawChart(canvas, points, rate) {
  const width = canvas.clientWidth || 600;
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio;
  canvas.height = 140 * ratio;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.clearRect(0, 0, width, 140);
  const top = Math.max(1, ...points.map((p) => Math.max(p[1], p[2])));
  const x = (i) => 36 + (width - 44) * (i / (HISTORY - 1));
  const y = (v) => 128 - 116 * (v / top);
  g.strokeStyle = "#d9dee5"; g.fillStyle = "#5d6875"; g.font = "11px system-ui";
  g.beginPath(); g.moveTo(36, y(0)); g.lineTo(width - 8, y(0)); g.moveTo(36, y(top)); g.lineTo(width - 8, y(top)); g.stroke();
  g.fillText(top.toFixed(top < 10 ? 1 : 0), 2, y(top) + 4);
  g.fillText("0", 2, y(0) + 4);
  const start = HISTORY - points.length;
  for (const [index, color] of [[1, "#0b5cad"], [2, "#d9730d"]]) {
    g.strokeStyle = color; g.lineWidth = 2; g.beginPath();
    points.forEach((p, i) => (i ? g.lineTo : g.moveTo).call(g, x(start + i), y(p[index])));
    g.stroke();
  }
  const now = $("rate-now");
  if (now) now.textContent = rate ? `now: in ${rate[0].toFixed(1)}/s, out ${rate[1].toFixed(1)}/s` : "";
}

// -- messages: peek page by page, a message's detail, resubmit, purge ----------------------

function messagesView(ns, entity) {
  const p = state.peek;
  const subs = [["active", "Active"], ["scheduled", "Scheduled"], ["deferred", "Deferred"], ["deadletter", "Dead-letter"]];
  const error = el("p", { class: "error", id: "messages-error" });
  const note = el("p", { class: "note", id: "messages-note" });
  const list = el("tbody", { id: "message-rows" });
  const shown = el("div", { id: "message" });
  const counts = { active: entity.counts.active, scheduled: entity.counts.scheduled,
    deferred: entity.counts.deferred, deadletter: entity.counts.dead_letter };
  const load = async (from) => {
    error.textContent = "";
    try {
      const page = await api("GET", "peek", { ns, path: entity.path, sub: p.sub, from, count: 20 });
      p.from = from; p.next = page.next; p.rows = page.messages; p.chosen = null; p.cut = page.cut;
      fill();
    } catch (e) { error.textContent = e.message; }
  };
  const fill = () => {
    list.replaceChildren(...p.rows.map((m, i) => el("tr", {
      class: p.chosen === i ? "selected" : "", dataset: { seq: m.system.sequence_number },
      onclick: () => { p.chosen = i; fill(); },
    }, el("td", { class: "num" }, m.system.sequence_number),
    el("td", { class: "hide-narrow" }, m.system.message_id || ""),
    el("td", { class: "hide-narrow" }, (m.system.enqueued_time || "").replace("T", " ").slice(0, 19)),
    el("td", {}, m.system.subject || ""),
    el("td", { class: "mono" }, m.body.kind === "binary" ? `${m.body.size} bytes` : m.body.text.slice(0, 60)))));
    if (!p.rows.length) list.append(el("tr", {}, el("td", { colspan: 5, class: "hint" }, "No messages here.")));
    if (p.cut) list.append(el("tr", { id: "page-cut" }, el("td", { colspan: 5, class: "hint" },
      `These ${p.rows.length} messages are as much as one page holds (4 MiB): Next shows more.`)));
    $("prev").disabled = !p.back.length;
    $("next").disabled = p.next === null || p.rows.length === 0;
    shown.replaceChildren(...(p.chosen === null ? [] : messageDetail(ns, entity, p.rows[p.chosen], load)));
  };
  const actions = [];
  if (p.sub === "deadletter" && can("Listen") && can("Send")) {
    actions.push(el("button", { type: "button", id: "resubmit-all", onclick: () => ask(
      `Resubmit every dead-lettered message of ${entity.path}?`, async () => {
        try {
          const done = await api("POST", "resubmit", { ns, path: entity.path, sequence_numbers: null });
          note.textContent = `${done.resubmitted} resubmitted to ${done.to}.`;
          load(0);
        } catch (e) { error.textContent = e.message; }
      }) }, "Resubmit all"));
  }
  if (can("Manage")) {
    actions.push(el("button", { type: "button", class: "danger", id: "purge", onclick: () => ask(
      `Delete every ${p.sub} message of ${entity.path}? This cannot be undone.`, async () => {
        try {
          const done = await api("POST", "purge", { ns, path: entity.path, sub: p.sub });
          note.textContent = `${done.purged} purged.`;
          load(0);
        } catch (e) { error.textContent = e.message; }
      }) }, "Purge…"));
  }
  const view = [
    el("div", { class: "tabs", id: "sub-counts" }, subs.map(([id, label]) => el("button", {
      type: "button", "aria-selected": String(p.sub === id), dataset: { sub: id }, id: "sub-" + id,
      onclick: () => { state.peek = { sub: id, from: 0, back: [], next: null, rows: [], chosen: null }; renderDetail(); },
    }, label + " ", el("span", { class: "badge" }, counts[id])))),
    el("div", { class: "row" },
      el("button", { type: "button", class: "plain", id: "refresh", onclick: () => load(p.from) }, "Refresh"),
      el("button", { type: "button", class: "plain", id: "prev", onclick: () => load(p.back.pop() || 0) }, "◀ Previous"),
      el("button", { type: "button", class: "plain", id: "next", onclick: () => { p.back.push(p.from); load(p.next); } }, "Next ▶"),
      ...actions),
    note, error,
    el("div", { class: "card" }, el("table", { class: "messages" },
      el("thead", {}, el("tr", {}, el("th", { class: "num" }, "#"), el("th", { class: "hide-narrow" }, "Message id"),
        el("th", { class: "hide-narrow" }, "Enqueued (UTC)"), el("th", {}, "Subject"), el("th", {}, "Body"))),
      list)),
    shown,
  ];
  if (!can("Listen")) {
    return [el("p", { class: "error" }, `The key ${state.me.key_name} has no Listen right: it cannot peek.`)];
  }
  setTimeout(() => load(p.from), 0);
  return view;
}

function table(rows) {
  return el("table", {}, el("tbody", {}, rows.map(([k, v]) =>
    el("tr", {}, el("th", {}, k), el("td", { class: "mono" }, v)))));
}

function messageDetail(ns, entity, m, reload) {
  const body = m.body;
  const size = body.cut ? `${body.size} bytes, cut: the first ${body.kind === "binary" ? "4 KiB" : "64 Ki characters"} shown` : `${body.size} bytes`;
  const parts = [
    el("div", { class: "card", id: "message-detail" },
      el("h3", {}, `Message ${m.system.sequence_number}`),
      el("h4", {}, "System properties"),
      table(Object.entries(m.system).map(([k, v]) => [k.replaceAll("_", " "), String(v)])),
      el("h4", {}, "Application properties"),
      m.properties.length ? table(m.properties.map(([k, t, v]) => [k, `${String(v)}  (${t})`]))
        : el("p", { class: "hint" }, "none"),
      el("h4", {}, `Body (${body.kind}, ${size})`),
      el("pre", { class: "body", id: "message-body" }, body.text)),
  ];
  if (state.peek.sub === "deadletter" && can("Listen") && can("Send")) {
    const error = el("p", { class: "error" });
    parts[0].append(el("div", { class: "row" }, el("button", { type: "button", id: "resubmit-one", onclick: () => ask(
      `Resubmit message ${m.system.sequence_number} to its entity?`, async () => {
        try {
          const done = await api("POST", "resubmit", { ns, path: entity.path, sequence_numbers: [m.system.sequence_number] });
          $("messages-note").textContent = `${done.resubmitted} resubmitted to ${done.to}.`;
          reload(0);
        } catch (e) { error.textContent = e.message; }
      }) }, "Resubmit"), error));
  }
  return parts;
}

// A confirmation in the page (a <dialog>), then the action.
function ask(text, action) {
  const dialog = $("confirm");
  $("confirm-text").textContent = text;
  dialog.onclose = () => { if (dialog.returnValue === "ok") action(); };
  dialog.returnValue = "";
  dialog.showModal();
}

// -- sending ------------------------------------------------------------------------------

function field(label, input) { return el("label", {}, label, input); }

function sendView(ns, entity) {
  if (!can("Send")) return [el("p", { class: "error" }, `The key ${state.me.key_name} has no Send right.`)];
  const input = (id, attrs) => el("input", { id, ...attrs });
  const error = el("p", { class: "error", id: "send-error" });
  const note = el("p", { class: "note", id: "send-note" });
  const form = el("form", { class: "card", id: "send-form" },
    field("Body", el("textarea", { id: "send-body", rows: 6, placeholder: '{"hello": "world"}' })),
    el("div", { class: "grid2" },
      field("Content type", input("send-content-type", { list: "content-types", placeholder: "application/json" })),
      field("Message id", input("send-message-id", {})),
      field("Subject", input("send-subject", {})),
      field("Correlation id", input("send-correlation-id", {})),
      field(entity.sessions ? "Session id (required)" : "Session id", input("send-session-id", { required: entity.sessions })),
      field("Partition key", input("send-partition-key", {})),
      field("Time to live (seconds)", input("send-ttl", { type: "number", min: 1 })),
      field("Scheduled enqueue time (local)", input("send-scheduled", { type: "datetime-local", step: 1 }))),
    field("Application properties (a JSON object)", el("textarea", { id: "send-properties", rows: 3, placeholder: '{"color": "red", "qty": 3}' })),
    el("datalist", { id: "content-types" }, ["application/json", "text/plain", "application/octet-stream"].map((t) => el("option", { value: t }))),
    el("div", { class: "row" }, el("button", { type: "submit", id: "send-submit" }, "Send")), note, error);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = ""; note.textContent = "";
    const value = (id) => $(id).value.trim();
    let properties = {};
    try { properties = value("send-properties") ? JSON.parse(value("send-properties")) : {}; }
    catch (e) { error.textContent = `The application properties are not JSON: ${e.message}`; return; }
    const when = value("send-scheduled");
    const args = {
      ns, path: entity.path, body: $("send-body").value, content_type: value("send-content-type"),
      message_id: value("send-message-id"), subject: value("send-subject"),
      correlation_id: value("send-correlation-id"), session_id: value("send-session-id"),
      partition_key: value("send-partition-key"), properties,
      time_to_live: value("send-ttl") ? Number(value("send-ttl")) : null,
      scheduled_enqueue_time: when ? new Date(when).toISOString() : null,
    };
    try {
      const done = await api("POST", "send", args);
      note.textContent = done.scheduled ? `Scheduled as message ${done.scheduled[0]}.` : "Sent.";
    } catch (e) { error.textContent = e.message; }
  });
  return [form];
}

// -- rules and sessions -------------------------------------------------------------------

function rulesView(ns, entity) {
  const rows = el("tbody", { id: "rule-rows" });
  const error = el("p", { class: "error", id: "rule-error", role: "alert" });
  const note = el("p", { class: "note", id: "rule-note" });
  const load = async () => {
    try {
      const got = await api("GET", "rules", { ns, path: entity.path });
      rows.replaceChildren(...got.rules.map((r) => el("tr", { dataset: { rule: r.name } },
        el("td", {}, r.name), el("td", { class: "mono" }, r.filter),
        el("td", { class: "mono" }, r.action || "—"),
        el("td", {}, can("Manage") ? el("button", { type: "button", class: "plain", onclick: () => ask(
          `Delete rule ${r.name} of ${entity.path}?`, async () => {
            try { await api("DELETE", "rules", { ns, path: entity.path, name: r.name }); note.textContent = `Rule ${r.name} deleted.`; load(); }
            catch (e) { error.textContent = e.message; }
          }) }, "Delete") : ""))));
    } catch (e) { error.textContent = e.message; }
  };
  const parts = [el("div", { class: "card" }, el("table", {},
    el("thead", {}, el("tr", {}, el("th", {}, "Rule"), el("th", {}, "Filter"), el("th", {}, "Action"), el("th", {}))), rows))];
  if (can("Manage")) {
    const form = el("form", { class: "card", id: "rule-form" },
      el("h3", {}, "Add a rule"),
      el("div", { class: "grid2" }, field("Name", el("input", { id: "rule-name", required: true }))),
      field("SQL filter", el("textarea", { id: "rule-filter", rows: 2, required: true, placeholder: "color = 'red' AND qty > 2" })),
      field("SQL action (optional)", el("textarea", { id: "rule-action", rows: 2, placeholder: "SET priority = 'high'" })),
      el("div", { class: "row" }, el("button", { type: "submit", id: "rule-submit" }, "Add rule")));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      error.textContent = ""; note.textContent = "";
      try {
        const made = await api("POST", "rules", { ns, path: entity.path, name: $("rule-name").value.trim(),
          filter: $("rule-filter").value, action: $("rule-action").value.trim() || null });
        note.textContent = `Rule ${made.name} added.`;
        load();
      } catch (e) { error.textContent = e.message; }
    });
    form.append(note, error);
    parts.push(form);
  } else {
    parts.push(note, error);
  }
  load();
  return parts;
}

function sessionsView(ns, entity) {
  if (!can("Listen")) return [el("p", { class: "error" }, `The key ${state.me.key_name} has no Listen right.`)];
  const rows = el("tbody", { id: "session-rows" });
  const error = el("p", { class: "error" });
  const load = async () => {
    try {
      const got = await api("GET", "sessions", { ns, path: entity.path });
      rows.replaceChildren(...got.sessions.map((s) => el("tr", {},
        el("td", { class: "mono" }, s.session_id), el("td", { class: "num" }, s.messages),
        el("td", {}, s.locked ? "locked by a receiver" : "free"),
        el("td", {}, s.state ? el("pre", { class: "body" }, s.state.text) : "—"))));
      if (!got.sessions.length) rows.append(el("tr", {}, el("td", { colspan: 4, class: "hint" }, "No sessions.")));
    } catch (e) { error.textContent = e.message; }
  };
  load();
  return [el("div", { class: "row" }, el("button", { type: "button", class: "plain", onclick: load }, "Refresh")), error,
    el("div", { class: "card" }, el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "Session"),
      el("th", { class: "num" }, "Messages"), el("th", {}, "Lock"), el("th", {}, "State"))), rows))];
}

// -- faults -------------------------------------------------------------------------------

function namespaceView(name) {
  const ns = findNamespace(name);
  if (!ns) return [el("p", { class: "hint" }, "This namespace is gone.")];
  const total = ns.entities.reduce((n, e) => n + e.counts.total, 0);
  const parts = [
    el("div", { class: "kind" }, `namespace, ${ns.tier} tier`), el("h2", {}, name),
    el("p", { class: "hint" }, `${ns.entities.length} entities, ${total} messages.`),
  ];
  if (ns.faults) parts.push(el("div", { class: "card" }, el("h3", {}, "Active faults"), el("div", { id: "fault-list" })));
  else parts.push(el("p", { class: "hint", id: "manage-only" }, `The key ${state.me.key_name} has no Manage right: `
    + "entities' settings, rules and faults are not shown."));
  if (can("Manage")) {
    const error = el("p", { class: "error", id: "fault-error" });
    const kind = el("select", { id: "fault-kind" }, ["unavailable", "timeout", "transient", "delay"].map((k) => el("option", { value: k }, k)));
    const ops = ["send", "receive", "manage"].map((op) => el("label", { class: "row" },
      el("input", { type: "checkbox", checked: true, value: op, id: "fault-op-" + op }), op));
    const form = el("form", { class: "card", id: "fault-form" }, el("h3", {}, "Inject a fault"),
      el("div", { class: "grid2" },
        field("Entity", el("select", { id: "fault-entity" }, el("option", { value: "" }, "(the whole namespace)"),
          ns.entities.filter((e) => e.kind !== "subscription").map((e) => el("option", { value: e.path }, e.path)))),
        field("Kind", kind),
        field("Seconds (a delay)", el("input", { id: "fault-seconds", type: "number", min: 0, step: "any" })),
        field("Fragment (partitioned only)", el("input", { id: "fault-fragment", type: "number", min: 0 }))),
      el("div", { class: "row" }, ...ops),
      el("div", { class: "row" }, el("button", { type: "submit", class: "danger", id: "fault-submit" }, "Inject")), error);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      error.textContent = "";
      const fragment = $("fault-fragment").value;
      try {
        await api("POST", "faults", { ns: name, entity: $("fault-entity").value || null, kind: kind.value,
          operations: ops.map((l) => l.querySelector("input")).filter((i) => i.checked).map((i) => i.value),
          seconds: $("fault-seconds").value ? Number($("fault-seconds").value) : null,
          fragment: fragment === "" ? null : Number(fragment) });
      } catch (e) { error.textContent = e.message; }
    });
    parts.push(form);
  }
  setTimeout(() => { const list = $("fault-list"); if (list) fillFaults(list, name); }, 0);
  return parts;
}

function fillFaults(list, name) {
  const ns = findNamespace(name);
  if (!ns || !ns.faults) return;
  const heal = (id) => api("DELETE", "faults", { ns: name, id: id || "" }).catch((e) => { list.append(el("p", { class: "error" }, e.message)); });
  const key = JSON.stringify(ns.faults);
  if (list.dataset.shown === key) return;  // unchanged: keep the buttons under the pointer
  list.dataset.shown = key;
  if (!ns.faults.length) { list.replaceChildren(el("p", { class: "hint" }, "None: every entity is up.")); return; }
  list.replaceChildren(el("table", {}, el("tbody", {}, ns.faults.map((f) => el("tr", { dataset: { fault: f.id } },
    el("td", {}, `#${f.id}`), el("td", {}, f.entity || "(namespace)"), el("td", {}, f.kind + (f.kind === "delay" ? ` ${f.seconds} s` : "")),
    el("td", {}, f.operations.join(", ") + (f.fragment !== null ? `, fragment ${f.fragment}` : "")),
    el("td", {}, can("Manage") ? el("button", { type: "button", class: "plain", onclick: () => heal(f.id) }, "Heal") : ""))))),
  can("Manage") ? el("div", { class: "row" }, el("button", { type: "button", id: "heal-all", onclick: () => heal(null) }, "Heal all")) : "");
}

document.addEventListener("DOMContentLoaded", start);
