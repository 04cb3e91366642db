// Unit tests of the input checks: no database.
import type { EntityProperty } from '@mikro-orm/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaState, WeekdayCalendar } from '../../src/index.js';
import { copyMessage } from '../../src/saga/copy-message.js';
import { correlationCheckFor, DEFAULT_CORRELATION_LENGTH, MAX_TEXT_CORRELATION_LENGTH } from '../../src/saga/correlation-value.js';
import { MAX_PAYLOAD_DEPTH, toJsonPayload } from '../../src/saga/json-payload.js';
import { codePointLength, exceedsCodePoints, nameProblem, textProblem } from '../../src/saga/stored-text.js';
import { dueAtProblem, EARLIEST_DUE_AT_MS, LATEST_DUE_AT_MS } from '../../src/time/due-date-range.js';
import { toMilliseconds } from '../../src/time/duration.js';

const DAY_MS = 86_400_000;
/** Any UTF-16 text, lone surrogates and U+0000 included. */
const anyText = fc.string({
  unit: fc.oneof(
    fc.constantFrom('\u0000', '\uD800', '\uDBFF', '\uDC00', '\uDFFF', '😀', 'é'),
    fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
  ),
});

describe('stored text', () => {
  it('counts code points as PostgreSQL does, and refuses exactly U+0000 and lone surrogates', () => {
    fc.assert(
      fc.property(anyText, fc.integer({ min: 0, max: 40 }), (text, max) => {
        expect(codePointLength(text)).toBe([...text].length);
        expect(exceedsCodePoints(text, max)).toBe([...text].length > max);
        const wellFormed = !text.includes('\u0000') && encodeURIComponentSafe(text);
        expect(textProblem(text) === undefined).toBe(wellFormed);
      }),
      { numRuns: 500 },
    );
  });

  it('describes a bad name without quoting it', () => {
    expect(nameProblem('x'.repeat(201), { maxLength: 200 })).toBe('is longer than 200 characters');
    expect(nameProblem('😀'.repeat(200), { maxLength: 200 })).toBeUndefined();
    expect(nameProblem('   ', { maxLength: 5, notBlank: true })).toBe('is only white space');
    expect(nameProblem(7, { maxLength: 5 })).toBe('is a number, not a string');
  });
});

/** Whether the text is well-formed UTF-16: encodeURIComponent throws on lone surrogates. */
function encodeURIComponentSafe(text: string): boolean {
  try {
    encodeURIComponent(text);
    return true;
  } catch {
    return false;
  }
}

