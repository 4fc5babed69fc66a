import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { CommandToolbarButton, Toolbar } from '@jupyterlab/ui-components';
import type { ReadonlyJSONObject } from '@lumino/coreutils';
import type { SyncfreeSidebar } from '../_settings';
import { syncfreeIcon } from '../icons';
import { revealCellLine } from '../navigate';
import { CommandIDs, ISyncReports, PLUGIN_IDS } from '../tokens';
import { ISyncsSource, SyncsPanel } from './panel';
import type { IRankInput } from './ranking';

/** The reports of one open notebook, read when the panel draws. */
export function notebookSource(panel: NotebookPanel, reports: ISyncReports): ISyncsSource {
  return {
    get title() {
      return panel.title.label;
    },
    inputs(): IRankInput[] {
      const path = panel.context.path;
      const found = reports.reportsOf(path);
      const model = panel.context.model;
      if (found.length === 0 || !model) {
        return [];
      }
      const cells = new Map<string, { number: number; source: string }>();
      for (let i = 0; i < model.cells.length; i++) {
        const cell = model.cells.get(i);
        cells.set(cell.id, { number: i + 1, source: cell.sharedModel.getSource() });
      }
      const inputs: IRankInput[] = [];
      for (const { cellId, report } of found) {
        const cell = cells.get(cellId);
        if (cell) {
          inputs.push({
            cellId,
            cellNumber: cell.number,
            report,
            previous: reports.previousOf(path, cellId),
            lineCount: cell.source.split('\n').length
          });
        }
      }
      return inputs;
    }
  };
}

/** The Syncs panel in the right sidebar; it follows the active notebook. */
export const sidebarPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_IDS.sidebar,
  description: 'The Syncs sidebar: every sync of the current notebook, ranked by blocked time.',
  autoStart: true,
  requires: [ISyncReports, INotebookTracker],
  optional: [ISettingRegistry, ICommandPalette, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    reports: ISyncReports,
    tracker: INotebookTracker,
    settingRegistry: ISettingRegistry | null,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null
  ) => {
    const { commands, shell } = app;
    let settings: ISettingRegistry.ISettings | null = null;

    const toolbar = new Toolbar();
    const addButton = (name: string, id: string, label: string | undefined, args: ReadonlyJSONObject = {}) =>
      toolbar.addItem(name, new CommandToolbarButton({ commands, id, args, label }));
    addButton('check', CommandIDs.checkCell, 'Check cell');
    // Labeled by the command: "Watch", or "Watching" while watch mode is on.
    addButton('watch', CommandIDs.toggleWatch, undefined, { short: true });
    addButton('clear', CommandIDs.clearMarkers, 'Clear', { all: true });

    const panel = new SyncsPanel({
      toolbar,
      jump: (cellId, line) => {
        const notebook = tracker.currentWidget;
        if (notebook) {
          shell.activateById(notebook.id);
          void revealCellLine(notebook.content, cellId, line);
        }
      },
      onGroupByCellChanged: value => {
        void settings?.set('groupByCell', value).catch(reason => console.error('syncfree: could not save a setting', reason));
      }
    });
    panel.title.icon = syncfreeIcon;
    shell.add(panel, 'right', { rank: 650 });
    restorer?.add(panel, panel.id);

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
          const cells = notebook.context.model.cells;
          const onCells = () => panel.update();
          cells.changed.connect(onCells);
          watchedCells = { disconnect: () => cells.changed.disconnect(onCells) };
          panel.update();
        });
      }
    };
    tracker.currentChanged.connect(follow);
    follow();
    reports.changed.connect((_, path) => {
      if (tracker.currentWidget?.context.path === path) {
        panel.update();
      }
    });

    commands.addCommand(CommandIDs.openSidebar, {
      label: 'Show Syncs Panel',
      caption: 'The syncs of this notebook, ranked by blocked time',
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
