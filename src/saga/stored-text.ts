/**
 * Text as the database columns store it. PostgreSQL counts `varchar(n)` in characters (code points), not in
 * JavaScript's UTF-16 units; it refuses U+0000 in text and jsonb; node-postgres turns a lone surrogate into
 * U+FFFD, so two different strings can become equal once stored. SQLite would store all of these as given.
 * Every string the library writes is checked here, so both databases store the same thing or nothing.
 */

// A high surrogate not followed by a low one, or a low surrogate not preceded by a high one.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Why `text` is not stored alike by PostgreSQL and SQLite, or `undefined` when it is. */
export function textProblem(text: string): string | undefined {
  if (text.includes('\u0000')) return 'contains U+0000 (NUL), which PostgreSQL does not store';
  if (LONE_SURROGATE.test(text)) return 'contains a lone UTF-16 surrogate, which is not Unicode text';
  return undefined;
}

/**
 * Whether `text` has more than `max` code points, counting no further than needed: a string of more than
 * `2 * max` UTF-16 units has more than `max` code points whatever it holds.
 */
export function exceedsCodePoints(text: string, max: number): boolean {
  if (text.length <= max) return false;
  if (text.length > 2 * max) return true;
  return codePointLength(text) > max;
}

/** The number of code points of `text`: what PostgreSQL's `length()` and `varchar(n)` count. */
export function codePointLength(text: string): number {
  let count = 0;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    // A high surrogate followed by a low one is one code point.
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i++;
    }
    count++;
  }
  return count;
}

/** Rules for a name stored in a `varchar` column: a timer name, a message type, a calendar key. */
export interface NameRules {
  /** Largest length in code points. */
  readonly maxLength: number;
  /** Whether a name of only white space is refused (timer names). Default: false. */
  readonly notBlank?: boolean;
}

/**
 * Why `value` is not a storable name under `rules`, or `undefined` when it is. The reason states lengths,
 * never the value itself.
 */
export function nameProblem(value: unknown, rules: NameRules): string | undefined {
  if (typeof value !== 'string') return `is ${kindOf(value)}, not a string`;
  if (value === '') return 'is empty';
  if (rules.notBlank && value.trim() === '') return 'is only white space';
  if (exceedsCodePoints(value, rules.maxLength)) return `is longer than ${rules.maxLength} characters`;
  return textProblem(value);
}

/** A short description of a value's kind for error messages, never the value itself. */
export function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  switch (typeof value) {
    case 'object':
      return 'an object';
    case 'undefined':
      return 'undefined';
    case 'bigint':
      return 'a BigInt';
    default:
      return `a ${typeof value}`;
  }
}

// A name shown as it is in error messages; any other is described by its kind and length.
const PLAIN_NAME = /^[\w$.:-]{1,64}$/;

/** `'name'` for a short plain name, otherwise a description that quotes nothing (for error messages). */
export function labelOf(value: unknown): string {
  if (typeof value !== 'string') return kindOf(value);
  return PLAIN_NAME.test(value) ? `'${value}'` : `(a string of ${value.length} UTF-16 units)`;
}
