import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { SyncReportStore, compileReportSchema } from './reports';
import { ISyncReports, PLUGIN_IDS } from './tokens';

/** Provides the reports of every open notebook (ISyncReports). */
export const reportsPlugin: JupyterFrontEndPlugin<ISyncReports> = {
  id: PLUGIN_IDS.reports,
  description: 'Finds syncfree reports in the outputs of open notebooks.',
  autoStart: true,
  provides: ISyncReports,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker): ISyncReports => {
    const store = new SyncReportStore();
    const watch = (panel: NotebookPanel) => {
      void panel.context.ready.then(() => {
        if (panel.isDisposed) {
          return;
        }
        const model = panel.context.model;
        const stop = store.watch(panel.context.path, model);
        const onPath = (_: unknown, path: string) => store.rename(model, path);
        panel.context.pathChanged.connect(onPath);
        panel.disposed.connect(() => {
          panel.context.pathChanged.disconnect(onPath);
          stop();
        });
      });
    };
    if (typeof requestIdleCallback === 'function') {
      requestIdleCallback(() => compileReportSchema());
    }
    tracker.forEach(watch);
    tracker.widgetAdded.connect((_, panel) => watch(panel));
    return store;
  }
};
