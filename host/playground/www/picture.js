// The picture of one machine's decision: the VM with its NICs in order, each wired to its org
// VDC network, the primary marked, the vApp networks boxed, and every violation drawn on the NIC
// or entry its field path names (docs/schema.md: `{spec}.extraOvdcNetworks[i]` is NIC i + 1;
// the primary's sources are `cluster.*` and `{spec}.failureDomain`).

import { specPath } from "./decide.js";
import { describeSource } from "./pkg/nicpolicy_playground.js";

const ROW = 66; // height of one NIC row
const TOP = 64; // VM title
const VM_X = 16;
const VM_W = 290;
const NET_X = 430;
const NET_W = 210;
const NOTE_X = 670;
const WIDTH = 1090;

const esc = (text) =>
  String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

const clip = (text, max) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

/** Where a violation belongs: {nic: index} | {entry: i} | {machine: true}. */
export function target(violation, kind, nics) {
  const spec = specPath(kind);
  const extra = violation.field.match(/^(.*)\.extraOvdcNetworks\[(\d+)\]/);
  if (extra && extra[1] === spec) {
    const i = Number(extra[2]);
    return nics.some((nic) => nic.index === i + 1) ? { nic: i + 1 } : { entry: i };
  }
  if (violation.field.startsWith("cluster.") || violation.field === `${spec}.failureDomain`) {
    const primary = nics.find((nic) => nic.primary);
    return { nic: primary ? primary.index : 0 };
  }
  return { machine: true };
}

/** The rows of the picture: planned NICs, an unresolved NIC 0, extra entries with no NIC. */
function rows(request, decision) {
  const nics = [...decision.nics].sort((a, b) => a.index - b.index);
  const marks = new Map(); // row key -> violation numbers
  const machineNotes = [];
  const entries = new Map(); // extraOvdcNetworks index -> row
  decision.violations.forEach((v, n) => {
    const where = target(v, request.kind, nics);
    const key = where.nic !== undefined ? `nic${where.nic}` : where.entry !== undefined ? `entry${where.entry}` : null;
    if (key === null) {
      machineNotes.push(n);
      return;
    }
    if (where.entry !== undefined && !entries.has(where.entry)) {
      const list = decision.extraOvdcNetworks ?? request.machine.extraOvdcNetworks ?? [];
      entries.set(where.entry, { entry: where.entry, network: list[where.entry] ?? "" });
    }
    marks.set(key, [...(marks.get(key) ?? []), n]);
  });
  const out = [];
  if (nics.length === 0 || nics[0].index > 0) {
    // NIC 0 is not in the plan: the primary could not be resolved (or depends on the zone).
    out.push({ key: "nic0", placeholder: true, index: 0 });
  }
  for (const nic of nics) out.push({ key: `nic${nic.index}`, nic, index: nic.index });
  for (const [i, entry] of [...entries].sort((a, b) => a[0] - b[0])) {
    out.push({ key: `entry${i}`, entry });
  }
  for (const row of out) row.marks = marks.get(row.key) ?? [];
  return { rows: out, machineNotes };
}

function networkInfo(name, inventory) {
  if (!inventory) return { text: "no inventory given", known: null };
  const network = inventory.networks.find((n) => n.name === name);
  if (!network) return { text: "not in the org VDC", known: false };
  const parts = [network.type, network.gateway && `${network.gateway}/${network.prefixLength ?? "?"}`];
  return { text: parts.filter(Boolean).join(" · ") || "in the inventory", known: true };
}

/**
 * The SVG markup for one machine's decision. `unapplied`: the plan fields stock CAPVCD will not
 * apply (`notBuiltAsPlanned`), marked on their NIC with `*` and explained on hover.
 */
