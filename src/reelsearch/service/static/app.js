// reelsearch search page: plain JavaScript, no dependencies.
"use strict";

const $ = (id) => document.getElementById(id);
const MAX_STRIP = 24;
const KEY_STORE = "reelsearch-key";
const KEY_COOKIE = "reelsearch_key";  // sent by the browser with <img> and <video> requests (GET only)

// The API key, when the server wants one: kept in localStorage, sent as X-API-Key by fetch and as a same-site
// cookie by the media elements.
function setKey(key) {
  localStorage.setItem(KEY_STORE, key);
  document.cookie = `${KEY_COOKIE}=${key}; path=/; SameSite=Strict`;
}

async function api(path, init = {}) {
  const key = localStorage.getItem(KEY_STORE);
  const resp = await fetch(path, key ? { ...init, headers: { "X-API-Key": key } } : init);
  if (resp.status === 401) {
    $("key-form").hidden = false;
    $("key").focus();
    throw new Error("this server needs its API key (enter it above)");
  }
  return resp;
}

function clock(s) {
  s = Math.max(0, s || 0);
  const m = Math.floor(s / 60);
  const sec = (s - 60 * m).toFixed(1).padStart(4, "0");
  return `${m}:${sec}`;
}

// A confidence in whole percent, "<1%" below one percent (reelsearch.display.percent: the CLI's words).
function percent(c) {
  return c < 0.01 ? "<1%" : `${Math.round(100 * c)}%`;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// Frames shown in the strip: at most MAX_STRIP, spread evenly, always keeping the best one.
function stripFrames(frames, best) {
  if (frames.length <= MAX_STRIP) return frames;
  const keep = new Set([best]);
  for (let i = 0; i < MAX_STRIP - 1; i++) keep.add(Math.round(i * (frames.length - 1) / (MAX_STRIP - 2)));
  return frames.filter((f) => keep.has(f.index));
}

function play(result, seconds, card) {
  const video = $("video");
  const still = $("still");
  const player = $("player");
  player.hidden = false;
  document.querySelectorAll(".card.active").forEach((c) => c.classList.remove("active"));
  if (card) card.classList.add("active");
  const isImage = result.kind === "image";
  video.hidden = isImage;
  still.hidden = !isImage;
  if (isImage) {  // an image is a one-frame video: show it
    video.pause();
    still.src = result.media;
    still.alt = result.name;
    $("player-info").textContent = `${result.name}${scoreNote(result)}\n${result.path}`;
    return;
  }
  const start = Math.max(0, seconds);
  video.dataset.id = result.id;
  video.dataset.start = String(start);
  const seek = () => { video.currentTime = start; video.play().catch(() => {}); };
  if (video.dataset.src === result.media && video.readyState >= 1) {
    seek();
  } else {
    video.dataset.src = result.media;
    video.addEventListener("loadedmetadata", seek, { once: true });
    video.src = `${result.media}#t=${start.toFixed(2)}`;  // media fragment: the browser starts there too
  }
  $("player-info").textContent = `${result.name} — from ${clock(start)}${scoreNote(result)}\n${result.path}`;
  player.scrollIntoView({ behavior: "smooth", block: "nearest" });
}

function scoreNote(result) {
  return result.score === undefined ? "" : ` (score ${result.score.toFixed(4)})`;
}

// The words said or written that matched, the query's words highlighted; a click plays from them.
function matchLine(result, c) {
  const m = result.match;
  const line = el("button", `match ${m.cue}`);
  line.type = "button";
  line.dataset.t = String(m.moment);
  line.title = (m.how === "keyword" ? "matched words" : "matched by meaning") + ` — play from ${clock(m.moment)}`;
  const label = el("span", "cue", `${m.cue === "speech" ? "said" : "on screen"} ${clock(m.moment)}`);
  const quote = el("q", "words");
  const chars = Array.from(m.text);  // highlights are code-point offsets
  let last = 0;
  for (const [a, b] of m.highlights) {
    quote.append(chars.slice(last, a).join(""), el("mark", null, chars.slice(a, b).join("")));
    last = b;
  }
  quote.append(chars.slice(last).join(""));
  line.append(label, quote);
  line.addEventListener("click", (ev) => { ev.stopPropagation(); play(result, m.moment, c); });
  return line;
}

// The video's best moments on a bar as long as the video, the best one marked; a click plays from its start.
function timeline(result, c) {
  const bar = el("div", "timeline");
  bar.setAttribute("role", "group");
  bar.setAttribute("aria-label", `best moments of ${result.name}`);
  result.moments.forEach((m, i) => {
    const seg = el("button", "moment" + (i === 0 ? " best" : "") + (i >= TOP_MOMENTS ? " extra" : ""));
    seg.type = "button";
    seg.dataset.start = String(m.start);
    seg.style.left = `${(100 * Math.min(m.start, result.duration) / result.duration).toFixed(3)}%`;
    seg.style.width = `${(100 * Math.max(m.end - m.start, 0) / result.duration).toFixed(3)}%`;
    const sure = m.confidence === undefined ? "" : ` · ${percent(m.confidence)} confident`;
    seg.title = `moment ${i + 1}: ${clock(m.start)}–${clock(m.end)}${sure} — play from ${clock(m.start)}`;
    seg.setAttribute("aria-label", seg.title);
    seg.addEventListener("click", (ev) => { ev.stopPropagation(); play(result, m.start, c); });
    bar.append(seg);
  });
  return bar;
}

// What each source is called where people read it (as reelsearch.display.SOURCES); any other expert is one of a
// mixture model's picture experts.
const SOURCES = {visual: "picture", speech: "words said", ocr: "text on screen", like: "the example"};

// What a result matched by, in words (as reelsearch.display.matched): the picture, the example, the words.
function matchedBy(result) {
  const parts = [];
  const keys = result.experts ? Object.keys(result.experts) : null;
  if (result.kind !== "audio" && (keys === null || keys.some((k) => !(k in SOURCES) || k === "visual"))) {
    parts.push("picture");
  }
  if (keys !== null && keys.includes("like")) parts.push(SOURCES.like);
  if (result.match) parts.push(SOURCES[result.match.cue]);
  return parts.join(" + ");
}

// A result's raw numbers, named (as reelsearch.display.detail_line).
function detailText(result) {
  let out = `ranking score ${result.score >= 0 ? "+" : ""}${result.score.toFixed(4)} ` +
    "(its sources' weighted scores, for seven words or more less the video's usual score: it orders this " +
    "search's hits only)";
  if (result.experts) {
    out += " · own scores: " + Object.entries(result.experts)
      .map(([k, v]) => `${SOURCES[k] || "picture expert " + k} ${v.toFixed(3)}`).join(", ");
  }
  return out;
}

function card(result, rank) {
  const c = el("article", "card");
  c.dataset.id = result.id;
  c.dataset.moment = String(result.moment);
  const thumb = el("div", "thumb");
  if (result.kind === "audio") {  // sound alone: no picture to show
    thumb.append(el("span", "sound", "♪ audio only"));
  } else {
    thumb.append(thumbImage(result.thumbnail, result.name));
  }
  thumb.append(el("span", "rank", `#${rank}`));
  if (result.kind !== "image") thumb.append(el("span", "badge", clock(result.moment)));  // a photo has no time
  const meta = el("div", "meta");
  meta.append(el("div", "name", result.name));
  const by = matchedBy(result);
  let scoreText = (by ? `matched: ${by}` : "") +
    (result.kind === "image" ? "" : `${by ? " · " : ""}best moment ${clock(result.moment)}`);
  if (result.confidence !== undefined) scoreText = `${percent(result.confidence)} confident · ` + scoreText;
  meta.append(el("div", "score", scoreText));
  if (result.taken_at !== undefined) meta.append(takenLine(result));
  const numbers = el("details", "numbers");  // the raw numbers, on request
  numbers.append(el("summary", null, "numbers"), el("div", null, detailText(result)));
  numbers.addEventListener("click", (ev) => ev.stopPropagation());
  meta.append(numbers);
  meta.title = result.path;
  const more = el("button", "more-like", "more like this");
  more.type = "button";
  more.title = `videos that look like ${result.name}`;
  more.addEventListener("click", (ev) => { ev.stopPropagation(); searchLike(result.id, result.name); });
  if (result.kind !== "audio") meta.append(more);  // sound alone has no picture to look for
  c.append(thumb);
  if (result.kind !== "image" && result.moments && result.duration > 0) {
    const line = timeline(result, c);
    c.append(line);
    if (result.moments.length > TOP_MOMENTS) meta.append(everyMoment(line, result.moments.length));
  }
  c.append(meta);
  if (result.kind !== "image" && result.frames && result.frames.length) {  // a photo has one frame: no strip
    const strip = el("div", "strip");
    const scores = result.frames.map((f) => f.score);
    const lo = Math.min(...scores), hi = Math.max(...scores);
    for (const f of stripFrames(result.frames, result.frame)) {
      const level = hi > lo ? (f.score - lo) / (hi - lo) : 1;
      const fr = el("div", "frame" + (f.index === result.frame ? " best" : ""));
      fr.style.backgroundImage = `url("/videos/${result.id}/thumbnail?frame=${f.index}")`;
      fr.style.setProperty("--shade", (0.8 * (1 - level)).toFixed(3));
      fr.style.setProperty("--level", level.toFixed(3));
      fr.title = `${clock(f.t)} · similarity ${f.score.toFixed(4)}`;
      fr.dataset.t = String(f.t);
      fr.append(el("span", "bar"));
      fr.addEventListener("click", (ev) => { ev.stopPropagation(); play(result, f.t, c); });
      strip.append(fr);
    }
    c.append(strip);
  }
  if (result.match) c.append(matchLine(result, c));
  c.tabIndex = 0;
  c.addEventListener("click", () => play(result, result.moment, c));
  c.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); play(result, result.moment, c); }
  });
  return c;
}

