// The playground page in a real browser: headless Chromium from the system (never a downloaded
// one) driven by playwright-core, the page served by `nicpolicy playground`. Every decision the
// page shows is checked against the `nicpolicy` binary (Wasmtime) on the same files.
//
//   node --test --test-concurrency=1 tests/playground/browser.test.mjs
//
// NICPOLICY_BIN: the nicpolicy binary (default target/debug/nicpolicy); CHROMIUM: the browser
// (default /usr/bin/chromium); screenshots go to target/playground-screenshots/.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const target = process.env.CARGO_TARGET_DIR ?? path.join(root, "target");
const nicpolicy = path.resolve(root, process.env.NICPOLICY_BIN ?? path.join(target, "debug/nicpolicy"));
const shots = path.join(target, "playground-screenshots");
const file = (name) => path.join(root, name);

let server;
let origin;
let context;
let profile;
const outside = []; // requests that left the page's own origin
const problems = []; // console errors and uncaught exceptions

/** `nicpolicy eval` on the same files: its stdout (the exit code says allowed or denied). */
function cliEval(args) {
  try {
    return execFileSync(nicpolicy, ["eval", ...args], { encoding: "utf8" });
  } catch (err) {
    if (err.status === 1) return err.stdout; // denied
    throw err;
  }
}

before(async () => {
  server = spawn(nicpolicy, ["playground", "--listen", "127.0.0.1:0"], { stdio: ["ignore", "pipe", "inherit"] });
  origin = await new Promise((resolve, reject) => {
    let seen = "";
    server.stdout.on("data", (chunk) => {
      seen += chunk;
      const url = seen.match(/http:\/\/[\d.:]+\//);
      if (url) resolve(url[0].replace(/\/$/, ""));
    });
    server.on("exit", (code) => reject(new Error(`nicpolicy playground exited with ${code}: ${seen}`)));
  });
  profile = mkdtempSync(path.join(tmpdir(), "nicpolicy-chromium-"));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    viewport: { width: 1440, height: 1000 },
  });
  // The page must work offline: anything but its own origin is refused and recorded.
  await context.route("**/*", (route) => {
    const url = route.request().url();
    if (url.startsWith(origin) || url.startsWith("data:")) return route.continue();
    outside.push(url);
    return route.abort();
  });
  mkdirSync(shots, { recursive: true });
});

after(async () => {
  await context?.close();
  server?.kill();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

/** A fresh page at `hash`, waiting until the inputs it shows are evaluated. */
async function open(hash = "") {
  const page = await context.newPage();
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(message.text());
  });
  page.on("pageerror", (error) => problems.push(error.message));
  await page.goto(`${origin}/${hash}`);
  await page.waitForSelector("body[data-evaluations]");
  return page;
}

/** Runs `action` and waits for the evaluation it triggers. */
async function evaluated(page, action) {
  const before = await page.evaluate(() => Number(document.body.dataset.evaluations));
  await action();
  await page.waitForFunction((n) => Number(document.body.dataset.evaluations) > n, before);
}

async function loadExample(page, name) {
  await evaluated(page, () => page.click(`[data-example="${name}"]`));
}

/** What the picture of one machine shows. */
function pictureOf(page, name) {
  return page.evaluate((name) => {
    const card = document.querySelector(`article.machine[data-name="${name}"]`);
    const nics = [...card.querySelectorAll("svg.picture g.nic")].map((g) => ({
      index: g.dataset.index === undefined ? null : Number(g.dataset.index),
      entry: g.dataset.entry === undefined ? null : Number(g.dataset.entry),
      network: g.dataset.network ?? null,
      primary: g.dataset.primary === "true",
      placeholder: g.dataset.placeholder === "true",
      violations: g.dataset.violations ? g.dataset.violations.split(",").map(Number) : [],
      source: g.dataset.source ?? null,
    }));
    const notes = [...card.querySelectorAll("svg.picture g.violation-note")]
      .map((g) => [Number(g.dataset.number), g.dataset.source])
      .sort((a, b) => a[0] - b[0])
      .map(([, source]) => source);
    const marks = [...card.querySelectorAll("svg.picture g.violation-mark")].map((g) => g.dataset.field);
    const unknown = [...card.querySelectorAll("svg.picture g.network.unknown")].map((g) => g.dataset.network);
    const vapp = card.querySelector("svg.picture .vapp-label")?.textContent ?? null;
    return { decision: card.dataset.decision, nics, marks, unknown, vapp, notes };
  }, name);
}

