// jobservice web UI: progressive enhancement only. Every page works without this file.
//  - new-job form: file previews, type/size/duration checks before upload, model switching,
//    upload progress (XMLHttpRequest upload events), field errors from the server;
//  - job page: live status from the event stream (GET /jobs/<id>/stream), else by polling the JSON
//    API (GET /jobs/<id>); the preview of what a running job rendered so far (links.preview);
//    seeking from the validation timeline;
//  - jobs list: refreshes its rows while a job is unfinished.
(function () {
  "use strict";

  const STAGES = {
    queued: "Waiting in the queue",
    fetching: "Fetching the inputs",
    loading: "Loading the model",
    generating: "Generating frames",
    encoding: "Encoding the video",
    validating: "Checking the video",
    uploading: "Storing the result",
    done: "Done",
  };
  const TERMINAL = ["succeeded", "failed", "canceled"];
  // The accepted media types: the server's one table (jobservice.media.types), handed over as the
  // data-media-types attribute of this script's tag.
  const MEDIA = JSON.parse((document.querySelector("script[data-media-types]") || { dataset: {} }).dataset.mediaTypes || "[]");
  function mediaOf(kind) { return MEDIA.filter(function (t) { return t.kind === kind; }); }
  const IMAGE_TYPES = mediaOf("image").flatMap(function (t) { return [t.mime].concat(t.aliases); });
  const IMAGE_EXT = mediaOf("image").flatMap(function (t) { return t.extensions; });
  const AUDIO_EXT = mediaOf("audio").flatMap(function (t) { return t.extensions; });

  function $(sel, root) { return (root || document).querySelector(sel); }
  function $all(sel, root) { return Array.from((root || document).querySelectorAll(sel)); }
  function ext(name) { const i = name.lastIndexOf("."); return i < 0 ? "" : name.slice(i + 1).toLowerCase(); }
  function mb(bytes) { return bytes < 1048576 ? Math.ceil(bytes / 1024) + " kB" : (bytes / 1048576).toFixed(1) + " MB"; }

  // --- new-job form -------------------------------------------------------------------------
  function setError(form, name, message) {
    const slot = $('[data-error-for="' + name + '"]', form);
    if (slot) {
      slot.textContent = message || "";
      slot.classList.toggle("hidden", name === "__all__" && !message);
    }
    const field = $('[data-field="' + name + '"]', form) || (slot && slot.closest(".field"));
    if (field) field.classList.toggle("invalid", Boolean(message));
    const input = form.elements[name];
    if (input && input.setAttribute) {
      if (message) input.setAttribute("aria-invalid", "true"); else input.removeAttribute("aria-invalid");
    }
  }

  function clearErrors(form) {
    $all("[data-error-for]", form).forEach(function (slot) { setError(form, slot.dataset.errorFor, ""); });
  }

  function checkFile(form, input) {
    // Type and size now; image dimensions and audio duration once the preview has loaded.
    const name = input.name;
    const preview = document.getElementById(name + "-preview");
    if (preview) preview.textContent = "";
    input.setCustomValidity("");
    setError(form, name, "");
    const file = input.files && input.files[0];
    if (!file) return;
    const kind = input.dataset.kind;
    const okType = kind === "image"
      ? IMAGE_TYPES.includes(file.type) || IMAGE_EXT.includes(ext(file.name))
      : file.type.startsWith("audio/") || AUDIO_EXT.includes(ext(file.name));
    let problem = "";
    if (!okType) {
      problem = kind === "image" ? "This is not a PNG, JPEG or WebP image." : "This is not a WAV, MP3, FLAC, OGG or M4A file.";
    } else if (file.size > Number(input.dataset.maxBytes)) {
      problem = "The file is " + mb(file.size) + "; at most " + mb(Number(input.dataset.maxBytes)) + " is accepted.";
    } else if (file.size === 0) {
      problem = "The file is empty.";
    }
    if (problem) { fail(form, input, problem); return; }
    const url = URL.createObjectURL(file);
    if (kind === "image") {
      const img = new Image();
      img.alt = "Preview of " + file.name;
      img.onload = function () {
        const side = Number(form.dataset.minImageSide || 0);
        if (Math.min(img.naturalWidth, img.naturalHeight) < side) {
          fail(form, input, "The image is " + img.naturalWidth + "×" + img.naturalHeight + "; each side must be at least " + side + " px.");
        }
      };
      img.onerror = function () { fail(form, input, "The browser cannot read this image."); };
      img.src = url;
      preview.appendChild(img);
    } else {
      const audio = document.createElement("audio");
      audio.controls = true;
      audio.preload = "metadata";
      audio.setAttribute("aria-label", "Preview of " + file.name);
      const note = document.createElement("span");
      note.className = "hint";
      audio.addEventListener("loadedmetadata", function () {
        const d = audio.duration;
        const lo = Number(form.dataset.minAudioSeconds), hi = Number(form.dataset.maxAudioSeconds);
        if (isFinite(d)) {
          note.textContent = file.name + " · " + d.toFixed(2) + " s · " + mb(file.size);
          if (d < lo) fail(form, input, "The audio lasts " + d.toFixed(2) + " s; at least " + lo + " s is needed.");
          else if (d > hi) fail(form, input, "The audio lasts " + d.toFixed(1) + " s; at most " + hi + " s is accepted.");
        }
      });
      // Some containers the server accepts may not play here; the server's check decides then.
      audio.src = url;
      preview.appendChild(audio);
      preview.appendChild(note);
    }
  }

  function fail(form, input, message) {
    input.setCustomValidity(message);
    setError(form, input.name, message);
  }

  // A file field's drop zone: marked while files are dragged over it; dropped files become the
  // field's, then ``dropped(input)`` runs. The job form and the job-group form (groups.js) use it.
  function dropZone(zone, dropped) {
    const input = $("input[type=file]", zone);
    ["dragenter", "dragover"].forEach(function (ev) {
      zone.addEventListener(ev, function (e) { e.preventDefault(); zone.classList.add("dragover"); });
    });
    ["dragleave", "drop"].forEach(function (ev) {
      zone.addEventListener(ev, function () { zone.classList.remove("dragover"); });
    });
    zone.addEventListener("drop", function (e) {
      e.preventDefault();
      if (e.dataTransfer && e.dataTransfer.files.length) {
        input.files = e.dataTransfer.files;
        if (dropped) dropped(input);
      }
    });
  }

  function wireDrop(form, zone) {
    const input = $("input[type=file]", zone);
    dropZone(zone, function () { checkFile(form, input); });
    input.addEventListener("change", function () { checkFile(form, input); });
  }

  function wireModelSwitch(form) {
    const select = form.elements.model;
    const box = $("#model-params", form);
    if (!select || !box) return;
    select.addEventListener("change", function () {
      const old = {};
      $all("input, textarea, select", box).forEach(function (el) { if (el.name && el.value) old[el.name] = el.value; });
      const url = form.dataset.paramsUrl + "?task=" + encodeURIComponent(form.elements.task.value) +
        "&model=" + encodeURIComponent(select.value);
      fetch(url, { headers: { Accept: "text/html" } }).then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      }).then(function (html) {
        box.innerHTML = html;  // server-rendered and escaped
        $all("input, textarea, select", box).forEach(function (el) {
          if (el.name && old[el.name] !== undefined && el.type !== "checkbox") el.value = old[el.name];
        });
        const action = new URL(form.action, location.href);
        action.searchParams.set("model", select.value);
        form.action = action.pathname + action.search;
      }).catch(function () { setError(form, "__all__", "Could not load this model's parameters; reload the page."); });
    });
  }

  function wireSubmit(form) {
    const box = $("#upload-progress-box");
    const bar = $("#upload-progress");
    const status = $("#upload-status");
    const button = $("#submit-job");
    form.addEventListener("submit", function (e) {
      if (e.submitter && e.submitter.name === "change_model") return;
      e.preventDefault();
      const invalid = $all("input, textarea, select", form).find(function (el) { return !el.checkValidity(); });
      if (invalid) { invalid.reportValidity(); invalid.focus(); return; }
      clearErrors(form);
      button.disabled = true;
      box.classList.remove("hidden");
      bar.value = 0;
      status.textContent = "Starting the upload…";
      const above = Number(form.dataset.uploadAbove || 0);
      const big = $all('input[type="file"]', form).filter(function (input) {
        return input.files.length && input.files[0].size > above;
      });
      uploadAll(big, bar, status).then(function (ids) {
        const data = new FormData(form);
        ids.forEach(function (pair) { data.delete(pair[0]); data.set(pair[0], pair[1]); });
        send(data);
      }).catch(function (err) {
        button.disabled = false;
        setError(form, err.field || "__all__", err.message);
        status.textContent = "Upload failed.";
      });
    });

    function send(data) {
      const xhr = new XMLHttpRequest();
      xhr.open("POST", form.action);
      xhr.setRequestHeader("Accept", "application/json");
      xhr.upload.addEventListener("progress", function (ev) {
        if (!ev.lengthComputable) return;
        bar.value = Math.round((ev.loaded / ev.total) * 100);
        status.textContent = bar.value + "% of " + mb(ev.total);
      });
      xhr.upload.addEventListener("load", function () {
        bar.value = 100;
        status.textContent = "Uploaded; the server is checking the files…";
      });
      xhr.addEventListener("load", function () {
        let body = null;
        try { body = JSON.parse(xhr.responseText); } catch (err) { body = null; }
        if (xhr.status === 202 && body && body.url) {
          status.textContent = "Accepted; opening the job…";
          location.assign(body.url);
          return;
        }
        done();
        const fields = (body && body.fields) || {};
        Object.keys(fields).forEach(function (name) {
          const slot = $('[data-error-for="' + name + '"]', form);
          setError(form, slot ? name : "__all__", fields[name]);
        });
        if (!Object.keys(fields).length) {
          setError(form, "__all__", (body && body.error && body.error.message) || ("The server answered " + xhr.status + "."));
        }
        const first = $(".invalid input, .invalid textarea, .invalid select", form) || $("#form-error");
        if (first) first.focus && first.focus();
      });
      xhr.addEventListener("error", function () { done(); setError(form, "__all__", "The upload failed: the server could not be reached."); });
      xhr.addEventListener("abort", function () { done(); status.textContent = "Upload canceled."; });
      function done() { button.disabled = false; }
      xhr.send(data);
    }
  }

  // Direct uploads (POST /uploads): a large file goes in parts to where the API says (S3 itself, or
  // the API), each failed part sent again, then the job's form names the upload by its id.
  function refusal(body, fallback, field) {
    const err = new Error((body && body.error && body.error.message) || fallback);
    err.field = field;
    return err;
  }

  function api(method, url, body) {
    const init = { method: method, headers: { Accept: "application/json" } };
    if (body) { init.headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
    return fetch(url, init).then(function (r) {
      return r.json().catch(function () { return null; }).then(function (json) {
        if (!r.ok) throw refusal(json, "The server answered " + r.status + ".");
        return json;
      });
    });
  }

  function putPart(url, blob, onProgress, triesLeft) {
    return new Promise(function (resolve, reject) {
      const xhr = new XMLHttpRequest();
      xhr.open("PUT", url);
      xhr.upload.addEventListener("progress", function (ev) { onProgress(ev.loaded); });
      xhr.addEventListener("load", function () {
        if (xhr.status < 300) { resolve(); return; }
        const retry = xhr.status >= 500 || xhr.status === 429;
        reject(Object.assign(new Error("A part was refused (" + xhr.status + ")."), { retry: retry }));
      });
      xhr.addEventListener("error", function () { reject(Object.assign(new Error("A part did not arrive."), { retry: true })); });
      xhr.send(blob);
    }).catch(function (err) {
      if (!err.retry || triesLeft <= 0) throw err;
      onProgress(0);
      return new Promise(function (r) { setTimeout(r, 1000); }).then(function () {
        return putPart(url, blob, onProgress, triesLeft - 1);
      });
    });
  }

  const TYPES = {};  // extension -> the type a direct upload declares
  MEDIA.forEach(function (t) { t.extensions.forEach(function (e) { TYPES[e] = t.mime; }); });

  // One file as a direct upload: declared, its parts PUT (onProgress(bytes of the part so far),
  // onPart(part) once a part is in), then completed; resolves to the ready upload's view. The job
  // form and the job-group page (groups.js, through window.jobserviceUploads) both use it.
  function uploadFile(file, onProgress, onPart) {
    const declared = { filename: file.name, size: file.size, content_type: TYPES[ext(file.name)] || file.type || "application/octet-stream" };
    return api("POST", "/uploads", declared).then(function (view) {
      let parts = Promise.resolve();
      view.parts.forEach(function (part) {
        parts = parts.then(function () {
          return putPart(part.url, file.slice(part.offset, part.offset + part.size), onProgress, 3).then(function () {
            onPart(part);
          });
        });
      });
      return parts.then(function () { return api("POST", view.complete_url); });
    });
  }
  window.jobserviceUploads = { uploadFile: uploadFile, dropZone: dropZone };

  function uploadAll(inputs, bar, status) {
    const total = inputs.reduce(function (sum, input) { return sum + input.files[0].size; }, 0);
    let sent = 0;
    function show(current) {
      bar.value = total ? Math.round(((sent + current) / total) * 100) : 100;
      status.textContent = bar.value + "% of " + mb(total);
    }
    let chain = Promise.resolve([]);
    inputs.forEach(function (input) {
      const file = input.files[0];
      chain = chain.then(function (ids) {
        const onPart = function (part) {
          sent += part.size;
          show(0);
          if (sent >= total) status.textContent = "Checking " + file.name + "…";
        };
        return uploadFile(file, show, onPart).catch(function (err) { err.field = input.name; throw err; })
          .then(function (ready) { return ids.concat([[input.name, ready.id]]); });
      });
    });
    return chain;
  }

  function initForm() {
    const form = $("#job-form");
    if (!form) return;
    $all(".drop", form).forEach(function (zone) { wireDrop(form, zone); });
    wireModelSwitch(form);
    wireSubmit(form);
  }

  // --- job page ------------------------------------------------------------------------------
  function poller(fn, firstDelay) {
    let timer = null;
    function schedule(ms) { timer = setTimeout(tick, ms); }
    function tick() {
      if (document.hidden) { schedule(1000); return; }
      fn().then(function (next) { if (next) schedule(next); }).catch(function () { schedule(5000); });
    }
    schedule(firstDelay);
    return function () { clearTimeout(timer); };
  }

  function etaWords(iso, verb) {
    // The same words as the server's (jobservice.fleet.views.eta_words).
    if (!iso) return "";
    const s = (Date.parse(iso) - Date.now()) / 1000;
    if (isNaN(s)) return "";
    if (s < 20) return verb + " any moment";
    if (s < 90) return verb + " in about a minute";
    if (s < 3600) return verb + " in about " + Math.round(s / 60) + " min";
    const h = s / 3600;
    if (s < 48 * 3600) return verb + " in about " + (h < 10 ? h.toFixed(1) : Math.round(h)) + " h";
    return verb + " in about " + Math.round(s / 86400) + " days";
  }

  function etaText(job) {
    if (job.eta_basis === "no_group") return "no card group online can run this model";
    const words = job.status === "queued" ? etaWords(job.estimated_start_at, "starts")
      : job.status === "running" ? etaWords(job.estimated_finish_at, "ends") : "";
    if (!words) return "";
    return words + (job.eta_basis === "not_measured" ? " (a guess: this model's speed is not measured yet)" : "");
  }

  function showShare(live, job) {
    // The tenant's share of the cards, and the ETA's moves with their causes (newest first).
    const share = $('[data-role="share"]', live);
    if (share) {
      share.hidden = !(job.status === "queued" && job.fair_share);
      share.textContent = job.fair_share ? job.fair_share.text : "";
    }
    const list = $('[data-role="revisions"]', live);
    if (!list) return;
    const revisions = (job.eta_revisions || []).slice(-5).reverse();
    list.hidden = revisions.length === 0 || TERMINAL.includes(job.status);
    list.replaceChildren.apply(list, revisions.map(function (r) {
      const item = document.createElement("li");
      item.textContent = utcText(r.at) + ": start " + utcText(r.old) + " \u2192 " + utcText(r.new) + " (" + r.cause + ")";
      return item;
    }));
  }

  function utcText(iso) {
    // "2026-12-06 04:55:00 UTC", as the page's own "utc" filter writes it.
    return String(iso).replace("T", " ").slice(0, 19) + " UTC";
  }

  function showJob(live, job) {
    // Draw a job view (the JSON of GET /jobs/<id>) into the page; true once the job has ended.
    const pct = Math.round(job.progress * 100);
    $all('[data-role="progress"]').forEach(function (p) { p.value = job.progress; p.textContent = pct + "%"; });
    $('[data-role="percent"]', live).textContent = pct + "%";
    const badge = $('[data-role="status"]');
    badge.textContent = job.status;
    badge.className = "badge badge-" + job.status;
    $('[data-role="stage"]', live).textContent = job.cancel_requested
      ? "Stopping (cancel requested)" : (STAGES[job.stage] || job.stage);
    const q = job.queue_position;
    $('[data-role="queue"]', live).textContent = q === null || q === undefined ? "" : (q === 0 ? " · next in line" : " · " + q + " ahead");
    const eta = etaText(job);
    $('[data-role="eta"]', live).textContent = eta ? " · " + eta : "";
    showShare(live, job);
    const cancel = $("#cancel-job");
    if (cancel && job.cancel_requested) cancel.disabled = true;
    showPreview(job);
    return TERMINAL.includes(job.status);
  }

  function showPreview(job) {
    // A running job's preview (links.preview): what it has rendered so far, not yet validated. A
    // new one keeps the viewer's place and play state; at the job's end the page reloads and
    // shows the validated video instead.
    const box = $("#render-preview");
    if (!box) return;
    const p = job.preview;
    let video = $("#preview-video", box);
    if (TERMINAL.includes(job.status)) {
      // Ended: its preview is gone (404 preview_replaced); stop reading it before the page reloads.
      if (!video) return;
      video.pause();
      video.removeAttribute("src");
      video.load();
      return;
    }
    const text = $('[data-role="preview-text"]', box);
    const label = $('[data-role="preview-label"]', box);
    if (!p || p.state === "waiting") { box.hidden = true; return; }
    box.hidden = false;
    if (p.state !== "ready") {
      if (video) video.hidden = true;
      label.hidden = true;
      text.textContent = "No preview: " + (p.message || "this model hands over its video only once it is finished.");
      return;
    }
    if (!video) {  // the page was drawn before the first preview: the player comes with it
      video = document.createElement("video");
      video.id = "preview-video";
      video.controls = video.muted = video.playsInline = true;
      video.preload = "auto";
      box.insertBefore(video, text);
    }
    video.hidden = false;
    label.hidden = false;
    text.textContent = "What has been rendered so far (" + Number(p.seconds || 0).toFixed(1) + " s, preview "
      + p.number + "); the checked video replaces it when the job ends.";
    const url = job.links.preview;
    if (!url || video.dataset.src === url) return;
    const at = video.currentTime || 0;
    const playing = !video.paused && !video.ended;
    video.dataset.src = url;
    video.addEventListener("loadedmetadata", function resume() {
      video.removeEventListener("loadedmetadata", resume);
      if (at) video.currentTime = Math.min(at, isFinite(video.duration) ? video.duration : at);
      if (playing) video.play().catch(function () { /* autoplay refused: the viewer presses play */ });
    });
    video.src = url;
  }

  // A message shown once ("The job was canceled.") would vanish with the reload that follows the
  // job's end a moment later; it is carried over that one reload.
  const FLASH_KEY = "jobservice.flashes";
  function reloadFinished() {
    const shown = $all(".flashes .flash").map(function (p) { return { cls: p.className, role: p.getAttribute("role"), text: p.textContent }; });
    try { if (shown.length) sessionStorage.setItem(FLASH_KEY, JSON.stringify(shown)); } catch (e) { /* storage off: lose it */ }
    location.reload();
  }

  function restoreFlashes() {
    let kept = null;
    try { kept = JSON.parse(sessionStorage.getItem(FLASH_KEY) || "null"); sessionStorage.removeItem(FLASH_KEY); } catch (e) { return; }
    const main = $("#main");
    if (!Array.isArray(kept) || !kept.length || !main || $(".flashes", main)) return;
    const box = document.createElement("div");
    box.className = "flashes";
    kept.forEach(function (m) {
      const p = document.createElement("p");
      p.className = String(m.cls);
      p.setAttribute("role", m.role === "alert" ? "alert" : "status");
      p.textContent = String(m.text);
      box.appendChild(p);
    });
    main.insertBefore(box, main.firstChild);
  }

  function pollJob(live, firstDelay) {
    live.dataset.live = "poll";
    poller(function () {
      return fetch(live.dataset.pollUrl, { headers: { Accept: "application/json" } }).then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        const after = Number(r.headers.get("X-Poll-After-Ms")) || 1000;
        return r.json().then(function (job) {
          if (showJob(live, job)) { reloadFinished(); return 0; }
          return after;
        });
      });
    }, firstDelay);
  }

  function streamJob(live) {
    // Live events (GET /jobs/<id>/stream). EventSource reconnects by itself when the server closes
    // a long stream, resuming with Last-Event-ID; when it gives up, or keeps failing, we poll.
    const source = new EventSource(live.dataset.streamUrl);
    let failures = 0;
    function onView(e) { showJob(live, JSON.parse(e.data)); }
    ["status", "stage", "preview", "progress", "queue_position", "eta"].forEach(function (name) {
      source.addEventListener(name, onView);
    });
    source.addEventListener("end", function (e) {
      source.close();
      showJob(live, JSON.parse(e.data));
      reloadFinished();  // the finished page has the video, the checks and the report
    });
    source.addEventListener("open", function () {
      failures = 0;  // the server closes long streams now and then: each reopening is a success
      live.dataset.live = "stream";
    });
    source.addEventListener("error", function () {
      failures += 1;
      if (source.readyState === EventSource.CLOSED || failures >= 3) {
        source.close();
        pollJob(live, 500);
      }
    });
  }

  function initJob() {
    const live = $("#live");
    if (!live || live.dataset.terminal === "1") { initTimeline(); return; }
    if (window.EventSource && live.dataset.streamUrl) streamJob(live);
    else pollJob(live, 500);
  }

  function initTimeline() {
    const video = $("#result-video");
    const chart = $("#timeline");
    if (!video || !chart) return;
    const duration = Number(chart.dataset.duration);
    $all(".tl-track", chart).forEach(function (svg) {
      svg.addEventListener("click", function (e) {
        const box = svg.getBoundingClientRect();
        const frac = Math.min(1, Math.max(0, (e.clientX - box.left) / box.width));
        video.currentTime = frac * (isFinite(video.duration) ? video.duration : duration);
      });
    });
    video.addEventListener("timeupdate", function () {
      const pct = Math.min(100, (video.currentTime / duration) * 100) + "%";
      $all(".playhead", chart).forEach(function (line) { line.setAttribute("x1", pct); line.setAttribute("x2", pct); });
    });
  }

  // --- jobs list -----------------------------------------------------------------------------
  function initList() {
    if (!$("#job-rows")) return;
    poller(function () {
      const rows = $("#job-rows");
      if (rows.dataset.live !== "1") return Promise.resolve(5000);
      return fetch(rows.dataset.rowsUrl, { headers: { Accept: "text/html" } }).then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      }).then(function (html) {
        const holder = document.createElement("table");
        holder.innerHTML = html;  // server-rendered and escaped
        const fresh = $("tbody", holder);
        if (fresh) rows.replaceWith(fresh);
        return 2000;
      });
    }, 2000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    restoreFlashes();
    initForm();
    initJob();
    initList();
  });
})();
