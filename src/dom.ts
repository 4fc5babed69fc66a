/**
 * Create an element with a class and text content. Every report string reaches the DOM
 * through here or through other textContent/attribute setters, never through innerHTML.
 */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/**
 * An element holding text with `inline code` spans, as the catalog and the kind labels
 * write them: the spans become <code> elements and everything is set as text (no markup
 * is ever parsed). Unpaired backticks stay as they are.
 */
export function withInlineCode<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string | undefined,
  text: string
): HTMLElementTagNameMap[K] {
  const node = el(tag, className);
  appendWithInlineCode(node, text);
  return node;
}

/** Append `text` to `node`, its `code` spans as <code> elements (see withInlineCode). */
export function appendWithInlineCode(node: HTMLElement, text: string): void {
  text.split(/`([^`\n]+)`/).forEach((part, i) => {
    if (i % 2 === 1) {
      node.appendChild(el('code', 'jp-syncfree-inline-code', part));
    } else if (part) {
      node.appendChild(document.createTextNode(part));
    }
  });
}
