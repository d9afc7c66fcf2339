// Evaluating a request with a chain of policy JS builds. Each policy runs in its JS build; the
// decisions are combined by the host chain's own Rust code (nicpolicy_plugin::combine, exported
// by the playground module as Combine), so the page and `nicpolicy eval` combine alike:
// settings per policy, write-backs flowing forward, messages prefixed in a chain of two or more,
// violations in field order, and each NIC's and violation's source naming its policy.

import { Combine } from "./pkg/nicpolicy_playground.js";

/** A policy JS build (wasm-bindgen --target web), loaded once. */
export class JsPolicy {
  constructor(name, module, metadata) {
    this.name = name; // the built-in name, like "capvcd"
    this.module = module;
    this.metadata = metadata; // {name, version, abiVersion, description}
  }

  /** Loads pkg/<module>.js and its .wasm. */
  static async load(name, moduleName, base) {
    const module = await import(new URL(`pkg/${moduleName}.js`, base).href);
    await module.default({ module_or_path: new URL(`pkg/${moduleName}_bg.wasm`, base) });
    return new JsPolicy(name, module, JSON.parse(module.metadata()));
  }

  /** `{valid: true}` or `{valid: false, message}`. */
  validateSettings(settings) {
    return JSON.parse(this.module.validateSettings(JSON.stringify(settings)));
  }

  /** The decision, or `{error}` when the policy fails. */
  evaluate(request) {
    try {
      return JSON.parse(this.module.evaluate(JSON.stringify(request)));
    } catch (err) {
      // A trap (unreachable, out of memory) surfaces as a JS exception.
      return { error: `trapped: ${err.message ?? err}` };
    }
  }
}

/**
 * Evaluates `request` with `chain` ([{policy: JsPolicy, settings}]).
 * Returns {decision} or {failure: "policy X failed: ..."}.
 */
export function evaluateChain(chain, request) {
  const combine = new Combine(JSON.stringify(request), chain.length);
  try {
    let current = request;
    for (const [index, { policy, settings }] of chain.entries()) {
      const name = policy.metadata.name;
      const decision = policy.evaluate({ ...current, settings: settings ?? null });
      if (decision.error !== undefined) {
        const where = chain.length > 1 ? ` (${index + 1} of ${chain.length} in the chain)` : "";
        return { failure: `policy ${name}${where} failed: ${decision.error}` };
      }
      const step = JSON.parse(combine.add(name, JSON.stringify(decision)));
      if (step.error !== undefined) return { failure: step.error };
      if (step.extraOvdcNetworks) {
        current = { ...current, machine: { ...current.machine, extraOvdcNetworks: step.extraOvdcNetworks } };
      }
    }
    const combined = JSON.parse(combine.finish());
    return combined.error !== undefined ? { failure: combined.error } : { decision: combined.decision };
  } finally {
    combine.free();
  }
}

/** `spec` or `spec.template.spec`: where the machine's fields are. */
export function specPath(kind) {
  return kind === "VCDMachineTemplate" ? "spec.template.spec" : "spec";
}

const yes = (flag) => (flag ? "yes" : "no");

/** Left-aligned columns separated by three spaces, like kubectl's tables. */
function table(rows) {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => [...row[i]].length)));
  return rows
    .map((row) =>
      row
        .map((cell, i) => (i + 1 === row.length ? cell : cell + " ".repeat(widths[i] - [...cell].length + 3)))
        .join("")
        .trimEnd() + "\n",
    )
    .join("");
}

/**
 * The text `nicpolicy eval` prints for a decision (host/src/cli/render.rs, render_decision);
 * `unapplied`: the plan fields the provisioner will not apply, marked `*` as the CLI marks them.
 */
export function renderText(request, chain, decision, unapplied = []) {
  const machine = request.machine;
  const namespace = machine.namespace ? `${machine.namespace}/` : "";
  const operation = request.operation === "UPDATE" ? "Update" : "Create";
  const role = machine.role === "control-plane" ? "control plane" : "worker";
  let out = `Machine:   ${request.kind} ${namespace}${machine.name} (${operation}, ${role})\n`;
  out += `Cluster:   ${request.cluster.name}\n`;
  const policies = chain.map(({ policy }) => `${policy.metadata.name} ${policy.metadata.version}`);
  out += policies.length === 1 ? `Policy:    ${policies[0]}\n` : `Policies:  ${policies.join(" -> ")}\n`;
  out += `Decision:  ${decision.allowed ? "allowed" : "denied"}\n`;
  if (decision.nics.length > 0) {
    const rows = [["NIC", "NETWORK", "PRIMARY", "IP MODE", "IP ADDRESS", "ADAPTER", "CONNECTED"]];
    for (const nic of decision.nics) {
      const mark = (field, cell) => (unapplied.some((u) => u.index === nic.index && u.field === field) ? cell + "*" : cell);
      rows.push([
        String(nic.index),
        mark("network", nic.network),
        mark("primary", yes(nic.primary)),
        mark("ipAllocationMode", nic.ipAllocationMode),
        mark("ipAddress", nic.ipAddress ?? "-"),
        mark("adapterType", nic.adapterType),
        mark("connected", yes(nic.connected)),
      ]);
    }
    out += "\n" + table(rows);
    if (unapplied.length > 0) {
      out += `* not built as planned: ${unapplied[0].provisioner} builds it otherwise (see Warnings or Violations)\n`;
    }
  }
  if (decision.vappNetworks.length > 0) {
    out += `\nvApp networks: ${decision.vappNetworks.join(", ")}\n`;
  }
  const extras = decision.extraOvdcNetworks;
  if (extras && JSON.stringify(extras) !== JSON.stringify(machine.extraOvdcNetworks ?? [])) {
    out += `Defaulted ${specPath(request.kind)}.extraOvdcNetworks: [${extras.join(", ")}]\n`;
  }
  if (decision.violations.length > 0) {
    out += "\nViolations:\n";
    for (const v of decision.violations) out += `  ${v.field} (${v.reason}): ${v.message}\n`;
  }
  if (decision.warnings.length > 0) {
    out += "\nWarnings:\n";
    for (const w of decision.warnings) out += `  ${w}\n`;
  }
  return out;
}
