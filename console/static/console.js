// Keel's console: reads /console/api/* and renders it. Every value is set
// with textContent (never as HTML): names come from clients.
"use strict";

const REFRESH_MS = 5000;      // the tables
const FEATURES_EVERY = 6;     // features every 6th refresh: it asks every voter
const PAGE = 100;

const state = {
  topicOffset: 0, topicQuery: "", topicUnhealthy: false,
  topic: null, partOffset: 0, partUnhealthy: false,
  ticks: 0, timer: null, inFlight: false, again: false,
};

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function pill(text, cls) { return el("span", text, "pill " + (cls || "")); }

function cell(content, cls) {
  const td = el("td", undefined, cls);
  if (content instanceof Node) td.appendChild(content);
  else td.textContent = content === undefined || content === null ? "" : String(content);
  return td;
}

function list(ids) { return ids && ids.length ? ids.join(", ") : "–"; }

function fill(tbodyParent, rows, cols, empty) {
  const tbody = tbodyParent.querySelector("tbody");
  const out = rows.length ? rows : null;
  tbody.replaceChildren();
  if (!out) {
    const tr = el("tr");
    const td = cell(empty, "empty");
    td.colSpan = cols;
    tr.appendChild(td);
    tbody.appendChild(tr);
    return;
  }
  for (const r of out) tbody.appendChild(r);
}

function ago(ms) {
  if (ms < 0) return "never";
  if (ms < 1000) return ms + " ms ago";
  return (ms / 1000).toFixed(1) + " s ago";
}

async function getJSON(path) {
  const resp = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
  if (!resp.ok) {
    const text = (await resp.text()).trim().replace(/^console: /, "");
    throw new Error(text || resp.status + " " + resp.statusText);
  }
  return resp.json();
}

function brokerState(s) {
  switch (s) {
    case "active": return pill("active", "ok");
    case "fenced": return pill("fenced", "bad");
    case "shutting_down": return pill("shutting down", "warn");
  }
  return pill(s);
}

function count(n, cls) {
  return cell(n, n > 0 ? cls : "");
}

function renderOverview(o) {
  const src = o.source;
  $("cluster-id").textContent = o.cluster_id || "(none yet)";
  $("node-id").textContent = o.node.id;
  $("node-role").textContent = o.node.active ? "active controller" : (o.node.state || "unknown");
  $("epoch").textContent = o.controller_epoch;
  $("mv").textContent = o.metadata_version;
  document.title = "Keel · " + (o.cluster_id || "cluster") + " · controller " + o.node.id;

  // Whose view this is, when it is not the active controller's.
  const banner = $("banner");
  const notes = [];
  let bad = false;
  if (o.node.diverged_index) {
    bad = true;
    notes.push("This controller's image diverged at index " + o.node.diverged_index + " (" + o.node.diverged_reason + "); ask another controller.");
  }
  if (!src.active) {
    let s = "You are looking at controller " + src.node_id + "'s own view (" + (o.node.state || "not active") +
      "), as of its applied index " + src.applied_index + ". ";
    s += src.leader_id >= 0 ? "The active controller is " + src.leader_id + "." : "It knows no leader.";
    if (src.behind_index) s += " It is " + (src.behind_ms / 1000).toFixed(1) + " s behind the leader's commit index " + src.behind_index + ".";
    notes.push(s);
  }
  if (!o.node.ready && o.node.not_ready_reason) notes.push("Not ready: " + o.node.not_ready_reason);
  banner.hidden = notes.length === 0;
  banner.className = "banner" + (bad ? " bad" : "");
  banner.textContent = notes.join(" ");

  // Cards.
  const c = o.counts;
  const cards = [
    ["Brokers", c.brokers, ""], ["Fenced brokers", c.fenced_brokers, c.fenced_brokers ? "bad" : ""],
    ["Topics", c.topics, ""], ["Partitions", c.partitions, ""],
    ["Under-replicated", c.under_replicated, c.under_replicated ? "warn" : ""],
    ["Offline", c.offline, c.offline ? "bad" : ""], ["Reassigning", c.reassigning, c.reassigning ? "warn" : ""],
  ];
  $("cards").replaceChildren(...cards.map(([label, n, cls]) => {
    const d = el("div", undefined, "card " + cls);
    d.dataset.card = label.toLowerCase().replace(/ /g, "-");
    d.append(el("div", n, "n"), el("div", label, "l"));
    return d;
  }));

  // Quorum.
  $("quorum-note").textContent = src.active ? "" :
    "Match index and lag are known to the active controller only: open its console for them.";
  fill($("voters"), o.voters.map((v) => {
    const tr = el("tr");
    tr.dataset.voter = v.id;
    let role = v.leader ? pill("leader", "info") : pill(v.suffrage === "voter" ? "follower" : v.suffrage);
    if (v.id === o.node.id) {
      const wrap = el("span");
      wrap.append(role, document.createTextNode(" "), pill("this node"));
      role = wrap;
    }
    tr.append(cell(v.id), cell(v.address, "mono"), cell(role),
      cell(v.replication_known ? v.match_index : "–"),
      cell(v.replication_known ? v.lag : "–", v.lag > 0 ? "num-warn" : ""),
      cell(v.replication_known ? ago(v.last_contact_ms) : "–"));
    return tr;
  }), 6, "no voters");

  // Brokers.
  fill($("brokers"), o.brokers.map((b) => {
    const tr = el("tr");
    tr.dataset.broker = b.id;
    tr.dataset.state = b.state;
    tr.append(cell(b.id), cell(brokerState(b.state)), cell(b.address, "mono"), cell(b.kafka_address || "–", "mono"),
      cell(b.epoch), cell(b.rack || "–"), cell(b.leaders), cell(b.replicas), count(b.moving_off, "num-warn"));
    return tr;
  }), 9, "no brokers registered");

  // Reassignments.
  fill($("reassignments"), o.reassignments.map((p) => {
    const tr = el("tr");
    tr.append(cell(p.topic), cell(p.partition), cell(list(p.replicas)), cell(list(p.adding)),
      cell(list(p.removing)), cell(list(p.isr)));
    return tr;
  }), 6, "none");
  $("reassignments-note").textContent = o.reassignments_omitted > 0 ?
    "…and " + o.reassignments_omitted + " more (keel partition reassign --list)." : "";

  $("asof").textContent = "as of " + new Date(o.as_of).toLocaleTimeString() + " · index " + src.applied_index +
    " · controller " + src.node_id + "'s view";
}

