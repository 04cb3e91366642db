// Lock keys are compared in the database's order (PostgreSQL's collate "C": UTF-8 bytes, i.e. code points), not by
// UTF-16 code unit as JavaScript's `<` compares them: the two orders would lock rows in opposite orders
// (unit-of-work/lock-order.postgres.test.ts).
import { describe, expect, it } from 'vitest';
import { compareCodePoints } from '../../src/text/code-point-order.js';

const byCodePoint = (values: string[]) => [...values].sort(compareCodePoints);
const byUtf8 = (values: string[]) => [...values].sort((a, b) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8')));

describe('compareCodePoints', () => {
  it('sorts a character above U+FFFF after U+E000-U+FFFF, as UTF-8 bytes do, where `<` sorts it before', () => {
    expect('\u{1F600}' < '\uFF01').toBe(true);
    expect(byCodePoint(['\u{1F600}', '\uFF01', '\uE000', 'z'])).toEqual(['z', '\uE000', '\uFF01', '\u{1F600}']);
  });

  it('agrees with UTF-8 byte order on prefixes, equal strings and a mix of planes', () => {
    const values = [
      '',
      'a',
      'ab',
      'a\u{10000}',
      'a\uFFFF',
      'a\uD7FF',
      '\u{10FFFF}',
      '\u{1F600}x',
      '\u{1F600}',
      'brk\uFF01',
      'brk\u{1F600}',
    ];
    expect(byCodePoint(values)).toEqual(byUtf8(values));
    expect(compareCodePoints('same', 'same')).toBe(0);
    expect(Math.sign(compareCodePoints('a', 'ab'))).toBe(-1);
  });
});
