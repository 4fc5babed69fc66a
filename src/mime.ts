import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import type { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';
import { parseReport, reportData } from './reports';
import {
  allPredicted,
  costText,
  definedInText,
  costliestFirst,
  findingsWithoutSites,
  formatCount,
  formatMs,
  type ICellLines,
  isPredicted,
  lineInCell,
  plural,
  ruleOf,
  siteColumn,
  siteLabel,
  sitesInCell,
  syncCountText
} from './model';
import { CSS_PREFIX, MIME_TYPE, SyncReport, SyncSite } from './tokens';
import { appendWithInlineCode, el, withInlineCode } from './dom';
import { libraryText } from './library';

/**
 * The report's totals less the sites left out (past the cell's end: `sitesInCell`), so
 * that the summary's counts are those of the sites it lists, as the Syncs panel's are.
 */
export function totalsWithout(report: SyncReport, leftOut: readonly SyncSite[]): SyncReport['totals'] {
  const { totals } = report;
  if (leftOut.length === 0) {
    return totals;
  }
  const less = (value: number | null | undefined, of: (site: SyncSite) => number | null | undefined) =>
    value === null || value === undefined
      ? value
      : Math.max(0, value - leftOut.reduce((sum, site) => sum + (of(site) ?? 0), 0));
  return {
    ...totals,
    syncs: less(totals.syncs, site => site.count) as number,
    sites: Math.max(0, totals.sites - leftOut.length),
    blocked_ms: less(totals.blocked_ms, site => site.blocked_ms) as number | null,
    cost_ms: less(totals.cost_ms, site => site.cost_ms)
  };
}

/** The summary's first line: how many syncs, where, how long, on what. */
export function headline(report: SyncReport, leftOut: readonly SyncSite[] = []): string {
  const totals = totalsWithout(report, leftOut);
  const sites = plural(totals.sites, 'site');
  if (report.mode === 'static') {
    const n = report.findings.length;
    return `syncfree: ${n} likely sync${n === 1 ? '' : 's'} found by reading the code (it did not run under syncfree)`;
  }
  if (allPredicted(report)) {
    // The report's note says why (no CUDA device in the kernel). Counts only: what a sync
    // costs is measured on a GPU, and none is made up (issue 37); said here unless a note of
    // the report says it already (report.py adds one: "no GPU, no cost: …").
    const said = (report.notes ?? []).some(note => /\bno cost\b/i.test(note));
    return `syncfree: ${syncCountText(totals.syncs, true)} at ${sites}${said ? '' : ' · no cost without a GPU'}`;
  }
  // What the syncs cost leads where the GPU measured it (issue 37), blocked time second.
  const cost =
    totals.cost_ms !== null && totals.cost_ms !== undefined ? `, ${formatMs(totals.cost_ms)} GPU time lost` : '';
  const blocked =
    totals.blocked_ms !== null ? `${cost ? ' (' : ', '}blocked ${formatMs(totals.blocked_ms)}${cost ? ')' : ''}` : '';
  const device = report.device.kind === 'cuda' ? report.device.name : 'no GPU';
  const mode = report.mode === 'error' ? ' · stopped at the first sync' : '';
  return `syncfree: ${syncCountText(totals.syncs)} at ${sites}${cost}${blocked}${mode} · ${device}`;
}

/**
 * "RuntimeError (line 5): …", the line said once: the error mode's own message starts
 * with "line 5: " already.
 */
export function errorText(error: NonNullable<SyncReport['error']>): string {
  const line = error.line ?? null;
  let message = error.message;
  if (line !== null && message.startsWith(`line ${line}: `)) {
    message = message.slice(`line ${line}: `.length);
  }
  return `${error.type}${line !== null ? ` (line ${line})` : ''}: ${message}`;
}

/** Sites shown at first; a long report (a loop over many lines) shows the rest on request. */
export const SUMMARY_ROWS = 8;

/** How far outside the visible part of the notebook a summary is already drawn. */
const DRAW_AHEAD = '1500px 0px';

/**
 * The notebook's scroll container (JupyterLab 4 and Notebook 7). Summaries are watched
 * against it: JupyterLab's widgets clip their content (`overflow: hidden`), so against
 * the window a summary below the fold would only count as near once it is on screen,
 * whatever the margin.
 */
const SCROLLER = '.jp-WindowedPanel-outer';

/**
 * Draws summaries when they come near the viewport. A notebook of 500 reports would
 * otherwise build 500 summaries with their tables when it opens (the largest part of
 * syncfree's time there, see bench/ui/README.md), though a screen shows two or three;
 * JupyterLab's windowed notebook defers cells the same way. Without
 * IntersectionObserver (jsdom, an old host), summaries are drawn at once.
 */
class DrawNearViewport {
  /**
   * Call `draw` once `target` is near the visible part of its notebook; false if that
   * cannot be known. A target that is not in the document yet is watched from when it
   * is attached (`attached`).
   */
  defer(target: Element, draw: () => void): boolean {
    if (typeof IntersectionObserver === 'undefined') {
      return false;
    }
    this._pending.set(target, draw);
    if (target.isConnected) {
      this._observe(target);
    }
    return true;
  }

  /** `target` was attached to the document: watch it if it waits to be drawn. */
  attached(target: Element): void {
    if (this._pending.has(target)) {
      this._observe(target);
    }
  }

  /** Stop waiting for a target (its summary was re-rendered or disposed). */
  forget(target: Element): void {
    if (this._pending.delete(target)) {
      this._observedBy.get(target)?.unobserve(target);
      this._observedBy.delete(target);
    }
  }

  private _observe(target: Element): void {
    const root = target.closest(SCROLLER);
    let observer = root ? this._byRoot.get(root) : this._viewport;
    if (!observer) {
      const onIntersect = (entries: IntersectionObserverEntry[]) => this._onIntersect(entries);
      // Outside a notebook (another host), the window with the same margin.
      observer = root
        ? new IntersectionObserver(onIntersect, { root, rootMargin: DRAW_AHEAD })
        : new IntersectionObserver(onIntersect, {
            rootMargin: DRAW_AHEAD,
            scrollMargin: DRAW_AHEAD
          } as IntersectionObserverInit);
      if (root) {
        this._byRoot.set(root, observer);
      } else {
        this._viewport = observer;
      }
    }
    const before = this._observedBy.get(target);
    if (before !== observer) {
      before?.unobserve(target);
      observer.observe(target);
      this._observedBy.set(target, observer);
    }
  }

  private _onIntersect(entries: IntersectionObserverEntry[]): void {
    for (const entry of entries) {
      const draw = entry.isIntersecting ? this._pending.get(entry.target) : undefined;
      if (draw) {
        this.forget(entry.target);
        draw();
      }
    }
  }

  private _pending = new Map<Element, () => void>();
  private _observedBy = new WeakMap<Element, IntersectionObserver>();
  private _byRoot = new WeakMap<Element, IntersectionObserver>();
  private _viewport: IntersectionObserver | null = null;
}

const nearViewport = new DrawNearViewport();

const TABLE_COLUMNS = ['line', 'what', 'count', 'blocked', 'rule'];

let rowTemplate: HTMLTableRowElement | null = null;

/** An empty table row with its five cells: cloning it is cheaper than building each. */
function newRow(): HTMLTableRowElement {
  if (!rowTemplate) {
    rowTemplate = document.createElement('tr');
    for (const name of TABLE_COLUMNS) {
      rowTemplate.appendChild(el('td', name === 'what' || name === 'rule' ? undefined : `${CSS_PREFIX}-num`));
    }
  }
  return rowTemplate.cloneNode(true) as HTMLTableRowElement;
}

/** The most rows a placeholder keeps (a summary with notes, a table and findings). */
export const MAX_PLACEHOLDER_ROWS = 24;

/**
 * About how many text rows a drawn summary takes, rounded up: its placeholder keeps
 * that height (the `jp-syncfree-rows-<n>` classes of the stylesheet), so that the
 * notebook does not jump when the summary is drawn.
 */
export function summaryRows(report: SyncReport): number {
  const sites = report.sites.length;
  const table = sites > 0 ? Math.min(sites, SUMMARY_ROWS) + 1 + (sites > SUMMARY_ROWS ? 1 : 0) : 0;
  const findings = Math.min(findingsWithoutSites(report).length, SUMMARY_ROWS + 1);
  const rows = 2 + (report.notes?.length ?? 0) + (report.error ? 1 : 0) + table + findings;
  return Math.min(rows, MAX_PLACEHOLDER_ROWS);
}

/**
 * Renders a report as a short summary under the cell: a headline, a compact table
 * (line, what, count, blocked) and a link that opens the Syncs sidebar. Away from the
 * viewport it is a placeholder of about its height until it comes near.
 */
export class SyncReportRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(
    private readonly _options: IRenderMime.IRendererOptions,
    private readonly _actions: IRendererActions
  ) {
    super();
    this.addClass(`${CSS_PREFIX}-summary`);
  }

  dispose(): void {
    nearViewport.forget(this.node);
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    nearViewport.attached(this.node);
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    nearViewport.forget(this.node);
    this.node.textContent = '';
    // An output model's `data` is a deep copy of the whole bundle, HTML included, made
    // on every read (@jupyterlab/rendermime outputmodel.ts): read the stored report, the
    // object the reports store has already checked, so the parse cache hits.
    const data = (isOutputModel(model) ? reportData(model) : undefined) ?? model.data[this._options.mimeType];
    const report = parseReport(data, 'an output');
    if (!report) {
      this.node.appendChild(
        el(
          'div',
          `${CSS_PREFIX}-invalid`,
          'syncfree: this report is malformed and was ignored (see the browser console).'
        )
      );
      return Promise.resolve();
    }
    const draw = () => this._draw(report);
    if (nearViewport.defer(this.node, draw)) {
      this._setPending(summaryRows(report));
    } else {
      draw();
    }
    return Promise.resolve();
  }

  /**
   * Make the (empty) summary a placeholder of about `rows` text rows: the stylesheet
   * gives an empty summary the height its rows class says (a class rather than an
   * inline style: 500 of these are set while a large notebook opens).
   */
  private _setPending(rows: number): void {
    const name = `${CSS_PREFIX}-rows-${rows}`;
    if (name !== this._rowsClass) {
      if (this._rowsClass) {
        this.node.classList.remove(this._rowsClass);
      }
      this.node.classList.add(name);
      this._rowsClass = name;
    }
  }

  private _rowsClass: string | null = null;
  private _listening = false;

  private _draw(report: SyncReport): void {
    if (!this._listening) {
      // Rows jump to their line; added once drawn, when there are rows.
      this._listening = true;
      this.node.addEventListener('click', this._onActivate);
      this.node.addEventListener('keydown', this._onActivate);
    }
    // Sites on lines past the cell's end (a crafted or hand-edited report) are left out, as
    // the Syncs panel leaves them out: the two list and count the same sites.
    const cell = this._actions.cellLines?.(this.node, report) ?? null;
    const { sites, leftOut } = sitesInCell(report, cell);
    const head = el('div', `${CSS_PREFIX}-headline`);
    head.appendChild(el('span', `${CSS_PREFIX}-title`, headline(report, leftOut)));
    // Shown (by the stylesheet) while the cell's text differs from what ran: the gutter
    // marks the cell `jp-syncfree-mod-stale`.
    head.appendChild(el('span', `${CSS_PREFIX}-stale-note`, 'Out of date: the cell was edited since this run'));
    if (this._actions.openSidebar) {
      const link = el('button', `${CSS_PREFIX}-open-sidebar`, 'Open Syncs panel');
      link.type = 'button';
      link.addEventListener('click', () => this._actions.openSidebar?.());
      head.appendChild(link);
    }
    this.node.appendChild(head);

    for (const note of report.notes ?? []) {
      this.node.appendChild(withInlineCode('div', `${CSS_PREFIX}-note`, note));
    }
    if (report.error) {
      this.node.appendChild(withInlineCode('div', `${CSS_PREFIX}-error`, errorText(report.error)));
    }
    if (leftOut.length > 0) {
      const lines = [...new Set(leftOut.map(site => site.line))].sort((a, b) => a - b);
      const shown = lines.slice(0, 5).join(', ') + (lines.length > 5 ? ', …' : '');
      this.node.appendChild(
        el(
          'div',
          `${CSS_PREFIX}-note ${CSS_PREFIX}-left-out`,
          `${plural(leftOut.length, 'site')} on lines past the cell's end (line ${shown}) left out: ` +
            'this report does not match the cell'
        )
      );
    }
    if (sites.length > 0) {
      // Sorted only now: most summaries of a large notebook are never drawn.
      this.node.appendChild(this._table(report, costliestFirst(sites)));
    }
    const unmatched = findingsWithoutSites(report).filter(finding => lineInCell(finding.range.line, cell));
    if (unmatched.length > 0) {
      const list = el('ul', `${CSS_PREFIX}-findings`);
      const label = report.mode === 'static' ? '' : ' (did not run)';
      for (const finding of unmatched.slice(0, SUMMARY_ROWS)) {
        list.appendChild(
          withInlineCode('li', undefined, `line ${finding.range.line}: ${finding.rule} ${finding.message}${label}`)
        );
      }
      if (unmatched.length > SUMMARY_ROWS) {
        list.appendChild(el('li', undefined, `… and ${unmatched.length - SUMMARY_ROWS} more (see the Syncs panel)`));
      }
      this.node.appendChild(list);
    }
  }

  /** The sites, most costly first: line, what, count, blocked, rule. */
  private _table(report: SyncReport, rows: SyncSite[], all = false): HTMLElement {
    const box = el('div', `${CSS_PREFIX}-sites`);
    const table = el('table', `${CSS_PREFIX}-table`);
    const header = table.createTHead().insertRow();
    // A report whose sites the GPU costed shows the cost in the fourth column, blocked time in its tooltip;
    // one where nothing was timed (predicted without a GPU) has no such column, rather than one of dashes.
    const costed = rows.some(site => site.cost_ms !== null && site.cost_ms !== undefined);
    const timed = costed || rows.some(site => site.blocked_ms !== null);
    for (const name of TABLE_COLUMNS) {
      if (name !== 'blocked' || timed) {
        header.appendChild(el('th', undefined, costed && name === 'blocked' ? 'cost' : name));
      }
    }
    const body = table.createTBody();
    const jump = this._actions.jumpToLine !== undefined;
    // The headline says when every sync was predicted; a row says it only among measured ones.
    const mixed = !allPredicted(report);
    for (const site of all ? rows : rows.slice(0, SUMMARY_ROWS)) {
      const row = newRow();
      row.dataset.line = String(site.line);
      const column = siteColumn(report, site);
      if (column !== null) {
        row.dataset.column = String(column);
      }
      if (jump) {
        row.tabIndex = 0;
        row.title = `Go to line ${site.line}`;
        row.className = `${CSS_PREFIX}-jump`;
      }
      const cells = row.cells;
      const chain = site.chain.length > 1 ? ` (via ${site.chain.slice(0, -1).join(' → ')})` : '';
      cells[0].textContent = `${site.line}${chain}`;
      appendWithInlineCode(
        cells[1],
        mixed && isPredicted(report, site) ? `${siteLabel(site)} (predicted)` : siteLabel(site)
      );
      // Where inside a package, or inside a function of an earlier cell, the call synced.
      for (const where of [site.library ? libraryText(site.library) : null, definedInText(site)]) {
        if (where) {
          cells[1].appendChild(withInlineCode('div', `${CSS_PREFIX}-site-where`, where));
        }
      }
      cells[2].textContent = formatCount(site.count);
      if (costed) {
        cells[3].textContent = formatMs(site.cost_ms);
        cells[3].title = [costText(site), `blocked ${formatMs(site.blocked_ms)}`].filter(Boolean).join('; ');
      } else if (timed) {
        cells[3].textContent = formatMs(site.blocked_ms);
      }
      const rule = ruleOf(report, site.rule);
      if (rule) {
        appendWithInlineCode(cells[4], `${rule.code} ${rule.title}`);
      }
      if (!timed) {
        row.deleteCell(3);
      }
      body.appendChild(row);
    }
    box.appendChild(table);
    if (!all && rows.length > SUMMARY_ROWS) {
      const more = el('button', `${CSS_PREFIX}-more jp-mod-styled`, `Show all ${rows.length} sites`);
      more.type = 'button';
      more.addEventListener('click', () => box.replaceWith(this._table(report, rows, true)));
      box.appendChild(more);
    }
    return box;
  }

  private _onActivate = (event: MouseEvent | KeyboardEvent) => {
    if (event instanceof KeyboardEvent && event.key !== 'Enter') {
      return;
    }
    const row = (event.target as HTMLElement).closest<HTMLElement>('tr[data-line]');
    if (row && this._actions.jumpToLine) {
      event.preventDefault();
      const column = row.dataset.column;
      this._actions.jumpToLine(this.node, Number(row.dataset.line), column === undefined ? null : Number(column));
    }
  };
}

function isOutputModel(model: IRenderMime.IMimeModel): model is IRenderMime.IMimeModel & { toJSON(): unknown } {
  return typeof (model as { toJSON?: unknown }).toJSON === 'function';
}

/** What the summary's link and rows do; both optional (other hosts have no sidebar). */
export interface IRendererActions {
  openSidebar?: () => void;
  /** Go to a 1-based line (at a 0-based column, if known) of the cell whose output holds `from`. */
  jumpToLine?: (from: HTMLElement, line: number, column: number | null) => void;
  /** The lines of the cell whose output holds `from` (its report is `report`); null when unknown. */
  cellLines?: (from: HTMLElement, report: SyncReport) => ICellLines | null;
}

export function rendererFactory(actions: IRendererActions = {}): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [MIME_TYPE],
    defaultRank: 0,
    createRenderer: options => new SyncReportRenderer(options, actions)
  };
}