function setPager(prefix, page, count) {
  const from = count ? page.offset + 1 : 0;
  $(prefix + "-range").textContent = from + "–" + (page.offset + count) + " of " + page.total;
  $(prefix + "-prev").disabled = page.offset === 0;
  $(prefix + "-next").disabled = page.offset + count >= page.total;
}

function renderTopics(p) {
  fill($("topics"), p.topics.map((t) => {
    const tr = el("tr", undefined, "click" + (t.name === state.topic ? " selected" : ""));
    tr.dataset.topic = t.name;
    tr.title = "Show its partitions";
    tr.addEventListener("click", () => selectTopic(t.name));
    tr.append(cell(t.name, "mono"), cell(t.partitions), cell(t.replication_factor),
      count(t.under_replicated, "num-warn"), count(t.offline, "num-bad"), count(t.reassigning, "num-warn"));
    return tr;
  }), 6, state.topicQuery || state.topicUnhealthy ? "no topic matches" : "no topics yet (keel topic create NAME)");
  setPager("topics", p, p.topics.length);
}

function health(p) {
  if (p.offline) {
    const s = el("span");
    s.append(pill("offline", "bad"));
    if (p.no_leader_reason) s.append(el("div", p.no_leader_reason, "reason"));
    return s;
  }
  if (p.under_replicated) return pill("under-replicated", "warn");
  if (p.adding.length || p.removing.length) return pill("reassigning", "info");
  return pill("ok", "ok");
}

function renderPartitions(p) {
  $("partitions-topic").textContent = p.topic;
  fill($("partitions"), p.partitions.map((r) => {
    const tr = el("tr");
    tr.dataset.partition = r.partition;
    tr.append(cell(r.partition), cell(r.leader < 0 ? "none" : r.leader, r.leader < 0 ? "num-bad" : ""), cell(r.leader_epoch),
      cell(list(r.replicas)), cell(list(r.isr)), cell(list(r.elr)), cell(list(r.adding)), cell(list(r.removing)),
      cell(health(r)));
    return tr;
  }), 9, state.partUnhealthy ? "every partition is well" : "no partitions");
  setPager("partitions", p, p.partitions.length);
}

