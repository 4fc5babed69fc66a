import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';
import { formatMs } from './gutter/lines';
import { parseReport } from './reports';
import { ruleOf } from './gutter/card';
import { CSS_PREFIX, MIME_TYPE, SyncReport, SyncSite } from './tokens';

/** Create an element with text content: report strings never go through innerHTML. */
function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function headline(report: SyncReport): string {
  const { totals } = report;
  const device = report.device.kind === 'cuda' ? report.device.name : report.device.kind === 'predict' ? 'predicted on CPU' : 'not run under the recorder';
  const syncs = `${totals.syncs} sync${totals.syncs === 1 ? '' : 's'}`;
  const sites = `${totals.sites} site${totals.sites === 1 ? '' : 's'}`;
  const blocked = totals.blocked_ms !== null ? `, blocked ${formatMs(totals.blocked_ms)}` : '';
  if (report.mode === 'static') {
    const n = report.findings.length;
    return `syncfree: ${n} likely sync${n === 1 ? '' : 's'} found by static analysis (${device})`;
  }
  return `syncfree: ${syncs} at ${sites}${blocked} · ${report.mode} · ${device}`;
}

/** Sites shown at first; a long report (a loop over many lines) shows the rest on request. */
export const SUMMARY_ROWS = 8;

/**
 * Renders a report as a short summary under the cell: a headline, a compact table
 * (line, what, count, blocked) and a link that opens the Syncs sidebar.
 */
export class SyncReportRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(
    private readonly _options: IRenderMime.IRendererOptions,
    private readonly _actions: IRendererActions
  ) {
    super();
    this.addClass(`${CSS_PREFIX}-summary`);
    this.node.addEventListener('click', this._onActivate);
    this.node.addEventListener('keydown', this._onActivate);
  }

  /** The sites, most costly first: line, what, count, blocked, rule. */
  private _table(report: SyncReport, rows: SyncSite[], all = false): HTMLElement {
    const box = el('div', `${CSS_PREFIX}-sites`);
    const table = el('table', `${CSS_PREFIX}-table`);
    const header = table.createTHead().insertRow();
    for (const name of ['line', 'what', 'count', 'blocked', 'rule']) {
      header.appendChild(el('th', undefined, name));
    }
    const body = table.createTBody();
    for (const site of all ? rows : rows.slice(0, SUMMARY_ROWS)) {
      const row = body.insertRow();
      row.dataset.line = String(site.line);
      if (this._actions.jumpToLine) {
        row.tabIndex = 0;
        row.title = `Go to line ${site.line}`;
        row.classList.add(`${CSS_PREFIX}-jump`);
      }
      const chain = site.chain.length > 1 ? ` (via ${site.chain.slice(0, -1).join(' → ')})` : '';
      row.appendChild(el('td', `${CSS_PREFIX}-num`, `${site.line}${chain}`));
      row.appendChild(el('td', undefined, site.predicted || report.mode === 'predict' ? `${site.kind} (predicted)` : site.kind));
      row.appendChild(el('td', `${CSS_PREFIX}-num`, `×${site.count}`));
      row.appendChild(el('td', `${CSS_PREFIX}-num`, formatMs(site.blocked_ms)));
      const rule = ruleOf(report, site.rule);
      row.appendChild(el('td', undefined, rule ? `${rule.code} ${rule.title}` : ''));
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
      this._actions.jumpToLine(this.node, Number(row.dataset.line));
    }
  };

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this.node.textContent = '';
    const report = parseReport(model.data[this._options.mimeType], 'an output');
    if (!report) {
      this.node.appendChild(el('div', `${CSS_PREFIX}-invalid`, 'syncfree: this report is malformed and was ignored (see the browser console).'));
      return Promise.resolve();
    }
    const head = el('div', `${CSS_PREFIX}-headline`);
    head.appendChild(el('span', `${CSS_PREFIX}-title`, headline(report)));
    if (this._actions.openSidebar) {
      const link = el('button', `${CSS_PREFIX}-open-sidebar jp-mod-styled`, 'Open Syncs panel');
      link.type = 'button';
      link.addEventListener('click', () => this._actions.openSidebar?.());
      head.appendChild(link);
    }
    this.node.appendChild(head);

    for (const note of report.notes ?? []) {
      this.node.appendChild(el('div', `${CSS_PREFIX}-note`, note));
    }
    if (report.error) {
      const where = report.error.line ? ` (line ${report.error.line})` : '';
      this.node.appendChild(el('div', `${CSS_PREFIX}-error`, `${report.error.type}${where}: ${report.error.message}`));
    }

    const rows = [...report.sites].sort(
      (a, b) => (b.blocked_ms ?? 0) - (a.blocked_ms ?? 0) || b.count - a.count || a.line - b.line
    );
    if (rows.length > 0) {
      this.node.appendChild(this._table(report, rows));
    }
    const siteLines = new Set(report.sites.map(s => s.line));
    const unmatched = report.findings.filter(f => !siteLines.has(f.range.line));
    if (unmatched.length > 0) {
      const list = el('ul', `${CSS_PREFIX}-findings`);
      const label = report.mode === 'static' ? '' : ' (did not run)';
      for (const finding of unmatched.slice(0, SUMMARY_ROWS)) {
        list.appendChild(el('li', undefined, `line ${finding.range.line}: ${finding.rule} ${finding.message}${label}`));
      }
      if (unmatched.length > SUMMARY_ROWS) {
        list.appendChild(el('li', undefined, `… and ${unmatched.length - SUMMARY_ROWS} more (see the Syncs panel)`));
      }
      this.node.appendChild(list);
    }
    return Promise.resolve();
  }
}

/** What the summary's link and rows do; both optional (other hosts have no sidebar). */
export interface IRendererActions {
  openSidebar?: () => void;
  /** Go to a 1-based line of the cell whose output holds `from`. */
  jumpToLine?: (from: HTMLElement, line: number) => void;
}

export function rendererFactory(actions: IRendererActions = {}): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [MIME_TYPE],
    defaultRank: 0,
    createRenderer: options => new SyncReportRenderer(options, actions)
  };
}