async function evalText(page, name) {
  const card = page.locator(`article.machine[data-name="${name}"]`);
  await card.locator('.tabs button[data-view="nicpolicy eval"]').click();
  const text = await card.locator("pre.eval").textContent();
  await card.locator('.tabs button[data-view="Picture"]').click();
  return text;
}

test("the README example: three NICs in order, NIC 0 primary, the table of nicpolicy eval", async () => {
  const page = await open();
  assert.equal(await page.locator("article.machine").count(), 1);
  const picture = await pictureOf(page, "prod-eu1-md-0-x7k2p");
  assert.equal(picture.decision, "allowed");
  assert.deepEqual(
    picture.nics.map((n) => [n.index, n.network, n.primary]),
    [
      [0, "mgmt-net", true],
      [1, "storage-net", false],
      [2, "workload-net", false],
    ],
  );
  assert.deepEqual(picture.marks, []);
  assert.equal(picture.vapp, "vApp networks (3)");
  const args = ["--cluster", file("examples/cluster.yaml"), "--machine", file("examples/machine.yaml"), "--inventory", file("examples/inventory.yaml")];
  assert.equal(await evalText(page, "prod-eu1-md-0-x7k2p"), cliEval(args));
  // Each NIC's hover says where it comes from in the words of `nicpolicy eval --explain`.
  const explained = cliEval([...args, "--explain"]);
  for (const nic of picture.nics) {
    assert.match(nic.source, /rule capvcd\/plan, policy nicpolicy-capvcd$/);
    assert.ok(explained.split("\n").some((line) => line.trim().startsWith(`NIC ${nic.index}`) && line.endsWith(nic.source)), `NIC ${nic.index}: ${nic.source}\n${explained}`);
  }
  await page.screenshot({ path: path.join(shots, "readme-example.png"), fullPage: true });
  await page.close();
});

test("the invalid machine: the duplicates and the unknown network are marked where they are", async () => {
  const page = await open();
  await loadExample(page, "invalid");
  const name = "prod-eu1-md-1-q9z4d";
  const args = [
    "--cluster", file("examples/cluster.yaml"),
    "--machine", file("examples/invalid-machine.yaml"),
    "--inventory", file("examples/inventory.yaml"),
    "--settings", file("examples/settings.yaml"),
  ];
  const cli = JSON.parse(cliEval([...args, "-o", "json"]));
  const picture = await pictureOf(page, name);
  assert.equal(picture.decision, "denied");
  // Every planned NIC, in the order and on the network Wasmtime planned.
  assert.deepEqual(
    picture.nics.map((n) => [n.index, n.network, n.primary]),
    cli.nics.map((n) => [n.index, n.network, n.primary]),
  );
  assert.equal(picture.nics.length, 6);
  // Each violation drawn once, on NIC i + 1 for extraOvdcNetworks[i].
  assert.deepEqual(picture.marks, cli.violations.map((v) => v.field));
  assert.deepEqual(
    picture.nics.filter((n) => n.violations.length).map((n) => [n.index, n.violations]),
    [
      [3, [1]],
      [4, [2]],
      [5, [3]],
    ],
  );
  assert.deepEqual(picture.unknown, ["storag-net"]);
  assert.equal(await evalText(page, name), cliEval(args));
  // Each violation's note names the rule behind it, as `nicpolicy eval --explain` does.
  const from = cliEval([...args, "--explain"])
    .split("\n")
    .filter((line) => line.startsWith("    from: "))
    .map((line) => line.slice("    from: ".length));
  assert.deepEqual(picture.notes, from);
  assert.match(from[2], /^rule capvcd\/inventory, policy nicpolicy-capvcd$/);
  const violations = await page.locator(`article.machine[data-name="${name}"] ol.violations li`).allTextContents();
  assert.equal(violations.length, 3);
  assert.match(violations[2], /spec\.extraOvdcNetworks\[4\].*NotFound.*did you mean "storage-net"/);
  await page.screenshot({ path: path.join(shots, "invalid-machine.png"), fullPage: true });
  await page.close();
});

