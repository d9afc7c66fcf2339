// The playground page: inputs, the policy chain, evaluation on every edit, the state in the URL.

import initManifests, { notBuiltAsPlanned, readManifests, readSettings } from "./pkg/nicpolicy_playground.js";
import { JsPolicy, evaluateChain, renderText } from "./decide.js";
import { picture } from "./picture.js";

const base = new URL(".", import.meta.url);
const $ = (selector, root = document) => root.querySelector(selector);
const INPUTS = ["cluster", "machines", "inventory"];

/** One-click examples: files of the repository's examples/ (copied into the page). */
const EXAMPLES = {
  readme: {
    chain: [{ policy: "capvcd", settings: "" }],
    cluster: "examples/cluster.yaml",
    machines: "examples/machine.yaml",
    inventory: "examples/inventory.yaml",
  },
  invalid: {
    chain: [{ policy: "capvcd", settings: "examples/settings.yaml" }],
    cluster: "examples/cluster.yaml",
    machines: "examples/invalid-machine.yaml",
    inventory: "examples/inventory.yaml",
  },
  multizone: {
    chain: [{ policy: "capvcd", settings: "" }],
    cluster: "examples/cluster-multizone.yaml",
    machines: "",
    inventory: "examples/inventory-multizone.yaml",
  },
};

const policies = new Map(); // built-in name -> JsPolicy
let chainState = []; // [{policy: name, settings: text}]

async function main() {
  const [index] = await Promise.all([
    fetch(new URL("pkg/policies.json", base)).then((r) => r.json()),
    initManifests({ module_or_path: new URL("pkg/nicpolicy_playground_bg.wasm", base) }),
  ]);
  for (const { name, module } of index) {
    policies.set(name, await JsPolicy.load(name, module, base));
  }
  for (const id of INPUTS) {
    const area = $(`#${id}`);
    area.addEventListener("input", schedule);
    dropInto(area);
  }
  $("#add-policy").addEventListener("click", () => {
    chainState.push({ policy: policies.has("capvcd") ? "capvcd" : [...policies.keys()][0], settings: "" });
    drawChain();
    schedule();
  });
  for (const button of document.querySelectorAll("[data-example]")) {
    button.addEventListener("click", () => loadExample(button.dataset.example));
  }
  $("#share").addEventListener("click", async () => {
    await saveState();
    await navigator.clipboard?.writeText(location.href).catch(() => {});
    $("#share").textContent = "Link copied";
    setTimeout(() => ($("#share").textContent = "Copy link"), 1500);
  });
  window.addEventListener("hashchange", async () => {
    if (location.hash !== lastHash) await restore();
  });
  await restore();
}

/** Puts the state of the URL (or the README example) into the inputs and evaluates. */
async function restore() {
  const state = await readHash();
  if (!state) return loadExample("readme");
  chainState = (state.chain ?? []).filter((entry) => policies.has(entry.policy));
  if (chainState.length === 0) chainState = [{ policy: "capvcd", settings: "" }];
  for (const id of INPUTS) $(`#${id}`).value = state[id] ?? "";
  drawChain();
  evaluate();
}

async function loadExample(name) {
  const example = EXAMPLES[name];
  const text = (path) => (path ? fetch(new URL(path, base)).then((r) => r.text()) : "");
  const [cluster, machines, inventory, ...settings] = await Promise.all([
    text(example.cluster),
    text(example.machines),
    text(example.inventory),
    ...example.chain.map((entry) => text(entry.settings)),
  ]);
  chainState = example.chain.map((entry, i) => ({ policy: entry.policy, settings: settings[i] }));
  $("#cluster").value = cluster;
  $("#machines").value = machines;
  $("#inventory").value = inventory;
  drawChain();
  evaluate();
}

function drawChain() {
  const list = $("#chain");
  list.replaceChildren();
  chainState.forEach((entry, i) => {
    const item = $("#chain-entry").content.firstElementChild.cloneNode(true);
    const select = $(".policy", item);
    for (const [name, policy] of policies) {
      select.append(new Option(`builtin:${name}`, name, false, name === entry.policy));
    }
    const meta = policies.get(entry.policy)?.metadata;
    $(".meta", item).textContent = meta ? `${meta.name} ${meta.version}` : "";
    $(".meta", item).title = meta?.description ?? "";
    select.addEventListener("change", () => {
      entry.policy = select.value;
      drawChain();
      schedule();
    });
    const settings = $(".settings", item);
    settings.value = entry.settings;
    settings.addEventListener("input", () => {
      entry.settings = settings.value;
      schedule();
    });
    dropInto(settings, () => {
      entry.settings = settings.value;
    });
    const remove = $(".remove", item);
    remove.disabled = chainState.length === 1;
    remove.addEventListener("click", () => {
      chainState.splice(i, 1);
      drawChain();
      schedule();
    });
    list.append(item);
  });
}

