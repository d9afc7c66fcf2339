// A JavaScript policy engine calling the CAPVCD policy's JS build (wasm-bindgen, Node.js).
//
//   cargo build -p nicpolicy-capvcd --features js --target wasm32-unknown-unknown --profile policy-js --target-dir target/js
//   wasm-bindgen --target nodejs --out-dir target/js/pkg target/js/wasm32-unknown-unknown/policy-js/nicpolicy_capvcd.wasm
//   node examples/js/evaluate.mjs target/js/pkg
//
// The request is the same JSON the Wasmtime host sends (docs/schema.md); so is the decision.
import { createRequire } from "node:module";
import path from "node:path";

const pkg = path.resolve(process.argv[2] ?? "target/js/pkg");
const policy = createRequire(import.meta.url)(path.join(pkg, "nicpolicy_capvcd.js"));

console.log("policy:", JSON.parse(policy.metadata()));

const settings = { maxNics: 6, networks: { "storage-net": { ipAllocationMode: "DHCP" } } };
const verdict = JSON.parse(policy.validateSettings(JSON.stringify(settings)));
if (!verdict.valid) {
  throw new Error(`settings refused: ${verdict.message}`);
}

const request = {
  operation: "CREATE",
  kind: "VCDMachine",
  machine: {
    name: "prod-eu1-md-0-x7k2p",
    namespace: "prod-eu1",
    labels: { "cluster.x-k8s.io/cluster-name": "prod-eu1" },
    role: "worker",
    extraOvdcNetworks: ["storage-net", "workload-net"],
  },
  cluster: { name: "prod-eu1", namespace: "prod-eu1", ovdc: "eu1-ovdc-prod", ovdcNetwork: "mgmt-net" },
  settings,
};

const decision = JSON.parse(policy.evaluate(JSON.stringify(request)));
if (decision.error) {
  throw new Error(`policy failed: ${decision.error}`);
}
console.log(decision.allowed ? "allowed" : "denied");
for (const nic of decision.nics) {
  console.log(`NIC ${nic.index}  ${nic.network.padEnd(14)} ${nic.ipAllocationMode.padEnd(5)} ${nic.adapterType}`);
}
for (const v of decision.violations) {
  console.log(`${v.field} (${v.reason}): ${v.message}`);
}