describe('correlationCheckFor', () => {
  const property = (fields: Partial<EntityProperty>) => ({ name: 'p', ...fields }) as EntityProperty;
  const check = (fields: Partial<EntityProperty>) => correlationCheckFor('s', property(fields));
  const refuses = (fields: Partial<EntityProperty>, value: unknown) =>
    expect(() => check(fields)(value, 'M')).toThrow(expect.objectContaining({ code: 'CORRELATION_INVALID' }));

  it('a string property takes only strings within its length in code points', () => {
    const varchar = { type: 'string', runtimeType: 'string', length: 3 } as const;
    expect(check(varchar)('😀😀😀', 'M')).toBe('😀😀😀');
    for (const value of ['abcd', 'a\u0000', '\uD800', 1, true, null, { $ne: 'x' }, ['a'], 1n]) refuses(varchar, value);
    expect(() => check({ type: 'string', runtimeType: 'string' })('x'.repeat(DEFAULT_CORRELATION_LENGTH), 'M')).not.toThrow();
    refuses({ type: 'string', runtimeType: 'string' }, 'x'.repeat(DEFAULT_CORRELATION_LENGTH + 1));
    refuses({ type: 'text', runtimeType: 'string' }, 'x'.repeat(MAX_TEXT_CORRELATION_LENGTH + 1));
    expect(check({ type: 'string', runtimeType: 'string', columnTypes: ['character varying(8)'] })('abc', 'M')).toBe('abc');
  });

  it('a uuid property takes a uuid in any case and looks it up in lower case', () => {
    const uuid = { type: 'uuid', runtimeType: 'string' } as const;
    expect(check(uuid)('0192F0C1-AAAA-7BBB-8CCC-DDDDEEEEFFFF', 'M')).toBe('0192f0c1-aaaa-7bbb-8ccc-ddddeeeeffff');
    refuses(uuid, '0192f0c1aaaa7bbb8cccddddeeeeffff');
  });

  it('number properties take numbers of their column', () => {
    const integer = { type: 'integer', runtimeType: 'number' } as const;
    expect(check(integer)(2_147_483_647, 'M')).toBe(2_147_483_647);
    for (const value of [2_147_483_648, 1.5, Number.NaN, '1', 1n]) refuses(integer, value);
    refuses({ type: 'smallint', runtimeType: 'number' }, 32_768);
    expect(check({ type: 'BigIntType', runtimeType: 'number' })(Number.MAX_SAFE_INTEGER, 'M')).toBe(Number.MAX_SAFE_INTEGER);
    refuses({ type: 'BigIntType', runtimeType: 'number' }, 2 ** 53);
    expect(check({ type: 'DoubleType', runtimeType: 'number' })(0.5, 'M')).toBe(0.5);
    refuses({ type: 'DoubleType', runtimeType: 'number' }, Number.POSITIVE_INFINITY);
    const bigint = { type: 'BigIntType', runtimeType: 'bigint' } as const;
    expect(check(bigint)(2n ** 53n - 1n, 'M')).toBe(2n ** 53n - 1n);
    for (const value of [2n ** 53n, 2n ** 63n - 1n, -(2n ** 53n), 1, '1']) refuses(bigint, value);
    const bigintText = { type: 'BigIntType', runtimeType: 'string' } as const;
    for (const value of ['0', '-9007199254740991', '9007199254740991']) expect(check(bigintText)(value, 'M')).toBe(value);
    for (const value of ['abc', '1e3', '01', '+1', '-0', ' 1', '9007199254740992', '9223372036854775807', 1, 1n])
      refuses(bigintText, value);
  });

  it('an enum takes one of its items; other types are refused when the saga is registered', () => {
    const enumeration = { type: 'string', runtimeType: 'string' as const, enum: true, items: ['a', 'b'] };
    expect(check(enumeration)('a', 'M')).toBe('a');
    refuses(enumeration, 'c');
    for (const fields of [
      { type: 'boolean', runtimeType: 'boolean' },
      { type: 'DecimalType', runtimeType: 'string' },
      { type: 'json', runtimeType: 'any' },
      { type: 'float', runtimeType: 'number' },
      { type: 'double', runtimeType: 'number', columnTypes: ['real'] },
      { type: 'character', runtimeType: 'string', length: 8 },
      { type: 'string', runtimeType: 'string', columnTypes: ['char(8)'] },
    ])
      expect(() => check(fields as Partial<EntityProperty>)).toThrow(expect.objectContaining({ code: 'DEFINITION_INVALID' }));
  });

  it('accepts exactly the strings of the column and refuses every other JSON value, typed', () => {
    const varchar = check({ type: 'string', runtimeType: 'string', length: 10 });
    fc.assert(
      fc.property(fc.oneof(fc.jsonValue(), anyText), (value) => {
        const ok = typeof value === 'string' && [...value].length <= 10 && textProblem(value) === undefined;
        if (ok) expect(varchar(value, 'M')).toBe(value);
        else expect(() => varchar(value, 'M')).toThrow(expect.objectContaining({ code: 'CORRELATION_INVALID' }));
      }),
      { numRuns: 300 },
    );
  });
});

