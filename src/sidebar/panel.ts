import type { Message } from '@lumino/messaging';
import { Panel, Widget } from '@lumino/widgets';
import { CSS_PREFIX } from '../tokens';
import {
  DEFAULT_SORT,
  ICellGroup,
  IOnceTotals,
  IRankInput,
  IRankedSite,
  ISiteFilter,
  ISiteSort,
  ISyncTotals,
  SiteRanking,
  SortKey,
  filterChoices,
  firstDirection,
  rowBand
} from './ranking';
import { costText, formatCount, formatMs, messageAddsToLabel, plainText, plural, syncCountText } from '../model';
import { el, withInlineCode } from '../dom';
import { librarySwitch, libraryText, libraryWhere } from '../library';
import { shortFile } from './merged';

/** The notebook the sidebar shows. */
export interface ISyncsSource {
  /** A name for the header (the notebook's file name). */
  readonly title: string;
  /** The cells' reports, read when the panel draws. */
  inputs(): IRankInput[];
}

export interface ISyncsPanelOptions {
  /**
   * Go to a cell line (activate the cell, put the cursor on the line): at a 0-based
   * column, or with null at the line's first character that is not blank.
   */
  jump(cellId: string, line: number, column: number | null): void;
  /** Group sites by cell (else one flat ranked list). */
  groupByCell?: boolean;
  /** Called when the user switches between grouped and flat. */
  onGroupByCellChanged?(value: boolean): void;
  /** Widgets for the header (command buttons). */
  toolbar?: Widget;
  /** Whether watch mode is on for the notebook's kernel (the empty panel says what to do). */
  watching?(): boolean;
}

const S = `${CSS_PREFIX}-sidebar`;

/** The first sort when no time was measured (predicted syncs): most syncs first. */
const COUNT_SORT: ISiteSort = { key: 'count', descending: true };

/** Rows drawn at first; the rest on request, so a huge notebook stays responsive. */
export const ROWS_SHOWN = 200;

function signed(n: number): string {
  return n > 0 ? `+${n}` : n < 0 ? `−${-n}` : '±0';
}

function signedMs(ms: number): string {
  return ms > 0 ? `+${formatMs(ms)}` : ms < 0 ? `−${formatMs(-ms)}` : '±0 ms';
}

/**
 * "1.73 ms GPU time lost" where the GPU measured what the syncs cost (issue 37), else
 * "41.2 ms blocked" where only the wait was timed; null without either (predicted on CPU:
 * no cost, and none is made up).
 */
export function timeText(costMs: number | null, blockedMs: number | null): string | null {
  if (costMs !== null) {
    return `${formatMs(costMs)} GPU time lost`;
  }
  return blockedMs !== null ? `${formatMs(blockedMs)} blocked` : null;
}

/** The change of what the syncs cost, else of their blocked time: "+1.20 ms GPU time", "−3.00 ms blocked". */
function deltaTimeText(costMs: number | null, blockedMs: number | null): string | null {
  if (costMs !== null) {
    return Math.abs(costMs) >= 0.01 ? `${signedMs(costMs)} GPU time` : null;
  }
  return blockedMs !== null && Math.abs(blockedMs) >= 0.01 ? `${signedMs(blockedMs)} blocked` : null;
}

/** "new", "+3×, +12 ms", "" (unchanged). */
export function deltaText(site: IRankedSite): string {
  if (!site.delta) {
    return '';
  }
  if (site.delta.isNew) {
    return 'new';
  }
  const parts: string[] = [];
  if (site.delta.count !== 0) {
    parts.push(`${signed(site.delta.count)} sync${Math.abs(site.delta.count) === 1 ? '' : 's'}`);
  }
  // By cost where both runs measured it (issue 37), else by blocked time.
  const time = deltaTimeText(site.delta.costMs, site.delta.blockedMs);
  if (time) {
    parts.push(time);
  }
  return parts.join(', ');
}

/** A sort button of a column header: its key, text and tooltip. */
interface ISortButton {
  key: SortKey;
  label: string;
  title: string;
}

/**
 * The panel's columns and their sort buttons. The rule is written under what synced
 * (a sidebar is narrow), so its sort button shares that column's header.
 */
