// Error text the dispatcher stores in last_error / dead_letter_reason: every database must accept it.
import { describe, expect, it } from 'vitest';
import { storableText } from '../../src/text/storable-text.js';

describe('storableText', () => {
  it.each([
    ['U+0000', 'got \u0000 here', 'got \ufffd here'],
    ['a lone high surrogate at the end', 'cut \ud83d', 'cut \ufffd'],
    ['a lone low surrogate', 'x\ude00y', 'x\ufffdy'],
    ['a high surrogate followed by another high one', '\ud83d\ud83d\ude00', '\ufffd\ud83d\ude00'],
  ])('replaces %s with U+FFFD', (_, text, expected) => {
    expect(storableText(text, 100)).toBe(expected);
  });

  it('keeps well-formed text, surrogate pairs included, and cuts it with truncate', () => {
    expect(storableText('ok \ud83d\ude00', 100)).toBe('ok \ud83d\ude00');
    expect(storableText('abcdef', 4)).toBe('abc…');
    // A cut never leaves half a pair behind.
    expect(storableText('ab\ud83d\ude00cd', 4)).toBe('ab…');
  });
});
