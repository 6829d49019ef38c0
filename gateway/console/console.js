// The web console: the gateway's public HTTP API only (docs/http-api.md), everything it shows set as
// text (never as markup). Polls the statements every second and the region every two.
"use strict";

const $ = (id) => document.getElementById(id);
const HISTORY_S = 300; // seconds of queue length the chart keeps
const NUMERIC = /^(tinyint|smallint|integer|bigint|real|double|decimal)/;
let token = sessionStorage.getItem("cxg-token") || "";
let current = null; // the statement in the editor: {id, explain, columns, chunk, chunks}
const queueHistory = []; // [seconds since epoch, queue length]

class ApiError extends Error {
  constructor(status, error) {
    super(error.message);
    this.status = status;
    this.code = error.code;
  }
}

async function api(method, path, body) {
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let doc = null;
  try {
    doc = await response.json();
  } catch (e) {
    doc = null;
  }
  if (response.status === 401) askToken();
  if (!response.ok) {
    throw new ApiError(response.status, (doc && doc.error) || { code: `http_${response.status}`, message: response.statusText });
  }
  return doc;
}

function askToken() {
  const dialog = $("token-dialog");
  if (!dialog.open) dialog.showModal();
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function showError(error) {
  const p = $("error");
  p.textContent = `${error.code || "error"}: ${error.message || ""}`;
  p.hidden = false;
}

function hideError() {
  $("error").hidden = true;
}

function progressText(p) {
  if (!p || (!p.subqueries && p.spark_stages === undefined)) return ""; // nothing sent to a node yet
  let text = `${p.subqueries_done}/${p.subqueries} sub-queries, ${p.rows_scanned.toLocaleString()} rows scanned`;
  if (p.node_stages !== undefined) text += `, node stages ${p.node_stages_done}/${p.node_stages}`;
  if (p.spark_stages !== undefined) text += `, Spark stages ${p.spark_stages_done}/${p.spark_stages}`;
  return text;
}

function showSummary(doc) {
  const parts = [doc.state];
  if (doc.row_count !== undefined) parts.push(`${doc.row_count.toLocaleString()} row(s)${doc.truncated ? " (truncated)" : ""}`);
  const t = doc.timings_ms || {};
  const timed = ["prepare", "queue", "execute", "total"].filter((k) => k in t).map((k) => `${k} ${t[k].toFixed(1)} ms`);
  if (timed.length) parts.push(timed.join(", "));
  if (doc.engine) parts.push(`engine ${doc.engine}`);
  if (doc.nodes && doc.nodes.length) parts.push(`nodes ${doc.nodes.join(", ")}`);
  if (doc.region) parts.push(`region ${doc.region}`);
  if (doc.state === "running" || doc.state === "queued") parts.push(progressText(doc.progress));
  if (doc.waiting_for) parts.push(`waiting for ${doc.waiting_for}`);
  $("summary").textContent = parts.filter(Boolean).join(" · ");
}

function showRows(columns, rows) {
  const table = $("rows");
  table.replaceChildren();
  const head = table.createTHead().insertRow();
  for (const column of columns) {
    const th = document.createElement("th");
    th.textContent = column.name;
    th.title = column.type;
    head.appendChild(th);
  }
  const body = table.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    row.forEach((value, i) => {
      if (value === null) cell(tr, "NULL", "null");
      else cell(tr, typeof value === "object" ? JSON.stringify(value) : String(value), NUMERIC.test(columns[i].type) ? "num" : "");
    });
  }
}

function setPager(statement) {
  const paged = statement && statement.chunks > 1;
  $("prev").disabled = !paged || statement.chunk === 0;
  $("next").disabled = !paged || statement.chunk + 1 >= statement.chunks;
  $("page").textContent = statement && statement.chunks ? `page ${statement.chunk + 1} of ${statement.chunks}` : "";
}

async function run(explain) {
  const sql = $("sql").value;
  if (!sql.trim()) return;
  hideError();
  $("plan").hidden = true;
  $("rows").replaceChildren();
  setPager(null);
  const body = { sql: explain ? `EXPLAIN ${sql}` : sql, wait: 0 };
  const tag = $("tag").value.trim();
  if (tag) body.tag = tag;
  let doc;
  try {
    doc = await api("POST", "/v1/statements", body);
  } catch (e) {
    $("summary").textContent = "";
    return showError(e);
  }
  const statement = { id: doc.id, explain, columns: null, chunk: 0, chunks: 0 };
  current = statement;
  $("stop").disabled = false;
  while (doc.state === "queued" || doc.state === "running") {
    showSummary(doc);
    try {
      doc = await api("GET", `/v1/statements/${encodeURIComponent(statement.id)}?wait=1`);
    } catch (e) {
      if (current === statement) $("stop").disabled = true;
      return showError(e);
    }
    if (current !== statement) return; // another query took the editor
  }
  $("stop").disabled = true;
  showSummary(doc);
  if (doc.state !== "succeeded") return showError(doc.error || { code: doc.state, message: "" });
  if (explain) {
    $("plan").textContent = doc.rows.map((row) => row[0]).join("\n");
    $("plan").hidden = false;
    return;
  }
  statement.columns = doc.columns;
  statement.chunks = doc.chunks;
  showRows(doc.columns, doc.rows);
  setPager(statement);
}

