import type { Finding, Fix, Frame, Rule, SyncReport, SyncSite } from '../_report';
import { isApplicable, RewriteOutcome, RewritePlan } from '../rewrite';
import { CSS_PREFIX } from '../tokens';
import { ILineMarker } from './lines';
import {
  costText,
  costliestFirst,
  definedInText,
  formatCount,
  formatMs,
  isPredicted,
  LineAnchors,
  messageAddsToLabel,
  ruleOf,
  siteLabel
} from '../model';
import { el, withInlineCode } from '../dom';
import { librarySwitch, libraryText } from '../library';

/** What a sync card shows. */
export interface ISyncCardContent {
  marker: ILineMarker;
  /**
   * The 1-based line the marker is on now, when edits moved it from the report's line
   * (`marker.line`): the card names the line the user sees.
   */
  line?: number;
  report: SyncReport;
  /** The cell text no longer matches the report. */
  stale: boolean;
  showLibraryFrames: boolean;
  /**
   * Where the report's lines are in the cell's text now, when edits moved them (model.ts
   * anchorReportLines): the chain names the lines the user sees, as the marker does.
   */
  anchors?: LineAnchors | null;
}

/** What a sync card can do; the card itself never touches an editor. */
export interface ISyncCardActions {
  /** The rewrite of a fix against the current cell text (for the preview). */
  plan(fix: Fix): RewritePlan;
  apply(fix: Fix): RewriteOutcome;
  close(): void;
}

const C = `${CSS_PREFIX}-card`;

/** Ids for the reason a rewrite cannot apply (the button's description). */
let reasonIds = 0;

/** The heading of a card: what kind of evidence the line has. */
export function cardTitle(marker: ILineMarker, line: number = marker.line): string {
  switch (marker.source) {
    case 'measured':
      return `Sync at line ${line}`;
    case 'predicted':
      return `Predicted sync at line ${line}`;
    default:
      return `Likely sync at line ${line} (did not run)`;
  }
}

/**
 * "12 → 7 → 3": the cell lines from the outermost call to the sync, where they are now
 * when `anchors` says where the report's lines went ("?" for a line whose text is gone).
 */
export function chainText(site: SyncSite, anchors?: LineAnchors | null): string {
  const now = (line: number) => (anchors ? (anchors(line) ?? '?') : line);
  return site.chain.length > 0 ? site.chain.map(now).join(' → ') : String(now(site.line));
}

/** The last path components of a library file: enough to recognise it. */
export function shortFile(file: string, keep = 3): string {
  const parts = file.split(/[\\/]/).filter(Boolean);
  return parts.length > keep ? `…/${parts.slice(-keep).join('/')}` : file;
}

function frameText(frame: Frame): string {
  return `${shortFile(frame.file)}:${frame.line} in ${frame.name}`;
}

/**
 * What the CPU waits for, by the rule's category (syncfree/catalog categories): the words
 * of a true dependency. The fix is the rule's own (shown under it): the card does not
 * offer one remedy for every rule (issue 39: "move it out of the hot loop or batch it" on
 * rules whose fix is `torch.where` or a fused optimizer).
 */
const WAITS_FOR: Record<string, string> = {
  'Data-dependent control flow': 'the CPU needs the value to decide what runs next',
  'Dynamic output shapes': 'the CPU needs the size of the result before it can go on',
  'Printing and conversion to Python': 'the CPU needs the value to print it or make a Python object of it',
  'Device transfers': 'the CPU needs the data on the host',
  'Library calls that sync inside': 'the library reads a value on the CPU inside the call',
  'Indexing and slicing': 'the CPU needs the index or the bounds'
};

export function dependencyText(rule: Rule): string {
  if (rule.dependency === 'false') {
    return rule.category === 'Explicit synchronization'
      ? 'False dependency: nothing after it needs the GPU to have finished; the wait can go.'
      : 'False dependency: the CPU does not really need to wait here; the sync can be avoided.';
  }
  const waits = WAITS_FOR[rule.category] ?? 'the CPU needs a result of the GPU';
  return `True dependency: ${waits}. The fix below avoids or defers it.`;
}