function renderFeatures(f) {
  $("features-note").textContent = "Finalized metadata.version " + f.metadata_version +
    " (keel features upgrade raises it once every node supports the level).";
  fill($("features"), f.nodes.map((n) => {
    const tr = el("tr");
    tr.append(cell(n.kind + " " + n.id), cell(n.address, "mono"),
      cell(n.error ? "–" : n.min_metadata_version + "–" + n.max_metadata_version), cell(n.error || "", n.error ? "num-bad" : ""));
    return tr;
  }), 4, "no nodes");
}

function topicsURL() {
  const q = new URLSearchParams({ offset: state.topicOffset, limit: PAGE });
  if (state.topicQuery) q.set("q", state.topicQuery);
  if (state.topicUnhealthy) q.set("unhealthy", "1");
  return "api/topics?" + q;
}

function partitionsURL() {
  const q = new URLSearchParams({ topic: state.topic, offset: state.partOffset, limit: PAGE });
  if (state.partUnhealthy) q.set("unhealthy", "1");
  return "api/partitions?" + q;
}

async function refresh() {
  if (state.inFlight) {
    state.again = true; // a click meanwhile: answer it once this one is done
    return;
  }
  state.inFlight = true;
  const dot = $("status-dot");
  try {
    const [o, t] = await Promise.all([getJSON("api/overview"), getJSON(topicsURL())]);
    renderOverview(o);
    renderTopics(t);
    if (state.topic) {
      try {
        renderPartitions(await getJSON(partitionsURL()));
      } catch (e) {
        // The topic was deleted meanwhile, or the node cannot answer.
        $("partitions-topic").textContent = state.topic + " (" + e.message + ")";
      }
    }
    if (state.ticks % FEATURES_EVERY === 0) {
      try {
        renderFeatures(await getJSON("api/features"));
      } catch (e) {
        $("features-note").textContent = "Finalized metadata.version " + o.metadata_version +
          "; this controller supports " + o.node.min_metadata_version + "–" + o.node.max_metadata_version +
          ". Every node's range is the active controller's to ask (" + e.message + ").";
        fill($("features"), [], 4, "only the active controller asks the nodes");
      }
    }
    state.ticks++;
    dot.className = "dot " + (o.source.active ? "live" : "stale");
    document.body.dataset.loaded = "1";
  } catch (e) {
    dot.className = "dot down";
    $("asof").textContent = "not refreshed since " + new Date().toLocaleTimeString() + ": " + e.message;
    const banner = $("banner");
    banner.hidden = false;
    banner.className = "banner bad";
    banner.textContent = e.message;
    document.body.dataset.error = e.message;
  } finally {
    state.inFlight = false;
    if (state.again) {
      state.again = false;
      refresh();
    }
  }
}

function schedule() {
  clearTimeout(state.timer);
  if (document.hidden) return; // resumed by visibilitychange
  state.timer = setTimeout(async () => { await refresh(); schedule(); }, REFRESH_MS);
}

function selectTopic(name) {
  state.topic = name;
  state.partOffset = 0;
  $("partitions-section").hidden = false;
  refresh();
}

function init() {
  let debounce = null;
  $("topic-filter").addEventListener("input", (e) => {
    clearTimeout(debounce);
    debounce = setTimeout(() => { state.topicQuery = e.target.value.trim(); state.topicOffset = 0; refresh(); }, 250);
  });
  $("topic-unhealthy").addEventListener("change", (e) => { state.topicUnhealthy = e.target.checked; state.topicOffset = 0; refresh(); });
  $("topics-prev").addEventListener("click", () => { state.topicOffset = Math.max(0, state.topicOffset - PAGE); refresh(); });
  $("topics-next").addEventListener("click", () => { state.topicOffset += PAGE; refresh(); });
  $("partitions-unhealthy").addEventListener("change", (e) => { state.partUnhealthy = e.target.checked; state.partOffset = 0; refresh(); });
  $("partitions-prev").addEventListener("click", () => { state.partOffset = Math.max(0, state.partOffset - PAGE); refresh(); });
  $("partitions-next").addEventListener("click", () => { state.partOffset += PAGE; refresh(); });
  $("partitions-close").addEventListener("click", () => { state.topic = null; $("partitions-section").hidden = true; refresh(); });
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh().then(schedule); else clearTimeout(state.timer); });
  // A topic named in the address (#topic=NAME) opens with its partitions.
  const m = /^#topic=(.+)$/.exec(location.hash);
  if (m) { state.topic = decodeURIComponent(m[1]); $("partitions-section").hidden = false; }
  refresh().then(schedule);
}

init();
