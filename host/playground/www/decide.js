// Evaluating a request with a chain of policy JS builds. Each policy runs in its JS build; the
// decisions are combined, and rendered as text, by the host's own Rust code
// (nicpolicy_plugin::combine and ::render, exported by the playground module as Combine and
// renderDecision), so the page and `nicpolicy eval` combine and print alike:
// settings per policy, write-backs flowing forward, messages prefixed in a chain of two or more,
// violations in field order, and each NIC's and violation's source naming its policy.

import { Combine, renderDecision, specPath } from "./pkg/nicpolicy_playground.js";

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

/** `spec` or `spec.template.spec`: where the machine's fields are (the host's own rule). */
export { specPath };

/**
 * The text `nicpolicy eval` prints for a decision, rendered by the host's own Rust code
 * (nicpolicy_plugin::render, as `nicpolicy eval` renders it); `unapplied`: the plan fields the
 * provisioner will not apply, marked `*` as the CLI marks them.
 */
export function renderText(request, chain, decision, unapplied = []) {
  const policies = chain.map(({ policy }) => `${policy.metadata.name} ${policy.metadata.version}`);
  return renderDecision(
    JSON.stringify(request),
    JSON.stringify(policies),
    JSON.stringify(decision),
    JSON.stringify(unapplied),
  );
}