const COLUMNS: readonly { name: string; sorts: ISortButton[] }[] = [
  { name: 'location', sorts: [{ key: 'location', label: 'Line', title: 'Sort by cell and line' }] },
  {
    name: 'what',
    sorts: [
      { key: 'what', label: 'What', title: 'Sort by what synced' },
      { key: 'rule', label: 'Rule', title: 'Sort by catalog rule' }
    ]
  },
  {
    name: 'count',
    sorts: [
      {
        key: 'count',
        label: 'Count',
        title: 'Sort by how many times it synced (syncs made every step first, then those paid once)'
      }
    ]
  },
  {
    name: 'blocked',
    sorts: [
      {
        key: 'blocked',
        label: 'Blocked',
        title:
          'Sort by blocked time (how long the CPU waited), longest first: syncs made every step by their time after the first call, then those paid once by their total'
      }
    ]
  }
];

/** What a one-off phase means (output.py PHASE_WORDS; the card's badge says the same). */
const PHASE_WORDS: Record<'once' | 'compile', { badge: string; words: string; title: string }> = {
  once: {
    badge: 'once',
    words: 'once: the line runs once',
    title: 'This line runs once per run (setup, a final checkpoint): paid once, not every step'
  },
  compile: {
    badge: 'compiling',
    words: 'once: torch.compile compiling',
    title: 'Synced while torch.compile compiled or autotuned: paid once, not every call'
  }
};

/** The heading over the syncs paid once, as the reports' "once (setup, compilation)". */
const ONCE_HEADING = 'Once (setup, compilation)';
const ONCE_TITLE =
  'Syncs paid once per run, not every step: lines that run once (setup, a final checkpoint) and torch.compile compiling. Listed after the syncs of every step, by what they cost (the GPU time they lose) where a GPU measured it, else by the time the CPU waited, else by count.';
const COST_SORT_TITLE =
  'Sort by cost, the GPU time the syncs lose (measured on the GPU), costliest first; syncs made every step before those paid once';
const FIRST_CALL_TITLE =
  'The first sync of a line pays the warm-up (library handles, lazy loading, a compilation): the rows are ranked by what the further calls cost';

/**
 * The Syncs panel, a problems panel (as jupyterlab-lsp's diagnostics and VS Code's
 * Problems): every sync site of the current notebook's cells, costliest first or sorted
 * by a column, grouped by cell (collapsible) or flat, filtered by free text, kind and
 * rule, with the notebook's totals and the change since each cell's previous run.
 *
 * The list is one tab stop (a roving tabindex): arrow keys move between rows, Home and
 * End go to the first and last, Left and Right collapse and expand a cell, Enter or a
 * click goes to the line. Every report string is set as text.
 */
export class SyncsPanel extends Panel {
  constructor(private readonly _options: ISyncsPanelOptions) {
    super();
    this.id = 'jp-syncfree-sidebar';
    this.addClass(S);
    this.title.caption = 'Syncs: host-device synchronizations in this notebook';
    this._groupByCell = _options.groupByCell ?? true;
    if (_options.toolbar) {
      _options.toolbar.addClass(`${S}-toolbar`);
      this.addWidget(_options.toolbar);
    }
    this._body = new Widget();
    this._body.addClass(`${S}-body`);
    this.addWidget(this._body);
    const body = this._body.node;
    // Parts kept across redraws: the filter box keeps its focus and caret while typing.
    this._head = el('div', `${S}-head`);
    this._controls = this._buildControls();
    this._content = el('div', `${S}-content`);
    body.append(this._head, this._controls, this._content);
    body.addEventListener('click', this._onClick);
    body.addEventListener('keydown', this._onKeydown);
    body.addEventListener('change', this._onChange);
    body.addEventListener('input', this._onInput);
  }

  /** The notebook shown, or null when no notebook is open. */
  get source(): ISyncsSource | null {
    return this._source;
  }

  set source(value: ISyncsSource | null) {
    this._source = value;
    this._filter = {};
    this._textBox.value = '';
    this._collapsed.clear();
    this._activeKey = null;
    this._expanded = false;
    this.update();
  }

  get groupByCell(): boolean {
    return this._groupByCell;
  }

  set groupByCell(value: boolean) {
    if (value !== this._groupByCell) {
      this._groupByCell = value;
      this.update();
    }
  }

  /**
   * The column and direction the rows are sorted by: the user's choice, else costliest
   * first by blocked time, or by count where no time was measured (predicted syncs).
   */
  get sort(): ISiteSort {
    return this._sort ?? DEFAULT_SORT;
  }

  set sort(value: ISiteSort) {
    this._sort = value;
    this.update();
  }

  /** The site rows currently drawn, in order (for tests and the benchmark). */
  get rows(): HTMLElement[] {
    return Array.from(this._body.node.querySelectorAll<HTMLElement>(`.${S}-row`));
  }

  protected onUpdateRequest(msg: Message): void {
    super.onUpdateRequest(msg);
    if (this.isVisible) {
      this.render();
    } else {
      this._dirty = true;
    }
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    if (this._dirty) {
      this.render();
    }
  }

