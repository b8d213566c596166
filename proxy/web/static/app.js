"use strict";
// recap-proxy's dashboard: a thin page over /recap/api, the routes the CLI uses too. It
// changes nothing any other way. Hand-written, no build step, nothing fetched from outside.

const KEY = "recap-proxy-key";
const BLOCK = 40; // messages rendered together once their block scrolls into view
// `nav` counts the page's navigations: a view whose requests come back after the person
// went elsewhere (a slow answer, a busy machine) draws nothing over the view now shown.
const state = { view: null, chat: null, events: 0, backfill: null, filter: "", nav: 0 };

// -- little helpers ----------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c != null && c !== false) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

const main = () => document.getElementById("main");
const chatPath = (id) => `/recap/api/chats/${encodeURIComponent(id)}`;
const when = (seconds) => (seconds ? new Date(seconds * 1000).toLocaleString() : "—");
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

function toast(text, bad) {
  const el = h("div", { class: "toast" + (bad ? " error" : ""), role: "status" }, text);
  document.body.append(el);
  setTimeout(() => el.remove(), bad ? 6000 : 2500);
}

function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

// -- the API, with the access key asked once per browser session -------------------------

// One question at a time: the page's first requests (the list, the live stream) all come
// back 401 together, and each waits for the same answer rather than asking again.
let asking = null;

function askKey() {
  if (asking) return asking;
  const dialog = document.getElementById("key-dialog");
  asking = new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      sessionStorage.setItem(KEY, document.getElementById("key-input").value.trim());
      asking = null;
      resolve();
    }, { once: true });
    dialog.showModal();
  });
  return asking;
}

// After a 401: ask for the key, unless one was given since the request went (its answer
// came back after the question was answered): then the request is only sent again.
async function keyAfter401(sent) {
  if ((sessionStorage.getItem(KEY) || "") === (sent || "")) await askKey();
}

function keyHeaders() {
  const key = sessionStorage.getItem(KEY);
  return key ? { "X-Recap-Key": key } : {};
}

async function api(method, path, body) {
  for (let attempt = 0; ; attempt++) {
    const headers = keyHeaders();
    const sent = headers["X-Recap-Key"];
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401 && attempt < 3) {
      await keyAfter401(sent);
      continue;
    }
    const json = (response.headers.get("Content-Type") || "").includes("json");
    const data = json ? await response.json() : await response.text();
    if (!response.ok) throw new Error((data && data.error && data.error.message) || response.statusText);
    return data;
  }
}

async function act(method, path, body, done) {
  try {
    const answer = await api(method, path, body === undefined ? {} : body);
    if (done) toast(done);
    return answer;
  } catch (error) {
    toast(error.message, true);
    return null;
  }
}

function editText(title, text) {
  const dialog = document.getElementById("edit-dialog");
  document.getElementById("edit-title").textContent = title;
  const area = document.getElementById("edit-text");
  area.value = text || "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok" ? area.value : null),
      { once: true });
    dialog.showModal();
  });
}

// -- live: the proxy's event stream, read with fetch so the access key can go along -------

async function listen() {
  const live = document.getElementById("live");
  let last = null;
  for (;;) {
    try {
      const headers = keyHeaders();
      const sent = headers["X-Recap-Key"];
      if (last != null) headers["Last-Event-ID"] = String(last);
      const response = await fetch("/recap/api/events", { headers });
      if (response.status === 401) {
        await keyAfter401(sent);
        continue;
      }
      if (!response.ok || !response.body) throw new Error(String(response.status));
      live.textContent = "live";
      live.className = "live on";
      checkHealth(); // (re)connected: the proxy may have restarted, mended or not
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const fields = {};
          for (const line of block.split("\n")) {
            if (!line || line.startsWith(":")) continue;
            const at = line.indexOf(":");
            fields[line.slice(0, at)] = line.slice(at + 1).replace(/^ /, "");
          }
          if (fields.id) last = Number(fields.id);
          if (fields.data) onEvent(JSON.parse(fields.data));
        }
      }
    } catch (error) {
      // reconnect below
    }
    live.textContent = "reconnecting…";
    live.className = "live off";
    await new Promise((r) => setTimeout(r, 2000));
  }
}

const refreshChats = debounce(() => state.view === "chats" && renderChats(), 400);
const refreshQueue = debounce(() => state.view === "queue" && renderQueue(), 300);
const refreshChat = debounce((what) => state.view === "chat" && updateChat(what), 250);

