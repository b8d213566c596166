"use strict";
// The dashboard's chat view: scenes and messages, the running recap, what the model gets,
// and backfill. Loaded after app.js, whose helpers (h, api, act, state, ...) it uses.

// -- a chat ---------------------------------------------------------------------------

async function renderChat(id) {
  const nav = state.nav;
  state.chat = id;
  const root = main();
  root.replaceChildren(h("p", { class: "muted" }, "loading…"));
  // One round of requests: the story tab's scenes and recaps come along.
  const [overview, messages, scenes, recaps] = await Promise.all([
    api("GET", chatPath(id) + "/memory"), api("GET", chatPath(id) + "/messages"),
    api("GET", chatPath(id) + "/scenes"), api("GET", chatPath(id) + "/recaps"),
  ]);
  if (nav !== state.nav) return;
  state.messages = messages;
  const tab = state.tab || "story";
  const tabs = h("div", { class: "tabs", role: "tablist" },
    [["story", "Scenes & messages"], ["running", "Running recap"], ["entities", "Entities"], ["model", "What the model gets"]].map(([name, label]) =>
      h("button", { role: "tab", "data-tab": name, "aria-selected": String(name === tab), onclick: () => {
        state.tab = name;
        for (const b of tabs.children) b.setAttribute("aria-selected", String(b.dataset.tab === name));
        showTab();
      } }, label)));
  root.replaceChildren(
    h("h2", { id: "chat-title" }, chatTitle(id, overview)),
    h("div", { id: "overview" }),
    h("div", { class: "bar-row" },
      h("button", { id: "backfill", onclick: () => startBackfill(id) }, "Backfill"),
      h("div", { class: "progress", id: "backfill-progress", title: "backfill" }, h("div")),
      h("span", { id: "backfill-label", class: "muted" }),
      h("a", { href: chatPath(id) + "/export?format=markdown" }, "Export (Markdown)")),
    tabs, h("section", { id: "tab" }));
  renderOverview(overview);
  await showTab({ scenes, recaps });
}

// A chat's title: its file name, which names the character; a group chat's file is named
// by its date only, so the group's name goes first and the file under it.
function chatTitle(id, o) {
  const file = id.split("/").pop();
  if (o.kind !== "group" || !o.name) return file;
  return [o.name, h("div", { class: "muted", id: "chat-file" }, file)];
}

// When the open scene's next scene-break check comes ("" when none will come).
function checkHint(o) {
  if (o.scene_check_in === null || o.scene_check_in === undefined) return "";
  return o.scene_check_in === 0 ? "scene-break check due"
    : `next scene-break check in ${plural(o.scene_check_in, "message")}`;
}

// The chat's own on/off, and what it comes to when that differs (the default, or a
// global switch that overrules it).
function memoryState(o) {
  const own = o.enabled === null ? "default" : o.enabled ? "on" : "off";
  const effect = o.on ? "on" : "off";
  return own === effect ? own : `${own} (${effect})`;
}

function renderOverview(o) {
  state.overview = o;
  const queue = o.queue || {};
  const box = document.getElementById("overview");
  if (!box) return;
  box.replaceChildren(h("div", { class: "bar-row muted" },
    plural(o.messages, "message"), " · ", plural(o.scenes, "scene"), " · ",
    h("span", { id: "running-version" }, o.running_recap ? "running recap v" + o.running_recap.version : "no running recap yet"),
    " · ", `queue ${queue.queued || 0} queued, ${queue.running || 0} running`,
    queue.failed ? h("span", { class: "badge bad" }, queue.failed + " failed") : "",
    (o.waiting || []).length
      ? h("span", { class: "badge warn", id: "waiting", title: o.waiting[0].error }, heldReason(o.waiting[0], true))
      : "",
    " · memory ", memoryState(o)));
}