  /** Draw now (the panel otherwise draws on update requests, once per frame). */
  render(): void {
    this._dirty = false;
    const focusInList = this._content.contains(document.activeElement);
    this._head.textContent = '';
    this._content.textContent = '';
    const source = this._source;
    this._controls.hidden = true;
    if (!source) {
      this._content.appendChild(el('div', `${S}-empty`, 'Open a notebook to see its syncs.'));
      return;
    }
    const inputs = source.inputs();
    this._head.appendChild(el('div', `${S}-notebook`, source.title));
    this._updateControls(inputs);
    if (inputs.length === 0) {
      this._content.appendChild(this._emptyState());
      return;
    }
    this._controls.hidden = false;
    const ranking = new SiteRanking(inputs, this._filter);
    // The totals are the notebook's, whatever the filters show.
    const filtered = Boolean(this._filter.kind || this._filter.rule || this._filter.text);
    const all = filtered ? new SiteRanking(inputs) : ranking;
    const totals = all.totals();
    this._head.appendChild(this._totals(totals));
    this._costShown = totals.costMs !== null;
    this._timed = totals.blockedMs !== null || totals.costMs !== null;
    if (totals.costMs === null && totals.syncs > 0) {
      // Issue 37: the cost (GPU time lost) is measured on a GPU only; never a guess.
      const note = el(
        'div',
        `${S}-no-cost`,
        totals.predicted ? 'No cost without a GPU: ranked by count.' : 'Cost not measured: ranked by blocked time.'
      );
      note.title =
        'What a sync costs is the GPU time it loses, measured from the GPU’s own timestamps when the cell runs on a GPU. Predicted syncs (no GPU) have no cost, and none is guessed.';
      this._head.appendChild(note);
    }
    const lost = this._lostChildren(inputs);
    if (lost) {
      this._head.appendChild(lost);
    }
    this._filterCount.textContent = filtered ? `${ranking.size} of ${all.size}` : '';
    this._filterCount.title = filtered ? `${ranking.size} of ${all.size} rows match the filters` : '';
    if (ranking.size === 0) {
      this._content.appendChild(el('div', `${S}-empty`, 'No sync matches these filters.'));
      return;
    }
    // Until the user picks a column, the ranking (cost.ts rankKey), shown as by blocked time,
    // or by count where nothing was timed (without times the ranking is by count).
    const sort = this._sort ?? DEFAULT_SORT;
    this._shownSort = this._sort ?? (totals.blockedMs === null && totals.costMs === null ? COUNT_SORT : DEFAULT_SORT);
    const grid = el('div', `${S}-list${this._groupByCell ? '' : ` ${S}-flat`}${this._timed ? '' : ` ${S}-untimed`}`);
    grid.setAttribute('role', 'treegrid');
    grid.setAttribute('aria-label', 'Syncs in this notebook');
    grid.appendChild(this._columnHeaders());
    const limit = this._expanded ? Infinity : ROWS_SHOWN;
    // Sorted by cost or count, the syncs paid once follow the recurring ones under a heading
    // of their own (as the reports list them); sorted otherwise, each row says so itself.
    const banded = this._shownSort.key === 'count' || this._shownSort.key === 'blocked';
    const addRows = (sites: IRankedSite[], once: () => IOnceTotals | null, showCell: boolean) => {
      let headed = false;
      sites.forEach((site, i) => {
        if (banded && !headed && rowBand(site) === 1) {
          headed = true;
          const totals = once();
          if (totals) {
            grid.appendChild(this._onceHeading(totals, showCell));
          }
        }
        grid.appendChild(this._row(site, showCell, i, banded));
      });
    };
    if (this._groupByCell) {
      for (const group of ranking.groups(limit, sort)) {
        const collapsed = this._collapsed.has(group.cellId);
        grid.appendChild(this._groupHeader(group, collapsed));
        if (!collapsed) {
          addRows(group.sites, () => group.once, false);
        }
      }
    } else {
      addRows(ranking.flat(limit, sort), () => ranking.onceTotals(), true);
    }
    this._content.appendChild(grid);
    if (!this._expanded && ranking.size > ROWS_SHOWN) {
      const more = el('button', `${S}-more jp-mod-styled`, `Show all ${ranking.size} sites`);
      more.type = 'button';
      more.dataset.action = 'expand';
      this._content.appendChild(more);
    }
    // One tab stop: the active row (kept across redraws by its key), else the first.
    const navigable = this._navigable();
    const active = navigable.find(row => row.dataset.key === this._activeKey) ?? navigable[0];
    if (active) {
      active.tabIndex = 0;
      this._activeKey = active.dataset.key ?? null;
      if (focusInList) {
        active.focus();
      }
    }
  }