describe('defineSaga correlation', () => {
  class State extends SagaState {}
  it('reads own properties of correlation.from only', () => {
    const saga = defineSaga<State, { type: string; k: string }>({
      name: 's',
      state: State,
      correlation: { from: { A: (m: { k: string }) => m.k } as never },
      startedBy: ['A'],
      steps: { A() {}, constructor() {}, toString() {} },
    });
    for (const type of ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'valueOf']) {
      expect(saga.correlate({ type, k: 'x' })).toEqual({ defined: false, value: undefined });
    }
  });
  it('refuses message types and names a column cannot store', () => {
    const valid = { name: 's', state: State, correlation: { from: () => 'x' }, startedBy: ['A'], steps: { A() {} } };
    expect(() => defineSaga({ ...valid, steps: { A() {}, 'B\u0000': () => {} } } as never)).toThrow(/U\+0000/);
    expect(() => defineSaga({ ...valid, name: 'a\uD800' } as never)).toThrow(/lone UTF-16 surrogate/);
    expect(() => defineSaga({ ...valid, name: '😀'.repeat(100) } as never)).not.toThrow();
  });

  it.each([
    [
      'correlation.from: null (every handle() threw a TypeError)',
      { correlation: { from: null } },
      /'correlation.from' must be a function.*it is null/,
    ],
    ['correlation.from: an array', { correlation: { from: [] } }, /it is an array/],
    ['an entry of correlation.from that is not a function', { correlation: { from: { A: 'k' } } }, /the entry for 'A' is a string/],
    ['correlation: null', { correlation: null }, /'correlation' must be an object/],
    ["startedBy: 'A' (read as its characters)", { startedBy: 'A' }, /'startedBy' must be an array of message types; it is a string/],
    ['startedBy with a number', { startedBy: ['A', 7] }, /'startedBy' item #1 is a number/],
    ["handleCompleted: 'A'", { handleCompleted: 'A' }, /'handleCompleted' must be an array of message types; it is a string.*or a boolean/],
    ["steps: 'A'", { steps: 'A' }, /'steps' must be an object/],
  ])('refuses %s with DEFINITION_INVALID', (_what, change, message) => {
    const valid = { name: 's', state: State, correlation: { from: { A: () => 'x' } }, startedBy: ['A'], steps: { A() {} } };
    expect(() => defineSaga({ ...valid, ...change } as never)).toThrow(
      expect.objectContaining({ name: 'SagaDefinitionError', code: 'DEFINITION_INVALID', message: expect.stringMatching(message) }),
    );
  });

  it('keeps the correlation functions it was given: an entry changed later does not break handling', () => {
    const from: Record<string, unknown> = { A: (m: { k: string }) => m.k };
    const saga = defineSaga<State, { type: 'A'; k: string }>({
      name: 's',
      state: State,
      correlation: { from } as never,
      startedBy: ['A'],
      steps: { A() {} },
    });
    from.A = null;
    expect(saga.correlate({ type: 'A', k: 'x' })).toEqual({ defined: true, value: 'x' });
  });
});

