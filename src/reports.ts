import Ajv, { ValidateFunction } from 'ajv';
import type { ICellModel, ICodeCellModel } from '@jupyterlab/cells';
import type { INotebookModel } from '@jupyterlab/notebook';
import { JSONExt, JSONValue } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';
import { REPORT_SCHEMA } from './_report';
import { ICellMergedReport, ICellReport, ISyncReports, MIME_TYPE, SyncReport } from './tokens';
import { MERGED_MIME_TYPE, type MergedReport } from './merged/model';
import { parseMerged } from './merged/parse';

let validator: ValidateFunction | null = null;

/**
 * Compile the report schema now rather than on the first report. The reports plugin
 * calls this when the browser is idle after startup, so that opening the first
 * notebook does not pay for ajv's code generation (about 20 ms).
 */
export function compileReportSchema(): ValidateFunction {
  if (!validator) {
    // The schema is python_helper/syncfree/report.schema.json, embedded at build time
    // by scripts/gen-types.mjs: the kernel and the frontend check the same contract.
    const ajv = new Ajv({ allErrors: false, strict: false });
    validator = ajv.compile(REPORT_SCHEMA as unknown as object);
  }
  return validator;
}

function validate(data: unknown): ValidateFunction['errors'] | null {
  const check = compileReportSchema();
  return check(data) ? null : (check.errors ?? []);
}

/**
 * Reports already checked, by the output's data object. Cells re-read their report on
 * every output change (a streaming print, too): an output model hands out the same
 * stored object until the output itself is replaced (`toJSON().data`, see
 * `reportOfCell`), so each report is validated, and warned about, once.
 */
const checked = new WeakMap<object, SyncReport | null>();
/** The same for reports stored as JSON text (a few, most recent first out). */
const checkedText = new Map<string, SyncReport | null>();
const CHECKED_TEXT_LIMIT = 64;

/**
 * Check a report found in a notebook (possibly hand-edited, old or hostile) against the
 * schema. Returns the report, or null with a console warning: a bad report is ignored,
 * it never breaks the notebook.
 */
export function parseReport(data: unknown, where = 'a cell output'): SyncReport | null {
  if (typeof data === 'object' && data !== null) {
    if (checked.has(data)) {
      return checked.get(data)!;
    }
    const report = parseUnchecked(data, where);
    checked.set(data, report);
    return report;
  }
  if (typeof data === 'string') {
    if (checkedText.has(data)) {
      return checkedText.get(data)!;
    }
    const report = parseUnchecked(data, where);
    if (checkedText.size >= CHECKED_TEXT_LIMIT) {
      checkedText.delete(checkedText.keys().next().value!);
    }
    checkedText.set(data, report);
    return report;
  }
  return parseUnchecked(data, where);
}