function onEvent(event) {
  state.events++;
  document.body.dataset.events = String(state.events);
  if (event.kind === "reset") {
    route();
    return;
  }
  if (event.kind === "health") {
    checkHealth();
    return;
  }
  refreshChats();
  refreshQueue();
  if (state.view === "chat" && event.chat === state.chat) {
    refreshChat(event.kind === "chat" ? "messages" : "memory");
  }
  if (state.backfill && event.kind === "job" && event.chat === state.backfill.chat) {
    trackBackfill();
  }
}

// -- the chats --------------------------------------------------------------------------

async function renderChats() {
  const nav = state.nav;
  const root = main();
  const chats = await api("GET", "/recap/api/chats");
  // Which ST data folder these are from (fixed for the server's life: asked once).
  if (state.stData === undefined) state.stData = (await api("GET", "/")).st_data || null;
  if (nav !== state.nav) return;
  // The filter as it is now, once the list is in: what was typed while it loaded stays,
  // and so does the one left for a chat's page.
  const old = document.getElementById("filter");
  const filter = old ? old.value : state.filter;
  const typing = old !== null && document.activeElement === old;
  chats.sort((a, b) => (b.updated || 0) - (a.updated || 0));
  const rows = chats.map((c) => {
    const memory = c.memory || {};
    const queue = memory.queue || {};
    const toggle = h("select", {
      "aria-label": "memory for " + c.name,
      onchange: async (e) => {
        const value = { on: true, off: false, default: null }[e.target.value];
        await act("PUT", chatPath(c.id) + "/memory", { enabled: value }, "memory " + e.target.value);
      },
    }, ["default", "on", "off"].map((v) => h("option", { value: v },
      // What the default comes to for this chat, where the proxy has memory at all.
      v === "default" && c.on != null ? `default (${c.on ? "on" : "off"})` : v)));
    toggle.value = c.enabled === true ? "on" : c.enabled === false ? "off" : "default";
    const title = c.file.split("/").pop().replace(/\.jsonl$/, "");
    return h("tr", { "data-chat": c.id, "data-name": [title, c.name, c.owner, c.user].join(" ").toLowerCase() },
      h("td", {}, h("a", { href: "#/chat/" + encodeURIComponent(c.id) }, title)),
      h("td", {}, c.name), h("td", {}, c.user), h("td", {}, c.kind === "group" ? "group" : "solo"),
      h("td", { class: "num" }, c.messages), h("td", {}, when(c.updated)), h("td", {}, toggle),
      h("td", { class: "num" }, memory.scenes || 0),
      h("td", { class: "num" }, memory.running_version != null ? "v" + memory.running_version : "—"),
      h("td", { class: "queue-cell" }, `${queue.queued || 0} / ${queue.running || 0}`,
        queue.failed ? h("span", { class: "badge bad" }, queue.failed + " failed") : ""));
  });
  const input = h("input", { id: "filter", type: "search", placeholder: "filter by name", value: filter,
    oninput: (e) => applyFilter(e.target.value) });
  root.replaceChildren(
    h("h2", {}, "Chats"), h("div", { class: "bar-row" }, input, h("span", { class: "muted", id: "chat-count" },
      plural(chats.length, "chat") + (state.stData ? ` in ${state.stData}` : ""))),
    h("table", { id: "chats" }, h("thead", {}, h("tr", {}, ["Chat", "Character or group", "User", "Kind", "Messages",
      "Last save", "Memory", "Scenes", "Running", "Queue (queued / running)"].map((t) => h("th", {}, t)))),
    h("tbody", {}, rows)));
  applyFilter(filter);
  if (typing) {
    input.focus();
    input.setSelectionRange(filter.length, filter.length);
  }
}

function applyFilter(text) {
  state.filter = text;
  const needle = text.trim().toLowerCase();
  for (const row of document.querySelectorAll("#chats tbody tr")) {
    row.hidden = needle !== "" && !row.dataset.name.includes(needle);
  }
}

// -- the queue ---------------------------------------------------------------------------

const SHOWN_DONE = 50; // done jobs the queue page lists

