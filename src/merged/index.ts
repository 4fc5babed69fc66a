import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import type { CodeEditor } from '@jupyterlab/codeeditor';
import { INotebookTracker } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { landingColumn } from '../positions';
import { PACKAGE } from '../tokens';
import { fileBrowserPath } from './model';
import { mergedRendererFactory } from './renderer';

export { MERGED_MIME_TYPE } from './model';

/**
 * Registers the merged-report renderer (a distributed job's ranks in one table) with the
 * application's registry, as the cell report's renderer is (renderer.ts), so that its
 * sites can open their files at their line.
 */
export const mergedRendererPlugin: JupyterFrontEndPlugin<void> = {
  id: `${PACKAGE}:merged-renderer`,
  description: "Renders a distributed job's merged syncfree report: a column per rank, divergent sites marked.",
  autoStart: true,
  requires: [IRenderMimeRegistry],
  optional: [INotebookTracker],
  activate: (app: JupyterFrontEnd, rendermime: IRenderMimeRegistry, tracker: INotebookTracker | null) => {
    const contents = app.serviceManager.contents;
    // Files already looked up (path in the file browser -> whether the server has it).
    const found = new Map<string, Promise<boolean>>();
    // A site's file is one the lab can open when, taken from the folder of the notebook that
    // holds the output (where its kernel started), the server has it: a kernel elsewhere
    // (another machine, a changed working folder) gives no link rather than a wrong one.
    const locate = async (path: string, from: HTMLElement): Promise<string | null> => {
      const panel = tracker?.find(candidate => candidate.node.contains(from));
      const target = panel ? fileBrowserPath(path, contents.localPath(panel.context.path)) : null;
      if (target === null) {
        return null;
      }
      let exists = found.get(target);
      if (!exists) {
        exists = contents.get(target, { content: false }).then(
          model => model.type === 'file',
          () => false
        );
        found.set(target, exists);
      }
      return (await exists) ? target : null;
    };
    const openFile = (path: string, line: number) => void openAtLine(app, path, line);
    rendermime.addFactory(mergedRendererFactory({ locate, openFile }), 0);
  }
};

/** Open a file in the text editor (docmanager:open) and put the cursor where the line's code starts. */
async function openAtLine(app: JupyterFrontEnd, path: string, line: number): Promise<void> {
  // docmanager:open returns the document widget (@jupyterlab/docmanager-extension index.ts).
  const widget = (await app.commands.execute('docmanager:open', { path, factory: 'Editor' })) as
    { context?: { ready: Promise<void> }; content?: { editor?: CodeEditor.IEditor }; isDisposed?: boolean } | undefined;
  await widget?.context?.ready;
  const editor = widget?.content?.editor;
  if (!editor || widget?.isDisposed) {
    return;
  }
  const target = Math.max(0, Math.min(line - 1, editor.lineCount - 1));
  const position = { line: target, column: landingColumn(editor.getLine(target) ?? '', null) };
  editor.setCursorPosition(position);
  editor.revealPosition(position);
  editor.focus();
}
