import { truncate } from './truncate.js';

// U+0000, and a high surrogate not followed by a low one or a low one not preceded by a high one.
// biome-ignore lint/suspicious/noControlCharactersInRegex: U+0000 is exactly what must be replaced.
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * `text` made safe for a text column on every database and cut to at most `maxLength` UTF-16 code units
 * (see {@link truncate}): U+0000 and lone surrogates become U+FFFD. PostgreSQL refuses both in `text`
 * ("invalid byte sequence", "invalid message format"), so an error message carrying one would make the
 * statement that records the failure fail, and the failure would never be counted.
 */
export function storableText(text: string, maxLength: number): string {
  return truncate(text.replace(UNSTORABLE, '\uFFFD'), maxLength);
}
