// Runs every shared case (tests/js/parity.json: request + the Wasmtime host's decision) through
// the JS build and checks the decisions are identical. Uses Node's test runner:
//
//   node --test examples/js/check-parity.mjs
//
// NICPOLICY_JS_PKG names the wasm-bindgen output directory (default target/js/pkg).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const pkg = path.resolve(root, process.env.NICPOLICY_JS_PKG ?? "target/js/pkg");
const policy = createRequire(import.meta.url)(path.join(pkg, "nicpolicy_capvcd.js"));
const cases = JSON.parse(readFileSync(path.join(root, "tests/js/parity.json"), "utf8"));

test("the parity file holds the shared cases", () => {
  assert.ok(cases.length >= 30, `only ${cases.length} cases`);
});

for (const { case: name, request, decision } of cases) {
  test(`JS decides like Wasmtime: ${name}`, () => {
    assert.deepEqual(JSON.parse(policy.evaluate(JSON.stringify(request))), decision);
  });
}

test("bad settings are refused with the reason", () => {
  const verdict = JSON.parse(policy.validateSettings(JSON.stringify({ maxNics: 11 })));
  assert.equal(verdict.valid, false);
  assert.match(verdict.message, /maxNics/);
});