// `story`: the scenes and recaps when the caller has them already.
async function showTab(story) {
  const section = document.getElementById("tab");
  if (!section) return;
  const tab = state.tab || "story";
  if (tab === "story") await renderStory(section, story);
  else if (tab === "running") await renderRunning(section);
  else if (tab === "entities") await renderEntities(section);
  else await renderModel(section);
}

async function updateChat(what) {
  const nav = state.nav;
  const id = state.chat;
  const [messages, overview] = await Promise.all([
    what === "messages" ? api("GET", chatPath(id) + "/messages") : null,
    api("GET", chatPath(id) + "/memory"),
  ]);
  if (nav !== state.nav) return; // another page (or chat) is shown now
  if (messages) state.messages = messages;
  renderOverview(overview);
  await showTab();
}

// Scenes and their messages. Scenes are collapsible; a scene's messages are rendered in
// blocks, each only once it scrolls into view, so a chat of thousands opens at once.
async function renderStory(section, story) {
  const id = state.chat;
  const [scenes, recaps] = story ? [story.scenes, story.recaps]
    : await Promise.all([api("GET", chatPath(id) + "/scenes"), api("GET", chatPath(id) + "/recaps")]);
  state.recaps = new Map(recaps.map((r) => [r.index, r]));
  const open = new Set([...section.querySelectorAll("details.scene[open]")].map((d) => d.dataset.scene));
  const fresh = !section.querySelector("details.scene");
  const breaks = new Map(scenes.map((s) => [s.index, s]));
  const groups = [];
  let first = 0;
  for (const scene of scenes.filter((s) => s.visible)) {
    groups.push({ scene, first, last: scene.index });
    first = scene.index + 1;
  }
  const end = state.messages.length ? state.messages[state.messages.length - 1].index : -1;
  if (first <= end || groups.length === 0) groups.push({ scene: null, first, last: end });
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      if (entry.isIntersecting) {
        observer.unobserve(entry.target);
        fillBlock(entry.target, breaks);
      }
    }
  }, { rootMargin: "600px" });
  section.replaceChildren(...groups.map((g) => sceneElement(g, breaks, observer,
    fresh ? g.scene === null : open.has(String(g.scene ? g.scene.index : "open")))));
  if (fresh) {
    // Opened anew: show where the story is now, the end of the open scene, and stay there
    // while the blocks above fill in, until the person scrolls.
    state.pinned = true;
    requestAnimationFrame(pinEnd);
  }
}

function pinEnd() {
  const last = document.querySelector('details.scene[data-scene="open"] .block:last-child');
  if (state.pinned && last) last.scrollIntoView({ block: "end" });
}

for (const name of ["wheel", "touchstart", "keydown", "mousedown"]) {
  window.addEventListener(name, () => { state.pinned = false; }, { passive: true });
}

