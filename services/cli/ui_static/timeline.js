// rollbook ui: the rollout list and one rollout's timeline, drawn as SVG from /api/rollout (the SQL views
// and the replay fold). No framework, no build step. The URL hash (#rollout=ID&position=N) says what is shown.
// The page polls: the list always, the rollout shown while it runs (or after a failed read), so it moves with
// the trail; when the stack or this page's server is down a banner says so and the polling goes on.
// Recorded strings are data: they reach the DOM only as text (textContent, attribute values), never as HTML.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = { inPlace: "#2b7bb9", recreatePod: "#e8871e", createPod: "#3a9d4a", other: "#888" };
const LEFT = 190, RIGHT = 20, ROW = 18, CHART = 90;
const PAUSED = "#f3e2a9";
let pollSeconds = 2; // the server says how often (poll_seconds); this until it has
let shown = null; // the rollout on the page: { id, data, stale }
let refreshes = 0;

function el(name, attrs, text) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function hashParams() {
  return new URLSearchParams(location.hash.replace(/^#/, ""));
}

// Beyond the loopback the API needs the token: given once in the fragment (#token=...), which the browser
// never sends, kept for this tab, and taken out of the address bar.
(function takeToken() {
  const params = hashParams();
  if (!params.has("token")) return;
  sessionStorage.setItem("rollbook-token", params.get("token"));
  params.delete("token");
  history.replaceState(null, "", location.pathname + location.search + (params.toString() ? "#" + params : ""));
})();

// A failed read: "server-gone" (this page's server does not answer), "stack-down" (it answers 503: the event
// store is unreachable), or "error" (any other answer).
class ReadError extends Error {
  constructor(kind, message) { super(message); this.kind = kind; }
}

async function getJSON(url) {
  const token = sessionStorage.getItem("rollbook-token");
  let response;
  try {
    response = await fetch(url, token ? { headers: { Authorization: "Bearer " + token } } : {});
  } catch (error) {
    throw new ReadError("server-gone", "rollbook ui does not answer (stopped, or the network is down)");
  }
  if (response.status === 503) {
    let reason = "";
    try { reason = (await response.json()).error; } catch (ignored) { reason = "" }
    throw new ReadError("stack-down", reason || "the event store is unreachable");
  }
  if (!response.ok) throw new ReadError("error", `${url}: ${response.status} ${await response.text()}`);
  return response.json();
}

function setBanner(error) {
  const banner = document.getElementById("banner");
  if (!error) {
    banner.hidden = true;
    delete document.body.dataset.banner;
    return;
  }
  const kind = error.kind || "error";
  const lead = { "stack-down": "The stack is down: ", "server-gone": "No connection: " }[kind] || "Error: ";
  banner.textContent = `${lead}${error.message}. Retrying every ${pollSeconds} s; what is shown is as last read.`;
  banner.dataset.kind = kind;
  banner.hidden = false;
  document.body.dataset.banner = kind;
}

async function showList() {
  const list = document.getElementById("rollouts");
  const rollouts = await getJSON("api/rollouts");
  list.textContent = rollouts.length ? "" : "no rollouts recorded";
  const id = shown ? shown.id : hashParams().get("rollout");
  for (const r of rollouts) {
    const link = document.createElement("a");
    link.href = "#rollout=" + encodeURIComponent(r.rollout_id);
    link.className = "rollout-link";
    link.dataset.rollout = r.rollout_id;
    const detail = document.createElement("small");
    detail.textContent = `${r.to_revision} · ${r.strategy_type} · ${r.outcome || "in progress"}`;
    link.append(`${r.namespace}/${r.workload}`, document.createElement("br"), detail);
    link.classList.toggle("current", r.rollout_id === id);
    list.appendChild(link);
  }
}

function colorOf(action) {
  if (action.in_place) return COLORS.inPlace;
  return COLORS[action.action] || COLORS.other;
}

function draw(data, width) {
  const svg = document.getElementById("timeline");
  svg.replaceChildren();
  const actions = data.actions.filter((a) => a.requested);
  const pods = [...new Set(actions.map((a) => a.pod))];
  const paused = data.paused || [];
  const times = [data.rollout.started, data.rollout.finished, ...actions.flatMap((a) => [a.requested, a.finished]),
    ...data.unavailability.map((u) => u.at), ...paused.flatMap((p) => [p.from, p.to])]
    .filter(Boolean).map((t) => Date.parse(t));
  const t0 = Math.min(...times), t1 = Math.max(...times, t0 + 1000);
  const x = (t) => LEFT + ((Date.parse(t) - t0) / (t1 - t0)) * (width - LEFT - RIGHT);
  const top = 22, rowsHeight = pods.length * ROW, chartTop = top + rowsHeight + 30;
  svg.setAttribute("width", width);
  svg.setAttribute("height", chartTop + CHART + 30);
  // time axis
  for (let i = 0; i <= 5; i++) {
    const t = t0 + ((t1 - t0) * i) / 5, px = LEFT + ((width - LEFT - RIGHT) * i) / 5;
    svg.appendChild(el("line", { x1: px, x2: px, y1: top - 6, y2: chartTop + CHART, stroke: "#eee" }));
    svg.appendChild(el("text", { x: px, y: chartTop + CHART + 16, "text-anchor": "middle" },
      `+${((t - t0) / 1000).toFixed(1)}s`));
  }
  // paused periods, behind everything else: from RolloutPaused to RolloutResumed (or to the end so far)
  for (const p of paused) {
    const end = p.to || data.rollout.finished || new Date(t1).toISOString();
    const shade = el("rect", { x: x(p.from), y: top - 6, width: Math.max(x(end) - x(p.from), 2),
      height: chartTop + CHART - top + 6, fill: PAUSED, "fill-opacity": 0.7, class: "paused",
      "data-from": p.from, "data-to": p.to || "", "data-reason": p.reason });
    shade.appendChild(el("title", {}, `paused${p.to ? "" : " (still)"}: ${p.reason}`));
    svg.appendChild(shade);
  }
  svg.dataset.paused = paused.length;
  pods.forEach((pod, i) => {
    svg.appendChild(el("text", { x: LEFT - 6, y: top + i * ROW + 12, "text-anchor": "end", class: "pod-label" }, pod));
  });
  for (const a of actions) {
    const row = pods.indexOf(a.pod), y = top + row * ROW + 2;
    const end = a.finished || data.rollout.finished || new Date(t1).toISOString();
    const start = a.started || a.requested;
    svg.appendChild(el("rect", { x: x(a.requested), y: y + 4, width: Math.max(x(start) - x(a.requested), 0),
      height: ROW - 12, fill: "#ccc", class: "queued" }));
    const bar = el("rect", { x: x(start), y, width: Math.max(x(end) - x(start), 2), height: ROW - 4,
      fill: colorOf(a), class: "action", "data-pod": a.pod, "data-action": a.action,
      "data-kind": a.in_place ? "in place" : a.action });
    bar.appendChild(el("title", {}, `${a.pod} ${a.action} ${a.outcome}` + (a.reason ? `: ${a.reason}` : "")));
    svg.appendChild(bar);
  }
  for (const step of data.steps) {
    const px = x(step.planned);
    svg.appendChild(el("line", { x1: px, x2: px, y1: top - 4, y2: chartTop + CHART, stroke: "#555",
      "stroke-dasharray": "2,3", class: "partition-step" }));
    svg.appendChild(el("text", { x: px + 3, y: top - 8 + 0 }, `partition ${step.partition}`));
  }
  // unavailable pods over time, against the allowed number
  const allowed = data.steps.length ? data.steps[data.steps.length - 1].max_unavailable : null;
  const most = Math.max(1, allowed || 0, ...data.unavailability.map((u) => u.unavailable));
  const y = (n) => chartTop + CHART - (n / most) * CHART;
  svg.appendChild(el("text", { x: LEFT - 6, y: chartTop + CHART / 2, "text-anchor": "end" }, "unavailable pods"));
  svg.appendChild(el("text", { x: LEFT - 4, y: y(0) + 4, "text-anchor": "end" }, "0"));
  svg.appendChild(el("text", { x: LEFT - 4, y: y(most) + 4, "text-anchor": "end" }, String(most)));
  svg.appendChild(el("line", { x1: LEFT, x2: width - RIGHT, y1: y(0), y2: y(0), stroke: "#999" }));
  let path = "", last = null;
  for (const u of data.unavailability) {
    const px = x(u.at);
    path += last === null ? `M${px},${y(u.unavailable)}` : `L${px},${y(last)}L${px},${y(u.unavailable)}`;
    last = u.unavailable;
  }
  if (last !== null) path += `L${width - RIGHT},${y(last)}`;
  svg.appendChild(el("path", { d: path, fill: "none", stroke: "#333", "stroke-width": 1.5, class: "unavailable" }));
  if (allowed !== null) {
    svg.appendChild(el("line", { x1: LEFT, x2: width - RIGHT, y1: y(allowed), y2: y(allowed), stroke: "#c0392b",
      "stroke-dasharray": "6,4", class: "max-unavailable", "data-allowed": allowed }));
    svg.appendChild(el("text", { x: width - RIGHT, y: y(allowed) - 3, "text-anchor": "end", fill: "#c0392b" },
      `maxUnavailable ${allowed}`));
  }
  const peak = Math.max(0, ...data.unavailability.map((u) => u.unavailable));
  svg.dataset.peakUnavailable = peak;
  const cursor = el("line", { y1: top - 6, y2: chartTop + CHART, stroke: "#8e44ad", "stroke-width": 1.5, id: "cursor" });
  svg.appendChild(cursor);
  return (time) => { const px = x(time); cursor.setAttribute("x1", px); cursor.setAttribute("x2", px); };
}

// The pods after event ``index``: each state carries only the pods its event changed (every pod in the
// first; a pod gone is null).
function podsAt(states, index) {
  const pods = new Map();
  for (let i = 0; i <= index; i++) {
    for (const [name, pod] of Object.entries(states[i].pods)) {
      if (pod === null) pods.delete(name);
      else pods.set(name, pod);
    }
  }
  return pods;
}

function showState(data, index, moveCursor) {
  const step = data.states[index];
  document.getElementById("position").value = index;
  document.getElementById("position-label").textContent =
    `${index + 1}/${data.states.length} · position ${step.position} · ${step.recordedAt} · ${step.type}`;
  const body = document.querySelector("#state tbody");
  body.replaceChildren();
  const pods = podsAt(data.states, index);
  for (const name of [...pods.keys()].sort()) {
    const pod = pods.get(name);
    const row = document.createElement("tr");
    row.dataset.pod = name;
    for (const value of [name, pod.revision, pod.ready, pod.available, (pod.images || []).join(", ")]) {
      const cell = document.createElement("td");
      cell.textContent = String(value);
      row.appendChild(cell);
    }
    body.appendChild(row);
  }
  document.getElementById("state").dataset.position = step.position;
  moveCursor(step.recordedAt);
}

// Draw rollout ``id``; ``position``: the event to show the state after (null: the latest). A refresh keeps the
// slider where the user left it, or on the latest event when it was there.
async function showRollout(id, position) {
  document.querySelectorAll(".rollout-link").forEach((a) => a.classList.toggle("current", a.dataset.rollout === id));
  const data = await getJSON("api/rollout?id=" + encodeURIComponent(id));
  shown = { id, data, stale: false };
  pollSeconds = data.poll_seconds || pollSeconds;
  const r = data.rollout;
  const paused = data.paused || [];
  const still = paused.length && !paused[paused.length - 1].to && !r.finished;
  document.getElementById("empty").hidden = true;
  document.getElementById("rollout").hidden = false;
  document.getElementById("title").textContent = `${r.namespace}/${r.workload}: ${r.from_revision || "-"} → ${r.to_revision}`;
  document.getElementById("summary").textContent =
    `${r.strategy_type}, ${r.replicas} replicas, ${r.outcome || (still ? "paused" : "in progress")}` +
    (r.duration !== null ? `, took ${r.duration.toFixed(1)}s` : "") +
    `; ${data.actions.length} pod actions, ${data.steps.length} partition steps` +
    (paused.length ? `, paused ${paused.length}×` : "") + (r.finished ? "" : " (live)");
  document.body.dataset.live = r.finished ? "false" : "true";
  document.body.dataset.outcome = r.outcome || "";
  const moveCursor = draw(data, Math.max(700, document.querySelector("main").clientWidth - 40));
  const slider = document.getElementById("position");
  slider.max = data.states.length - 1;
  let index = data.states.length - 1;
  if (position !== null) {
    const at = data.states.findIndex((s) => s.position >= position);
    index = at < 0 ? data.states.length - 1 : at;
  }
  slider.oninput = () => showState(data, Number(slider.value), moveCursor);
  showState(data, index, moveCursor);
  document.body.dataset.ready = "true";
}

async function route() {
  const params = hashParams();
  const id = params.get("rollout");
  const position = params.has("position") ? Number(params.get("position")) : null;
  if (id) await showRollout(id, position);
  else document.body.dataset.ready = "true";
}

// What a refresh redraws: the rollout shown while it has not finished, or when the last read failed.
function keptPosition() {
  const slider = document.getElementById("position");
  if (!shown || Number(slider.value) >= Number(slider.max)) return null;
  return shown.data.states[Number(slider.value)].position;
}

async function refresh() {
  try {
    await showList();
    if (shown && (shown.stale || !shown.data.rollout.finished)) await showRollout(shown.id, keptPosition());
    else if (!shown && hashParams().get("rollout")) await route();
    setBanner(null);
  } catch (error) {
    if (shown) shown.stale = true;
    setBanner(error);
    const list = document.getElementById("rollouts");
    if (list.textContent === "loading…") list.textContent = "unavailable";
  }
  refreshes += 1;
  document.body.dataset.refreshes = refreshes;
  setTimeout(refresh, pollSeconds * 1000);
}

showList().then(route).then(() => setBanner(null)).catch((error) => {
  setBanner(error);
  document.getElementById("rollouts").textContent = "unavailable";
  document.body.dataset.ready = "error";
}).finally(() => setTimeout(refresh, pollSeconds * 1000));
window.addEventListener("hashchange", () => { shown = null; route().catch(setBanner); });
