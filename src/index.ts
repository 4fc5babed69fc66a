import type { JupyterFrontEndPlugin } from '@jupyterlab/application';
import { commandsPlugin } from './commands';
import { markersPlugin } from './gutter';
import { mergedRendererPlugin } from './merged';
import { rendererPlugin } from './renderer';
import { sidebarPlugin } from './sidebar';
import { reportsPlugin } from './store';

export * from './tokens';

const plugins: JupyterFrontEndPlugin<any>[] = [
  reportsPlugin,
  markersPlugin,
  rendererPlugin,
  mergedRendererPlugin,
  sidebarPlugin,
  commandsPlugin
];

export default plugins;