  private _emptyState(): HTMLElement {
    const box = el('div', `${S}-empty`);
    box.appendChild(el('p', undefined, 'No syncs reported in this notebook yet.'));
    if (this._options.watching?.()) {
      box.appendChild(
        el('p', undefined, 'Watch mode is on: run a cell, and each cell that syncs gets its report here.')
      );
      return box;
    }
    const how = el('p');
    how.appendChild(document.createTextNode('Run '));
    how.appendChild(el('code', undefined, '%load_ext syncfree'));
    how.appendChild(document.createTextNode(' once, then start a cell with '));
    how.appendChild(el('code', undefined, '%%syncfree'));
    how.appendChild(
      document.createTextNode(' and run it — or use the notebook toolbar button “Check syncs”, which does both.')
    );
    box.appendChild(how);
    return box;
  }

  /**
   * The cells whose child processes ended without a report of their syncs (killed): their
   * counts lack those syncs, and the totals above say less than ran (report.schema.json
   * lost_children). Null when every child reported.
   */
  private _lostChildren(inputs: IRankInput[]): HTMLElement | null {
    const cells = inputs.filter(input => (input.report.lost_children ?? []).length > 0);
    if (cells.length === 0) {
      return null;
    }
    const numbers = cells.map(input => input.cellNumber).sort((a, b) => a - b);
    const which = `${numbers.length === 1 ? 'cell' : 'cells'} ${numbers.join(', ')}`;
    const line = el(
      'div',
      `${S}-lost`,
      `Not every sync is counted: a child process of ${which} ended without a report (killed).`
    );
    line.setAttribute('role', 'note');
    line.title = cells
      .flatMap(input => (input.report.lost_children ?? []).map(note => `Cell ${input.cellNumber}: ${plainText(note)}`))
      .join('\n');
    return line;
  }

  /** "103 syncs in 3 cells · 42.9 ms blocked", "60 predicted syncs in 4 cells". */
  private _totals(totals: ISyncTotals): HTMLElement {
    const line = el('div', `${S}-totals`);
    const part = (name: string, text: string) => {
      const span = el('span', `${S}-total`, text);
      span.dataset.total = name;
      line.appendChild(span);
    };
    part('syncs', syncCountText(totals.syncs, totals.predicted));
    line.appendChild(document.createTextNode(' in '));
    part('cells', plural(totals.cells, 'cell'));
    if (totals.costMs !== null) {
      line.appendChild(document.createTextNode(' · '));
      part('cost', `${formatMs(totals.costMs)} GPU time lost`);
    }
    if (totals.blockedMs !== null) {
      line.appendChild(document.createTextNode(' · '));
      part('blocked', `${formatMs(totals.blockedMs)} blocked`);
    } else if (!totals.predicted && totals.syncs > 0) {
      line.appendChild(document.createTextNode(' · '));
      part('blocked', 'blocked time not measured');
    }
    return line;
  }

  private _buildControls(): HTMLElement {
    const bar = el('div', `${S}-controls`);
    const text = el('input', `${S}-search`);
    text.type = 'search';
    text.placeholder = 'Filter (text, kind, rule)';
    text.setAttribute('aria-label', 'Filter syncs by text');
    text.dataset.control = 'text';
    this._textBox = text;
    bar.appendChild(text);
    // "3 of 8" while a filter hides rows; read out as it changes.
    this._filterCount = el('span', `${S}-filter-count`);
    this._filterCount.setAttribute('role', 'status');
    this._filterCount.setAttribute('aria-live', 'polite');
    bar.appendChild(this._filterCount);
    const group = el('label', `${S}-group-toggle`);
    const box = el('input');
    box.type = 'checkbox';
    box.dataset.control = 'group';
    this._groupBox = box;
    group.appendChild(box);
    group.appendChild(document.createTextNode(' by cell'));
    bar.appendChild(group);
    this._kindSelect = this._select('kind');
    this._ruleSelect = this._select('rule');
    bar.append(this._kindSelect, this._ruleSelect);
    return bar;
  }

  private _select(name: 'kind' | 'rule'): HTMLSelectElement {
    const select = el('select', `${S}-filter`);
    select.dataset.control = name;
    select.setAttribute('aria-label', `Filter by ${name}`);
    return select;
  }