function sceneElement(group, breaks, observer, isOpen) {
  const { scene, first, last } = group;
  const key = scene ? String(scene.index) : "open";
  const title = scene ? (scene.name || "Scene") : "Open scene";
  const count = Math.max(0, last - first + 1);
  const summary = h("summary", {}, h("strong", { class: "scene-name" }, title),
    h("span", { class: "muted" }, ` messages ${first}–${last} (${count})`),
    scene && scene.versions ? h("span", { class: "badge" }, plural(scene.versions, "version")) : "",
    scene && !scene.recap ? h("span", { class: "badge warn" }, "no recap yet") : "",
    !scene && state.overview && checkHint(state.overview)
      ? h("span", { class: "muted check-hint" }, ` · ${checkHint(state.overview)}`) : "");
  const body = h("div", { class: "scene-body" });
  if (scene) {
    body.append(h("div", { class: "recap", "data-recap": key }, scene.recap || "(not recapped yet)"),
      h("div", { class: "bar-row" },
        h("button", { onclick: () => renameScene(scene) }, "Rename"),
        h("button", { onclick: () => editSceneRecap(scene) }, "Edit recap"),
        h("button", { onclick: () => act("POST", chatPath(state.chat) + `/scenes/${scene.index}/regenerate`, {}, "regenerating") }, "Regenerate"),
        h("button", { class: "versions", onclick: (e) => showVersions(scene, e.target.parentElement) }, "Versions")));
  } else {
    // The open scene: look for its end now rather than after more messages.
    body.append(h("div", { class: "bar-row" },
      h("button", { onclick: () => act("POST", chatPath(state.chat) + "/scene-check", {}, "checking") }, "Check for a scene end now")));
  }
  const messages = state.messages.filter((m) => m.index >= first && m.index <= last);
  for (let i = 0; i < messages.length; i += BLOCK) {
    const block = h("div", { class: "block", style: `min-height:${Math.min(BLOCK, messages.length - i) * 3}rem` });
    block.messages = messages.slice(i, i + BLOCK);
    body.append(block);
  }
  const details = h("details", { class: "scene" + (scene ? "" : " open-scene"), "data-scene": key }, summary, body);
  const watch = () => body.querySelectorAll(".block").forEach((b) => b.messages && observer.observe(b));
  details.addEventListener("toggle", () => details.open && watch());
  if (isOpen) {
    details.open = true;
    requestAnimationFrame(watch);
  }
  return details;
}

function fillBlock(block, breaks) {
  const items = [];
  for (const m of block.messages) {
    items.push(messageElement(m));
    const mark = breaks.get(m.index);
    if (mark) items.push(breakElement(mark));
  }
  block.messages = null;
  block.style.minHeight = "";
  block.replaceChildren(...items);
  if (state.pinned) pinEnd();
}

function messageElement(m) {
  const recap = state.recaps.get(m.index);
  const base = chatPath(state.chat) + `/messages/${m.index}`;
  const lore = h("div", { class: "lore" });
  const badges = [
    m.hidden ? h("span", { class: "badge" }, "hidden") : "",
    recap && recap.edited ? h("span", { class: "badge ok" }, "edited") : "",
    recap && recap.stale ? h("span", { class: "badge warn" }, "stale") : "",
    recap && recap.excluded ? h("span", { class: "badge" }, "excluded") : "",
  ];
  return h("div", { class: "msg" + (m.hidden ? " hidden-msg" : ""), "data-index": m.index },
    h("div", {}, h("span", { class: "muted" }, `#${m.index} `), h("span", { class: "who" }, m.name || m.role), badges,
      h("span", { class: "actions" },
        h("button", { onclick: () => act("PUT", base + "/scene_break", {}, "scene ends here") }, "End a scene here"),
        h("button", { onclick: async () => {
          const text = await editText(`Recap of message ${m.index}`, recap && recap.recap);
          if (text != null) act("PUT", base + "/recap", { recap: text }, "recap saved");
        } }, "Edit recap"),
        h("button", { onclick: () => act("PUT", base + "/excluded", { excluded: !(recap && recap.excluded) }, "saved") },
          recap && recap.excluded ? "Include" : "Exclude"),
        h("button", { onclick: () => act("POST", base + "/recap/regenerate", {}, "regenerating") }, "Regenerate recap"),
        recap && recap.recap ? h("button", { onclick: () => act("DELETE", base + "/recap", undefined, "recap cleared") }, "Clear recap") : "",
        m.role === "assistant" ? h("button", { onclick: () => showLore(m, lore) }, "Lore") : "")),
    h("div", { class: "text" }, m.text),
    recap && recap.recap ? h("div", { class: "mrecap" }, "↳ " + recap.recap) : "",
    recap && recap.reasoning ? reasoningElement(recap.reasoning) : "", lore);
}

// What the model thought before it answered, when its API said: folded, as ST shows it.
function reasoningElement(text) {
  return h("details", { class: "reasoning" }, h("summary", {}, "the model's reasoning"), h("div", { class: "muted" }, text));
}

