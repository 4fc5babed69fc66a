import type { Message } from '@lumino/messaging';
import { Panel, Widget } from '@lumino/widgets';
import { formatMs } from '../gutter/lines';
import { CSS_PREFIX } from '../tokens';
import {
  ICellGroup,
  IRankInput,
  IRankedSite,
  ISiteFilter,
  ISyncTotals,
  STATIC_KIND,
  SiteRanking,
  filterChoices
} from './ranking';
import { el } from '../dom';

/** The notebook the sidebar shows. */
export interface ISyncsSource {
  /** A name for the header (the notebook's file name). */
  readonly title: string;
  /** The cells' reports, read when the panel draws. */
  inputs(): IRankInput[];
}

export interface ISyncsPanelOptions {
  /** Go to a cell line (activate the cell, put the cursor on the line). */
  jump(cellId: string, line: number): void;
  /** Group sites by cell (else one flat ranked list). */
  groupByCell?: boolean;
  /** Called when the user switches between grouped and flat. */
  onGroupByCellChanged?(value: boolean): void;
  /** Widgets for the header (command buttons). */
  toolbar?: Widget;
}

const S = `${CSS_PREFIX}-sidebar`;

/** Rows drawn at first; the rest on request, so a huge notebook stays responsive. */
export const ROWS_SHOWN = 200;

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

function signed(n: number): string {
  return n > 0 ? `+${n}` : n < 0 ? `−${-n}` : '±0';
}

function signedMs(ms: number): string {
  return ms > 0 ? `+${formatMs(ms)}` : ms < 0 ? `−${formatMs(-ms)}` : '±0 ms';
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
    parts.push(`${signed(site.delta.count)}×`);
  }
  if (site.delta.blockedMs !== null && Math.abs(site.delta.blockedMs) >= 0.01) {
    parts.push(signedMs(site.delta.blockedMs));
  }
  return parts.join(', ');
}

