import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, Dialog, ISessionContextDialogs, Notification, showDialog } from '@jupyterlab/apputils';
import type { ICodeCellModel } from '@jupyterlab/cells';
import type * as nbformat from '@jupyterlab/nbformat';
import { JSONExt, JSONValue } from '@lumino/coreutils';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import type { SyncfreeCommands } from '../_settings';
import { markerAtLine, syncMarkerField } from '../gutter/extension';
import { openSyncCard, showSyncCardAtCursor, syncCardField } from '../gutter/tooltip';
import { syncfreeIcon } from '../icons';
import { cursorPosition, editorViewOfCell, revealCellLine, syncPositions } from '../navigate';
import { stepToSync } from '../positions';
import { applyRewrite, rewritableFindings } from '../rewrite';
import { reportOfCell } from '../reports';
import { CommandIDs, ISyncReports, MIME_TYPE, PLUGIN_IDS } from '../tokens';
import { LoadOutcome, SyncfreeKernelControl } from './kernel';
import { DEFAULT_MAGIC_OPTIONS, IMagicOptions, magicPrefix, watchLine } from './magic';

const CATEGORY = 'Syncfree';

/** Tell the user once, in words, why the kernel side did not start. */
function reportLoadProblem(outcome: LoadOutcome): void {
  if (outcome.ok) {
    return;
  }
  if (outcome.problem === 'not-installed') {
    Notification.error(outcome.detail, {
      autoClose: false,
      actions: [
        {
          label: 'Copy pip command',
          callback: () => void navigator.clipboard?.writeText('pip install syncfree')
        }
      ]
    });
  } else {
    Notification.warning(outcome.detail, { autoClose: 8000 });
  }
}

/** The report outputs taken out of one cell: enough to put them back. */
export interface IRemovedReports {
  cell: ICodeCellModel;
  /** The cell's outputs before, in order. */
  outputs: nbformat.IOutput[];
  count: number;
}

/**
 * Remove the syncfree report outputs of a cell, as an edit of the notebook: through the
 * cell's shared model, which is what is saved and what marks the notebook dirty, as
 * JupyterLab's own Clear Outputs does (NotebookActions.clearOutputs). Removing them
 * from the cell's output area model is not enough: its 'remove' change reaches the
 * shared model with the count as the end index (@jupyterlab/cells model.ts
 * `onOutputsChange`), so nothing is deleted there and the reports came back on reopening.
 * Null when the cell had no report.
 */
export function removeReportOutputs(model: ICodeCellModel): IRemovedReports | null {
  const before = model.sharedModel.getOutputs();
  const kept = before.filter(output => (output.data as Record<string, unknown> | undefined)?.[MIME_TYPE] === undefined);
  if (kept.length === before.length) {
    return null;
  }
  model.sharedModel.transact(() => {
    for (let i = before.length - 1; i >= 0; i--) {
      if ((before[i].data as Record<string, unknown> | undefined)?.[MIME_TYPE] !== undefined) {
        model.sharedModel.updateOutputs(i, i + 1, []);
      }
    }
  }, false);
  return { cell: model, outputs: before, count: before.length - kept.length };
}

/**
 * Put removed reports back (the Undo of a clear): each cell gets the outputs it had, if
 * it is still there and its outputs did not change since (a cell run again has new ones).
 */
export function restoreReportOutputs(removed: readonly IRemovedReports[]): number {
  let restored = 0;
  for (const { cell, outputs, count } of removed) {
    if (cell.isDisposed) {
      continue;
    }
    const now = cell.sharedModel.getOutputs();
    const expected = outputs.filter(o => (o.data as Record<string, unknown> | undefined)?.[MIME_TYPE] === undefined);
    if (!JSONExt.deepEqual(now as unknown as JSONValue, expected as unknown as JSONValue)) {
      continue;
    }
    cell.sharedModel.updateOutputs(0, now.length, outputs);
    restored += count > 0 ? 1 : 0;
  }
  return restored;
}

/**
 * The syncfree commands: check a cell, watch mode, apply the rewrite or open the card
 * at the cursor, clear reports, and step through the marked lines of a notebook.
 */