export function picture(request, decision, unapplied = []) {
  const { rows: list, machineNotes } = rows(request, decision);
  const violations = decision.violations;
  const rowY = (i) => TOP + i * ROW + ROW / 2;
  const notesH = machineNotes.length * 34;
  const height = TOP + list.length * ROW + notesH + 28;
  const machine = request.machine;
  const vapp = new Set(decision.vappNetworks);
  const parts = [];

  // Networks: one box per distinct network, at the row of its first NIC.
  const networks = new Map();
  list.forEach((row, i) => {
    const name = row.nic?.network ?? row.entry?.network;
    if (row.placeholder || name === undefined || networks.has(name)) return;
    networks.set(name, { name, y: rowY(i), inVapp: vapp.has(name), bad: false });
  });
  for (const row of list) {
    const name = row.nic?.network ?? row.entry?.network;
    if (name !== undefined && row.marks.some((n) => violations[n].reason === "NotFound")) {
      networks.get(name).bad = true;
    }
  }

  // The vApp: the networks of the plan, boxed together.
  const inVapp = [...networks.values()].filter((n) => n.inVapp);
  if (inVapp.length > 0) {
    const top = Math.min(...inVapp.map((n) => n.y)) - ROW / 2 + 6;
    const bottom = Math.max(...inVapp.map((n) => n.y)) + ROW / 2 - 6;
    parts.push(
      `<g class="vapp"><rect x="${NET_X - 16}" y="${top - 18}" width="${NET_W + 32}" height="${bottom - top + 24}" rx="12" class="vapp-box"/>` +
        `<text x="${NET_X - 6}" y="${top - 5}" class="vapp-label">vApp networks (${inVapp.length})</text></g>`,
    );
  }

  // The VM.
  const vmH = list.length * ROW + notesH + 28;
  const zone = machine.failureDomain ? ` · zone ${machine.failureDomain}` : "";
  const role = machine.role === "control-plane" ? "control plane" : "worker";
  parts.push(
    `<g class="vm"><rect x="${VM_X}" y="14" width="${VM_W}" height="${vmH + TOP - 24}" rx="14" class="vm-box"/>` +
      `<text x="${VM_X + 16}" y="38" class="vm-name">${esc(clip(machine.name || "(no name)", 34))}</text>` +
      `<text x="${VM_X + 16}" y="56" class="vm-sub">${esc(request.kind)} · ${role}${esc(zone)}</text></g>`,
  );

  list.forEach((row, i) => {
    const y = rowY(i);
    const marked = row.marks.length > 0;
    const classes = ["nic", marked ? "has-violation" : "", row.nic?.primary ? "primary" : "", row.placeholder ? "placeholder" : "", row.entry ? "entry" : ""].filter(Boolean).join(" ");
    const attrs = row.nic
      ? `data-index="${row.nic.index}" data-network="${esc(row.nic.network)}" data-primary="${row.nic.primary}"`
      : row.entry
        ? `data-entry="${row.entry.entry}" data-network="${esc(row.entry.network)}"`
        : `data-index="0" data-placeholder="true"`;
    // Where the NIC comes from, on hover: the words of `nicpolicy eval --explain`.
    const from = row.nic ? describeSource(JSON.stringify(row.nic.source ?? null)) : "";
    const source = row.nic ? ` data-source="${esc(from)}"` : "";
    let g = `<g class="${classes}" ${attrs}${source} data-violations="${row.marks.map((n) => n + 1).join(",")}">`;
    if (row.nic) g += `<title>${esc(`NIC ${row.nic.index} on ${row.nic.network}: ${from}`)}</title>`;
    g += `<rect x="${VM_X + 10}" y="${y - ROW / 2 + 5}" width="${VM_W - 20}" height="${ROW - 10}" rx="8" class="nic-row"/>`;
    if (row.nic) {
      const nic = row.nic;
      const title = `NIC ${nic.index}`;
      g += `<text x="${VM_X + 24}" y="${y - 6}" class="nic-title">${esc(title)}</text>`;
      if (nic.primary) g += `<g class="primary-badge"><rect x="${VM_X + 84}" y="${y - 21}" width="70" height="20" rx="10"/><text x="${VM_X + 119}" y="${y - 7}" text-anchor="middle">★ primary</text></g>`;
      const address = nic.ipAddress ? ` · ${nic.ipAddress}` : "";
      const off = nic.connected ? "" : " · disconnected";
      const notBuilt = unapplied.filter((u) => u.index === nic.index);
      const star = notBuilt.length ? " *" : "";
      const hover = notBuilt.length ? `<title>${esc(notBuilt.map((u) => u.message).join("\n"))}</title>` : "";
      g += `<text x="${VM_X + 24}" y="${y + 14}" class="nic-detail${notBuilt.length ? " not-applied" : ""}" data-unapplied="${esc(notBuilt.map((u) => u.field).join(","))}">${hover}${esc(`${nic.ipAllocationMode}${address} · ${nic.adapterType}${off}${star}`)}</text>`;
      const network = networks.get(nic.network);
      g += wire(VM_X + VM_W, y, NET_X, network.y, nic.primary, marked);
    } else if (row.placeholder) {
      g += `<text x="${VM_X + 24}" y="${y - 6}" class="nic-title">NIC 0</text>`;
      g += `<text x="${VM_X + 24}" y="${y + 14}" class="nic-detail">${marked ? "primary network unresolved" : "primary of the zone CAPVCD picks"}</text>`;
    } else {
      g += `<text x="${VM_X + 24}" y="${y - 6}" class="nic-title">${esc(`${specPath(request.kind)}.extraOvdcNetworks[${row.entry.entry}]`)}</text>`;
      g += `<text x="${VM_X + 24}" y="${y + 14}" class="nic-detail">${esc(`"${row.entry.network}" · no NIC planned`)}</text>`;
    }
    g += `<circle cx="${VM_X + VM_W}" cy="${y}" r="7" class="port"/>`;
    row.marks.forEach((n, k) => {
      g += `<g class="violation-mark" data-field="${esc(violations[n].field)}"><circle cx="${VM_X + VM_W - 26 - k * 24}" cy="${y - 12}" r="10"/><text x="${VM_X + VM_W - 26 - k * 24}" y="${y - 8}" text-anchor="middle">${n + 1}</text></g>`;
    });
    g += "</g>";
    parts.push(g);
  });

  for (const network of networks.values()) {
    const info = networkInfo(network.name, request.inventory);
    const cls = ["network", network.bad || info.known === false ? "unknown" : "", network.inVapp ? "in-vapp" : ""].filter(Boolean).join(" ");
    parts.push(
      `<g class="${cls}" data-network="${esc(network.name)}"><rect x="${NET_X}" y="${network.y - 24}" width="${NET_W}" height="48" rx="8"/>` +
        `<text x="${NET_X + 12}" y="${network.y - 4}" class="net-name">${esc(clip(network.name || '""', 26))}</text>` +
        `<text x="${NET_X + 12}" y="${network.y + 14}" class="net-info">${esc(info.text)}</text></g>`,
    );
  }

  // Violation notes, level with what they name.
  list.forEach((row, i) => {
    // A lone note gets two lines of message; several share the row's height.
    const lines = row.marks.length === 1 ? 2 : 1;
    row.marks.forEach((n, k) => {
      parts.push(note(violations[n], n, NOTE_X, rowY(i) - 10 + k * 34 - ((row.marks.length - 1) * 34) / 2, 58, lines));
    });
  });
  machineNotes.forEach((n, k) => {
    const y = TOP + list.length * ROW + 18 + k * 34;
    parts.push(
      `<g class="violation-mark machine" data-field="${esc(violations[n].field)}"><circle cx="${VM_X + 28}" cy="${y}" r="10"/><text x="${VM_X + 28}" y="${y + 4}" text-anchor="middle">${n + 1}</text></g>`,
    );
    parts.push(note(violations[n], n, VM_X + 46, y - 4, 110));
  });

  return (
    `<svg class="picture" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${WIDTH} ${height}" width="${WIDTH}" height="${height}" role="img" ` +
    `aria-label="${esc(`NICs of ${machine.name}`)}">${parts.join("")}</svg>`
  );
}

