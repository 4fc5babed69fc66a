import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { rendererFactory } from './mime';
import { type ICellLines, anchoredLines } from './model';
import { revealCellLine } from './navigate';
import { CommandIDs, PLUGIN_IDS, type SyncReport } from './tokens';

/**
 * Registers the report renderer with the application's registry (rather than as a
 * mime extension) so that its "Open Syncs panel" link can run a command and its rows
 * can jump to their line.
 */
export const rendererPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_IDS.renderer,
  description: 'Renders syncfree reports as a summary under the cell.',
  autoStart: true,
  requires: [IRenderMimeRegistry],
  optional: [INotebookTracker],
  activate: (app: JupyterFrontEnd, rendermime: IRenderMimeRegistry, tracker: INotebookTracker | null) => {
    const openSidebar = () => {
      if (app.commands.hasCommand(CommandIDs.openSidebar)) {
        void app.commands.execute(CommandIDs.openSidebar);
      }
    };
    // The summary is an output: the cell it belongs to is the one whose node holds it.
    const cellOf = (from: HTMLElement) => {
      const panel = tracker?.find(candidate => candidate.node.contains(from));
      const cellNode = from.closest('.jp-Cell');
      const cell = panel?.content.widgets.find(candidate => candidate.node === cellNode);
      return panel && cell ? { panel, cell } : null;
    };
    const jumpToLine = (from: HTMLElement, line: number, column: number | null) => {
      const found = cellOf(from);
      if (found) {
        void revealCellLine(found.panel.content, found.cell.model.id, line, column);
      }
    };
    // The cell's lines as the Syncs panel reads them (sidebar/index.ts notebookSource), so
    // that the summary leaves out the same sites past the cell's end.
    const cellLines = (from: HTMLElement, report: SyncReport): ICellLines | null => {
      const found = cellOf(from);
      if (!found) {
        return null;
      }
      const source = found.cell.model.sharedModel.getSource();
      return { lineCount: source.split('\n').length, currentLine: anchoredLines(source, report).currentLine };
    };
    rendermime.addFactory(
      rendererFactory({
        openSidebar,
        jumpToLine: tracker ? jumpToLine : undefined,
        cellLines: tracker ? cellLines : undefined
      }),
      0
    );
  }
};