export const commandsPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_IDS.commands,
  description: 'Commands, shortcuts and the toolbar button of syncfree.',
  autoStart: true,
  requires: [INotebookTracker, ISyncReports],
  optional: [ISettingRegistry, ICommandPalette, ISessionContextDialogs],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    reports: ISyncReports,
    settingRegistry: ISettingRegistry | null,
    palette: ICommandPalette | null,
    sessionDialogs: ISessionContextDialogs | null
  ) => {
    const { commands } = app;
    const kernels = new SyncfreeKernelControl();
    let runOptions: IMagicOptions = DEFAULT_MAGIC_OPTIONS;

    const current = (): NotebookPanel | null => tracker.currentWidget;
    const activeView = () => editorViewOfCell(tracker.activeCell);
    const hasCodeCell = () => tracker.activeCell?.model.type === 'code';

    commands.addCommand(CommandIDs.checkCell, {
      label: 'Check Cell for Syncs',
      caption: 'Run the active cell under %%syncfree (loads the syncfree extension in the kernel first)',
      icon: syncfreeIcon,
      execute: async () => {
        const panel = current();
        const cell = panel?.content.activeCell;
        if (!panel || !cell) {
          return;
        }
        if (cell.model.type !== 'code') {
          Notification.info('Select a code cell to check it for syncs.', { autoClose: 3000 });
          return;
        }
        const loaded = await kernels.ensureLoaded(panel.sessionContext);
        if (!loaded.ok) {
          reportLoadProblem(loaded);
          return;
        }
        const prefix = magicPrefix(cell.model.sharedModel.getSource(), runOptions);
        if (prefix !== null) {
          cell.model.sharedModel.updateSource(0, 0, prefix);
        }
        // Run just this cell, not the whole selection.
        panel.content.deselectAll();
        await NotebookActions.run(panel.content, panel.sessionContext, sessionDialogs ?? undefined);
      }
    });

    commands.addCommand(CommandIDs.toggleWatch, {
      // `short`: the sidebar's button, which says whether watch mode is on.
      label: args =>
        args.short
          ? kernels.isWatching(current()?.sessionContext)
            ? 'Watching'
            : 'Watch'
          : 'Check Every Cell for Syncs (Watch Mode)',
      caption: 'Run every cell of this notebook’s kernel under syncfree (%syncfree on|off)',
      isToggleable: true,
      isToggled: () => kernels.isWatching(current()?.sessionContext),
      isEnabled: () => !!current(),
      execute: async () => {
        const panel = current();
        if (!panel) {
          return;
        }
        const on = !kernels.isWatching(panel.sessionContext);
        const outcome = await kernels.setWatching(panel.sessionContext, on, watchLine(on, runOptions));
        if (!outcome.ok) {
          reportLoadProblem(outcome);
          return;
        }
        Notification.info(
          on
            ? 'Syncfree watch mode is on: every cell run in this kernel is checked for syncs.'
            : 'Syncfree watch mode is off.',
          { autoClose: 4000 }
        );
      }
    });
    kernels.stateChanged.connect(() => commands.notifyCommandChanged(CommandIDs.toggleWatch));
    // `%syncfree on|off` run in a cell changes the state as the button does.
    tracker.widgetAdded.connect((_, panel) => kernels.follow(panel.sessionContext));
    tracker.forEach(panel => kernels.follow(panel.sessionContext));
    // Buttons and menus bound to these commands redraw their enabled/toggled state.
    tracker.currentChanged.connect(() => {
      for (const id of [
        CommandIDs.toggleWatch,
        CommandIDs.clearMarkers,
        CommandIDs.nextSync,
        CommandIDs.previousSync
      ]) {
        commands.notifyCommandChanged(id);
      }
    });

    commands.addCommand(CommandIDs.showCard, {
      label: 'Show Sync Details at Cursor',
      caption: 'Open the card of the sync marked on the cursor line (keyboard focus moves into it)',
      isEnabled: hasCodeCell,
      execute: () => {
        const view = activeView();
        if (!view || !showSyncCardAtCursor(view)) {
          Notification.info('No sync is marked on the cursor line.', { autoClose: 3000 });
        }
      }
    });

    commands.addCommand(CommandIDs.applyRewrite, {
      label: 'Apply Sync-Free Rewrite at Cursor',
      caption: 'Apply the catalog’s rewrite for the sync on the cursor line (one undoable edit)',
      isEnabled: hasCodeCell,
      execute: () => {
        const view = activeView();
        const state = view?.state.field(syncMarkerField, false);
        const line = view ? view.state.doc.lineAt(view.state.selection.main.head) : null;
        const marker = view && line ? markerAtLine(view, line.number) : null;
        if (!view || !state?.report || !line || !marker) {
          Notification.info('No sync is marked on the cursor line.', { autoClose: 3000 });
          return;
        }
        const findings = rewritableFindings(state.report, marker.info.line);
        if (findings.length === 0) {
          Notification.info('This sync has no mechanical rewrite: see the card for the sync-free alternative.', {
            autoClose: 5000
          });
          return;
        }
        const column = view.state.selection.main.head - line.from;
        const under = findings.filter(f => f.range.col <= column && column <= f.range.end_col);
        const choice = findings.length === 1 ? findings[0] : under.length === 1 ? under[0] : null;
        if (!choice || choice.fix!.safety !== 'safe') {
          // Several rewrites on this line (pick one), or one to review first: the card
          // shows the preview and the warning, its Apply button does the rest.
          showSyncCardAtCursor(view);
          return;
        }
        const outcome = applyRewrite(view, state.report, choice.fix!);
        if (!outcome.ok) {
          Notification.warning(outcome.reason, { autoClose: 6000 });
        }
      }
    });

    commands.addCommand(CommandIDs.clearMarkers, {
      label: args => (args.all ? 'Clear Syncfree Reports in Notebook' : 'Clear Syncfree Reports of Selected Cells'),
      caption: args =>
        args.all
          ? 'Remove the syncfree reports of ALL cells in this notebook (asks first; run the cells again to get them back)'
          : 'Remove the syncfree reports of the selected cells (and so their markers)',
      isEnabled: () => !!current(),
      execute: async args => {
        const panel = current();
        if (!panel) {
          return;
        }
        const notebook = panel.content;
        if (args.all && args.confirm !== false) {
          const count = notebook.widgets.filter(
            cell => cell.model.type === 'code' && reportOfCell(cell.model) !== null
          ).length;
          if (count === 0) {
            return;
          }
          const answer = await showDialog({
            title: 'Clear syncfree reports?',
            body: `This removes the syncfree reports of all ${count} cell${count === 1 ? '' : 's'} in this notebook, as an edit of the notebook (saved with it). Undo it from the notice that follows, or run the cells again to get them back.`,
            buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Clear all' })]
          });
          if (!answer.button.accept || panel.isDisposed) {
            return;
          }
        }
        const removed: IRemovedReports[] = [];
        for (const cell of notebook.widgets) {
          if (cell.model.type === 'code' && (args.all || notebook.isSelectedOrActive(cell))) {
            const taken = removeReportOutputs(cell.model as ICodeCellModel);
            if (taken) {
              removed.push(taken);
            }
          }
        }
        if (removed.length === 0) {
          return;
        }
        // Output edits are not on a cell's undo stack (JupyterLab's own Clear Outputs is
        // not undoable): the notice offers the undo.
        const cleared = Notification.info(
          `Cleared the syncfree reports of ${removed.length} cell${removed.length === 1 ? '' : 's'}.`,
          {
            autoClose: 10000,
            actions: [
              {
                label: 'Undo',
                caption: 'Put the reports back',
                callback: () => {
                  Notification.dismiss(cleared);
                  restoreReportOutputs(removed);
                }
              }
            ]
          }
        );
      }
    });

    const step = (direction: 1 | -1) => async () => {
      const panel = current();
      if (!panel) {
        return;
      }
      const target = stepToSync(syncPositions(panel, reports), cursorPosition(panel.content), direction);
      if (!target) {
        Notification.info('No syncs are marked in this notebook.', { autoClose: 3000 });
        return;
      }
      // The card of the line stepped from goes; the one of the line stepped to opens,
      // as VS Code's F8 shows the problem it goes to (the focus stays in the editor).
      const from = activeView();
      if (from?.state.field(syncCardField, false)) {
        from.dispatch({ effects: openSyncCard.of(null) });
      }
      const cell = panel.content.widgets[target.cell];
      if (await revealCellLine(panel.content, cell.model.id, target.line, target.column)) {
        const view = editorViewOfCell(cell);
        if (view && markerAtLine(view, target.line)) {
          view.dispatch({ effects: openSyncCard.of({ line: target.line, pinned: true }) });
        }
      }
    };
    commands.addCommand(CommandIDs.nextSync, {
      label: 'Go to Next Sync',
      isEnabled: () => !!current(),
      execute: step(1)
    });
    commands.addCommand(CommandIDs.previousSync, {
      label: 'Go to Previous Sync',
      isEnabled: () => !!current(),
      execute: step(-1)
    });

    if (palette) {
      for (const command of [
        CommandIDs.checkCell,
        CommandIDs.toggleWatch,
        CommandIDs.showCard,
        CommandIDs.applyRewrite,
        CommandIDs.nextSync,
        CommandIDs.previousSync
      ]) {
        palette.addItem({ command, category: CATEGORY });
      }
      palette.addItem({ command: CommandIDs.clearMarkers, category: CATEGORY, args: { all: false } });
      palette.addItem({ command: CommandIDs.clearMarkers, category: CATEGORY, args: { all: true } });
    }

    if (settingRegistry) {
      void settingRegistry
        .load(PLUGIN_IDS.commands)
        .then(loaded => {
          const apply = () => {
            const value = loaded.composite as SyncfreeCommands;
            runOptions = {
              mode: value.mode ?? DEFAULT_MAGIC_OPTIONS.mode,
              measureBlocked: value.measureBlocked ?? DEFAULT_MAGIC_OPTIONS.measureBlocked
            };
          };
          loaded.changed.connect(apply);
          apply();
        })
        .catch(reason => console.error('syncfree: could not load command settings', reason));
    }
  }
};