function breakElement(mark) {
  const base = chatPath(state.chat) + `/messages/${mark.index}/scene_break`;
  return h("div", { class: "break", "data-break": mark.index },
    (mark.visible ? "scene break" : "hidden break") + (mark.source === "manual" ? " (yours)" : ""),
    h("button", { onclick: () => act("PUT", base, { visible: !mark.visible }, "saved") }, mark.visible ? "Hide" : "Show"),
    h("button", { onclick: () => act("DELETE", base, undefined, "break removed") }, "Remove"));
}

async function showLore(m, box) {
  try {
    const found = await api("GET", chatPath(state.chat) + `/messages/${m.index}/lore`);
    const list = (title, entries) => h("div", {}, h("strong", {}, title + ": "),
      entries.length ? entries.map((e) => h("span", { class: "badge" }, `${e.world}: ${e.comment || e.keys.join(", ") || e.uid}` + (e.strategy ? ` (${e.strategy})` : ""))) : "none");
    box.replaceChildren(list("active", found.active || []), list("inactive", found.inactive || []));
  } catch (error) {
    box.replaceChildren(h("span", { class: "muted" }, error.message));
  }
}

async function renameScene(scene) {
  const name = await editText("Scene name", scene.name || "");
  if (name != null) act("PATCH", chatPath(state.chat) + `/scenes/${scene.index}`, { name: name.trim() }, "renamed");
}

// Any version (the current one by default) edited into a new version.
async function editSceneRecap(scene, from) {
  const text = await editText(`Recap of the scene ending at message ${scene.index}`, from ?? scene.recap ?? "");
  if (text != null) act("POST", chatPath(state.chat) + `/scenes/${scene.index}/recaps`, { recap: text }, "new version saved").then(keptNote);
}

async function showVersions(scene, row) {
  const found = await api("GET", chatPath(state.chat) + `/scenes/${scene.index}`);
  const list = h("div", { class: "versions-list" }, found.versions.map((v) => h("div", { class: "bar-row" },
    h("strong", {}, "v" + v.version), h("span", { class: "badge" }, v.source), v.current ? h("span", { class: "badge ok" }, "current") : "",
    h("span", { class: "muted" }, when(v.created)),
    v.current ? "" : h("button", { onclick: () => act("PATCH", chatPath(state.chat) + `/scenes/${scene.index}`, { current_version: v.version }, "picked").then(keptNote) }, "Pick"),
    h("button", { onclick: () => editSceneRecap(scene, v.recap) }, "Edit into a new version"),
    h("div", { class: "recap" }, v.recap), v.reasoning ? reasoningElement(v.reasoning) : "")));
  const old = row.parentElement.querySelector(".versions-list");
  if (old) old.remove();
  row.after(list);
}

