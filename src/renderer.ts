import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { rendererFactory } from './mime';
import { revealCellLine } from './navigate';
import { CommandIDs, PLUGIN_IDS } from './tokens';

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
    const jumpToLine = (from: HTMLElement, line: number, column: number | null) => {
      const panel = tracker?.find(candidate => candidate.node.contains(from));
      const cell = panel?.content.widgets.find(candidate => candidate.node.contains(from));
      if (panel && cell) {
        void revealCellLine(panel.content, cell.model.id, line, column);
      }
    };
    rendermime.addFactory(rendererFactory({ openSidebar, jumpToLine: tracker ? jumpToLine : undefined }), 0);
  }
};