describe('copyMessage', () => {
  /** Every object reachable from `value`. */
  const objectsOf = (value: unknown, found = new Set<object>()): Set<object> => {
    if (value !== null && typeof value === 'object' && !found.has(value)) {
      found.add(value);
      for (const item of Object.values(value)) objectsOf(item, found);
    }
    return found;
  };

  it('copies any JSON value deep-equal, sharing no object or array with it', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const copy = copyMessage(value, 'm');
        expect(copy).toStrictEqual(value);
        const shared = [...objectsOf(copy)].filter((object) => objectsOf(value).has(object));
        expect(shared).toEqual([]);
      }),
      { numRuns: 300 },
    );
  });

  it('keeps Dates, BigInts, Maps and class instances (with their class), and cycles; functions as they are', () => {
    class Order {
      constructor(readonly lines: number[]) {}
      get count() {
        return this.lines.length;
      }
    }
    const step = () => 1;
    const source: Record<string, unknown> = {
      type: 'M',
      at: new Date(5),
      big: 10n,
      map: new Map([[1, { a: 1 }]]),
      order: new Order([1, 2]),
      step,
    };
    source.self = source;
    const copy = copyMessage(source, 'm');
    expect(copy).toStrictEqual(source);
    expect(copy.at).not.toBe(source.at);
    expect(copy.map).not.toBe(source.map);
    expect(copy.order).toBeInstanceOf(Order);
    expect((copy.order as Order).count).toBe(2);
    expect(copy.self).toBe(copy);
    expect(copy.step).toBe(step);
  });

  it('copies a __proto__ key as a key, and holds what a getter answered, not the getter', () => {
    const parsed = JSON.parse('{"type":"M","__proto__":{"polluted":true}}');
    const copy = copyMessage(parsed, 'm');
    expect(Object.getPrototypeOf(copy)).toBe(Object.prototype);
    expect(Object.hasOwn(copy, '__proto__')).toBe(true);
    expect((copy as { polluted?: boolean }).polluted).toBeUndefined();
    let reads = 0;
    const copied = copyMessage(
      {
        type: 'M',
        get note() {
          return ++reads === 1 ? 'fine' : 'a\u0000b';
        },
      },
      'm',
    );
    expect([copied.note, copied.note, reads]).toEqual(['fine', 'fine', 1]);
  });

  it('copies 100,000 levels of nesting and a sparse array of length 2^32 - 1 without overflowing or walking it', () => {
    let deep: Record<string, unknown> = { leaf: true };
    for (let i = 0; i < 100_000; i++) deep = { deep };
    expect(() => copyMessage(deep, 'm')).not.toThrow();
    const started = performance.now();
    const sparse = copyMessage({ items: Object.assign([], { length: 2 ** 32 - 1, 7: 'x' }) }, 'm');
    expect(performance.now() - started).toBeLessThan(1_000);
    expect([sparse.items.length, sparse.items[7]]).toEqual([2 ** 32 - 1, 'x']);
  });

  it('refuses what it cannot copy with PAYLOAD_NOT_SERIALIZABLE, the thrown error as cause and never its text', () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const thrown = new Error('secret value');
    const refusals = [
      { type: 'M', pending: Promise.resolve() },
      { type: 'M', gone: proxy },
      {
        type: 'M',
        get broken() {
          throw thrown;
        },
      },
    ];
    for (const message of refusals) {
      expect(() => copyMessage(message, 'A message for saga s', { sagaType: 's' })).toThrow(
        expect.objectContaining({ code: 'PAYLOAD_NOT_SERIALIZABLE', details: { sagaType: 's' } }),
      );
    }
    const error = (() => {
      try {
        copyMessage(refusals[2], 'm');
      } catch (caught) {
        return caught as Error;
      }
    })();
    expect(error?.cause).toBe(thrown);
    expect(error?.message).not.toContain('secret');
  });
});