  private _updateControls(inputs: IRankInput[]): void {
    const { kinds, rules, kindLabels, ruleLabels } = filterChoices(inputs);
    // A kind or rule no longer present (its reports were cleared) filters nothing out.
    if (this._filter.kind && !kinds.includes(this._filter.kind)) {
      this._filter = { ...this._filter, kind: null };
    }
    if (this._filter.rule && !rules.includes(this._filter.rule)) {
      this._filter = { ...this._filter, rule: null };
    }
    if (inputs.length === 0) {
      this._filterCount.textContent = '';
    }
    this._groupBox.checked = this._groupByCell;
    fillSelect(this._kindSelect, 'all kinds', kinds, this._filter.kind ?? null, k => kindLabels[k] ?? k);
    fillSelect(this._ruleSelect, 'all rules', rules, this._filter.rule ?? null, r => ruleLabels[r] ?? r);
  }

  private _columnHeaders(): HTMLElement {
    const row = el('div', `${S}-columns`);
    row.setAttribute('role', 'row');
    row.appendChild(el('span', `${S}-column-spacer`));
    for (const column of COLUMNS) {
      if (column.name === 'blocked' && !this._timed) {
        continue; // nothing was timed (predicted syncs): no column of dashes in a narrow panel
      }
      const cell = el('span', `${S}-column ${S}-column-${column.name}`);
      cell.setAttribute('role', 'columnheader');
      const shown = this._shownSort;
      const sorted = column.sorts.some(sort => sort.key === shown.key);
      cell.setAttribute('aria-sort', sorted ? (shown.descending ? 'descending' : 'ascending') : 'none');
      column.sorts.forEach((sort, i) => {
        if (i > 0) {
          cell.appendChild(document.createTextNode(' · '));
        }
        const cost = sort.key === 'blocked' && this._costShown;
        const button = el('button', `${S}-sort`, cost ? 'Cost' : sort.label);
        button.type = 'button';
        button.dataset.sort = sort.key;
        button.title = cost ? COST_SORT_TITLE : sort.title;
        if (sort.key === shown.key) {
          button.setAttribute('aria-pressed', 'true');
          button.appendChild(el('span', `${S}-sort-arrow`, shown.descending ? '▾' : '▴'));
        }
        cell.appendChild(button);
      });
      row.appendChild(cell);
    }
    return row;
  }

  /** "Once (setup, compilation) 16 syncs · 120 ms": over the rows paid once. */
  private _onceHeading(once: IOnceTotals, flat: boolean): HTMLElement {
    const head = el('div', `${S}-once`);
    head.setAttribute('role', 'row');
    head.setAttribute('aria-level', flat ? '1' : '2');
    head.title = ONCE_TITLE;
    const cell = el('span', `${S}-once-label`);
    cell.setAttribute('role', 'gridcell');
    cell.appendChild(el('span', `${S}-once-name`, ONCE_HEADING));
    // What they cost leads where the GPU measured it (issue 37); without a GPU, counts only.
    const parts = [plural(once.syncs, 'sync'), timeText(once.costMs, once.blockedMs)].filter(Boolean);
    cell.appendChild(el('span', `${S}-once-totals`, parts.join(' · ')));
    head.appendChild(cell);
    return head;
  }

  private _groupHeader(group: ICellGroup, collapsed: boolean): HTMLElement {
    const head = el('div', `${S}-cell`);
    head.setAttribute('role', 'row');
    head.setAttribute('aria-level', '1');
    head.setAttribute('aria-expanded', String(!collapsed));
    head.tabIndex = -1;
    head.dataset.cellId = group.cellId;
    head.dataset.key = `cell|${group.cellId}`;
    head.dataset.nav = 'group';
    const cell = el('span', `${S}-cell-label`);
    cell.setAttribute('role', 'gridcell');
    cell.appendChild(el('span', `${S}-chevron`, collapsed ? '▸' : '▾'));
    cell.appendChild(el('span', `${S}-cell-name`, group.title ?? `Cell ${group.cellNumber}`));
    // The cell's cost (GPU time lost) where measured (issue 37), else its blocked time;
    // predicted without a GPU, its count alone.
    const parts = [syncCountText(group.syncs, group.predicted), timeText(group.costMs, group.blockedMs)].filter(
      Boolean
    );
    const totals = el('span', `${S}-cell-totals`, parts.join(' · '));
    // What the cell is ranked by, where that is not its total (cost.ts): the wait after the
    // first calls ranks it only where no cost was measured.
    const ranked: string[] = [];
    if (
      group.costMs === null &&
      !group.oneOff &&
      group.rankMs !== null &&
      group.blockedMs !== null &&
      group.rankMs !== group.blockedMs
    ) {
      ranked.push(`ranked by ${formatMs(group.rankMs)} blocked after the first calls`);
    }
    if (group.once && !group.oneOff) {
      const time = timeText(group.once.costMs, group.once.blockedMs);
      ranked.push(`${plural(group.once.syncs, 'sync')} paid once (setup, compilation)${time ? `, ${time}` : ''}`);
    }
    if (ranked.length) {
      totals.title = ranked.join('; ');
    }
    cell.appendChild(totals);
    if (group.delta) {
      const change: string[] = [];
      if (group.delta.syncs !== 0) {
        change.push(`${signed(group.delta.syncs)} syncs`);
      }
      // By cost where both runs measured it (issue 37), else by blocked time.
      const time = deltaTimeText(group.delta.costMs, group.delta.blockedMs);
      if (time) {
        change.push(time);
      }
      if (group.delta.fixed > 0) {
        change.push(`${group.delta.fixed} gone`);
      }
      const delta = el(
        'span',
        `${S}-delta`,
        change.length ? `${change.join(', ')} vs previous run` : 'same as previous run'
      );
      delta.classList.toggle(`${S}-better`, group.delta.syncs < 0);
      delta.classList.toggle(`${S}-worse`, group.delta.syncs > 0);
      cell.appendChild(delta);
    }
    head.appendChild(cell);
    head.title = collapsed ? 'Expand (Right arrow)' : 'Collapse (Left arrow)';
    return head;
  }

