import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { rendererFactory } from './mime';
import { CommandIDs, PLUGIN_IDS } from './tokens';

/**
 * Registers the report renderer with the application's registry (rather than as a
 * mime extension) so that its "Open Syncs panel" link can run a command.
 */
export const rendererPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_IDS.renderer,
  description: 'Renders syncfree reports as a summary under the cell.',
  autoStart: true,
  requires: [IRenderMimeRegistry],
  activate: (app: JupyterFrontEnd, rendermime: IRenderMimeRegistry) => {
    const openSidebar = () => {
      if (app.commands.hasCommand(CommandIDs.openSidebar)) {
        void app.commands.execute(CommandIDs.openSidebar);
      }
    };
    rendermime.addFactory(rendererFactory(openSidebar), 0);
  }
};