function wire(x1, y1, x2, y2, primary, marked) {
  const mid = (x1 + x2) / 2;
  const cls = ["wire", primary ? "primary" : "", marked ? "has-violation" : ""].filter(Boolean).join(" ");
  return `<path class="${cls}" d="M${x1 + 7} ${y1} C${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}"/>`;
}

function note(violation, n, x, y, width = 46, lines = 1) {
  const message = wrap(violation.message, width, lines)
    .map((line, i) => `<text x="${x}" y="${y + 16 * (i + 1)}" class="note-message">${esc(line)}</text>`)
    .join("");
  return (
    `<g class="violation-note" data-number="${n + 1}" data-source="${esc(describeSource(JSON.stringify(violation.source ?? null)))}">` +
    `<title>${esc(`${violation.message}\nfrom: ${describeSource(JSON.stringify(violation.source ?? null))}`)}</title>` +
    `<text x="${x}" y="${y}" class="note-field"><tspan class="note-number">${n + 1}</tspan> ${esc(violation.field)} · ${esc(violation.reason)}</text>` +
    `${message}</g>`
  );
}

/** At most `lines` lines of at most `width` characters, broken at spaces; the rest clipped. */
function wrap(text, width, lines) {
  const out = [];
  let rest = text;
  while (rest && out.length < lines) {
    if (rest.length <= width) {
      out.push(rest);
      rest = "";
      break;
    }
    const cut = rest.lastIndexOf(" ", width);
    const at = cut > width / 2 ? cut : width;
    out.push(rest.slice(0, at));
    rest = rest.slice(at).trimStart();
  }
  if (rest) out[out.length - 1] = clip(`${out[out.length - 1]} ${rest}`, width);
  return out;
}