  /** A site's row; `underHeadings`: a row paid once is under the once heading, which says so. */
  private _row(site: IRankedSite, showCell: boolean, index: number, underHeadings: boolean): HTMLElement {
    const row = el('div', `${S}-row ${S}-row-${site.source}${site.stale ? ` ${CSS_PREFIX}-stale` : ''}`);
    row.setAttribute('role', 'row');
    row.setAttribute('aria-level', showCell ? '1' : '2');
    row.tabIndex = -1;
    row.dataset.nav = 'site';
    row.dataset.cellId = site.cellId;
    // Where the line is now (edits above it move it); the report's own line is kept too.
    const line = site.currentLine ?? site.line;
    row.dataset.line = String(line);
    row.dataset.reportLine = String(site.line);
    if (site.column !== null) {
      row.dataset.column = String(site.column);
    }
    row.dataset.key = `${site.cellId}|${site.line}|${site.kind}|${site.rule ?? ''}|${index}`;
    if (site.stale) {
      row.dataset.stale = 'true';
    }
    if (site.currentLine === null) {
      // The line was deleted since the run: there is nothing to go to.
      row.dataset.deleted = 'true';
      row.setAttribute('aria-disabled', 'true');
    }
    if (site.file !== undefined) {
      // A line of a script (a merged rank report), not of a cell: there is no cell line to go to.
      row.dataset.file = site.file ?? '';
    }
    const dot = el(
      'span',
      `${CSS_PREFIX}-marker ${CSS_PREFIX}-marker-${site.source} ${CSS_PREFIX}-weight-${site.weight}`
    );
    dot.setAttribute('aria-hidden', 'true');
    row.appendChild(dot);
    const cell = (className: string, text?: string) => {
      const span = el('span', `${S}-${className}`, text);
      span.setAttribute('role', 'gridcell');
      row.appendChild(span);
      return span;
    };
    if (site.file !== undefined) {
      const file = site.file ?? '?';
      cell('where', `${shortFile(file)}:${site.line}`).title = `${file}:${site.line}`;
    } else {
      const position = site.currentLine === null ? `${site.line} (deleted)` : String(line);
      cell('where', showCell ? `cell ${site.cellNumber}:${position}` : position);
    }
    const what = cell('kind');
    what.appendChild(withInlineCode('span', `${S}-label`, site.label));
    if (site.library) {
      // The package's line where the sync happened, under the user's line (issue 21).
      const library = el('span', `${S}-library`, libraryWhere(site.library));
      library.title = [libraryText(site.library), librarySwitch(site.library)].filter(Boolean).join('\n');
      what.appendChild(library);
    }
    const delta = deltaText(site);
    if (delta) {
      const chip = el('span', `${S}-delta`, delta);
      chip.classList.toggle(`${S}-worse`, site.delta!.isNew || site.delta!.count > 0);
      chip.classList.toggle(`${S}-better`, !site.delta!.isNew && site.delta!.count < 0);
      what.appendChild(chip);
    }
    if (site.rule) {
      const rule = el('span', `${S}-rule`, site.rule);
      if (site.ruleTitle) {
        rule.title = `${site.rule} ${plainText(site.ruleTitle)}`;
      }
      what.appendChild(rule);
    }
    const phase = site.phase === 'once' || site.phase === 'compile' ? PHASE_WORDS[site.phase] : null;
    if (site.source !== 'static') {
      const count = cell('count', formatCount(site.count));
      if (phase && !underHeadings) {
        // Paid once, not every step (issue 21), where no heading says it: under the count,
        // which it qualifies (the narrow panel's "what" column has no room to spare).
        const badge = el('span', `${S}-phase`, phase.badge);
        badge.title = phase.title;
        count.appendChild(badge);
      }
      if (site.costMs !== null) {
        // What the sync costs leads (issue 37): the GPU time lost; its blocked time second.
        const cost = cell('blocked', formatMs(site.costMs));
        cost.dataset.cost = 'true';
        const costWords = costText({
          cost_ms: site.costMs,
          cost_each_ms: site.costEachMs,
          cost_share: site.costShare,
          count: site.count
        });
        cost.title = [costWords, site.blockedMs !== null ? `blocked ${formatMs(site.blockedMs)}` : null]
          .filter(Boolean)
          .join('; ');
      } else if (this._timed) {
        const blocked = cell('blocked', this._costShown ? '—' : formatMs(site.blockedMs));
        if (site.source === 'predicted') {
          // Beside measured rows: a predicted one has no cost, and no time is made up for it.
          blocked.title = 'Predicted without a GPU: no cost, nothing timed';
        } else if (this._costShown) {
          blocked.title =
            site.blockedMs !== null ? `cost not measured; blocked ${formatMs(site.blockedMs)}` : 'cost not measured';
        }
        this._firstCall(blocked, site);
      }
    } else {
      if (this._timed) {
        cell('count', '—');
        cell('blocked', 'not run');
      } else {
        cell('count', 'not run');
      }
    }
    const whatText =
      site.source === 'static'
        ? `${plainText(site.label)}, did not run`
        : `${plainText(site.label)} ${formatCount(site.count)}${site.source === 'predicted' ? ' (predicted)' : ''}`;
    const ruleText = site.ruleTitle ? `${site.rule} ${plainText(site.ruleTitle)}` : site.rule;
    const staleNote =
      site.currentLine === null
        ? `line ${site.line} was deleted since this run`
        : site.stale
          ? 'out of date: the cell was edited since this run'
          : null;
    const where =
      site.file !== undefined
        ? `${site.file ?? '?'}:${site.line}`
        : site.currentLine === null
          ? `line ${site.line} (deleted)`
          : `line ${line}`;
    // The recorder's own message ("… synced 100x") repeats the label and count: shown only when it says more.
    const message = messageAddsToLabel(site) ? site.message : null;
    row.title = [`${where}: ${whatText}`, site.firstCall, phase?.words, ruleText, message, staleNote]
      .filter(Boolean)
      .join(' — ');
    return row;
  }