/**
 * "first sync 98.0 ms, then 0.013 ms per sync ×19": a recurring site's first call apart from
 * the rest (report.schema.json SyncSite.first_ms); null for a one-off site, a site that
 * synced once, or without times.
 */
export function firstCallText(site: SyncSite): string | null {
  if (site.first_ms === undefined || site.blocked_ms === null || (site.phase ?? 'recurring') !== 'recurring') {
    return null;
  }
  const rest = site.count - 1;
  if (rest <= 0) {
    return null; // synced once: its blocked time says it all
  }
  const first = `first sync ${formatMs(site.first_ms)}`;
  const each = Math.max(site.blocked_ms - site.first_ms, 0) / rest;
  return `${first}, then ${each >= 0.1 ? formatMs(each) : `${each.toFixed(3)} ms`} per sync ×${rest}`;
}

/** What "blocked" means, for a newcomer (the card's tooltip on it). */
const BLOCKED_TITLE =
  'How long the CPU waited inside the sync for GPU work already queued, which the GPU does anyway. What a sync costs is the GPU time it loses after it (run with --cost on a GPU to measure it).';
const NO_COST_TITLE =
  'What a sync costs is the GPU time it loses, measured on a GPU. This sync was predicted without one: it has no cost, and none is guessed.';

function siteBlock(site: SyncSite, content: ISyncCardContent): HTMLElement {
  const block = el('div', `${C}-site`);
  const head = el('div', `${C}-site-head`);
  head.appendChild(withInlineCode('span', `${C}-kind`, siteLabel(site)));
  head.appendChild(el('span', `${C}-count`, formatCount(site.count)));
  const predicted = isPredicted(content.report, site);
  // What the sync costs leads (issue 37): the GPU time it loses, measured on the GPU; the
  // time the CPU was blocked (GPU work already queued, done anyway) comes second.
  const cost = costText(site);
  const blockedNode = el(
    'span',
    `${C}-blocked`,
    site.blocked_ms !== null
      ? `blocked ${formatMs(site.blocked_ms)}`
      : predicted
        ? 'no cost without a GPU'
        : 'blocked time not measured'
  );
  blockedNode.title = site.blocked_ms === null && predicted ? NO_COST_TITLE : BLOCKED_TITLE;
  head.appendChild(blockedNode);
  if (predicted) {
    head.appendChild(el('span', `${C}-badge`, 'predicted'));
  }
  if (site.phase === 'once' || site.phase === 'compile') {
    // Paid once (the line runs once, or torch.compile compiled), not every step (issue 21).
    const badge = el('span', `${C}-badge ${C}-phase`, site.phase === 'compile' ? 'once: compiling' : 'once');
    badge.title =
      site.phase === 'compile'
        ? 'Synced while torch.compile compiled or autotuned: paid once, not every call'
        : 'This line runs once per run (setup, a final checkpoint): paid once, not every step';
    head.appendChild(badge);
  }
  block.appendChild(head);
  if (cost) {
    block.insertBefore(el('div', `${C}-cost`, cost), head.nextSibling);
    // The blocked time goes after the cost, on its own line.
    const blocked = head.querySelector(`.${C}-blocked`);
    if (blocked) {
      blocked.remove();
      const second = el(
        'div',
        `${C}-blocked ${C}-second`,
        `${blocked.textContent}, waiting for GPU work already queued`
      );
      second.title = BLOCKED_TITLE;
      block.appendChild(second);
    }
  }
  const first = firstCallText(site);
  if (first) {
    const line = el('div', `${C}-first`, first);
    line.title =
      'The first sync of a line pays the warm-up (library handles, lazy loading, a compilation): the rest is what each further call costs';
    block.appendChild(line);
  }
  // The recorder's message repeats the label and numbers (rounded its own way): shown
  // only when it says something else.
  if (messageAddsToLabel(site)) {
    block.appendChild(withInlineCode('div', `${C}-message`, site.message));
  }
  if (site.thread) {
    block.appendChild(el('div', `${C}-thread`, `in thread ${site.thread}`));
  }
  if (site.chain.length > 1) {
    block.appendChild(el('div', `${C}-chain`, `cell lines ${chainText(site, content.anchors)}`));
  }
  const definedIn = definedInText(site);
  if (definedIn) {
    // The sync happened inside a function from an earlier cell, called from this line.
    block.appendChild(withInlineCode('div', `${C}-defined`, definedIn));
  }
  if (site.library) {
    // The line inside an installed package where the sync happened (issue 21), under this
    // line; its rule explains that line, the site's rule this one (a library call).
    const library = el('div', `${C}-library`);
    library.appendChild(withInlineCode('div', `${C}-library-line`, libraryText(site.library)));
    library.title = `${site.library.package}: ${site.library.function}`;
    const switchText = librarySwitch(site.library);
    if (switchText) {
      library.appendChild(withInlineCode('div', `${C}-library-switch`, switchText));
    }
    block.appendChild(library);
  }
  if (content.showLibraryFrames && site.frames.length > 0) {
    const list = el('ol', `${C}-frames`);
    list.setAttribute('aria-label', 'library calls, outer to inner');
    for (const frame of site.frames) {
      const item = el('li', undefined, frameText(frame));
      item.title = `${frame.file}:${frame.line}`;
      list.appendChild(item);
    }
    block.appendChild(list);
    if (content.report.truncated.frames) {
      block.appendChild(el('div', `${C}-note`, 'Some library calls were left out.'));
    }
  }
  return block;
}