async function renderQueue() {
  const nav = state.nav;
  const [queue, chats] = await Promise.all([api("GET", `/recap/api/queue?done=${SHOWN_DONE}`), api("GET", "/recap/api/chats")]);
  if (nav !== state.nav) return;
  const usage = chats.filter((c) => c.usage && c.usage.total);
  // Prompt and answer apart: APIs bill the two at different prices.
  const count = (n) => n.toLocaleString("en-US");
  const tokens = (u) => (u && u.calls ? `${plural(u.calls, "call")}: ${count(u.prompt_tokens)} tokens in, ${count(u.answer_tokens)} out` : "—");
  const sum = (key) => ["calls", "prompt_tokens", "answer_tokens"].reduce((all, k) => ({ ...all, [k]: usage.reduce((n, c) => n + ((c.usage[key] || {})[k] || 0), 0) }), {});
  const chatLink = (id, text) => h("a", { href: "#/chat/" + encodeURIComponent(id) }, text);
  const control = (action, label) => h("button", { id: "queue-" + action, onclick: async () => {
    await act("POST", `/recap/api/queue/${action}`, {}, label);
    renderQueue();
  } }, label);
  // The work not done, and the newest done jobs only: a backfilled story leaves hundreds.
  const jobs = queue.jobs.slice().sort((a, b) => b.id - a.id);
  const waiting = { model: "waiting for a model", retry: "retrying" };
  main().replaceChildren(
    h("h2", {}, "Queue"),
    h("div", { class: "bar-row" }, h("span", { id: "queue-state" }, queue.paused ? "paused" : "running"),
      queue.paused ? control("resume", "Resume") : control("pause", "Pause"), control("clear", "Clear"),
      queue.embeddings ? h("span", { id: "embeddings", class: queue.embeddings.state === "ok" ? "muted" : "badge bad" },
        `embeddings ${queue.embeddings.state}` + (queue.embeddings.waiting ? `, ${plural(queue.embeddings.waiting, "text")} waiting` : "")) : ""),
    h("table", { id: "jobs" }, h("thead", {}, h("tr", {}, ["Job", "Chat", "Operation", "State", "Attempts", "Error", "Updated", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, jobs.map((j) => h("tr", { "data-job": j.id },
        h("td", {}, j.id), h("td", {}, chatLink(j.chat, j.chat.split("/").pop())),
        h("td", {}, j.operation), h("td", { class: "state" }, j.waiting_for ? `${j.state} (${waiting[j.waiting_for]})` : j.state),
        h("td", { class: "num" }, j.attempts), h("td", { class: "error" }, j.error || ""),
        h("td", {}, when(j.updated)),
        h("td", {}, j.state === "failed" || j.state === "dropped" ? h("button", { onclick: () => act("POST", `/recap/api/queue/jobs/${j.id}/retry`, {}, "retrying") }, "Retry") : ""))))),
    queue.older_done ? h("p", { class: "muted", id: "older-jobs" }, `and ${queue.older_done} older done jobs (\`recap-proxy queue --all\` lists them)`) : "",
    h("h3", {}, "The proxy's own calls"),
    h("table", { id: "usage" }, h("thead", {}, h("tr", {}, ["Chat", "Today", "In all"].map((t) => h("th", {}, t)))),
      h("tbody", {}, usage.map((c) => h("tr", { "data-chat": c.id }, h("td", {}, chatLink(c.id, c.file.split("/").pop().replace(/\.jsonl$/, ""))),
        h("td", {}, tokens(c.usage.today)), h("td", {}, tokens(c.usage.total))))),
      usage.length > 1 ? h("tfoot", {}, h("tr", {}, h("th", {}, "All chats"), h("th", {}, tokens(sum("today"))), h("th", {}, tokens(sum("total"))))) : ""));
}

// -- the proxy's health: what makes it degraded, said above every view --------------------

const HEALTH_EVERY = 10000; // ms; /health is also what a service manager asks

async function checkHealth() {
  const banner = document.getElementById("health");
  try {
    const response = await fetch("/health", { headers: keyHeaders() });
    const problems = response.status === 401 ? [] : (await response.json()).problems || [];
    banner.replaceChildren(...problems.map((text) => h("div", {}, text)),
      h("div", { class: "muted" }, "recap-proxy doctor says what to do."));
    banner.hidden = problems.length === 0;
  } catch (error) {
    // the proxy itself is away: the live indicator says so
  }
}

// -- routing -------------------------------------------------------------------------------

async function route() {
  const nav = ++state.nav;
  const hash = location.hash.replace(/^#/, "") || "/";
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("here", hash.startsWith("/" + a.dataset.nav));
  try {
    if (hash.startsWith("/chat/")) {
      state.view = "chat";
      await renderChat(decodeURIComponent(hash.slice(6)));
    } else if (hash === "/queue") {
      state.view = "queue";
      await renderQueue();
    } else {
      state.view = "chats";
      await renderChats();
    }
  } catch (error) {
    if (nav === state.nav) main().replaceChildren(h("p", { class: "error" }, error.message));
  }
  document.body.dataset.ready = "1";
}

window.addEventListener("hashchange", () => { state.tab = null; route(); });
window.addEventListener("DOMContentLoaded", () => {
  route();
  listen();
  checkHealth();
  setInterval(checkHealth, HEALTH_EVERY);
});