async function search(ev) {
  if (ev) ev.preventDefault();
  const q = $("q").value.trim();
  if (!q) return;
  const k = $("k").value;
  lastSearch = search;
  await show(`q=${encodeURIComponent(q)}&k=${k}${sortParam()}`, (data) => `“${data.query}”`);
}

// "More like this": the videos that look like an indexed one (the video itself and copies of it left out).
async function searchLike(id, name) {
  lastSearch = () => searchLike(id, name);
  await show(`like=${encodeURIComponent(id)}&k=${$("k").value}${sortParam()}`, () => `videos like ${name || "#" + id}`);
}

// The number of the last search or view asked for: the answer of an older one, arriving later, is dropped.
let latest = 0;

// Run one search (its URL parameters, or `request`: an upload) and show its results; `what` names it in the status
// line.
async function show(params, what, request) {
  $("status").textContent = "searching…";
  leaveBrowse();
  const mine = ++latest;
  const t0 = performance.now();
  let data;
  try {
    const resp = await (request ? request() : api(`/search?${params}&moments=${MAX_MOMENTS}`));
    data = await resp.json();
    if (mine !== latest) return;
    if (!resp.ok) throw new Error(typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail));
  } catch (err) {
    if (mine !== latest) return;
    $("status").textContent = `error: ${err.message}`;
    $("filtered").hidden = true;
    return;
  }
  const box = $("results");
  box.replaceChildren(...data.results.map((r, i) => card(r, i + 1)));
  // how the box's filters were read (after:, folder:, -word, "phrase": docs/search.md)
  const filtered = $("filtered");
  filtered.textContent = data.filtered ? `filtered: ${data.filtered}` : "";
  filtered.hidden = !data.filtered;
  showFilters(data.filters);
  const notice = $("no-match");
  notice.textContent = data.message || "";
  notice.hidden = !data.no_good_match;
  const ms = Math.round(performance.now() - t0);
  $("status").textContent = data.results.length
    ? `${data.results.length} results for ${what(data)} in ${ms} ms — click one to play it from its best moment`
    : data.filtered ? "no results: no video passes the filters" : "no results (is the library indexed?)";
  history.replaceState(null, "", params === null ? location.pathname : `?${params}`);
}

