import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { CommandToolbarButton, Toolbar } from '@jupyterlab/ui-components';
import type { ReadonlyJSONObject } from '@lumino/coreutils';
import type { SyncfreeSidebar } from '../_settings';
import { syncfreeIcon } from '../icons';
import { reportFreshness, syncMarkerField } from '../gutter/extension';
import { editorViewOfCell, revealCellLine } from '../navigate';
import { CommandIDs, ISyncReports, PLUGIN_IDS } from '../tokens';
import { ISyncsSource, SyncsPanel } from './panel';
import { SyncsStatus, badgeCount, badgeText } from './status';
import { anchoredLines, notebookTotals } from '../model';
import type { IRankInput } from './ranking';
import { mergedRankInput } from './merged';
import type { EditorView } from '@codemirror/view';
import type { SyncReport } from '../tokens';

/** The reports of one open notebook, read when the panel draws. */
export function notebookSource(panel: NotebookPanel, reports: ISyncReports): ISyncsSource {
  return {
    get title() {
      return panel.title.label;
    },
    inputs(): IRankInput[] {
      const path = panel.context.path;
      const found = reports.reportsOf(path);
      const merged = reports.mergedOf?.(path) ?? [];
      const model = panel.context.model;
      if ((found.length === 0 && merged.length === 0) || !model) {
        return [];
      }
      const cells = new Map<string, { number: number; source: string }>();
      for (let i = 0; i < model.cells.length; i++) {
        const cell = model.cells.get(i);
        cells.set(cell.id, { number: i + 1, source: cell.sharedModel.getSource() });
      }
      const widgets = new Map(panel.content.widgets.map(widget => [widget.model.id, widget]));
      const inputs: IRankInput[] = [];
      for (const { cellId, report } of found) {
        const cell = cells.get(cellId);
        if (cell) {
          inputs.push({
            cellId,
            cellNumber: cell.number,
            report,
            previous: reports.previousOf(path, cellId),
            lineCount: cell.source.split('\n').length,
            ...(editedLines(editorViewOfCell(widgets.get(cellId)), report) ?? anchoredLines(cell.source, report))
          });
        }
      }
      // A distributed job's merged report: its sites are in scripts, a group of their own.
      for (const { cellId, merged: report } of merged) {
        const cell = cells.get(cellId);
        if (cell) {
          inputs.push(mergedRankInput(report, cellId, cell.number));
        }
      }
      return inputs;
    }
  };
}

/**
 * Where a rendered cell's report lines are now, from its editor's markers (they follow
 * edits), and whether the report is out of date. Null for a cell not rendered.
 */
function editedLines(view: EditorView | null, report: SyncReport): Pick<IRankInput, 'currentLine' | 'stale'> | null {
  const field = view?.state.field(syncMarkerField, false);
  if (!view || !field || field.report !== report) {
    return null;
  }
  const stale = reportFreshness(view.state) === 'stale';
  if (!stale) {
    return { stale };
  }
  const moved = new Map<number, number>();
  for (const iter = field.markers.iter(); iter.value; iter.next()) {
    moved.set(iter.value.info.line, view.state.doc.lineAt(iter.from).number);
  }
  // A line whose marker an edit deleted is gone; a line without a marker (not drawn:
  // under the threshold) stays where it was.
  const lines = view.state.doc.lines;
  return {
    stale,
    currentLine: line => moved.get(line) ?? (field.deleted.has(line) || line > lines ? null : line)
  };
}

/**
 * What the panel shows of an edited cell: whether its report is out of date and where
 * its marked lines are now; null when the cell has no report. Typing that changes
 * neither (most keys) needs no redraw.
 */
function editSignature(view: EditorView | null): string | null {
  const field = view?.state.field(syncMarkerField, false);
  if (!view || !field || !field.report) {
    return null;
  }
  const parts: string[] = [reportFreshness(view.state)];
  for (const iter = field.markers.iter(); iter.value; iter.next()) {
    parts.push(`${iter.value.info.line}>${view.state.doc.lineAt(iter.from).number}`);
  }
  return parts.join(' ');
}

/** How long after an edit the panel redraws (ms). */
const EDIT_REDRAW_MS = 150;

