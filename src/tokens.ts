import { Token } from '@lumino/coreutils';
import { ISignal } from '@lumino/signaling';
import type { SyncReport } from './_report';
import type { MergedReport } from './_merged';

export type { SyncReport, SyncSite, Finding, Rule, Fix, TextEdit, Range } from './_report';

/** The MIME type of a syncfree report output (see python_helper/syncfree/report.py). */
export const MIME_TYPE = 'application/vnd.syncfree.report.v1+json';

/** The npm package name, which prefixes every plugin id. */
export const PACKAGE = 'jupyterlab-syncfree';

export const PLUGIN_IDS = {
  reports: `${PACKAGE}:reports`,
  markers: `${PACKAGE}:markers`,
  renderer: `${PACKAGE}:renderer`,
  sidebar: `${PACKAGE}:sidebar`,
  commands: `${PACKAGE}:commands`
} as const;

export const CommandIDs = {
  checkCell: 'syncfree:check-cell',
  toggleWatch: 'syncfree:toggle-watch',
  applyRewrite: 'syncfree:apply-rewrite',
  showCard: 'syncfree:show-card',
  clearMarkers: 'syncfree:clear-markers',
  nextSync: 'syncfree:next-sync',
  previousSync: 'syncfree:previous-sync',
  openSidebar: 'syncfree:open-sidebar'
} as const;

/** CSS classes share this prefix. */
export const CSS_PREFIX = 'jp-syncfree';

/** A report as found in one cell's outputs. */
export interface ICellReport {
  /** The cell model id (stable while the notebook is open). */
  readonly cellId: string;
  readonly report: SyncReport;
}

/** A distributed job's merged report (its ranks' sites in scripts) as found in one cell's outputs. */
export interface ICellMergedReport {
  readonly cellId: string;
  readonly merged: MergedReport;
}

/**
 * The reports of the open notebooks, read from their cells' outputs.
 */
export interface ISyncReports {
  /** Reports of a notebook, in cell order; empty when it has none. */
  reportsOf(notebookPath: string): readonly ICellReport[];
  /** Merged rank reports shown in a notebook's outputs, in cell order (issue 39). */
  mergedOf?(notebookPath: string): readonly ICellMergedReport[];
  /** The previous report of a cell (before its last re-run) while the notebook is open. */
  previousOf(notebookPath: string, cellId: string): SyncReport | null;
  /** Emitted with the notebook path whose reports changed. */
  readonly changed: ISignal<ISyncReports, string>;
}

export const ISyncReports = new Token<ISyncReports>(
  `${PACKAGE}:ISyncReports`,
  'The syncfree reports found in the outputs of open notebooks.'
);
