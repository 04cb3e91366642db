/**
 * Compares two strings by code point: the order of their UTF-8 bytes, which is PostgreSQL's `collate "C"` order on
 * a UTF-8 database. JavaScript's `<` compares UTF-16 code units instead, and the two disagree for a character above
 * U+FFFF (a surrogate pair, 0xD800-0xDFFF) against one in U+E000-U+FFFF: `'😀' < '！'` in JavaScript, while the
 * database sorts `'！'` first (ICU's `u_strCmpCodePointOrder` makes the same fix-up).
 * @returns a negative number when `a` sorts first, a positive one when `b` does, 0 when they are equal.
 */
export function compareCodePoints(a: string, b: string): number {
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return x >= 0xd800 && y >= 0xd800 ? inCodePointOrder(x) - inCodePointOrder(y) : x - y;
  }
  return a.length - b.length;
}

/** A code unit of U+D800 or above moved so that surrogates sort after U+E000-U+FFFF, as their code points do. */
function inCodePointOrder(unit: number): number {
  return unit >= 0xe000 ? unit - 0x800 : unit + 0x2000;
}