function findingBlock(finding: Finding): HTMLElement {
  const block = el('div', `${C}-finding`);
  block.appendChild(el('span', `${C}-rule-code`, finding.rule));
  block.appendChild(document.createTextNode(' '));
  block.appendChild(withInlineCode('span', `${C}-message`, finding.message));
  if (finding.certainty === 'likely') {
    block.appendChild(el('span', `${C}-badge`, 'likely'));
  }
  return block;
}

function ruleBlock(rule: Rule): HTMLElement {
  const block = el('section', `${C}-rule`);
  const head = el('div', `${C}-rule-head`);
  head.appendChild(el('span', `${C}-rule-code`, rule.code));
  head.appendChild(withInlineCode('span', `${C}-rule-title`, rule.title));
  block.appendChild(head);
  block.appendChild(el('div', `${C}-dependency ${C}-dependency-${rule.dependency}`, dependencyText(rule)));
  if (rule.cuda_call) {
    block.appendChild(el('div', `${C}-note`, `CUDA call: ${rule.cuda_call}`));
  }
  block.appendChild(withInlineCode('p', `${C}-why`, rule.why));
  block.appendChild(withInlineCode('p', `${C}-fix-text`, rule.fix));
  if (rule.example_before || rule.example_after) {
    const examples = el('div', `${C}-examples`);
    examples.appendChild(el('div', `${C}-label`, 'Before'));
    examples.appendChild(el('pre', `${C}-code ${C}-before`, rule.example_before));
    examples.appendChild(el('div', `${C}-label`, 'After'));
    examples.appendChild(el('pre', `${C}-code ${C}-after`, rule.example_after));
    block.appendChild(examples);
  }
  return block;
}

/** The lines removed and added by a rewrite, as a small unified diff. */
function previewBlock(plan: RewritePlan): HTMLElement {
  const pre = el('pre', `${C}-code ${C}-diff`);
  if (!plan.ok) {
    return pre;
  }
  const { firstLine, before, after } = plan.preview;
  before.forEach((text, i) => {
    pre.appendChild(el('div', `${C}-del`, `${String(firstLine + i).padStart(3)} - ${text}`));
  });
  after.forEach(text => {
    pre.appendChild(el('div', `${C}-add`, `    + ${text}`));
  });
  return pre;
}