// The running recap: its versions, a diff between two, pick, edit, regenerate.
async function renderRunning(section) {
  const versions = await api("GET", chatPath(state.chat) + "/running");
  if (!versions.length) {
    section.replaceChildren(h("p", { class: "muted" }, "No running recap yet: it is written when a scene has its recap."));
    return;
  }
  const current = versions.find((v) => v.current) || versions[versions.length - 1];
  const picker = (id, chosen) => {
    const select = h("select", { id, "aria-label": id }, versions.map((v) => h("option", { value: v.version }, "v" + v.version)));
    select.value = String(chosen);
    select.addEventListener("change", drawDiff);
    return select;
  };
  const older = versions.length > 1 ? versions[versions.length - 2].version : current.version;
  const diffBox = h("div", { class: "diff", id: "running-diff" });
  function drawDiff() {
    const a = versions.find((v) => String(v.version) === document.getElementById("diff-a").value);
    const b = versions.find((v) => String(v.version) === document.getElementById("diff-b").value);
    diffBox.replaceChildren(...lineDiff(a.content, b.content));
  }
  section.replaceChildren(
    h("h3", {}, `Current: v${current.version}`), h("pre", { class: "text", id: "running-current" }, current.content),
    h("div", { class: "bar-row" },
      h("button", { onclick: async () => {
        const text = await editText("Running recap", current.content);
        if (text != null) act("POST", chatPath(state.chat) + "/running", { content: text }, "new version saved");
      } }, "Edit"),
      h("button", { onclick: () => act("POST", chatPath(state.chat) + "/running/regenerate", {}, "regenerating") }, "Regenerate")),
    h("table", { id: "running-versions" }, h("thead", {}, h("tr", {}, ["Version", "Written", "From scene", "Scenes", "Source", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, versions.slice().reverse().map((v) => h("tr", { "data-version": v.version },
        h("td", {}, "v" + v.version, v.current ? h("span", { class: "badge ok" }, "current") : ""),
        h("td", {}, when(v.created)), h("td", {}, v.new_scene_index != null ? "#" + v.new_scene_index : "—"),
        h("td", { class: "num" }, v.scene_count), h("td", {}, v.source),
        h("td", {}, v.current ? "" : h("button", { onclick: () => act("PUT", chatPath(state.chat) + "/running/current", { version: v.version }, `v${v.version} picked`) }, "Pick")))))),
    h("h3", {}, "Difference"), h("div", { class: "bar-row" }, picker("diff-a", older), "→", picker("diff-b", current.version)), diffBox);
  drawDiff();
}

// A line diff (longest common subsequence): recaps are a few dozen lines at most.
function lineDiff(before, after) {
  const a = before.split("\n"), b = after.split("\n");
  const table = Array.from({ length: a.length + 1 }, () => new Uint16Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      table[i][j] = a[i] === b[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
    }
  }
  const out = [];
  let i = 0, j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) { out.push(h("div", {}, "  " + a[i])); i++; j++; }
    else if (i < a.length && (j >= b.length || table[i + 1][j] >= table[i][j + 1])) { out.push(h("div", { class: "del" }, "- " + a[i])); i++; }
    else { out.push(h("div", { class: "add" }, "+ " + b[j])); j++; }
  }
  return out;
}

// What the next request of this chat would carry, and its token budget.
async function renderModel(section) {
  const preview = await api("GET", chatPath(state.chat) + "/preview");
  const budget = preview.budget || { memory: 0, sent: 0, left_out: 0 };
  const total = Math.max(1, budget.memory + budget.sent + budget.left_out);
  const part = (cls, n, label) => h("div", { class: cls, style: `width:${(100 * n) / total}%`, title: `${label}: ${n} tokens` });
  const parts = preview.parts || [];
  const where = (p) => `${p.placement.position}` + (p.placement.position === "in_chat" ? ` at depth ${p.placement.depth}` : "");
  const named = { stable: "stable part (the running recap)", changing: "changing part (recent events, older scenes)" };
  section.replaceChildren(
    h("p", {}, parts.length ? `The memory goes in as ${parts.length === 1 ? "one message" : "two messages"}: ` +
      parts.map((p) => `the ${named[p.part] || p.part}, a ${p.role} message ${where(p)}, ${p.tokens} tokens`).join("; ") + "."
      : "Nothing would be inserted now (no memory yet, or memory is off for this chat)."),
    h("div", { class: "budget", id: "budget" }, part("memory", budget.memory, "memory"), part("sent", budget.sent, "chat messages sent"),
      part("out", budget.left_out, "messages left out")),
    h("div", { class: "legend", id: "budget-legend" },
      h("span", {}, h("i", { style: "background:var(--memory)" }), `memory ${budget.memory}`),
      h("span", {}, h("i", { style: "background:var(--sent)" }), `chat messages sent ${budget.sent}`),
      h("span", {}, h("i", { style: "background:var(--out)" }), `left out ${budget.left_out}` +
        (preview.left_out.length ? ` (messages ${preview.left_out[0]}–${preview.left_out[preview.left_out.length - 1]})` : ""))),
    h("div", { id: "injected" }, ...parts.map((p) =>
      h("pre", { class: "text", id: `injected-${p.part}`, title: `${p.part} part, ${where(p)}` }, p.text))));
}

