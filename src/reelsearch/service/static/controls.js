// reelsearch search page: the controls beside the box (loaded before app.js, whose helpers they call). Filters are
// written into the box in its own syntax (docs/search.md), the one query format; the order of the results; search by
// an uploaded photo or clip (a file, or one dropped on the page); browsing the catalog folder by folder (GET /videos);
// thumbnails at the size shown; dates; every moment of a video on its timeline.
"use strict";

// The box's tokens as the server reads them (reelsearch.search.filters): "phrase", -"phrase", key:"value", word.
const TOKEN = /(-?)"([^"]*)"?|([A-Za-z]+):"([^"]*)"?|(\S+)/g;
const KEYED = /^([A-Za-z]+):(.*)$/s;
// The moments a timeline shows until "every moment" is pressed (the API gives up to MAX_MOMENTS).
const TOP_MOMENTS = 3;
const MAX_MOMENTS = 100;
const BROWSE_PAGE = 48;

function boxTokens(text) {
  return Array.from(text.matchAll(TOKEN), (m) => {
    if (m[3] !== undefined) return { raw: m[0], key: m[3].toLowerCase(), value: m[4] };
    const keyed = m[5] !== undefined ? KEYED.exec(m[5]) : null;
    return keyed ? { raw: m[0], key: keyed[1].toLowerCase(), value: keyed[2] } : { raw: m[0] };
  });
}

// Write filter `key` into the box: its tokens (with `value` only, for `has`, which may be given twice) removed, then
// `key:value` added when `on` (a value with spaces in quotes).
function writeFilter(key, value, on) {
  const q = $("q");
  const keep = boxTokens(q.value).filter((t) => t.key !== key || (key === "has" && t.value.toLowerCase() !== value));
  const words = keep.map((t) => t.raw);
  if (on && value) words.push(/\s/.test(value) ? `${key}:"${value}"` : `${key}:${value}`);
  q.value = words.join(" ");
}

// Set the controls to the filters the server read from the box (the answer's `filters`).
function showFilters(filters) {
  const f = filters || {};
  const last = (key) => (f[key] || []).at(-1) || "";
  const has = (f.has || []).map((v) => v.trim().toLowerCase());
  $("f-kind").value = last("kind").trim().toLowerCase();
  $("f-after").value = fullDate(last("after"));
  $("f-before").value = fullDate(last("before"));
  $("f-folder").value = addOption($("f-folder"), last("folder").trim());
  $("f-speech").checked = has.includes("speech");
  $("f-text").checked = has.includes("text");
}

// YYYY, YYYY-M or YYYY-MM-DD as a date input's YYYY-MM-DD (the same period start); "" when it is none.
function fullDate(value) {
  const m = /^\s*(\d{4})(?:-(\d{1,2}))?(?:-(\d{1,2}))?\s*$/.exec(value);
  return m ? `${m[1]}-${(m[2] || "1").padStart(2, "0")}-${(m[3] || "1").padStart(2, "0")}` : "";
}

function addOption(select, value, label) {
  if (value && ![...select.options].some((o) => o.value === value)) select.append(new Option(label || value, value));
  return value;
}

function filterControls() {
  const rerun = () => { if ($("q").value.trim()) search(); };
  const bind = (id, key, value) => $(id).addEventListener("change", (ev) => {
    const on = ev.target.type === "checkbox" ? ev.target.checked : true;
    writeFilter(key, value || ev.target.value, on);
    rerun();
  });
  bind("f-kind", "kind");
  bind("f-after", "after");
  bind("f-before", "before");
  bind("f-folder", "folder");
  bind("f-speech", "has", "speech");
  bind("f-text", "has", "text");
  $("sort").addEventListener("change", () => { if (lastSearch) lastSearch(); });
}

// The last search (re-run when the order changes).
let lastSearch = null;

// `&sort=date` when the results are to be newest first (relevance is the API's default).
function sortParam() {
  return $("sort").value === "date" ? "&sort=date" : "";
}

// Photos and clips like an uploaded file (POST /search/like), fused with the box's text when there is some.
async function searchFile(file) {
  const form = new FormData();
  form.append("file", file, file.name);
  form.append("k", $("k").value);
  form.append("sort", $("sort").value);
  const q = $("q").value.trim();
  if (q) form.append("q", q);
  lastSearch = () => searchFile(file);
  await show(null, (data) => `files like ${data.like}`, () => api("/search/like", { method: "POST", body: form }));
}

// Drop a photo or clip anywhere on the page to search by it.
function dropZone() {
  const files = (ev) => ev.dataTransfer && [...(ev.dataTransfer.types || [])].includes("Files");
  let depth = 0;
  document.addEventListener("dragenter", (ev) => { if (files(ev)) { depth += 1; $("drop").hidden = false; } });
  document.addEventListener("dragleave", () => { depth = Math.max(0, depth - 1); if (!depth) $("drop").hidden = true; });
  document.addEventListener("dragover", (ev) => { if (files(ev)) ev.preventDefault(); });
  document.addEventListener("drop", (ev) => {
    ev.preventDefault();
    depth = 0;
    $("drop").hidden = true;
    const file = ev.dataTransfer && ev.dataTransfer.files[0];
    if (file) searchFile(file);
  });
  $("upload").addEventListener("change", (ev) => { if (ev.target.files[0]) searchFile(ev.target.files[0]); });
}

// A thumbnail URL at the size a card shows it (its column's width in device pixels; the server picks the size).
function sized(url) {
  const column = parseFloat(getComputedStyle($("results")).gridTemplateColumns) || 320;
  const px = Math.min(1280, Math.ceil(column * (window.devicePixelRatio || 1)));
  return `${url}${url.includes("?") ? "&" : "?"}size=${px}`;
}

function thumbImage(url, name) {
  const img = el("img");
  img.src = sized(url);
  img.alt = name;
  img.loading = "lazy";
  return img;
}

// When a file was taken (UTC day), and where that date comes from.
function takenLine(r) {
  const day = new Date(r.taken_at * 1000).toISOString().slice(0, 10);
  const line = el("div", "taken", day);
  line.title = { exif: "taken (the photo's EXIF)", container: "recorded (the video's metadata)" }[r.taken_from]
    || "the file's date (it says nothing of when it was taken)";
  return line;
}

// "every moment": show all the moments the API gave on the timeline `bar`, not only the best TOP_MOMENTS.
function everyMoment(bar, n) {
  const button = el("button", "every", `every moment (${n})`);
  button.type = "button";
  button.setAttribute("aria-pressed", "false");
  button.addEventListener("click", (ev) => {
    ev.stopPropagation();
    const on = bar.classList.toggle("every");
    button.setAttribute("aria-pressed", String(on));
    button.textContent = on ? `best ${TOP_MOMENTS} moments` : `every moment (${n})`;
  });
  return button;
}

// The catalog folder by folder (GET /videos): `folder` ("" for all), `sort` (date or name); `more`: the next page.
let browsing = null;

async function showBrowse(folder, sort, more) {
  const offset = more && browsing ? browsing.offset + BROWSE_PAGE : 0;
  const params = new URLSearchParams({ sort, offset, limit: BROWSE_PAGE });
  if (folder) params.set("folder", folder);
  $("status").textContent = "loading…";
  const mine = ++latest;
  let data;
  try {
    const resp = await api(`/videos?${params}`);
    data = await resp.json();
    if (mine !== latest) return;
    if (!resp.ok) throw new Error(typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail));
  } catch (err) {
    if (mine === latest) $("status").textContent = `error: ${err.message}`;
    return;
  }
  browsing = { folder, sort, offset };
  listFolders(data.folders);
  $("browse-bar").hidden = false;
  $("filtered").hidden = $("no-match").hidden = true;
  $("b-folder").value = folder;
  $("b-sort").value = sort;
  const cards = data.videos.map(libraryCard);
  if (more) $("results").append(...cards); else $("results").replaceChildren(...cards);
  const shown = offset + data.videos.length;
  $("more").hidden = shown >= data.total;
  $("status").textContent = `${data.total} files${folder ? ` in ${folder}` : ""}` +
    (shown < data.total ? ` — ${shown} shown` : "") + " — click one to play it";
  history.replaceState(null, "", `?${new URLSearchParams({ view: "browse", ...(folder ? { folder } : {}), sort })}`);
}

function leaveBrowse() {
  $("browse-bar").hidden = true;
  $("more").hidden = true;
  browsing = null;
}

// The catalog's folders (GET /videos's `folders`) in the browse bar and the filters' folder list.
function listFolders(folders) {
  for (const select of [$("b-folder"), $("f-folder")]) {
    for (const f of folders) addOption(select, f.path, `${f.path} (${f.videos})`);
  }
}

async function loadFolders() {
  try {
    const resp = await api("/videos?limit=1");
    if (resp.ok) listFolders((await resp.json()).folders);
  } catch (err) { /* the filters still work typed */ }
}

function libraryCard(v) {
  const c = el("article", "card library");
  c.dataset.id = v.id;
  const thumb = el("div", "thumb");
  thumb.append(thumbImage(v.thumbnail, v.name));
  if (v.kind === "video" && v.duration) thumb.append(el("span", "badge", clock(v.duration)));
  const meta = el("div", "meta");
  meta.append(el("div", "name", v.name), takenLine(v));
  meta.title = v.path;
  c.append(thumb, meta);
  c.tabIndex = 0;
  c.addEventListener("click", () => play(v, 0, c));
  c.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); play(v, 0, c); }
  });
  return c;
}

function browseControls() {
  const go = () => showBrowse($("b-folder").value, $("b-sort").value, false);
  $("browse").addEventListener("click", go);
  $("b-folder").addEventListener("change", go);
  $("b-sort").addEventListener("change", go);
  $("more").addEventListener("click", () => showBrowse(browsing.folder, browsing.sort, true));
}
