import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import type { CodeEditor } from '@jupyterlab/codeeditor';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { landingColumn } from '../positions';
import { PACKAGE } from '../tokens';
import { serverPath } from './model';
import { mergedRendererFactory } from './renderer';

export { MERGED_MIME_TYPE } from './model';

/** Files already looked up (path on the kernel's machine -> path in the file browser). */
const located = new Map<string, Promise<string | null>>();

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
  activate: (app: JupyterFrontEnd, rendermime: IRenderMimeRegistry) => {
    // JupyterLab's (and Notebook 7's) paths carry the server's root folder (PageConfig
    // `serverRoot`, @jupyterlab/application lab.ts); other hosts open no files.
    const root = (app as { paths?: { directories?: { serverRoot?: string } } }).paths?.directories?.serverRoot ?? '';
    // A file the ranks ran is one the lab can open when it lies under the server's root
    // folder and the server has it (the kernel may run on another machine than the server).
    const locate = (absolute: string, home: string | null): Promise<string | null> => {
      const key = `${home ?? ''}\n${absolute}`;
      let found = located.get(key);
      if (!found) {
        const path = root ? serverPath(absolute, root, home) : null;
        found =
          path === null
            ? Promise.resolve(null)
            : app.serviceManager.contents.get(path, { content: false }).then(
                model => (model.type === 'file' ? path : null),
                () => null
              );
        located.set(key, found);
      }
      return found;
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