test("a whole clusterctl output of a multi-zone cluster: every template decided as nicpolicy eval decides it", async () => {
  const page = await open();
  await loadExample(page, "multizone");
  const names = await page.locator("article.machine").evaluateAll((cards) => cards.map((c) => c.dataset.name));
  assert.deepEqual(names, ["prod-eu1-control-plane", "prod-eu1-md-0", "prod-eu1-md-1"]);
  for (const name of names) {
    const args = [
      "--cluster", file("examples/cluster-multizone.yaml"),
      "--machine", file("examples/cluster-multizone.yaml"),
      "--machine-name", name,
      "--inventory", file("tests/fixtures/inventory-zones.yaml"),
    ];
    assert.equal(await evalText(page, name), cliEval(args), name);
  }
  // Zone-a's primary for the control plane; md-1 has no zone: NIC 0 is left to CAPVCD, and
  // zone-c's primary listed as an extra is marked.
  const control = await pictureOf(page, "prod-eu1-control-plane");
  assert.deepEqual(control.nics[0], {
    index: 0,
    entry: null,
    network: "mgmt-net-a",
    primary: true,
    placeholder: false,
    violations: [],
    source: "the machine's zone (cluster.spec.multiZoneSpec.zones[0].ovdcNetworkName), rule capvcd/plan, policy nicpolicy-capvcd",
  });
  const md1 = await pictureOf(page, "prod-eu1-md-1");
  assert.equal(md1.decision, "denied");
  assert.equal(md1.nics[0].placeholder, true);
  assert.deepEqual(md1.marks, ["spec.template.spec.extraOvdcNetworks[1]"]);
  assert.deepEqual(md1.nics.find((n) => n.network === "mgmt-net-c").violations, [1]);
  await page.screenshot({ path: path.join(shots, "multizone.png"), fullPage: true });
  await page.close();
});

test("a template a KubeadmControlPlane builds from is shown as control plane, as nicpolicy eval finds it", async () => {
  const page = await open();
  const machines = readFileSync(file("tests/fixtures/clusterctl-control-plane-template.yaml"), "utf8");
  await evaluated(page, () => page.fill("#machines", machines));
  const name = "prod-eu1-control-plane";
  const sub = await page.locator(`article.machine[data-name="${name}"] svg.picture .vm-sub`).textContent();
  assert.match(sub, /VCDMachineTemplate · control plane/);
  const args = ["--cluster", file("examples/cluster.yaml"), "--machine", file("tests/fixtures/clusterctl-control-plane-template.yaml")];
  assert.equal(await evalText(page, name), cliEval(args));
  await page.close();
});

test("every shared parity case decides in the browser exactly as Wasmtime does", async () => {
  const cases = JSON.parse(readFileSync(file("tests/js/parity.json"), "utf8"));
  assert.ok(cases.length >= 30, `only ${cases.length} cases`);
  const page = await open();
  const decisions = await page.evaluate(async (cases) => {
    const { JsPolicy } = await import("./decide.js");
    const policy = await JsPolicy.load("capvcd", "nicpolicy_capvcd", new URL("./", location.href));
    return cases.map(({ request }) => policy.evaluate(request));
  }, cases);
  for (const [i, { case: name, decision }] of cases.entries()) {
    assert.deepEqual(decisions[i], decision, name);
  }
  await page.close();
});

test("malformed YAML shows its line next to the input, as nicpolicy eval reports it", async () => {
  const broken = "apiVersion: infrastructure.cluster.x-k8s.io/v1beta3\nkind: VCDMachine\nmetadata:\n  name: prod-eu1-md-0-x7k2p\n  labels: {cluster.x-k8s.io/cluster-name: prod-eu1\nspec:\n  extraOvdcNetworks: [storage-net]\n";
  const dir = mkdtempSync(path.join(tmpdir(), "nicpolicy-broken-"));
  writeFileSync(path.join(dir, "machines"), broken);
  let cliError = "";
  try {
    execFileSync(nicpolicy, ["eval", "--cluster", file("examples/cluster.yaml"), "--machine", "machines"], { cwd: dir, encoding: "utf8", stdio: "pipe" });
  } catch (err) {
    assert.equal(err.status, 2);
    cliError = err.stderr;
  }
  rmSync(dir, { recursive: true });
  const [, line, column] = cliError.match(/machines:(\d+):(\d+):/);
  const page = await open();
  await evaluated(page, () => page.fill("#machines", broken));
  const error = page.locator("#machines-error");
  assert.equal(await error.isVisible(), true);
  assert.equal(await error.locator(".at").textContent(), `line ${line}, column ${column}`);
  // The same reason as the CLI's `machines:LINE:COLUMN: REASON`.
  const shown = (await error.textContent()).replace(`line ${line}, column ${column}`, "").trim();
  assert.ok(shown.length > 0 && cliError.includes(`machines:${line}:${column}: ${shown}`), `${cliError} vs ${shown}`);
  // Its link selects the line in the text area.
  await error.locator(".at").click();
  const selected = await page.locator("#machines").evaluate((area) => area.value.slice(area.selectionStart, area.selectionEnd));
  assert.equal(selected, broken.split("\n")[Number(line) - 1]);
  assert.equal(await page.locator("#machines").evaluate((area) => area.classList.contains("invalid")), true);
  // A field of the wrong type is named by its path.
  await evaluated(page, () => page.fill("#machines", broken.replace("prod-eu1\n", "prod-eu1}\n").replace("[storage-net]", "[{name: storage-net}]")));
  assert.match(await page.locator("#machines-error").textContent(), /spec\.extraOvdcNetworks\[0\]/);
  await page.screenshot({ path: path.join(shots, "malformed-yaml.png"), fullPage: true });
  await page.close();
});