describe('toJsonPayload', () => {
  it(`refuses nesting deeper than ${MAX_PAYLOAD_DEPTH} levels, iteratively (100,000 levels, no stack overflow)`, () => {
    const nest = (levels: number) => {
      let value: unknown = 1;
      for (let i = 0; i < levels; i++) value = [value];
      return value;
    };
    expect(() => toJsonPayload(nest(MAX_PAYLOAD_DEPTH), 'p', 10_000)).not.toThrow();
    expect(() => toJsonPayload(nest(MAX_PAYLOAD_DEPTH + 1), 'p', 10_000)).toThrow(/nested deeper than 100 levels/);
    expect(() => toJsonPayload(nest(100_000), 'p', 10_000_000)).toThrow(expect.objectContaining({ code: 'PAYLOAD_NOT_SERIALIZABLE' }));
  });
  it('stops early on data far over the limit: a sparse array of a billion items, a 50 MB string', () => {
    expect(() => toJsonPayload({ list: new Array(1_000_000_000) }, 'p', 65_536)).toThrow(/more than 65536 bytes/);
    expect(() => toJsonPayload({ s: 'x'.repeat(50_000_000) }, 'p', 65_536)).toThrow(expect.objectContaining({ code: 'PAYLOAD_TOO_LARGE' }));
  });
  it('names the path of a bad string or key and never quotes it', () => {
    expect(() => toJsonPayload({ a: [{ b: 'x\u0000' }] }, 'p', 1000)).toThrow('p.a[0].b contains U+0000');
    expect(() => toJsonPayload({ ok: 1, 'secret\uD800': 1 }, 'p', 1000)).toThrow('p[key #1]: the key contains a lone UTF-16 surrogate');
  });
  it('checks the JSON text it returns, not only the value: a getter or toJSON answering differently later is refused', () => {
    let reads = 0;
    const flipping = {
      get s() {
        return reads++ === 0 ? 'fine' : 'x\uD800';
      },
    };
    expect(() => toJsonPayload(flipping, 'p', 1000)).toThrow('once written as JSON, p.s contains a lone UTF-16 surrogate');
    let deepReads = 0;
    const deepening = {
      get d() {
        if (deepReads++ === 0) return 1;
        let deep: unknown = 1;
        for (let i = 0; i < 200; i++) deep = [deep];
        return deep;
      },
    };
    expect(() => toJsonPayload(deepening, 'p', 100_000)).toThrow(/nested deeper than 100 levels/);
    let bigReads = 0;
    const bigint = {
      get n() {
        return bigReads++ === 0 ? 1 : 1n;
      },
    };
    expect(() => toJsonPayload(bigint, 'p', 1000)).toThrow(
      expect.objectContaining({ code: 'PAYLOAD_NOT_SERIALIZABLE', cause: expect.any(TypeError) }),
    );
  });
  it('accepts exactly what round-trips JSON and both databases store', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), anyText, (value, text) => {
        const json = toJsonPayload({ value }, 'p', 1_000_000);
        expect(JSON.parse(json)).toEqual(JSON.parse(JSON.stringify({ value })));
        if (textProblem(text) === undefined) expect(() => toJsonPayload({ text }, 'p', 1_000_000)).not.toThrow();
        else expect(() => toJsonPayload({ text }, 'p', 1_000_000)).toThrow(expect.objectContaining({ code: 'PAYLOAD_NOT_SERIALIZABLE' }));
      }),
      { numRuns: 300 },
    );
  });
});

describe('toMilliseconds', () => {
  it.each([
    ['a BigInt', 10n, /is a BigInt/],
    ['{}', {}, /no parts/],
    ['only undefined parts', { days: undefined }, /no parts/],
    ['inherited parts only', Object.create({ days: 1 }), /no parts/],
    ['an array', [1], /is an array/],
    ['a BigInt part', { days: 1n }, /'days' that is not a number/],
    ['an unknown unit', { weeks: 1 }, /not days\/hours/],
    ['a prototype key', JSON.parse('{"__proto__": 5}'), /not days\/hours/],
  ])('refuses %s with TIMER_DELAY_INVALID, and the message quotes nothing', (_what, value, message) => {
    expect(() => toMilliseconds(value as never)).toThrow(message);
    expect(() => toMilliseconds(value as never)).toThrow(expect.objectContaining({ code: 'TIMER_DELAY_INVALID' }));
  });
  it('reads own keys of a duration object', () => {
    const duration = Object.assign(Object.create({ days: 100 }), { seconds: 2 });
    expect(toMilliseconds(duration)).toBe(2_000);
  });
});

describe('due date range', () => {
  it('is 1970-01-01 to 9999-12-31 (UTC), and a Date round-trips both ends', () => {
    expect(new Date(EARLIEST_DUE_AT_MS).toISOString()).toBe('1970-01-01T00:00:00.000Z');
    expect(new Date(LATEST_DUE_AT_MS).toISOString()).toBe('9999-12-31T23:59:59.999Z');
    expect(dueAtProblem(LATEST_DUE_AT_MS + 1)).toMatch(/after 9999/);
    expect(dueAtProblem(-1)).toMatch(/before 1970/);
    expect(dueAtProblem(Number.NaN)).toMatch(/not a valid date/);
  });
});