function fixBlock(finding: Finding, fix: Fix, content: ISyncCardContent, actions: ISyncCardActions): HTMLElement {
  const block = el('section', `${C}-rewrite`);
  const head = el('div', `${C}-rewrite-head`);
  head.appendChild(withInlineCode('span', `${C}-rewrite-title`, fix.title));
  head.appendChild(el('span', `${C}-badge ${C}-safety-${fix.safety}`, fix.safety === 'safe' ? 'safe' : 'review'));
  block.appendChild(head);
  if (fix.safety === 'review') {
    block.appendChild(
      withInlineCode(
        'div',
        `${C}-review`,
        `Review first: ${fix.reason || 'the rewrite may change behaviour in edge cases.'}`
      )
    );
  }
  // On a stale report too: a rewrite whose lines were not edited still applies.
  const plan = actions.plan(fix);
  if (plan.ok) {
    block.appendChild(previewBlock(plan));
  }
  const status = el('div', `${C}-status`);
  status.setAttribute('role', 'status');
  status.setAttribute('aria-live', 'polite');
  const button = el('button', `${C}-apply jp-mod-styled jp-mod-accept`, 'Apply rewrite');
  button.type = 'button';
  button.dataset.rule = finding.rule;
  if (!plan.ok) {
    // Disabled before the click, with the reason beside it and on the button.
    button.disabled = true;
    button.title = plan.reason;
    status.textContent = plan.reason;
    status.id = `${C}-reason-${++reasonIds}`;
    button.setAttribute('aria-describedby', status.id);
  }
  button.addEventListener('click', () => {
    const outcome = actions.apply(fix);
    if (outcome.ok) {
      actions.close();
    } else {
      status.textContent = outcome.reason;
      status.classList.add(`${C}-refused`);
    }
  });
  const row = el('div', `${C}-actions`);
  row.appendChild(button);
  block.appendChild(row);
  block.appendChild(status);
  return block;
}

/**
 * The hover card of a marked line: what synced, how often and for how long, the call
 * chain, the catalog entries (why, false or true dependency, the sync-free alternative)
 * and an "Apply rewrite" button with a preview for each finding that carries a fix.
 * Every report string is set with textContent.
 */
export function renderSyncCard(content: ISyncCardContent, actions: ISyncCardActions): HTMLElement {
  const { marker, report } = content;
  const card = el('div', C);
  card.tabIndex = -1;
  card.setAttribute('role', 'dialog');
  const title = cardTitle(marker, content.line);
  card.setAttribute('aria-label', title);
  card.dataset.line = String(marker.line);

  const header = el('div', `${C}-header`);
  header.appendChild(el('span', `${C}-title`, title));
  // The line's totals, when it has several sites (one site says its own below): what they
  // cost leads where the GPU measured it (issue 37), else the blocked time; predicted
  // without a GPU, the count alone.
  if (marker.sites.length > 1) {
    const time =
      marker.costMs !== null
        ? `${formatMs(marker.costMs)} GPU time lost`
        : marker.blockedMs !== null
          ? `blocked ${formatMs(marker.blockedMs)}`
          : null;
    header.appendChild(el('span', `${C}-total`, [formatCount(marker.count), time].filter(Boolean).join(' · ')));
  }
  const close = el('button', `${C}-close`, '×');
  close.type = 'button';
  close.title = 'Close (Escape)';
  close.setAttribute('aria-label', 'Close');
  close.addEventListener('click', () => actions.close());
  header.appendChild(close);
  card.appendChild(header);

  if (content.stale) {
    card.appendChild(
      el('div', `${C}-stale`, 'The cell changed since this report: counts and lines are from the last run.')
    );
  }
  for (const site of costliestFirst(marker.sites)) {
    card.appendChild(siteBlock(site, content));
  }
  if (marker.sites.length === 0) {
    for (const finding of marker.findings) {
      card.appendChild(findingBlock(finding));
    }
  }

  // The rewrite first (the action), then the catalog's explanation.
  for (const finding of marker.findings) {
    if (isApplicable(finding.fix)) {
      card.appendChild(fixBlock(finding, finding.fix, content, actions));
    }
  }
  const codes = new Set<string>();
  for (const site of marker.sites) {
    if (site.rule) {
      codes.add(site.rule);
    }
    if (site.library?.rule) {
      codes.add(site.library.rule);
    }
  }
  for (const finding of marker.findings) {
    codes.add(finding.rule);
  }
  for (const code of codes) {
    const rule = ruleOf(report, code);
    if (rule) {
      card.appendChild(ruleBlock(rule));
    }
  }

  card.addEventListener('keydown', event => {
    if (event.key === 'Escape') {
      // Handled here so that JupyterLab does not also leave edit mode.
      event.preventDefault();
      event.stopPropagation();
      actions.close();
    }
  });
  return card;
}
