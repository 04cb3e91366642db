// Unit tests: no database, time from a fake clock.
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaState, WeekdayCalendar } from '../../src/index.js';
import { toJsonPayload } from '../../src/saga/json-payload.js';
import { FakeClock } from '../../src/testing/index.js';
import { toMilliseconds } from '../../src/time/duration.js';

describe('toJsonPayload', () => {
  it('returns the JSON text of plain data, undefined properties dropped', () => {
    expect(toJsonPayload({ type: 'A', n: 1, s: 'x', b: true, z: null, list: [1, { y: 2 }], gone: undefined }, 'p', 1000)).toBe(
      '{"type":"A","n":1,"s":"x","b":true,"z":null,"list":[1,{"y":2}]}',
    );
  });
  it('allows the same object twice when it is not a cycle', () => {
    const shared = { a: 1 };
    expect(toJsonPayload({ x: shared, y: shared }, 'p', 1000)).toBe('{"x":{"a":1},"y":{"a":1}}');
  });
  it.each([
    [{ n: 1n }, 'p.n is a BigInt'],
    [{ list: [1, undefined] }, 'p.list[1] is undefined'],
    [{ s: Symbol('s') }, 'p.s is a symbol'],
    [{ d: new Date(0) }, 'p.d is a Date'],
    [{ set: new Set() }, 'p.set is a Set'],
    [{ n: Number.POSITIVE_INFINITY }, 'p.n is Infinity'],
  ])('rejects %o', (value, message) => {
    expect(() => toJsonPayload(value, 'p', 1000)).toThrow(message);
  });
  it('counts UTF-8 bytes for the size limit', () => {
    expect(() => toJsonPayload({ s: 'é'.repeat(10) }, 'p', 20)).toThrow(/28 bytes of JSON, over the limit of 20/);
    expect(toJsonPayload({ s: 'é'.repeat(10) }, 'p', 28)).toHaveLength(18);
  });
});

describe('toMilliseconds', () => {
  it('adds up duration parts', () => {
    expect(toMilliseconds({ days: 1, hours: 2, minutes: 3, seconds: 4, milliseconds: 5 })).toBe(93_784_005);
    expect(toMilliseconds(0)).toBe(0);
  });
  it.each([[-1], [Number.NaN], [{ minutes: -1 }], [{ minutes: '1' }], ['5s'], [null]])('rejects %o', (value) => {
    expect(() => toMilliseconds(value as never)).toThrow(expect.objectContaining({ code: 'TIMER_DELAY_INVALID' }));
  });
});

describe('WeekdayCalendar', () => {
  const calendar = new WeekdayCalendar({ holidays: ['2026-01-12'] });
  it('counts only business days', () => {
    // Friday 16:00 + 1 business day, Monday 12 is a holiday: Tuesday 16:00.
    expect(calendar.addDuration(new Date('2026-01-09T16:00:00Z'), 86_400_000)).toEqual(new Date('2026-01-13T16:00:00Z'));
    // Within the same day.
    expect(calendar.addDuration(new Date('2026-01-08T10:00:00Z'), 3_600_000)).toEqual(new Date('2026-01-08T11:00:00Z'));
  });
  it('starts a delay on a closed day at the next business day', () => {
    expect(calendar.addDuration(new Date('2026-01-10T12:00:00Z'), 3_600_000)).toEqual(new Date('2026-01-13T01:00:00Z'));
  });
  it('moves a date on a closed day to the next business day and keeps an open one', () => {
    expect(calendar.nextOpen(new Date('2026-01-11T08:00:00Z'))).toEqual(new Date('2026-01-13T00:00:00Z'));
    expect(calendar.nextOpen(new Date('2026-01-14T08:00:00Z'))).toEqual(new Date('2026-01-14T08:00:00Z'));
  });
  it('refuses a calendar without business days', () => {
    expect(() => new WeekdayCalendar({ businessDays: [] })).toThrow(/at least one business day/);
  });
});

describe('FakeClock', () => {
  it('moves only when advanced and wakes sleepers it passes', async () => {
    const clock = new FakeClock('2026-01-01T00:00:00Z');
    const woke: string[] = [];
    const a = clock.sleep(1_000).then(() => woke.push('a'));
    const b = clock.sleep(5_000).then(() => woke.push('b'));
    clock.advance(1_000);
    await a;
    expect(woke).toEqual(['a']);
    expect(clock.now()).toEqual(new Date('2026-01-01T00:00:01Z'));
    clock.advance({ seconds: 4 });
    await b;
    expect(woke).toEqual(['a', 'b']);
  });
  it('wakes a sleeper whose signal aborts', async () => {
    const clock = new FakeClock();
    const controller = new AbortController();
    const sleeping = clock.sleep(60_000, controller.signal);
    controller.abort();
    await expect(sleeping).resolves.toBeUndefined();
  });
});

describe('defineSaga', () => {
  class State extends SagaState {}
  const valid = { name: 's', state: State, correlation: { from: () => 'x' }, startedBy: ['A'], steps: { A() {} } } as const;
  it.each([
    [{ ...valid, name: '' }, /name of 1 to 100/],
    [{ ...valid, name: 'x'.repeat(101) }, /name of 1 to 100/],
    [{ ...valid, steps: {} }, /has no steps/],
    [{ ...valid, startedBy: [] }, /at least one message type/],
    [{ ...valid, startedBy: ['B'] }, /no step for it: add steps.B/],
    [{ ...valid, correlation: {} }, /correlation.from/],
  ])('refuses a malformed definition (%#)', (input, message) => {
    expect(() => defineSaga(input as never)).toThrow(message);
  });
  it('correlates per message type and says when a type has no rule', () => {
    const saga = defineSaga<State, { type: 'A'; k: string } | { type: 'B'; j: string }>({
      name: 's',
      state: State,
      correlation: { property: 'id', from: { A: (m) => m.k } },
      startedBy: ['A'],
      steps: { A() {}, B() {} },
    });
    expect(saga.correlate({ type: 'A', k: 'key' })).toEqual({ defined: true, value: 'key' });
    expect(saga.correlate({ type: 'B', j: 'x' })).toEqual({ defined: false, value: undefined });
    expect(saga.handlesCompleted('A')).toBe(false);
  });
});

describe('uuidV7', () => {
  it('makes valid version-7 uuids that sort in creation order', async () => {
    const { uuidV7 } = await import('../../src/ids/uuid-v7.js');
    const ids = Array.from({ length: 5_000 }, () => uuidV7());
    expect(ids.every((id) => /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(id))).toBe(true);
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
  });
});
