// Job-group pages (jobservice/http/web/groups.py). Without this script the pages work: the form
// posts the manifest, and a group's page refreshes itself while the group runs.
//
// - The new-group form: a manifest and a folder can be dropped on their fields. When a folder is
//   given, every input cell (image, audio) that names one of its files by name is uploaded first
//   as a direct upload (POST /uploads, its parts, complete: app.js's uploader) and rewritten to
//   upload:<id>; then the rewritten manifest is posted.
// - A group's page follows the group's live events (GET /job-groups/<id>/stream) and reloads once
//   every job has ended; it polls when the stream is unavailable.
(function () {
  "use strict";

  const INPUT_COLUMNS = ["image", "audio"];
  function $(sel, root) { return (root || document).querySelector(sel); }
  function $all(sel, root) { return Array.from((root || document).querySelectorAll(sel)); }

  // --- CSV (RFC 4180) and JSON Lines -----------------------------------------------------------
  function parseCsv(text) {
    const rows = [];
    let row = [], cell = "", quoted = false;
    for (let i = 0; i < text.length; i += 1) {
      const c = text[i];
      if (quoted) {
        if (c === '"' && text[i + 1] === '"') { cell += '"'; i += 1; }
        else if (c === '"') quoted = false;
        else cell += c;
      } else if (c === '"') quoted = true;
      else if (c === ",") { row.push(cell); cell = ""; }
      else if (c === "\n" || c === "\r") {
        if (c === "\r" && text[i + 1] === "\n") i += 1;
        row.push(cell); rows.push(row); row = []; cell = "";
      } else cell += c;
    }
    if (cell !== "" || row.length) { row.push(cell); rows.push(row); }
    return rows;
  }
  function csvCell(value) { return /[",\r\n]/.test(value) ? '"' + value.replace(/"/g, '""') + '"' : value; }
  function writeCsv(rows) { return rows.map(function (r) { return r.map(csvCell).join(","); }).join("\r\n") + "\r\n"; }

  function isReference(value) { return /^(key:|upload:|https?:\/\/)/i.test(value.trim()); }

  // Each input cell naming a file of the folder, as [cell getter, cell setter, file name].
  function inputCells(text, isJsonl) {
    const cells = [];
    if (isJsonl) {
      const lines = text.replace(/^\ufeff/, "").split("\n").map(function (line) {
        if (!line.trim()) return line;
        try { return JSON.parse(line); } catch (e) { return line; }  // the server names bad lines
      });
      lines.forEach(function (obj) {
        if (!obj || typeof obj !== "object") return;
        INPUT_COLUMNS.forEach(function (name) {
          if (typeof obj[name] === "string" && obj[name].trim() && !isReference(obj[name])) {
            cells.push({ name: obj[name].trim(), set: function (v) { obj[name] = v; } });
          }
        });
      });
      return { cells: cells, write: function () {
        return lines.map(function (l) { return typeof l === "string" ? l : JSON.stringify(l); }).join("\n");
      } };
    }
    const rows = parseCsv(text.replace(/^\ufeff/, ""));
    const header = (rows[0] || []).map(function (h) { return h.trim(); });
    INPUT_COLUMNS.forEach(function (name) {
      const at = header.indexOf(name);
      if (at < 0) return;
      rows.slice(1).forEach(function (row) {
        const value = row[at];
        if (value && value.trim() && !isReference(value)) {
          cells.push({ name: value.trim(), set: function (v) { row[at] = v; } });
        }
      });
    });
    return { cells: cells, write: function () { return writeCsv(rows); } };
  }

  function fileIndex(files) {
    const found = {};
    files.forEach(function (f) {
      const path = f.webkitRelativePath || f.name;
      found[path] = f;
      found[path.split("/").slice(1).join("/")] = found[path.split("/").slice(1).join("/")] || f;
      found[f.name] = found[f.name] || f;
    });
    return found;
  }

  // A folder's file as a direct upload, the job form's way (app.js: declare, PUT the parts, complete).
  function upload(file) {
    if (!window.jobserviceUploads) return Promise.reject(new Error("The page's uploader did not load; reload the page."));
    return window.jobserviceUploads.uploadFile(file, function () {}, function () {}).then(function (ready) {
      return "upload:" + ready.id;
    }, function (err) {
      throw new Error("Uploading " + file.name + " failed: " + err.message);
    });
  }

  function showProblems(form, error) {
    const old = $("#manifest-problems", form);
    if (old) old.closest(".table-wrap").remove();
    const slot = $("#form-error", form);
    slot.textContent = error.message || "The group was refused.";
    slot.classList.remove("hidden");
    const rows = (error.details || []).filter(function (d) { return d.row; });
    if (!rows.length) return;
    const wrap = document.createElement("div");
    wrap.className = "table-wrap";
    const table = document.createElement("table");
    table.id = "manifest-problems";
    table.innerHTML = "<caption>Problems in the manifest (nothing was created)</caption><thead><tr>" +
      "<th scope='col' class='num'>Row</th><th scope='col' class='num'>Line</th><th scope='col'>Column</th>" +
      "<th scope='col'>Problem</th></tr></thead><tbody></tbody>";
    rows.forEach(function (d) {
      const tr = document.createElement("tr");
      [d.row, d.line || "", d.column || "–", d.message].forEach(function (v, i) {
        const td = document.createElement("td");
        td.textContent = String(v);
        if (i < 2) td.className = "num";
        tr.appendChild(td);
      });
      $("tbody", table).appendChild(tr);
    });
    wrap.appendChild(table);
    slot.after(wrap);
  }

  function submitWithFolder(form, folder) {
    const manifest = $("#f-manifest", form).files[0];
    const status = $("#group-status", form);
    const token = $("input[name=csrf_token]", form).value;
    const isJsonl = /\.(jsonl|ndjson)$/i.test(manifest.name);
    return manifest.text().then(function (text) {
      const parsed = inputCells(text, isJsonl);
      const files = fileIndex(folder);
      const missing = parsed.cells.filter(function (c) { return !files[c.name]; });
      if (missing.length) throw new Error("The folder has no file '" + missing[0].name + "' that the manifest names.");
      const ids = {};
      const names = Array.from(new Set(parsed.cells.map(function (c) { return c.name; })));
      return names.reduce(function (chain, name, i) {
        return chain.then(function () {
          status.textContent = "Uploading " + (i + 1) + " of " + names.length + ": " + name;
          return upload(files[name]).then(function (id) { ids[name] = id; });
        });
      }, Promise.resolve()).then(function () {
        parsed.cells.forEach(function (c) { c.set(ids[c.name]); });
        const body = new FormData();
        body.append("csrf_token", token);
        body.append("name", $("#f-name", form).value);
        body.append("manifest", new Blob([parsed.write()], { type: isJsonl ? "application/x-ndjson" : "text/csv" }), manifest.name);
        status.textContent = "Checking " + manifest.name + "…";
        return fetch(form.action, { method: "POST", body: body, headers: { Accept: "application/json" } });
      });
    }).then(function (r) {
      return r.json().then(function (body) {
        if (r.status === 202 && body.url) { window.location.assign(body.url); return; }
        showProblems(form, body.error || {});
        status.textContent = "";
      });
    });
  }

  function initForm() {
    const form = $("#group-form");
    if (!form) return;
    if (window.jobserviceUploads) $all(".drop", form).forEach(function (zone) { window.jobserviceUploads.dropZone(zone); });
    form.addEventListener("submit", function (e) {
      const folder = Array.from($("#f-files", form).files || []);
      if (!folder.length || !$("#f-manifest", form).files.length) return;  // a plain form post
      e.preventDefault();
      const button = $("button[type=submit]", form);
      button.disabled = true;
      submitWithFolder(form, folder).catch(function (err) {
        showProblems(form, { message: err.message });
        $("#group-status", form).textContent = "";
      }).then(function () { button.disabled = false; });
    });
  }

  // --- a group's page ---------------------------------------------------------------------------
  function showGroup(live, group) {
    const p = group.progress;
    const pct = (p.fraction * 100).toFixed(1);
    $all('[data-role="progress"]', live).forEach(function (bar) { bar.value = p.fraction; bar.textContent = pct + "%"; });
    $('[data-role="percent"]', live).textContent = pct + " %";
    $('[data-role="counts"]', live).textContent = p.queued + " queued, " + p.running + " running, " + p.succeeded +
      " succeeded, " + p.failed + " failed, " + p.canceled + " canceled of " + p.total;
    const badge = $('[data-role="status"]');
    if (badge) { badge.textContent = group.status; badge.className = "badge badge-" + group.status; }
    return group.status === "finished" || group.status === "canceled";
  }

  function pollGroup(live) {
    function tick() {
      fetch(live.dataset.pollUrl, { headers: { Accept: "application/json" } }).then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      }).then(function (group) {
        if (showGroup(live, group)) window.location.reload();
        else setTimeout(tick, 2000);
      }).catch(function () { setTimeout(tick, 5000); });
    }
    setTimeout(tick, 500);
  }

  function initGroup() {
    const live = $("#group-live");
    if (!live || live.dataset.ended === "1") return;
    if (!window.EventSource) { pollGroup(live); return; }
    const source = new EventSource(live.dataset.streamUrl);
    let failures = 0;
    ["status", "progress"].forEach(function (name) {
      source.addEventListener(name, function (e) { showGroup(live, JSON.parse(e.data)); });
    });
    source.addEventListener("end", function (e) {
      source.close();
      showGroup(live, JSON.parse(e.data));
      window.location.reload();  // the rows' final states, verdicts and videos
    });
    source.addEventListener("open", function () { failures = 0; });
    source.addEventListener("error", function () {
      failures += 1;
      if (source.readyState === EventSource.CLOSED || failures >= 3) { source.close(); pollGroup(live); }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    initForm();
    initGroup();
  });
})();