// After a scene's recap changed: the running recap is folded again from that scene,
// unless a version you wrote comes after it (it is never thrown away for the LLM's).
function keptNote(answer) {
  if (answer && answer.folded_in_again === false) {
    toast("the running recap keeps your edit: this change is not folded into it");
  }
}

// Backfill: queue the chat's whole memory, and follow it to the end. Planning follows
// each finished job, so the work is over only when two looks in a row, half a second
// apart, find nothing queued or running (as `recap-proxy backfill` does); until then the
// bar shows how far the running recap covers the chat.
async function startBackfill(id) {
  const queue = "/recap/api/queue?done=1&chat=" + encodeURIComponent(id);
  // The chat's newest job so far is among the work not done and the newest done job.
  const before = Math.max(0, ...(await api("GET", queue)).jobs.map((j) => j.id));
  const answer = await act("POST", chatPath(id) + "/backfill", {});
  if (!answer) return;
  if (answer.memory_on === false) {
    toast("memory is off for this chat: nothing to backfill", true);
    return;
  }
  toast("backfill started");
  state.backfill = { chat: id, before, quiet: 0, busy: false, again: false };
  if (answer.waiting_for_model) toast("waiting for a model: chat once through the proxy or set [memory.llm] model");
  await trackBackfill();
}

async function trackBackfill() {
  const run = state.backfill;
  if (!run) return;
  if (run.busy) {
    run.again = true; // one look at a time, in order
    return;
  }
  run.busy = true;
  try {
    do {
      run.again = false;
      await lookAtBackfill(run);
    } while (run.again && state.backfill === run);
  } finally {
    run.busy = false;
  }
}

// Why the work stands still ("" when nothing holds it): a queued job that already met an
// error waits for a model or for its retry (as `recap-proxy backfill` says it).
function heldBy(jobs) {
  const job = jobs.find((j) => j.waiting_for);
  return job ? heldReason(job) : "";
}

// `job`: a job, or an item of the overview's `waiting` (the server says what holds it,
// `held`); `brief`: without the advice (a badge, its title has the whole error).
function heldReason(job, brief = false) {
  const advice = job.waiting_for === "model" && !brief ? ": chat once through the proxy or set [memory.llm] model" : "";
  return job.held + advice;
}

async function lookAtBackfill(run) {
  const [found, overview] = await Promise.all([
    api("GET", `/recap/api/queue?after=${run.before}&chat=` + encodeURIComponent(run.chat)),
    api("GET", chatPath(run.chat) + "/memory"),
  ]);
  // The chat's work is over when none of its jobs is left, those queued before the
  // backfill too (a job retrying after an error, say); the counts are the backfill's own.
  const isLive = (j) => j.state === "queued" || j.state === "running";
  const live = found.jobs.filter(isLive);
  const ours = found.jobs.filter((j) => j.id > run.before);
  const finished = ours.filter((j) => !isLive(j)).length;
  const failed = ours.filter((j) => j.state === "failed").length;
  run.quiet = live.length ? 0 : run.quiet + 1;
  const done = run.quiet >= 2;
  const covered = (100 * (overview.covered_through + 1)) / Math.max(1, overview.messages);
  const share = done ? 100 : Math.min(99, Math.floor(covered));
  const bar = document.querySelector("#backfill-progress > div");
  const label = document.getElementById("backfill-label");
  if (bar && state.chat === run.chat) {
    bar.style.width = share + "%";
    const held = heldBy(live);
    label.textContent = `${share} %` +
      (done ? " done" : ` (${finished} jobs done, ${live.length} to go${held ? "; " + held : ""})`) +
      (failed ? `, ${failed} failed` : "");
  }
  if (done) state.backfill = null;
  else if (!live.length) setTimeout(trackBackfill, 500);
}