function parseUnchecked(data: unknown, where: string): SyncReport | null {
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

/**
 * Whether two reports say the same thing: the same object, or equal field by field
 * (a re-run that found the same syncs). Stops at the first difference, where comparing
 * JSON texts would serialise both reports in full.
 */
export function sameReport(a: SyncReport | null, b: SyncReport | null): boolean {
  return (
    a === b || (a !== null && b !== null && JSONExt.deepEqual(a as unknown as JSONValue, b as unknown as JSONValue))
  );
}

/**
 * The report entry of an output's MIME bundle (unchecked), or undefined. Not
 * `output.data`: that deep-copies every MIME entry on each read (@jupyterlab/rendermime
 * outputmodel.ts `Private.extract`), HTML included, so a notebook of 500 reports would
 * be copied whenever any output changes and the parse cache would never hit;
 * `toJSON()` hands out the stored bundle itself.
 */
export function reportData(output: { toJSON(): unknown }): unknown {
  const json = output.toJSON() as { data?: Record<string, unknown> };
  return json.data?.[MIME_TYPE];
}

/** The last syncfree report among a code cell's outputs, or null. */
export function reportOfCell(model: ICellModel): SyncReport | null {
  if (model.type !== 'code') {
    return null;
  }
  const outputs = (model as ICodeCellModel).outputs;
  if (!outputs) {
    // A disposed cell model.
    return null;
  }
  for (let i = outputs.length - 1; i >= 0; i--) {
    const data = reportData(outputs.get(i));
    if (data !== undefined) {
      return parseReport(data, `cell ${model.id}`);
    }
  }
  return null;
}

/** The last merged rank report among a code cell's outputs (checked), or null. */
export function mergedOfCell(model: ICellModel): MergedReport | null {
  const outputs = model.type === 'code' ? (model as ICodeCellModel).outputs : null;
  if (!outputs) {
    return null;
  }
  for (let i = outputs.length - 1; i >= 0; i--) {
    const json = outputs.get(i).toJSON() as { data?: Record<string, unknown> };
    const data = json.data?.[MERGED_MIME_TYPE];
    if (data !== undefined) {
      return parseMerged(data);
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

  mergedOf(notebookPath: string): readonly ICellMergedReport[] {
    return this._notebooks.get(notebookPath)?.merged ?? [];
  }

  previousOf(notebookPath: string, cellId: string): SyncReport | null {
    return this._notebooks.get(notebookPath)?.previous.get(cellId) ?? null;
  }

  /**
   * Watch a notebook model under a path. Returns a function that stops watching. The
   * path may change (rename): call `rename`. Several views of one notebook share the
   * model: it is watched until the last of them stops.
   */
  watch(path: string, model: INotebookModel): () => void {
    let entry = this._byModel.get(model);
    if (entry) {
      entry.users++;
    } else {
      const created: INotebookEntry = {
        path,
        model,
        users: 1,
        reports: [],
        byCell: new Map(),
        merged: [],
        mergedByCell: new Map(),
        current: new Map(),
        previous: new Map(),
        listeners: new Map(),
        onCells: () => this._watchCells(created)
      };
      entry = created;
      this._byModel.set(model, entry);
      this._notebooks.set(path, entry);
      model.cells.changed.connect(entry.onCells);
      this._watchCells(entry);
    }
    const watched = entry;
    let stopped = false;
    return () => {
      if (stopped || --watched.users > 0) {
        stopped = true;
        return;
      }
      stopped = true;
      if (!model.isDisposed) {
        model.cells.changed.disconnect(watched.onCells);
      }
      for (const watchedCell of watched.listeners.values()) {
        unwatchOutputs(watchedCell);
      }
      watched.listeners.clear();
      this._byModel.delete(model);
      if (this._notebooks.get(watched.path) === watched) {
        this._notebooks.delete(watched.path);
      }
      this._changed.emit(watched.path);
    };
  }

  rename(model: INotebookModel, to: string): void {
    const entry = this._byModel.get(model);
    if (!entry || entry.path === to) {
      return;
    }
    const from = entry.path;
    if (this._notebooks.get(from) === entry) {
      this._notebooks.delete(from);
    }
    entry.path = to;
    this._notebooks.set(to, entry);
    this._changed.emit(from);
    this._changed.emit(to);
  }

  /** Follow added and removed cells; each code cell's outputs are watched on their own. */
  private _watchCells(entry: INotebookEntry): void {
    const present = new Set<ICellModel>();
    for (let i = 0; i < entry.model.cells.length; i++) {
      const cell = entry.model.cells.get(i);
      present.add(cell);
      if (cell.type === 'code' && !entry.listeners.has(cell) && !cell.isDisposed) {
        const listener = () => {
          if (!cell.isDisposed && this._readCell(entry, cell)) {
            this._publish(entry);
          }
        };
        // The outputs list is kept: a disposed cell model's `outputs` is null.
        const outputs = (cell as ICodeCellModel).outputs;
        entry.listeners.set(cell, { outputs, listener });
        outputs.changed.connect(listener);
        this._readCell(entry, cell);
      }
    }
    for (const [cell, watchedCell] of entry.listeners) {
      if (!present.has(cell)) {
        unwatchOutputs(watchedCell);
        entry.listeners.delete(cell);
        entry.byCell.delete(cell);
        entry.mergedByCell.delete(cell);
      }
    }
    this._publish(entry);
  }

  /** Re-read one cell's report (and merged rank report); true when either changed. */
  private _readCell(entry: INotebookEntry, cell: ICellModel): boolean {
    const merged = mergedOfCell(cell);
    const mergedChanged = merged !== (entry.mergedByCell.get(cell) ?? null);
    entry.mergedByCell.set(cell, merged);
    const report = reportOfCell(cell);
    const before = entry.byCell.get(cell) ?? null;
    if (report === before) {
      return mergedChanged;
    }
    entry.byCell.set(cell, report);
    if (report) {
      const last = entry.current.get(cell.id);
      // Keep the report this one replaced (outputs are cleared before a re-run, so the
      // last report is remembered per cell): the sidebar shows the change between runs.
      if (last && !sameReport(last, report)) {
        entry.previous.set(cell.id, last);
      }
      entry.current.set(cell.id, report);
    }
    return true;
  }

  /** Rebuild the notebook's list in cell order and tell listeners, if it changed. */
  private _publish(entry: INotebookEntry): void {
    const reports: ICellReport[] = [];
    const merged: ICellMergedReport[] = [];
    for (let i = 0; i < entry.model.cells.length; i++) {
      const cell = entry.model.cells.get(i);
      const report = entry.byCell.get(cell);
      if (report) {
        reports.push({ cellId: cell.id, report });
      }
      const found = entry.mergedByCell.get(cell);
      if (found) {
        merged.push({ cellId: cell.id, merged: found });
      }
    }
    const same =
      reports.length === entry.reports.length &&
      reports.every((r, i) => r.cellId === entry.reports[i].cellId && r.report === entry.reports[i].report);
    const sameMerged =
      merged.length === entry.merged.length &&
      merged.every((m, i) => m.cellId === entry.merged[i].cellId && m.merged === entry.merged[i].merged);
    if (!same || !sameMerged) {
      entry.reports = reports;
      entry.merged = merged;
      this._changed.emit(entry.path);
    }
  }

  private _notebooks = new Map<string, INotebookEntry>();
  private _byModel = new Map<INotebookModel, INotebookEntry>();
  private _changed = new Signal<ISyncReports, string>(this);
}

interface INotebookEntry {
  path: string;
  model: INotebookModel;
  /** Open views of this notebook model. */
  users: number;
  reports: ICellReport[];
  byCell: Map<ICellModel, SyncReport | null>;
  /** Merged rank reports in the notebook's outputs, in cell order, and per cell. */
  merged: ICellMergedReport[];
  mergedByCell: Map<ICellModel, MergedReport | null>;
  /** The latest report per cell id, kept when outputs are cleared for a re-run. */
  current: Map<string, SyncReport>;
  previous: Map<string, SyncReport>;
  listeners: Map<ICellModel, IWatchedOutputs>;
  onCells: () => void;
}

/** A code cell's outputs list and the listener connected to it. */
interface IWatchedOutputs {
  outputs: ICodeCellModel['outputs'];
  listener: () => void;
}

function unwatchOutputs({ outputs, listener }: IWatchedOutputs): void {
  if (!outputs.isDisposed) {
    outputs.changed.disconnect(listener);
  }
}