/**
 * The Syncs panel: every sync site of the current notebook's cells ranked by blocked
 * time (then count), grouped by cell or flat, with filters by kind and rule, the
 * notebook's totals and the change since each cell's previous run. Clicking a row
 * jumps to the line. Every report string is set as text.
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
    this._body.node.addEventListener('click', this._onClick);
    this._body.node.addEventListener('keydown', this._onKeydown);
    this._body.node.addEventListener('change', this._onChange);
  }

  /** The notebook shown, or null when no notebook is open. */
  get source(): ISyncsSource | null {
    return this._source;
  }

  set source(value: ISyncsSource | null) {
    this._source = value;
    this._filter = {};
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

  /** The rows currently drawn, in order (for tests and the benchmark). */
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
    const body = this._body.node;
    body.textContent = '';
    const source = this._source;
    if (!source) {
      body.appendChild(el('div', `${S}-empty`, 'Open a notebook to see its syncs.'));
      return;
    }
    const inputs = source.inputs();
    body.appendChild(el('div', `${S}-notebook`, source.title));
    if (inputs.length === 0) {
      body.appendChild(this._emptyState());
      return;
    }
    const ranking = new SiteRanking(inputs, this._filter);
    body.appendChild(this._totals(ranking.totals()));
    body.appendChild(this._controls(inputs));
    if (ranking.size === 0) {
      body.appendChild(el('div', `${S}-empty`, 'No sync matches these filters.'));
      return;
    }
    const list = el('div', `${S}-list`);
    list.setAttribute('role', 'list');
    const limit = this._expanded ? Infinity : ROWS_SHOWN;
    if (this._groupByCell) {
      for (const group of ranking.groups(limit)) {
        list.appendChild(this._groupHeader(group));
        for (const site of group.sites) {
          list.appendChild(this._row(site, false));
        }
      }
    } else {
      for (const site of ranking.flat(limit)) {
        list.appendChild(this._row(site, true));
      }
    }
    body.appendChild(list);
    if (!this._expanded && ranking.size > ROWS_SHOWN) {
      const more = el('button', `${S}-more jp-mod-styled`, `Show all ${ranking.size} sites`);
      more.type = 'button';
      more.dataset.action = 'expand';
      body.appendChild(more);
    }
  }

  private _emptyState(): HTMLElement {
    const box = el('div', `${S}-empty`);
    box.appendChild(el('p', undefined, 'No syncs reported in this notebook yet.'));
    const how = el('p');
    how.appendChild(document.createTextNode('Run '));
    how.appendChild(el('code', undefined, '%load_ext syncfree'));
    how.appendChild(document.createTextNode(' once, then start a cell with '));
    how.appendChild(el('code', undefined, '%%syncfree'));
    how.appendChild(document.createTextNode(' and run it — or use the notebook toolbar button “Check syncs”, which does both.'));
    box.appendChild(how);
    return box;
  }

  private _totals(totals: ISyncTotals): HTMLElement {
    const line = el('div', `${S}-totals`);
    const parts = [plural(totals.syncs, 'sync'), `${formatMs(totals.blockedMs)} blocked`, plural(totals.cells, 'cell')];
    parts.forEach((text, i) => {
      const part = el('span', `${S}-total`, text);
      part.dataset.total = ['syncs', 'blocked', 'cells'][i];
      line.appendChild(part);
    });
    return line;
  }

  private _controls(inputs: IRankInput[]): HTMLElement {
    const { kinds, rules } = filterChoices(inputs);
    const bar = el('div', `${S}-controls`);
    const group = el('label', `${S}-group-toggle`);
    const box = el('input');
    box.type = 'checkbox';
    box.checked = this._groupByCell;
    box.dataset.control = 'group';
    group.appendChild(box);
    group.appendChild(document.createTextNode(' by cell'));
    bar.appendChild(group);
    bar.appendChild(this._select('kind', 'all kinds', kinds, this._filter.kind ?? null, k => (k === STATIC_KIND ? 'not run (static)' : k)));
    bar.appendChild(this._select('rule', 'all rules', rules, this._filter.rule ?? null, r => r));
    return bar;
  }

  private _select(
    name: 'kind' | 'rule',
    all: string,
    values: string[],
    selected: string | null,
    label: (value: string) => string
  ): HTMLSelectElement {
    const select = el('select', `${S}-filter`);
    select.dataset.control = name;
    select.setAttribute('aria-label', `Filter by ${name}`);
    const any = el('option', undefined, all);
    any.value = '';
    select.appendChild(any);
    for (const value of values) {
      const option = el('option', undefined, label(value));
      option.value = value;
      option.selected = value === selected;
      select.appendChild(option);
    }
    return select;
  }

  private _groupHeader(group: ICellGroup): HTMLElement {
    const head = el('div', `${S}-cell`);
    head.dataset.cellId = group.cellId;
    head.appendChild(el('span', `${S}-cell-name`, `Cell ${group.cellNumber}`));
    const parts = [plural(group.syncs, 'sync')];
    if (group.blockedMs !== null) {
      parts.push(formatMs(group.blockedMs));
    }
    head.appendChild(el('span', `${S}-cell-totals`, parts.join(' · ')));
    if (group.delta) {
      const change: string[] = [];
      if (group.delta.syncs !== 0) {
        change.push(`${signed(group.delta.syncs)} syncs`);
      }
      if (group.delta.blockedMs !== null && Math.abs(group.delta.blockedMs) >= 0.01) {
        change.push(signedMs(group.delta.blockedMs));
      }
      if (group.delta.fixed > 0) {
        change.push(`${group.delta.fixed} gone`);
      }
      const delta = el('span', `${S}-delta`, change.length ? `${change.join(', ')} vs previous run` : 'same as previous run');
      delta.classList.toggle(`${S}-better`, group.delta.syncs < 0);
      delta.classList.toggle(`${S}-worse`, group.delta.syncs > 0);
      head.appendChild(delta);
    }
    return head;
  }

  private _row(site: IRankedSite, showCell: boolean): HTMLElement {
    const row = el('div', `${S}-row ${S}-row-${site.source}${site.stale ? ` ${CSS_PREFIX}-stale` : ''}`);
    row.setAttribute('role', 'listitem');
    row.tabIndex = 0;
    row.dataset.cellId = site.cellId;
    // Where the line is now (edits above it move it); the report's own line is kept too.
    const line = site.currentLine ?? site.line;
    row.dataset.line = String(line);
    row.dataset.reportLine = String(site.line);
    if (site.stale) {
      row.dataset.stale = 'true';
    }
    const dot = el('span', `${CSS_PREFIX}-marker ${CSS_PREFIX}-marker-${site.source} ${CSS_PREFIX}-weight-${site.weight}`);
    dot.setAttribute('aria-hidden', 'true');
    row.appendChild(dot);
    const where = site.currentLine === null ? `${site.line} (deleted)` : String(line);
    row.appendChild(el('span', `${S}-where`, showCell ? `cell ${site.cellNumber}:${where}` : `line ${where}`));
    row.appendChild(el('span', `${S}-kind`, site.source === 'static' ? (site.rule ?? STATIC_KIND) : site.kind));
    if (site.source !== 'static') {
      row.appendChild(el('span', `${S}-count`, `×${site.count}`));
      row.appendChild(el('span', `${S}-blocked`, formatMs(site.blockedMs)));
    } else {
      row.appendChild(el('span', `${S}-count`, 'not run'));
    }
    const delta = deltaText(site);
    if (delta) {
      const chip = el('span', `${S}-delta`, delta);
      chip.classList.toggle(`${S}-worse`, site.delta!.isNew || site.delta!.count > 0);
      chip.classList.toggle(`${S}-better`, !site.delta!.isNew && site.delta!.count < 0);
      row.appendChild(chip);
    }
    const what = site.source === 'static' ? 'did not run' : `${site.kind} ×${site.count}`;
    const rule = site.ruleTitle ? `${site.rule} ${site.ruleTitle}` : site.rule;
    const staleNote = site.stale ? 'out of date: the cell was edited since this run' : null;
    row.title = [`line ${line}: ${what}`, rule, site.message, staleNote].filter(Boolean).join(' — ');
    return row;
  }

  private _onClick = (event: MouseEvent) => {
    const target = event.target as HTMLElement;
    if (target.closest('[data-action="expand"]')) {
      this._expanded = true;
      this.render();
      return;
    }
    const row = target.closest<HTMLElement>(`.${S}-row, .${S}-cell`);
    if (row?.dataset.cellId) {
      this._options.jump(row.dataset.cellId, Number(row.dataset.line ?? 1));
    }
  };

  private _onKeydown = (event: KeyboardEvent) => {
    if (event.key !== 'Enter' && event.key !== ' ') {
      return;
    }
    const row = (event.target as HTMLElement).closest<HTMLElement>(`.${S}-row`);
    if (row?.dataset.cellId) {
      event.preventDefault();
      this._options.jump(row.dataset.cellId, Number(row.dataset.line ?? 1));
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

  private _source: ISyncsSource | null = null;
  private _body: Widget;
  private _groupByCell: boolean;
  private _filter: ISiteFilter = {};
  private _expanded = false;
  private _dirty = false;
}
