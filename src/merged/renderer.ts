import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import type { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';
import { appendWithInlineCode, el, withInlineCode } from '../dom';
import { CSS_PREFIX } from '../tokens';
import {
  MERGED_MIME_TYPE,
  MergedReport,
  MergedSite,
  countText,
  divergentTitle,
  extremesText,
  mergedHeadline,
  phaseMark,
  rankColumns,
  siteRankCells,
  siteRule,
  siteWhat,
  siteWhere,
  totalTitle,
  totalsRankCells
} from './model';
import { parseMerged } from './parse';

/** Sites shown at first; the rest on request (a job with many lines that sync). */
export const MERGED_ROWS = 12;

/** What the table's sites can do; both optional (other hosts cannot open files). */
export interface IMergedActions {
  /**
   * Where the lab shows a file the ranks ran (`path`, relative to the kernel's working
   * folder) for the output holding `from`: its path in the file browser, or null when the
   * lab cannot open it.
   */
  locate?: (path: string, from: HTMLElement) => Promise<string | null>;
  /** Open a file of the file browser at a 1-based line. */
  openFile?: (path: string, line: number) => void;
}

/**
 * Renders a merged report of a distributed job (`%syncfree merge DIR`, `%syncfree run
 * --nproc-per-node N`): the summary, a table of the sites with a column per rank (or
 * min/median/max for many ranks), divergent sites marked, each rank's totals, the ranks
 * that blocked most and least, notes and what is missing. A site whose file the lab can
 * open links to its line. Every string is set as text.
 */
export class MergedReportRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(
    private readonly _options: IRenderMime.IRendererOptions,
    private readonly _actions: IMergedActions
  ) {
    super();
    this.addClass(`${CSS_PREFIX}-merged`);
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._linkPending();
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this.node.textContent = '';
    this._pendingLinks = [];
    const report = parseMerged(model.data[this._options.mimeType]);
    if (!report) {
      this.node.appendChild(
        el(
          'div',
          `${CSS_PREFIX}-invalid`,
          'syncfree: this merged report is malformed and was ignored (see the browser console).'
        )
      );
      return Promise.resolve();
    }
    const head = el('div', `${CSS_PREFIX}-headline`);
    head.appendChild(el('span', `${CSS_PREFIX}-title`, mergedHeadline(report)));
    this.node.appendChild(head);
    this.node.appendChild(el('div', `${CSS_PREFIX}-merged-summary`, report.summary));
    if (report.sites.length > 0) {
      this.node.appendChild(this._table(report, false));
    }
    const extremes = extremesText(report);
    if (extremes) {
      this.node.appendChild(el('div', `${CSS_PREFIX}-extremes`, extremes));
    }
    if (report.truncated > 0) {
      this.node.appendChild(
        el('div', `${CSS_PREFIX}-note`, `${report.truncated} less costly sites are left out of this report.`)
      );
    }
    for (const note of report.notes) {
      this.node.appendChild(withInlineCode('div', `${CSS_PREFIX}-note`, note));
    }
    for (const problem of report.problems) {
      this.node.appendChild(el('div', `${CSS_PREFIX}-error`, problem));
    }
    if (this.isAttached) {
      this._linkPending();
    }
    return Promise.resolve();
  }

  /**
   * The sites in the merge's order (recurring ones by their blocked time after the first calls,
   * those paid once after them, badged), with a column per rank (or the spread) and a totals row.
   */
  private _table(report: MergedReport, all: boolean): HTMLElement {
    const box = el('div', `${CSS_PREFIX}-sites`);
    const table = el('table', `${CSS_PREFIX}-table ${CSS_PREFIX}-merged-table`);
    const columns = rankColumns(report);
    const header = table.createTHead().insertRow();
    header.appendChild(el('th', undefined, 'where'));
    header.appendChild(el('th', undefined, 'what'));
    for (const column of columns) {
      const th = el('th', `${CSS_PREFIX}-num ${CSS_PREFIX}-rank`, column.label);
      th.title = column.title;
      header.appendChild(th);
    }
    header.appendChild(el('th', `${CSS_PREFIX}-num`, 'total'));
    header.appendChild(el('th', undefined, 'rule'));

    const body = table.createTBody();
    const shown = all ? report.sites : report.sites.slice(0, MERGED_ROWS);
    for (const site of shown) {
      const row = body.insertRow();
      if (site.divergent) {
        row.classList.add(`${CSS_PREFIX}-divergent`);
      }
      const where = row.insertCell();
      where.className = `${CSS_PREFIX}-where`;
      // A long path is cut with an ellipsis (its whole text is the tooltip): a 4096-character
      // file name took the table's whole width (issue 39).
      const place = el('span', `${CSS_PREFIX}-where-text`, siteWhere(site));
      place.title = siteWhere(site);
      where.appendChild(place);
      this._linkWhenOpenable(site, where);
      const what = row.insertCell();
      appendWithInlineCode(what, siteWhat(report, site));
      if (site.divergent) {
        const mark = el('span', `${CSS_PREFIX}-divergent-mark`, 'divergent');
        mark.title = divergentTitle(report, site);
        what.appendChild(mark);
      }
      const phase = phaseMark(site);
      if (phase) {
        const mark = el('span', `${CSS_PREFIX}-phase-mark`, phase.text);
        mark.title = phase.title;
        what.appendChild(mark);
      }
      for (const cell of siteRankCells(site, columns)) {
        const td = row.insertCell();
        td.className = `${CSS_PREFIX}-num${cell.absent ? ` ${CSS_PREFIX}-absent` : ''}`;
        td.textContent = cell.text;
        td.title = cell.title;
      }
      const total = row.insertCell();
      total.className = `${CSS_PREFIX}-num`;
      total.textContent = countText(site.count, site.blocked_ms);
      const title = totalTitle(site);
      if (title) {
        total.title = title;
      }
      const rule = row.insertCell();
      appendWithInlineCode(rule, siteRule(site));
    }

    const foot = table.createTFoot().insertRow();
    foot.className = `${CSS_PREFIX}-rank-totals`;
    const label = el('th', undefined, 'per rank');
    label.colSpan = 2;
    label.scope = 'row';
    foot.appendChild(label);
    for (const cell of totalsRankCells(report, columns)) {
      const td = el('td', `${CSS_PREFIX}-num`, cell.text);
      td.title = cell.title;
      foot.appendChild(td);
    }
    foot.appendChild(el('td', `${CSS_PREFIX}-num`, countText(report.totals.counted, report.totals.blocked_ms)));
    foot.appendChild(el('td'));
    box.appendChild(table);

    if (!all && report.sites.length > MERGED_ROWS) {
      const more = el('button', `${CSS_PREFIX}-more jp-mod-styled`, `Show all ${report.sites.length} sites`);
      more.type = 'button';
      more.addEventListener('click', () => {
        box.replaceWith(this._table(report, true));
        this._linkPending();
      });
      box.appendChild(more);
    }
    return box;
  }

  /**
   * Once the lab says it can open the site's file, its "file:line" becomes a link to the
   * line. Asked once the output is in its notebook (rendered before it is attached): the
   * file is found from the notebook's folder.
   */
  private _linkWhenOpenable(site: MergedSite, cell: HTMLElement): void {
    if (site.path && this._actions.locate && this._actions.openFile) {
      this._pendingLinks.push([site, cell]);
    }
  }

  private _linkPending(): void {
    const { locate, openFile } = this._actions;
    const pending = this._pendingLinks;
    this._pendingLinks = [];
    if (!locate || !openFile) {
      return;
    }
    for (const [site, cell] of pending) {
      void locate(site.path!, this.node).then(path => {
        if (path === null || this.isDisposed || !cell.isConnected) {
          return;
        }
        const link = el('button', `${CSS_PREFIX}-open-file`, siteWhere(site));
        link.type = 'button';
        link.title = `Open ${path} at line ${site.line}`;
        link.classList.add(`${CSS_PREFIX}-where-text`);
        link.addEventListener('click', () => openFile(path, site.line));
        cell.textContent = '';
        cell.appendChild(link);
      });
    }
  }

  private _pendingLinks: [MergedSite, HTMLElement][] = [];
}

export function mergedRendererFactory(actions: IMergedActions = {}): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [MERGED_MIME_TYPE],
    defaultRank: 0,
    createRenderer: options => new MergedReportRenderer(options, actions)
  };
}