/** Files dropped on a text area replace its text. */
function dropInto(area, changed = () => {}) {
  area.addEventListener("dragover", (event) => {
    event.preventDefault();
    area.classList.add("dragging");
  });
  area.addEventListener("dragleave", () => area.classList.remove("dragging"));
  area.addEventListener("drop", async (event) => {
    event.preventDefault();
    area.classList.remove("dragging");
    const files = [...(event.dataTransfer?.files ?? [])];
    if (files.length === 0) return;
    // Several files become several documents, as kubectl reads a directory.
    const texts = await Promise.all(files.map((file) => file.text()));
    area.value = texts.join("\n---\n");
    changed();
    schedule();
  });
}

let timer = null;
function schedule() {
  clearTimeout(timer);
  timer = setTimeout(evaluate, 200);
}

function showError(box, errors) {
  box.hidden = errors.length === 0;
  box.replaceChildren(
    ...errors.map((error) => {
      const line = document.createElement("div");
      line.className = "error-line";
      if (error.line) {
        const at = document.createElement("a");
        at.href = "#";
        at.className = "at";
        at.textContent = `line ${error.line}${error.column ? `, column ${error.column}` : ""}`;
        at.addEventListener("click", (event) => {
          event.preventDefault();
          selectLine(box.parentElement.querySelector("textarea"), error.line);
        });
        line.append(at, " ");
      }
      if (error.field) {
        const field = document.createElement("code");
        field.className = "field";
        field.textContent = error.field;
        line.append(field, " ");
      }
      line.append(reason(error));
      return line;
    }),
  );
}

/** The message without the input's name, line and field, which the error box shows apart. */
function reason(error) {
  let text = error.message;
  const location = text.match(/^[^:]*(?::\d+)*: /);
  if (location && location[0].startsWith(error.input)) text = text.slice(location[0].length);
  if (error.field && text.startsWith(`${error.field}: `)) text = text.slice(error.field.length + 2);
  return text;
}

function selectLine(area, number) {
  const lines = area.value.split("\n");
  const start = lines.slice(0, number - 1).reduce((sum, line) => sum + line.length + 1, 0);
  area.focus();
  area.setSelectionRange(start, start + (lines[number - 1]?.length ?? 0));
}

/** Reads the settings of every chain entry; null when one is unusable (errors shown). */
function loadChain() {
  const chain = [];
  let ok = true;
  $("#chain")
    .querySelectorAll(".chain-entry")
    .forEach((item, i) => {
      const entry = chainState[i];
      const policy = policies.get(entry.policy);
      const label = chainState.length > 1 ? `settings of policy ${i + 1}` : "settings";
      const read = JSON.parse(readSettings(label, entry.settings));
      let errors = [];
      if (read.error) {
        errors = [read.error];
      } else {
        const verdict = policy.validateSettings(read.settings);
        if (!verdict.valid) errors = [{ message: `settings refused by the policy: ${verdict.message}` }];
      }
      showError($(".error", item), errors);
      item.classList.toggle("invalid", errors.length > 0);
      ok &&= errors.length === 0;
      chain.push({ policy, settings: read.settings ?? null });
    });
  return ok ? chain : null;
}

async function evaluate() {
  try {
    render();
    await saveState();
  } finally {
    // Tests wait for this: what is on screen belongs to the current inputs.
    document.body.dataset.evaluations = String(Number(document.body.dataset.evaluations ?? 0) + 1);
  }
}

function render() {
  const chain = loadChain();
  let outcome;
  try {
    outcome = JSON.parse(readManifests($("#cluster").value, $("#machines").value, $("#inventory").value));
  } catch (err) {
    // The reader never panics on bad input; should it trap all the same, say so and keep going.
    outcome = { machines: [], errors: [{ input: "cluster", message: `the manifest reader failed: ${err.message ?? err}` }] };
  }
  const byInput = Object.fromEntries(INPUTS.map((id) => [id, []]));
  for (const error of outcome.errors) (byInput[error.input] ?? byInput.machines).push(error);
  for (const machine of outcome.machines) {
    if (machine.error) (byInput[machine.error.input] ?? byInput.machines).push(machine.error);
  }
  for (const id of INPUTS) {
    // One message per distinct error: every machine of a file reports a cluster error again.
    const unique = [...new Map(byInput[id].map((e) => [e.message, e])).values()];
    showError($(`#${id}-error`), unique);
    $(`#${id}`).classList.toggle("invalid", unique.length > 0);
  }
  const out = $("#machines-out");
  out.replaceChildren();
  const status = $("#status");
  if (!chain) {
    status.textContent = "Fix the policy settings to see the decisions.";
    status.className = "status problem";
    return;
  }
  const results = outcome.machines.map((machine) => withUnapplied({ machine, ...(machine.request ? evaluateChain(chain, machine.request) : {}) }));
  const denied = results.filter((r) => r.decision && !r.decision.allowed).length;
  const broken = results.filter((r) => !r.decision).length;
  const total = results.length;
  status.className = `status ${denied || broken || outcome.errors.length ? "problem" : "good"}`;
  status.textContent =
    total === 0
      ? "No machine to evaluate yet."
      : `${total} machine${total === 1 ? "" : "s"}: ${total - denied - broken} allowed, ${denied} denied` +
        (broken ? `, ${broken} not evaluated` : "");
  for (const result of results) out.append(card(result, chain));
}

