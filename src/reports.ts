import Ajv, { ValidateFunction } from 'ajv';
import type { ICellModel, ICodeCellModel } from '@jupyterlab/cells';
import type { INotebookModel } from '@jupyterlab/notebook';
import { ISignal, Signal } from '@lumino/signaling';
import { REPORT_SCHEMA } from './_report';
import { ICellReport, ISyncReports, MIME_TYPE, SyncReport } from './tokens';

let validator: ValidateFunction | null = null;

function validate(data: unknown): ValidateFunction['errors'] | null {
  if (!validator) {
    // The schema is python_helper/syncfree/report.schema.json, embedded at build time
    // by scripts/gen-types.mjs: the kernel and the frontend check the same contract.
    const ajv = new Ajv({ allErrors: false, strict: false });
    validator = ajv.compile(REPORT_SCHEMA as unknown as object);
  }
  return validator(data) ? null : validator.errors ?? [];
}

/**
 * Check a report found in a notebook (possibly hand-edited, old or hostile) against the
 * schema. Returns the report, or null with a console warning: a bad report is ignored,
 * it never breaks the notebook.
 */
export function parseReport(data: unknown, where = 'a cell output'): SyncReport | null {
  let value = data;
  if (typeof value === 'string') {
    try {
      value = JSON.parse(value);
    } catch {
      console.warn(`syncfree: ignored a report in ${where}: not JSON`);
      return null;
    }
  }
  const errors = validate(value);
  if (errors) {
    const first = errors[0];
    const detail = first ? `${first.instancePath || '/'} ${first.message ?? ''}` : 'invalid';
    console.warn(`syncfree: ignored a malformed report in ${where}: ${detail}`);
    return null;
  }
  return value as SyncReport;
}

/** The last syncfree report among a code cell's outputs, or null. */
export function reportOfCell(model: ICellModel): SyncReport | null {
  if (model.type !== 'code') {
    return null;
  }
  const outputs = (model as ICodeCellModel).outputs;
  for (let i = outputs.length - 1; i >= 0; i--) {
    const data = outputs.get(i).data[MIME_TYPE];
    if (data !== undefined) {
      return parseReport(data, `cell ${model.id}`);
    }
  }
  return null;
}

/**
 * The reports of every open notebook, kept up to date from their cells' outputs.
 * A notebook is registered by the reports plugin when its panel opens.
 */
export class SyncReportStore implements ISyncReports {
  get changed(): ISignal<ISyncReports, string> {
    return this._changed;
  }

  reportsOf(notebookPath: string): readonly ICellReport[] {
    return this._notebooks.get(notebookPath)?.reports ?? [];
  }

  previousOf(notebookPath: string, cellId: string): SyncReport | null {
    return this._notebooks.get(notebookPath)?.previous.get(cellId) ?? null;
  }

  /**
   * Watch a notebook model under a path. Returns a function that stops watching. The
   * path may change (rename): call `rename`.
   */
  watch(path: string, model: INotebookModel): () => void {
    const entry: INotebookEntry = {
      model,
      reports: [],
      current: new Map(),
      previous: new Map(),
      watched: new Set()
    };
    this._notebooks.set(path, entry);
    let currentPath = path;
    const refresh = () => this._refresh(currentPath);
    const onCells = () => {
      this._watchCells(entry, refresh);
      refresh();
    };
    model.cells.changed.connect(onCells);
    onCells();
    this._renames.set(model, (to: string) => {
      this._notebooks.delete(currentPath);
      this._changed.emit(currentPath);
      currentPath = to;
      this._notebooks.set(to, entry);
      refresh();
    });
    return () => {
      model.cells.changed.disconnect(onCells);
      for (const cell of entry.watched) {
        if (cell.type === 'code') {
          (cell as ICodeCellModel).outputs.changed.disconnect(refresh);
        }
      }
      this._renames.delete(model);
      this._notebooks.delete(currentPath);
      this._changed.emit(currentPath);
    };
  }

  rename(model: INotebookModel, to: string): void {
    this._renames.get(model)?.(to);
  }

  private _watchCells(entry: INotebookEntry, refresh: () => void): void {
    const present = new Set<ICellModel>();
    for (let i = 0; i < entry.model.cells.length; i++) {
      const cell = entry.model.cells.get(i);
      present.add(cell);
      if (!entry.watched.has(cell) && cell.type === 'code') {
        (cell as ICodeCellModel).outputs.changed.connect(refresh);
      }
      entry.watched.add(cell);
    }
    for (const cell of entry.watched) {
      if (!present.has(cell)) {
        if (cell.type === 'code') {
          (cell as ICodeCellModel).outputs.changed.disconnect(refresh);
        }
        entry.watched.delete(cell);
      }
    }
  }

  private _refresh(path: string): void {
    const entry = this._notebooks.get(path);
    if (!entry) {
      return;
    }
    const reports: ICellReport[] = [];
    for (let i = 0; i < entry.model.cells.length; i++) {
      const cell = entry.model.cells.get(i);
      const report = reportOfCell(cell);
      const last = entry.current.get(cell.id);
      if (report && last && last !== report && last.source_hash !== '') {
        // Keep the report this one replaced: the sidebar shows the change between runs.
        if (JSON.stringify(last) !== JSON.stringify(report)) {
          entry.previous.set(cell.id, last);
        }
      }
      if (report) {
        entry.current.set(cell.id, report);
        reports.push({ cellId: cell.id, report });
      }
    }
    entry.reports = reports;
    this._changed.emit(path);
  }

  private _notebooks = new Map<string, INotebookEntry>();
  private _renames = new Map<INotebookModel, (to: string) => void>();
  private _changed = new Signal<ISyncReports, string>(this);
}

interface INotebookEntry {
  model: INotebookModel;
  reports: ICellReport[];
  /** The latest report per cell id, kept when outputs are cleared for a re-run. */
  current: Map<string, SyncReport>;
  previous: Map<string, SyncReport>;
  watched: Set<ICellModel>;
}