test("the state is kept in the link: a shared URL shows the same inputs and decisions", async () => {
  const page = await open();
  await loadExample(page, "invalid");
  await evaluated(page, () => page.fill(".chain-entry .settings", "maxNics: 4\n"));
  const url = page.url();
  assert.match(url, /#s=1[A-Za-z0-9_-]+$/);
  const shared = await open(url.slice(url.indexOf("#")));
  assert.equal(await shared.inputValue(".chain-entry .settings"), "maxNics: 4\n");
  assert.equal(await shared.inputValue("#machines"), readFileSync(file("examples/invalid-machine.yaml"), "utf8"));
  const marks = (await pictureOf(shared, "prod-eu1-md-1-q9z4d")).marks;
  assert.ok(marks.includes("spec.extraOvdcNetworks"), marks.join(", "));
  await page.close();
  await shared.close();
});

test("a chain: settings are checked by their policy, violations carry the policy's name", async () => {
  const page = await open();
  await evaluated(page, () => page.fill(".chain-entry .settings", "maxNics: 11\n"));
  assert.match(await page.locator(".chain-entry .error").textContent(), /settings refused by the policy: .*maxNics/);
  await evaluated(page, () => page.fill(".chain-entry .settings", "maxNics: 2\n"));
  await evaluated(page, () => page.click("#add-policy"));
  const text = await evalText(page, "prod-eu1-md-0-x7k2p");
  assert.match(text, /^Policies: {2}nicpolicy-capvcd 0\.1\.0 -> nicpolicy-capvcd 0\.1\.0$/m);
  assert.match(text, /\[nicpolicy-capvcd\] /);
  await page.close();
});

test("a plan field stock CAPVCD will not apply is marked as nicpolicy eval marks it", async () => {
  const page = await open();
  const settings = readFileSync(file("examples/settings.yaml"), "utf8"); // storage-net on DHCP
  await evaluated(page, () => page.fill(".chain-entry .settings", settings));
  const name = "prod-eu1-md-0-x7k2p";
  const args = [
    "--cluster", file("examples/cluster.yaml"),
    "--machine", file("examples/machine.yaml"),
    "--inventory", file("examples/inventory.yaml"),
    "--settings", file("examples/settings.yaml"),
  ];
  const text = await evalText(page, name);
  assert.match(text, /^1 +storage-net +no +DHCP\* /m);
  assert.equal(text, cliEval(args));
  const card = page.locator(`article.machine[data-name="${name}"]`);
  const marked = await card.locator("svg.picture .nic-detail.not-applied").evaluateAll((nodes) =>
    nodes.map((n) => [n.closest("g.nic").dataset.index, n.dataset.unapplied, n.querySelector("title").textContent]),
  );
  assert.deepEqual(marked, [["1", "ipAllocationMode", "NIC 1 (storage-net): ipAllocationMode DHCP is not applied: CAPVCD builds POOL"]]);
  assert.match(await card.locator(".findings .warnings").textContent(), /not built as planned: NIC 1 \(storage-net\)/);
  await page.screenshot({ path: path.join(shots, "not-built-as-planned.png"), fullPage: true });
  await page.close();
});

test("nothing outside the page was requested and nothing failed in it", () => {
  assert.deepEqual(outside, []);
  assert.deepEqual(problems, []);
});