/**
 * The plan fields stock CAPVCD will not build, found and worded by the host's own rule, added to
 * the decision as the webhook adds them: a warning each.
 */
function withUnapplied(result) {
  if (!result.decision) return { ...result, unapplied: [] };
  const found = JSON.parse(notBuiltAsPlanned(JSON.stringify(result.machine.request), JSON.stringify(result.decision)));
  if (found.error) return { ...result, unapplied: [] };
  const warnings = [...result.decision.warnings, ...found.warnings];
  return { ...result, unapplied: found.unapplied, decision: { ...result.decision, warnings } };
}

function card({ machine, decision, failure, unapplied }, chain) {
  const section = document.createElement("article");
  section.className = "machine";
  section.dataset.name = machine.name;
  const verdict = decision ? (decision.allowed ? "allowed" : "denied") : "error";
  section.dataset.decision = verdict;
  const where = machine.position ? ` · ${machine.input}, ${machine.position}` : ` · ${machine.input}`;
  section.innerHTML =
    `<header><span class="badge ${verdict}">${verdict}</span><h3></h3><span class="where"></span></header>`;
  $("h3", section).textContent = `${machine.kind} ${machine.name}`;
  $(".where", section).textContent = where;
  if (!decision) {
    const problem = document.createElement("p");
    problem.className = "failure";
    problem.textContent = failure ?? machine.error?.message ?? "no request";
    section.append(problem);
    return section;
  }
  const tabs = document.createElement("div");
  tabs.className = "tabs";
  const views = {
    Picture: () => {
      const holder = document.createElement("div");
      holder.className = "picture-holder";
      holder.innerHTML = picture(machine.request, decision, unapplied);
      return holder;
    },
    "nicpolicy eval": () => {
      const pre = document.createElement("pre");
      pre.className = "eval";
      pre.textContent = renderText(machine.request, chain, decision, unapplied);
      return pre;
    },
    JSON: () => {
      const pre = document.createElement("pre");
      pre.className = "json";
      pre.textContent = JSON.stringify({ request: machine.request, decision }, null, 2);
      return pre;
    },
  };
  const body = document.createElement("div");
  body.className = "view";
  for (const [name, make] of Object.entries(views)) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = name;
    button.dataset.view = name;
    button.addEventListener("click", () => {
      tabs.querySelectorAll("button").forEach((b) => b.classList.toggle("active", b === button));
      body.replaceChildren(make());
    });
    tabs.append(button);
  }
  // The picture, and below it the violations and warnings as text, are shown at once.
  tabs.firstChild.classList.add("active");
  body.append(views.Picture());
  section.append(tabs, body, findings(decision));
  return section;
}

function findings(decision) {
  const box = document.createElement("div");
  box.className = "findings";
  if (decision.violations.length) {
    const list = document.createElement("ol");
    list.className = "violations";
    for (const v of decision.violations) {
      const item = document.createElement("li");
      item.innerHTML = `<code class="field"></code> <span class="reason"></span> <span class="message"></span>`;
      $(".field", item).textContent = v.field;
      $(".reason", item).textContent = v.reason;
      $(".message", item).textContent = v.message;
      list.append(item);
    }
    box.append(list);
  }
  if (decision.warnings.length) {
    const list = document.createElement("ul");
    list.className = "warnings";
    for (const w of decision.warnings) {
      const item = document.createElement("li");
      item.textContent = w;
      list.append(item);
    }
    box.append(list);
  }
  return box;
}

// The state lives in the URL's fragment (never sent to a server), deflated when the browser can.
let lastHash = "";

async function saveState() {
  const state = { chain: chainState };
  for (const id of INPUTS) state[id] = $(`#${id}`).value;
  const hash = `#s=${await pack(JSON.stringify(state))}`;
  if (hash !== location.hash) {
    lastHash = hash;
    history.replaceState(null, "", hash);
  }
}

async function readHash() {
  const match = location.hash.match(/^#s=([A-Za-z0-9_-]+)$/);
  if (!match) return null;
  try {
    return JSON.parse(await unpack(match[1]));
  } catch {
    return null;
  }
}

function toBase64Url(bytes) {
  let binary = "";
  // In chunks: spreading a large manifest into one call would overflow the stack.
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
const fromBase64Url = (text) => Uint8Array.from(atob(text.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));

async function pack(text) {
  const bytes = new TextEncoder().encode(text);
  if (typeof CompressionStream === "undefined") return "0" + toBase64Url(bytes);
  const stream = new Blob([bytes]).stream().pipeThrough(new CompressionStream("deflate-raw"));
  return "1" + toBase64Url(new Uint8Array(await new Response(stream).arrayBuffer()));
}

async function unpack(packed) {
  const bytes = fromBase64Url(packed.slice(1));
  if (packed[0] === "0") return new TextDecoder().decode(bytes);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
  return new Response(stream).text();
}

main().catch((err) => {
  const status = $("#status");
  status.className = "status problem";
  status.textContent = `The page could not start: ${err.message ?? err}`;
  console.error(err);
});