// The Duplicates view: each group of files that are the same footage, with how each matched the group.
async function showDuplicates() {
  $("status").textContent = "looking for duplicates…";
  leaveBrowse();
  let data;
  try {
    const resp = await api("/duplicates");
    data = await resp.json();
    if (!resp.ok) throw new Error(typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail));
  } catch (err) {
    $("status").textContent = `error: ${err.message}`;
    return;
  }
  $("results").replaceChildren(...data.groups.map((g, i) => duplicateGroup(g, i + 1)));
  $("status").textContent = data.groups.length
    ? `${data.groups.length} groups of files that are the same footage — click one to play it`
    : "no duplicates";
  history.replaceState(null, "", "?view=duplicates");
}

function duplicateGroup(group, number) {
  const box = el("section", "group");
  box.append(el("h2", null, `group ${number}: ${group.videos.length} files`));
  const link = {};  // each file's pair with the most frames aligned (then the most similar)
  const better = (p, q) => !q || p.frames > q.frames || (p.frames === q.frames && p.similarity > q.similarity);
  for (const p of group.pairs) {
    for (const id of [p.a, p.b]) if (better(p, link[id])) link[id] = p;
  }
  const row = el("div", "group-files");
  for (const v of group.videos) {
    const p = link[v.id];
    const result = { ...v, media: `/videos/${v.id}/media`, score: p.similarity };
    const c = el("article", "card dup");
    c.dataset.id = v.id;
    const img = thumbImage(`/videos/${v.id}/thumbnail`, v.name);
    const other = p.a === v.id ? p.b : p.a;
    const meta = el("div", "meta");
    const shift = `${p.offset >= 0 ? "+" : ""}${p.offset.toFixed(1)} s`;
    const first = group.videos[0].id;  // where each other file starts on its timeline, as the CLI prints it
    const at = v.id === first ? "" : ` (starts at ${v.start.toFixed(1)} s of #${first})`;
    meta.append(el("div", "name", `#${v.id} ${v.name}${at}`), el("div", "score",
      `${p.frames} frames aligned with #${other} (#${p.a} at t = #${p.b} at t ${shift}) · ` +
      `similarity ${p.similarity.toFixed(3)}`));
    meta.title = v.path;
    c.append(img, meta);
    c.tabIndex = 0;
    c.addEventListener("click", () => play(result, 0, c));
    row.append(c);
  }
  box.append(row);
  return box;
}

