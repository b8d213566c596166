"use strict";
// The dashboard's Entities tab: who and what a chat's memory keeps, with what is known of
// each; search, a type filter, edit, merge, delete and release. Loaded after chat.js,
// whose helpers it uses (h, api, act, state, chatPath, ...).

const ENTITY_TYPES = ["character", "place", "item", "group", "other"];

async function renderEntities(section) {
  const entities = await api("GET", chatPath(state.chat) + "/entities");
  state.entities = entities;
  if (!entities.length) {
    section.replaceChildren(h("p", { class: "muted", id: "no-entities" },
      "No entities yet: each scene recap lists the people, places, items and groups its scene names."));
    return;
  }
  // The search box and the filter stay as they are when the list reloads (an event came
  // while the person types): only the list is drawn again.
  let search = document.getElementById("entity-search");
  let type = document.getElementById("entity-type");
  if (!search || !type || !section.contains(search)) {
    search = h("input", { type: "search", id: "entity-search", placeholder: "search names and facts",
      "aria-label": "search entities" });
    type = h("select", { id: "entity-type", "aria-label": "type" },
      h("option", { value: "" }, "all types"), ENTITY_TYPES.map((t) => h("option", { value: t }, t)));
    search.addEventListener("input", drawEntities);
    type.addEventListener("change", drawEntities);
    section.replaceChildren(
      h("div", { class: "bar-row" }, search, type, h("span", { class: "muted", id: "entity-count" })),
      h("div", { id: "entities" }));
  }
  drawEntities();
}

function drawEntities() {
  const text = document.getElementById("entity-search").value.trim().toLowerCase();
  const type = document.getElementById("entity-type").value;
  const shown = (state.entities || []).filter((e) => (!type || e.type === type) && (!text ||
    [e.name, ...e.aliases, ...e.facts.map((f) => f.text)].some((s) => s.toLowerCase().includes(text))));
  document.getElementById("entity-count").textContent =
    shown.length < state.entities.length ? `${shown.length} of ${state.entities.length}`
      : shown.length === 1 ? "1 entity" : `${shown.length} entities`;
  document.getElementById("entities").replaceChildren(...shown.map(entityElement));
}

function entityElement(e) {
  const path = chatPath(state.chat) + "/entities/" + encodeURIComponent(e.name);
  const undo = e.edited || e.deleted;
  return h("div", { class: "entity" + (e.deleted ? " deleted" : ""), "data-entity": e.name },
    h("div", { class: "bar-row" },
      h("strong", {}, e.name), h("span", { class: "badge" }, e.type),
      e.aliases.length ? h("span", { class: "muted" }, "also " + e.aliases.join(", ")) : "",
      e.edited ? h("span", { class: "badge ok", title: "kept as you wrote it until released" }, "yours") : "",
      e.condensed != null ? h("span", { class: "badge", title: "its facts were condensed" }, "condensed") : "",
      e.deleted ? h("span", { class: "badge bad" }, "deleted") : "",
      h("span", { class: "actions" },
        h("button", { onclick: () => editEntity(e) }, "Edit"),
        h("button", { onclick: () => mergeEntity(e) }, "Merge into…"),
        e.deleted ? "" : h("button", { onclick: () => act("DELETE", path, {}, `${e.name} deleted`) }, "Delete"),
        undo ? h("button", { title: "what its scenes say again",
          onclick: () => act("POST", path + "/release", {}, `${e.name} released`) }, "Release") : "")),
    h("ul", { class: "facts" }, e.facts.map((f) => h("li", {}, f.text, " ", h("span", { class: "muted" }, factSource(f))))));
}

function factSource(f) {
  if (f.source === "edit") return "(yours)";
  if (f.source === "imported") return "(imported)";
  const scene = f.scene_name ? `${f.scene_name}, ` : "";
  return `(${f.source === "condensed" ? "condensed, up to " : ""}${scene}#${f.scene})`;
}

// The edit dialog: name, type, other names (comma-separated), facts one a line.
function editEntity(e) {
  const dialog = document.getElementById("entity-dialog");
  document.getElementById("entity-title").textContent = `Edit ${e.name}`;
  document.getElementById("entity-name").value = e.name;
  const type = document.getElementById("entity-kind");
  type.replaceChildren(...ENTITY_TYPES.map((t) => h("option", { value: t }, t)));
  type.value = e.type;
  document.getElementById("entity-aliases").value = e.aliases.join(", ");
  document.getElementById("entity-facts").value = e.facts.map((f) => f.text).join("\n");
  dialog.addEventListener("close", () => {
    if (dialog.returnValue !== "ok") return;
    const split = (text, by) => text.split(by).map((s) => s.trim()).filter(Boolean);
    act("PATCH", chatPath(state.chat) + "/entities/" + encodeURIComponent(e.name), {
      name: document.getElementById("entity-name").value.trim(),
      type: type.value,
      aliases: split(document.getElementById("entity-aliases").value, ","),
      facts: split(document.getElementById("entity-facts").value, "\n"),
    }, "saved: kept as you wrote it");
  }, { once: true });
  dialog.showModal();
}

function mergeEntity(e) {
  const dialog = document.getElementById("merge-dialog");
  document.getElementById("merge-title").textContent = `Merge ${e.name} into…`;
  const into = document.getElementById("merge-into");
  into.replaceChildren(...state.entities.filter((o) => o.name !== e.name && !o.deleted)
    .map((o) => h("option", { value: o.name }, o.name)));
  dialog.addEventListener("close", () => {
    if (dialog.returnValue === "ok" && into.value) {
      act("POST", chatPath(state.chat) + "/entities/" + encodeURIComponent(e.name) + "/merge",
        { into: into.value }, `${e.name} merged into ${into.value}`);
    }
  }, { once: true });
  dialog.showModal();
}
