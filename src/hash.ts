/**
 * SHA-256 of a string's UTF-8 bytes, as `sha256:<hex>`: the report's `source_hash`
 * (python_helper/syncfree/report.py hashes the cell text the same way). Synchronous on
 * purpose: stale detection runs on editor transactions, where `crypto.subtle` (async,
 * secure contexts only) would not fit. The stale check deferred to idle time can wait,
 * and uses the browser's native digest where there is one (`sourceHashSoon`).
 */

const K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
]);

const encoder = new TextEncoder();
/** The message schedule, reused: opening a notebook hashes every cell with a report. */
const W = new Int32Array(64);

const rotr = (x: number, n: number): number => (x >>> n) | (x << (32 - n));
const hex = (x: number): string => (x >>> 0).toString(16).padStart(8, '0');

/*
 * Plain int32 arithmetic on locals (no DataView, no typed-array destructuring, which
 * goes through the iterator protocol): the stale check hashes every cell with a report
 * when a notebook opens.
 */
export function sha256Hex(text: string): string {
  const bytes = encoder.encode(text);
  const length = bytes.length;
  // Padding: 0x80, zeros, then the bit length as a 64-bit big-endian integer.
  const total = Math.ceil((length + 9) / 64) * 64;
  const data = new Uint8Array(total);
  data.set(bytes);
  data[length] = 0x80;
  const high = Math.floor(length / 0x20000000);
  const low = (length << 3) >>> 0;
  data[total - 8] = high >>> 24;
  data[total - 7] = high >>> 16;
  data[total - 6] = high >>> 8;
  data[total - 5] = high;
  data[total - 4] = low >>> 24;
  data[total - 3] = low >>> 16;
  data[total - 2] = low >>> 8;
  data[total - 1] = low;

  let h0 = 0x6a09e667 | 0;
  let h1 = 0xbb67ae85 | 0;
  let h2 = 0x3c6ef372 | 0;
  let h3 = 0xa54ff53a | 0;
  let h4 = 0x510e527f | 0;
  let h5 = 0x9b05688c | 0;
  let h6 = 0x1f83d9ab | 0;
  let h7 = 0x5be0cd19 | 0;
  for (let offset = 0; offset < total; offset += 64) {
    for (let i = 0, j = offset; i < 16; i++, j += 4) {
      W[i] = (data[j] << 24) | (data[j + 1] << 16) | (data[j + 2] << 8) | data[j + 3];
    }
    for (let i = 16; i < 64; i++) {
      const w15 = W[i - 15];
      const w2 = W[i - 2];
      const s0 = rotr(w15, 7) ^ rotr(w15, 18) ^ (w15 >>> 3);
      const s1 = rotr(w2, 17) ^ rotr(w2, 19) ^ (w2 >>> 10);
      W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
    }
    let a = h0;
    let b = h1;
    let c = h2;
    let d = h3;
    let e = h4;
    let f = h5;
    let g = h6;
    let h = h7;
    for (let i = 0; i < 64; i++) {
      const s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const ch = (e & f) ^ (~e & g);
      const t1 = (h + s1 + ch + K[i] + W[i]) | 0;
      const s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const maj = (a & b) ^ (a & c) ^ (b & c);
      const t2 = (s0 + maj) | 0;
      h = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    h0 = (h0 + a) | 0;
    h1 = (h1 + b) | 0;
    h2 = (h2 + c) | 0;
    h3 = (h3 + d) | 0;
    h4 = (h4 + e) | 0;
    h5 = (h5 + f) | 0;
    h6 = (h6 + g) | 0;
    h7 = (h7 + h) | 0;
  }
  return hex(h0) + hex(h1) + hex(h2) + hex(h3) + hex(h4) + hex(h5) + hex(h6) + hex(h7);
}

/** The `source_hash` of a cell text. */
export function sourceHash(text: string): string {
  return `sha256:${sha256Hex(text)}`;
}

/**
 * The `source_hash` of a cell text, computed off the main thread by `crypto.subtle`
 * where the page has it (a secure context: https or localhost); elsewhere (plain http
 * to a remote host, jsdom) synchronously, as `sourceHash`. Opening a notebook of 500
 * reports hashes 500 cells: natively that is a fraction of the JS hash's time.
 */
export function sourceHashSoon(text: string): Promise<string> | string {
  const subtle = typeof crypto !== 'undefined' ? crypto.subtle : undefined;
  if (!subtle || typeof subtle.digest !== 'function') {
    return sourceHash(text);
  }
  return subtle.digest('SHA-256', encoder.encode(text)).then(
    digest => {
      const words = new DataView(digest);
      let out = 'sha256:';
      for (let i = 0; i < 32; i += 4) {
        out += hex(words.getUint32(i));
      }
      return out;
    },
    () => sourceHash(text)
  );
}