const WATCH_POLL_MS = 2000;
let watchTimer = null;

async function health() {
  try {
    const h = await (await api("/health")).json();
    $("library").textContent = `${h.videos} videos indexed` + (h.stale ? " · index built with another model" : "");
    showWatch(h.watch);
  } catch (err) { /* the page still works without it */ }
}

// What `serve --watch` is doing (GET /health's "watch"), refreshed every WATCH_POLL_MS while the server watches.
function showWatch(w) {
  const box = $("watch");
  box.hidden = !w;
  if (!w) return;
  const names = (paths) => paths.map((p) => p.split("/").pop()).join(", ");
  const parts = [`watching ${w.roots.join(", ")}`];
  if (w.state === "starting") parts.push("catching up with the folders…");
  if (w.indexing.length && w.state !== "starting") parts.push(`indexing ${names(w.indexing)}`);
  if (w.waiting.length) parts.push(`waiting for ${names(w.waiting)} (still being copied)`);
  if (w.state === "idle") parts.push("up to date");
  if (w.error) parts.push(`error: ${w.error} (retrying)`);
  box.textContent = parts.join(" · ");
  box.dataset.state = w.state;
  box.title = w.last ? `last update: ${w.last.summary}` : "";
  if (!watchTimer) watchTimer = setInterval(health, WATCH_POLL_MS);
}

async function init() {
  $("search-form").addEventListener("submit", search);
  $("dups").addEventListener("click", showDuplicates);
  filterControls();
  dropZone();
  browseControls();
  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    setKey($("key").value.trim());
    $("key-form").hidden = true;
    health();
    search();
  });
  const key = localStorage.getItem(KEY_STORE);
  if (key) setKey(key);  // renew the cookie for this session's media requests
  await health();
  loadFolders();
  const params = new URLSearchParams(location.search);
  if (params.get("k")) $("k").value = params.get("k");
  if (params.get("sort") === "date") $("sort").value = "date";
  if (params.get("q")) {
    $("q").value = params.get("q");
    search();
  } else if (params.get("like")) {
    searchLike(params.get("like"));
  } else if (params.get("view") === "duplicates") {
    showDuplicates();
  } else if (params.get("view") === "browse") {
    showBrowse(params.get("folder") || "", params.get("sort") === "name" ? "name" : "date", false);
  }
}

init();