describe('WeekdayCalendar', () => {
  /** The day-by-day walk the calendar used before it skipped whole weeks: the reference for small delays. */
  function dayByDay(businessDays: ReadonlySet<number>, holidays: ReadonlySet<string>, from: Date, durationMs: number): number {
    const isOpen = (ms: number) => businessDays.has(new Date(ms).getUTCDay()) && !holidays.has(new Date(ms).toISOString().slice(0, 10));
    const nextOpen = (ms: number) => {
      let cursor = ms;
      while (!isOpen(cursor)) cursor = Math.floor(cursor / DAY_MS) * DAY_MS + DAY_MS;
      return cursor;
    };
    let cursor = nextOpen(from.getTime());
    let remaining = durationMs;
    for (;;) {
      const endOfDay = Math.floor(cursor / DAY_MS) * DAY_MS + DAY_MS;
      if (cursor + remaining < endOfDay) return cursor + remaining;
      remaining -= endOfDay - cursor;
      cursor = nextOpen(endOfDay);
      if (remaining === 0) return cursor;
    }
  }

  it('gives the same due date as the day-by-day walk, holidays and odd weeks included', () => {
    const start = Date.UTC(2026, 0, 1);
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 0, max: 6 }), { minLength: 1, maxLength: 7 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 1_500 }), { maxLength: 60 }),
        fc.integer({ min: 0, max: 400 * DAY_MS }),
        fc.oneof(
          fc.integer({ min: 0, max: 3 * 365 * DAY_MS }),
          fc.integer({ min: 0, max: 60 }).map((days) => days * DAY_MS),
        ),
        (businessDays, holidayOffsets, fromOffset, durationMs) => {
          const holidays = holidayOffsets.map((d) => new Date(start + d * DAY_MS).toISOString().slice(0, 10));
          const calendar = new WeekdayCalendar({ businessDays, holidays });
          const from = new Date(start + fromOffset);
          expect(calendar.addDuration(from, durationMs).getTime()).toBe(
            dayByDay(new Set(businessDays), new Set(holidays), from, durationMs),
          );
        },
      ),
      { numRuns: 400 },
    );
  });

  it('refuses a delay of 1e20 ms at once (it blocked the event loop for 75 s)', () => {
    const started = performance.now();
    expect(() => new WeekdayCalendar().addDuration(new Date('2026-01-09T16:00:00Z'), 1e20)).toThrow(
      expect.objectContaining({ code: 'TIMER_DUE_INVALID' }),
    );
    expect(performance.now() - started).toBeLessThan(100);
  });

  it('computes 7,000 years of business time in well under a millisecond per call', () => {
    const calendar = new WeekdayCalendar({ holidays: ['2026-12-25', '2027-01-01'] });
    const started = performance.now();
    const due = calendar.addDuration(new Date('2026-01-09T16:00:00Z'), 7_000 * 260 * DAY_MS);
    expect(performance.now() - started).toBeLessThan(50);
    expect(due.getUTCFullYear()).toBeGreaterThan(8_000);
    expect([1, 2, 3, 4, 5]).toContain(due.getUTCDay());
  });

  it('refuses holidays that are not YYYY-MM-DD dates', () => {
    for (const holiday of ['2026-02-30', '26-01-01', 'Christmas']) {
      expect(() => new WeekdayCalendar({ holidays: [holiday] })).toThrow(/YYYY-MM-DD/);
    }
  });
});

describe('docs/guarantees.md', () => {
  it('has one row in its error-code table for every code in SAGA_ERROR_CODES', async () => {
    const { readFile } = await import('node:fs/promises');
    const { SAGA_ERROR_CODES } = await import('../../src/index.js');
    const text = await readFile(new URL('../../docs/guarantees.md', import.meta.url), 'utf8');
    const rows = [...text.matchAll(/^\| `([A-Z_]+)` \| `Saga\w*Error`/gm)].map((match) => match[1]);
    expect([...rows].sort()).toEqual(Object.values(SAGA_ERROR_CODES).sort());
  });
});
