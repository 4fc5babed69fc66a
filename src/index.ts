import type { JupyterFrontEndPlugin } from '@jupyterlab/application';
import { markersPlugin } from './gutter';
import { rendererPlugin } from './renderer';
import { reportsPlugin } from './store';

export * from './tokens';

const plugins: JupyterFrontEndPlugin<any>[] = [reportsPlugin, markersPlugin, rendererPlugin];

export default plugins;