  /** The first call apart, under a row's blocked time: the row is ranked by what the calls after it cost. */
  private _firstCall(blocked: HTMLElement, site: IRankedSite): void {
    if (site.firstCall && site.firstMs !== null) {
      blocked.appendChild(el('span', `${S}-first`, `first ${formatMs(site.firstMs)}`));
      blocked.title = `${site.firstCall}. ${FIRST_CALL_TITLE}`;
    }
  }

  /** Go to a row's line; a row whose line was deleted goes nowhere (its text says why). */
  private _jump(row: HTMLElement): void {
    if (row.dataset.cellId && row.dataset.deleted !== 'true' && row.dataset.file === undefined) {
      const column = row.dataset.column;
      this._options.jump(
        row.dataset.cellId,
        Number(row.dataset.line ?? 1),
        column === undefined ? null : Number(column)
      );
    }
  }

  /** The rows the arrow keys move between (group headers and site rows), in order. */
  private _navigable(): HTMLElement[] {
    return Array.from(this._content.querySelectorAll<HTMLElement>('[data-nav]'));
  }

  /** Make `row` the list's one tab stop and focus it. */
  private _activate(row: HTMLElement): void {
    for (const other of this._content.querySelectorAll<HTMLElement>('[data-nav][tabindex="0"]')) {
      other.tabIndex = -1;
    }
    row.tabIndex = 0;
    this._activeKey = row.dataset.key ?? null;
    row.focus();
  }

  private _toggleGroup(cellId: string, collapse?: boolean): void {
    const collapsed = this._collapsed.has(cellId);
    const next = collapse ?? !collapsed;
    if (next === collapsed) {
      return;
    }
    if (next) {
      this._collapsed.add(cellId);
    } else {
      this._collapsed.delete(cellId);
    }
    this._activeKey = `cell|${cellId}`;
    this.render();
  }

