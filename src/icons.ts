import { LabIcon } from '@jupyterlab/ui-components';

/**
 * An hourglass: the CPU waiting for the GPU. `jp-icon3` lets the theme colour it
 * (JupyterLab's own icons use the same class).
 */
const HOURGLASS =
  '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
  '<path class="jp-icon3" fill="#616161" d="M6 2h12v2h-1v3.2a4 4 0 0 1-1.6 3.2L13.3 12l2.1 1.6A4 4 0 0 1 17 16.8V20h1v2H6v-2h1v-3.2a4 4 0 0 1 1.6-3.2L10.7 12 8.6 10.4A4 4 0 0 1 7 7.2V4H6V2zm3 2v3.2c0 .6.3 1.2.8 1.6L12 10.5l2.2-1.7c.5-.4.8-1 .8-1.6V4H9zm3 9.5-2.2 1.7c-.5.4-.8 1-.8 1.6V20h6v-3.2c0-.6-.3-1.2-.8-1.6L12 13.5z"/>' +
  '</svg>';

export const syncfreeIcon = new LabIcon({ name: 'jupyterlab-syncfree:hourglass', svgstr: HOURGLASS });