/** The Syncs panel in the right sidebar; it follows the active notebook. */
export const sidebarPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_IDS.sidebar,
  description: 'The Syncs sidebar: every sync of the current notebook, costliest first.',
  autoStart: true,
  requires: [ISyncReports, INotebookTracker],
  optional: [ISettingRegistry, ICommandPalette, ILayoutRestorer, IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    reports: ISyncReports,
    tracker: INotebookTracker,
    settingRegistry: ISettingRegistry | null,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    statusBar: IStatusBar | null
  ) => {
    const { commands, shell } = app;
    let settings: ISettingRegistry.ISettings | null = null;

    const toolbar = new Toolbar();
    // noFocusOnClick: a click runs the command without moving the keyboard focus, as on
    // JupyterLab's notebook toolbar (@jupyterlab/ui-components toolbar.tsx
    // ToolbarButtonComponent): the next Shift+Enter runs the cell, not the button again.
    const addButton = (name: string, id: string, label: string | undefined, args: ReadonlyJSONObject = {}) =>
      toolbar.addItem(name, new CommandToolbarButton({ commands, id, args, label, noFocusOnClick: true }));
    addButton('check', CommandIDs.checkCell, 'Check cell');
    // Labeled by the command: "Watch", or "Watching" while watch mode is on.
    addButton('watch', CommandIDs.toggleWatch, undefined, { short: true });
    addButton('clear', CommandIDs.clearMarkers, 'Clear', { all: true });

    const panel = new SyncsPanel({
      toolbar,
      jump: (cellId, line, column) => {
        const notebook = tracker.currentWidget;
        if (notebook) {
          shell.activateById(notebook.id);
          void revealCellLine(notebook.content, cellId, line, column);
        }
      },
      // The commands plugin's watch toggle knows whether the kernel watches every cell.
      watching: () => commands.hasCommand(CommandIDs.toggleWatch) && commands.isToggled(CommandIDs.toggleWatch),
      onGroupByCellChanged: value => {
        void settings
          ?.set('groupByCell', value)
          .catch(reason => console.error('syncfree: could not save a setting', reason));
      }
    });
    panel.title.icon = syncfreeIcon;
    commands.commandChanged.connect((_, change) => {
      if (change.id === CommandIDs.toggleWatch) {
        panel.update();
      }
    });
    shell.add(panel, 'right', { rank: 650 });
    restorer?.add(panel, panel.id);

    // The notebook's totals: a count badge on the panel's tab and a status-bar item.
    const status = new SyncsStatus(() => void commands.execute(CommandIDs.openSidebar));
    statusBar?.registerStatusItem(`${PLUGIN_IDS.sidebar}:status`, {
      item: status,
      align: 'left',
      rank: 5,
      isActive: () => status.active,
      activeStateChanged: status.activeChanged
    });
    const caption = panel.title.caption;
    // At most once a frame: a notebook's reports can change many times while it loads.
    let totalsFrame = 0;
    const showTotalsSoon = () => {
      if (!totalsFrame) {
        totalsFrame = requestAnimationFrame(() => {
          totalsFrame = 0;
          showTotals();
        });
      }
    };
    const showTotals = () => {
      const notebook = tracker.currentWidget;
      const path = notebook?.context.path;
      // The merged rank reports' syncs count too, as the panel counts them.
      const found = path
        ? [
            ...reports.reportsOf(path),
            ...(reports.mergedOf?.(path) ?? []).map(({ cellId, merged }) => mergedRankInput(merged, cellId, 0))
          ]
        : [];
      const totals = found.length > 0 ? notebookTotals(found) : null;
      status.totals = totals;
      const count = badgeCount(totals);
      // The tab draws title.dataset as data-* attributes (@lumino/widgets TabBar
      // createTabDataset); the stylesheet shows data-syncfree-count as a badge.
      const dataset: Record<string, string> = { ...panel.title.dataset };
      delete dataset['syncfree-count'];
      if (count !== null) {
        dataset['syncfree-count'] = badgeText(count);
      }
      panel.title.dataset = dataset;
      panel.title.caption =
        count !== null && totals ? `${caption} (${status.node.textContent?.replace(/^Syncs: /, '')})` : caption;
    };

    // Cell moves renumber the rows without changing any report: follow the model too.
    let watchedCells: { disconnect(): void } | null = null;
    const follow = () => {
      watchedCells?.disconnect();
      watchedCells = null;
      const notebook = tracker.currentWidget;
      panel.source = notebook ? notebookSource(notebook, reports) : null;
      if (notebook) {
        void notebook.context.ready.then(() => {
          if (tracker.currentWidget !== notebook || notebook.isDisposed) {
            return;
          }
          const model = notebook.context.model;
          const cells = model.cells;
          const onCells = () => panel.update();
          // Edits move rows' lines and make them stale: redraw a moment after typing.
          let timer = 0;
          // The signature of the cell being edited when the panel last drew.
          let drawn = new Map<string, string>();
          const onContent = () => {
            window.clearTimeout(timer);
            timer = window.setTimeout(() => {
              // Edits are typed in the active cell; one without a report, or an edit that
              // neither moves a marked line nor changes the report's freshness, changes
              // nothing in the panel.
              const cell = notebook.content.activeCell;
              const signature = editSignature(editorViewOfCell(cell));
              if (!cell || signature === null || drawn.get(cell.model.id) === signature) {
                return;
              }
              drawn = new Map([[cell.model.id, signature]]);
              panel.update();
            }, EDIT_REDRAW_MS);
          };
          cells.changed.connect(onCells);
          model.contentChanged.connect(onContent);
          watchedCells = {
            disconnect: () => {
              window.clearTimeout(timer);
              if (!model.isDisposed) {
                cells.changed.disconnect(onCells);
                model.contentChanged.disconnect(onContent);
              }
            }
          };
          panel.update();
        });
      }
    };
    tracker.currentChanged.connect(follow);
    tracker.currentChanged.connect(showTotalsSoon);
    follow();
    showTotalsSoon();
    reports.changed.connect((_, path) => {
      if (tracker.currentWidget?.context.path === path) {
        panel.update();
        showTotalsSoon();
      }
    });

    commands.addCommand(CommandIDs.openSidebar, {
      label: 'Show Syncs Panel',
      caption: 'The syncs of this notebook, costliest first (GPU time lost where measured)',
      icon: syncfreeIcon,
      execute: () => shell.activateById(panel.id)
    });
    palette?.addItem({ command: CommandIDs.openSidebar, category: 'Syncfree' });

    if (settingRegistry) {
      void settingRegistry
        .load(PLUGIN_IDS.sidebar)
        .then(loaded => {
          settings = loaded;
          const apply = () => {
            panel.groupByCell = (loaded.composite as SyncfreeSidebar).groupByCell ?? true;
          };
          loaded.changed.connect(apply);
          apply();
        })
        .catch(reason => console.error('syncfree: could not load sidebar settings', reason));
    }
  }
};