async function turnPage(step) {
  const statement = current;
  if (!statement || !statement.columns) return;
  const chunk = statement.chunk + step;
  try {
    const doc = await api("GET", `/v1/statements/${encodeURIComponent(statement.id)}/chunks/${chunk}`);
    statement.chunk = chunk;
    showRows(statement.columns, doc.rows);
    setPager(statement);
  } catch (e) {
    showError(e);
  }
}

async function cancel(id) {
  try {
    await api("DELETE", `/v1/statements/${encodeURIComponent(id)}`);
  } catch (e) {
    showError(e);
  }
}

function showStatements(doc) {
  const body = $("statements").tBodies[0];
  body.replaceChildren();
  for (const s of doc.statements) {
    const tr = body.insertRow();
    tr.dataset.id = s.id;
    cell(tr, s.id);
    cell(tr, s.error ? `${s.state} (${s.error})` : s.state, `state-${s.state}`);
    cell(tr, s.token || "-");
    cell(tr, s.engine || "-");
    cell(tr, progressText(s.progress) || "-");
    cell(tr, s.timings_ms.total !== undefined ? s.timings_ms.total.toFixed(1) : "", "num");
    cell(tr, s.sql, "sql").title = s.sql;
    const actions = cell(tr, "");
    if (s.state === "queued" || s.state === "running") {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "cancel";
      button.textContent = "cancel";
      button.addEventListener("click", () => cancel(s.id));
      actions.appendChild(button);
    }
  }
}

function drawQueue() {
  const svg = $("queue-chart");
  const now = Date.now() / 1000;
  while (queueHistory.length && queueHistory[0][0] < now - HISTORY_S) queueHistory.shift();
  const top = Math.max(1, ...queueHistory.map(([, q]) => q));
  const points = queueHistory.map(([t, q]) => `${(300 * (t - now + HISTORY_S)) / HISTORY_S},${58 - (56 * q) / top}`);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points.join(" "));
  const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
  title.textContent = `queue length, last ${HISTORY_S / 60} minutes (highest ${top})`;
  svg.replaceChildren(title, line);
}

function showRegion(doc) {
  $("region-name").textContent = `region ${doc.region} (${doc.backend})`;
  const states = Object.entries(doc.statements || {}).map(([k, v]) => `${k} ${v}`).join(", ");
  const draining = doc.draining ? ", DRAINING: no new statements" : "";
  $("region-summary").textContent =
    `queue ${doc.queue} of ${doc.queue_bound}, in flight ${doc.in_flight}${draining}` + (states ? `; statements: ${states}` : "");
  const body = $("nodes").tBodies[0];
  body.replaceChildren();
  for (const member of doc.members) {
    for (const node of member.nodes) {
      const tr = body.insertRow();
      tr.dataset.node = node.name;
      cell(tr, node.name);
      cell(tr, String(node.slots), "num");
      cell(tr, String(node.running), "num running");
      cell(tr, String(node.buffered), "num buffered");
      cell(tr, node.draining ? "draining" : node.ready ? "ready" : "full");
      cell(tr, String(node.tables), "num");
    }
  }
  queueHistory.push([Date.now() / 1000, doc.queue]);
  drawQueue();
  const spark = doc.spark;
  $("spark").textContent = spark
    ? `Spark: ${Object.entries(spark).filter(([, v]) => typeof v !== "object").map(([k, v]) => `${k} ${v}`).join(", ")}`
    : "Spark: not used by this region";
}

async function showRegions() {
  let doc;
  try {
    doc = await api("GET", "/v1/regions");
  } catch (e) {
    $("regions").hidden = true; // one region: nothing moves between regions
    return;
  }
  $("regions").hidden = false;
  const moved = doc.moved;
  $("moved").textContent =
    `balancing ${doc.method}: ${moved.pulled} pulled here, ${moved.handed_over} handed over, ${moved.came_back} came back`;
  const body = $("region-table").tBodies[0];
  body.replaceChildren();
  for (const region of doc.regions) {
    const tr = body.insertRow();
    const load = (doc.load || {})[region.name];
    cell(tr, region.name);
    cell(tr, region.url);
    if (!load) {
      cell(tr, "not answering");
      continue;
    }
    cell(tr, String(load.queued), "num");
    cell(tr, String(load.running), "num");
    cell(tr, String(load.servers), "num");
    cell(tr, load.draining ? "draining" : String(load.room), "num");
  }
}

function every(seconds, work) {
  const tick = async () => {
    try {
      await work();
    } catch (e) {
      if (!(e instanceof ApiError)) console.error(e);
    }
    setTimeout(tick, seconds * 1000);
  };
  tick();
}

document.addEventListener("DOMContentLoaded", () => {
  $("run").addEventListener("click", () => run(false));
  $("explain").addEventListener("click", () => run(true));
  $("stop").addEventListener("click", () => current && cancel(current.id));
  $("prev").addEventListener("click", () => turnPage(-1));
  $("next").addEventListener("click", () => turnPage(1));
  $("sql").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) run(false);
  });
  $("token-button").addEventListener("click", askToken);
  $("save-token").addEventListener("click", () => {
    token = $("token").value.trim();
    sessionStorage.setItem("cxg-token", token);
  });
  every(1, async () => showStatements(await api("GET", "/v1/statements?limit=20")));
  every(2, async () => {
    showRegion(await api("GET", "/v1/cluster"));
    await showRegions();
  });
});