  private _onClick = (event: MouseEvent) => {
    const target = event.target as HTMLElement;
    if (target.closest('[data-action="expand"]')) {
      this._expanded = true;
      this.render();
      return;
    }
    const sort = target.closest<HTMLElement>('[data-sort]');
    if (sort) {
      const key = sort.dataset.sort as SortKey;
      const shown = this._shownSort;
      this._sort =
        shown.key === key ? { key, descending: !shown.descending } : { key, descending: firstDirection(key) };
      this.render();
      return;
    }
    const group = target.closest<HTMLElement>(`.${S}-cell`);
    if (group?.dataset.cellId) {
      this._toggleGroup(group.dataset.cellId);
      return;
    }
    const row = target.closest<HTMLElement>(`.${S}-row`);
    if (row?.dataset.cellId) {
      this._activate(row);
      this._jump(row);
    }
  };

  private _onKeydown = (event: KeyboardEvent) => {
    const row = (event.target as HTMLElement).closest<HTMLElement>('[data-nav]');
    if (!row || !this._content.contains(row)) {
      return;
    }
    const rows = this._navigable();
    const index = rows.indexOf(row);
    const isGroup = row.dataset.nav === 'group';
    let next: HTMLElement | undefined;
    switch (event.key) {
      case 'ArrowDown':
        next = rows[Math.min(index + 1, rows.length - 1)];
        break;
      case 'ArrowUp':
        next = rows[Math.max(index - 1, 0)];
        break;
      case 'Home':
        next = rows[0];
        break;
      case 'End':
        next = rows[rows.length - 1];
        break;
      case 'ArrowLeft':
        if (isGroup) {
          this._toggleGroup(row.dataset.cellId!, true);
        } else if (this._groupByCell) {
          // To the row's cell header.
          next = rows
            .slice(0, index)
            .reverse()
            .find(r => r.dataset.nav === 'group');
        }
        break;
      case 'ArrowRight':
        if (isGroup) {
          this._toggleGroup(row.dataset.cellId!, false);
        }
        break;
      case 'Enter':
      case ' ':
        if (isGroup) {
          this._toggleGroup(row.dataset.cellId!);
        } else {
          this._jump(row);
        }
        break;
      default:
        return;
    }
    event.preventDefault();
    event.stopPropagation();
    if (next) {
      this._activate(next);
    }
  };

  private _onChange = (event: Event) => {
    const target = event.target as HTMLInputElement | HTMLSelectElement;
    switch (target.dataset.control) {
      case 'group':
        this._groupByCell = (target as HTMLInputElement).checked;
        this._options.onGroupByCellChanged?.(this._groupByCell);
        break;
      case 'kind':
        this._filter = { ...this._filter, kind: target.value || null };
        break;
      case 'rule':
        this._filter = { ...this._filter, rule: target.value || null };
        break;
      default:
        return;
    }
    this.render();
  };

  private _onInput = (event: Event) => {
    const target = event.target as HTMLInputElement;
    if (target.dataset.control !== 'text') {
      return;
    }
    this._filter = { ...this._filter, text: target.value || null };
    this.render();
  };

  private _source: ISyncsSource | null = null;
  private _body: Widget;
  private _head: HTMLElement;
  private _controls: HTMLElement;
  private _content: HTMLElement;
  private _textBox!: HTMLInputElement;
  private _groupBox!: HTMLInputElement;
  private _kindSelect!: HTMLSelectElement;
  private _ruleSelect!: HTMLSelectElement;
  private _groupByCell: boolean;
  private _filter: ISiteFilter = {};
  /** The sort the user picked; null until a column header is clicked. */
  private _sort: ISiteSort | null = null;
  /** The sort of the rows drawn (`_sort`, or the default for the notebook's rows). */
  private _shownSort: ISiteSort = DEFAULT_SORT;
  /** A listed site has a cost (measured on a GPU): the fourth column shows cost, not blocked time. */
  private _costShown = false;
  /** A listed site was timed (cost or blocked time): the fourth column is drawn. */
  private _timed = true;
  private _filterCount!: HTMLElement;
  private _collapsed = new Set<string>();
  private _activeKey: string | null = null;
  private _expanded = false;
  private _dirty = false;
}

/** Refill a filter's options (the values present now), keeping the selection. */
function fillSelect(
  select: HTMLSelectElement,
  all: string,
  values: string[],
  selected: string | null,
  label: (value: string) => string
): void {
  select.textContent = '';
  const any = el('option', undefined, all);
  any.value = '';
  select.appendChild(any);
  for (const value of values) {
    const option = el('option', undefined, label(value));
    option.value = value;
    option.selected = value === selected;
    select.appendChild(option);
  }
}
