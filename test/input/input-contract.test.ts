// The input contract (docs/guarantees.md) on every database: untrusted values are refused typed, before any read or
// write, and what is accepted is stored alike on PostgreSQL and SQLite.
import { describe, expect, it } from 'vitest';
import {
  type BusinessCalendar,
  defineSaga,
  type OutboxEnvelope,
  SagaCorrelationError,
  SagaDispatcher,
  SagaRuntime,
  SagaValidationError,
  type StepContext,
  silentLogger,
  WeekdayCalendar,
} from '../../src/index.js';
import { textProblem } from '../../src/saga/stored-text.js';
import { FakeClock } from '../../src/testing/index.js';
import {
  Address,
  BigStringSaga,
  bigStringSaga,
  COLUMN_TYPE_ENTITIES,
  charKeySaga,
  EmbeddingSaga,
  embeddingSaga,
  floatKeySaga,
  LongKeySaga,
  longKeySaga,
} from '../fixtures/column-type-sagas.js';
import { NumberedSaga, numberedSaga, scriptedById } from '../fixtures/numbered-saga.js';
import { type Action, ScriptedSaga, scriptedSaga, scriptedVariant } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { refusal } from '../support/refusal.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

const calendars: Record<string, BusinessCalendar> = {
  weekdays: new WeekdayCalendar(),
  invalid: { addDuration: () => new Date(Number.NaN), nextOpen: () => new Date(Number.NaN) },
  backwards: { addDuration: (from) => new Date(from.getTime() - 1), nextOpen: (at) => new Date(at.getTime() - 1) },
  stringly: { addDuration: () => '2030-01-01' as never, nextOpen: () => '2030-01-01' as never },
  farAway: { addDuration: () => new Date('+010000-01-01T00:00:00Z'), nextOpen: () => new Date('+010000-01-01T00:00:00Z') },
};

for (const dialect of DIALECTS) {
  describe(`input contract (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, NumberedSaga, ...COLUMN_TYPE_ENTITIES]);
    const setup = () => {
      const clock = new FakeClock('2026-01-09T16:00:00.000Z');
      const runtime = new SagaRuntime({
        em: db().orm.em,
        sagas: [scriptedSaga, numberedSaga, scriptedById, bigStringSaga, longKeySaga, embeddingSaga],
        clock,
        calendars,
      });
      return { clock, runtime, rows: rowsOf(db().orm) };
    };
    const start = async (runtime: SagaRuntime, prefix: string) => {
      const key = uniqueKey(prefix);
      const result = await runtime.handle(scriptedSaga, { type: 'Start', key });
      return { key, sagaId: result.sagaId! };
    };
    /** Runs `actions` in a step of a started saga; expects `code`, the saga unchanged and no row written. */
    const expectRefusedStep = async (actions: Action[], code: string) => {
      const { runtime, rows } = setup();
      const { key } = await start(runtime, 'refused');
      const before = await rows.counts();
      const error = await refusal(runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }, ...actions] }));
      expect(error.code).toBe(code);
      expect(await rows.counts()).toEqual(before);
      expect(await rows.saga(key)).toMatchObject({ version: 0, counter: 0 });
      return error;
    };
    /**
     * Runs `step` in a step of a started saga; expects `code`, the saga unchanged and no row written. What the step
     * uses is built by the test, not carried by the message: a step's message is a copy, without getters.
     */
    const expectRefusedStepOf = async (step: (ctx: StepContext) => void, code: string) => {
      const { runtime, rows } = setup();
      const { key } = await start(runtime, 'refused');
      const poke = scriptedVariant('Poke', (saga, _message, ctx) => {
        saga.counter += 1;
        step(ctx);
      });
      const variant = new SagaRuntime({ em: db().orm.em, sagas: [poke] });
      const before = await rows.counts();
      const error = await refusal(variant.handle(poke, { type: 'Poke', key }));
      expect(error.code).toBe(code);
      expect(await rows.counts()).toEqual(before);
      expect(await rows.saga(key)).toMatchObject({ version: 0, counter: 0 });
      return error;
    };

    describe('correlation values are data, never query operators', () => {
      it("a $like correlation value does not reach another customer's saga", async () => {
        const { runtime, rows } = setup();
        const bob = uniqueKey('bob');
        await runtime.handle(scriptedSaga, { type: 'Start', key: bob });
        const before = await rows.counts();
        const error = await refusal(
          runtime.handle(scriptedSaga, { type: 'Do', key: { $like: 'bob%' } as never, actions: [{ op: 'inc', by: 100 }] }),
        );
        expect(error).toBeInstanceOf(SagaCorrelationError);
        expect(error).toMatchObject({ code: 'CORRELATION_INVALID', details: { sagaType: 'scripted', messageType: 'Do', property: 'key' } });
        expect(error.message).toMatch(/is an object/);
        expect(error.message).not.toContain('bob%');
        expect(await rows.saga(bob)).toMatchObject({ counter: 0, version: 0 });
        expect(await rows.counts()).toEqual(before);
      });

      it('a $ne or array correlation value does not run the step on any saga; a start message does not store \'{"$eq":...}\'', async () => {
        const { runtime, rows } = setup();
        const alice = uniqueKey('alice');
        await runtime.handle(scriptedSaga, { type: 'Start', key: alice });
        const before = await rows.counts();
        for (const key of [{ $ne: 'x' }, ['x', alice], { $in: [alice] }, { $gt: '' }]) {
          const error = await refusal(runtime.handle(scriptedSaga, { type: 'Do', key: key as never, actions: [{ op: 'inc' }] }));
          expect(error.code).toBe('CORRELATION_INVALID');
        }
        const error = await refusal(runtime.handle(scriptedSaga, { type: 'Start', key: { $eq: 'carol' } as never }));
        expect(error.code).toBe('CORRELATION_INVALID');
        expect(await rows.saga(alice)).toMatchObject({ counter: 0 });
        expect(await rows.saga('{"$eq":"carol"}')).toBeNull();
        expect(await rows.counts()).toEqual(before);
      });

      it.each([
        ['a number for a string property', 42],
        ['a boolean', true],
        ['a BigInt', 10n],
        ['NaN', Number.NaN],
        ['a string with U+0000', 'a\u0000b'],
        ['a string with a lone surrogate', 'a\uD800b'],
        ['a string of 101 characters for a varchar(100)', 'x'.repeat(101)],
        ['101 emoji for a varchar(100)', '😀'.repeat(101)],
      ])('%s is CORRELATION_INVALID and writes nothing', async (_what, key) => {
        const { runtime, rows } = setup();
        const before = await rows.counts();
        const error = await refusal(runtime.handle(scriptedSaga, { type: 'Start', key: key as never }));
        expect(error).toMatchObject({ code: 'CORRELATION_INVALID' });
        expect(await rows.counts()).toEqual(before);
      });

      it('a key of 100 emoji (200 UTF-16 units) fits a varchar(100), as PostgreSQL counts it, and is found again', async () => {
        const { runtime, rows } = setup();
        const key = `${uniqueKey('e')}${'😀'.repeat(86)}`;
        const started = await runtime.handle(scriptedSaga, { type: 'Start', key });
        const again = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
        expect(again).toMatchObject({ outcome: 'handled', sagaId: started.sagaId, version: 1 });
        expect((await rows.saga(key))?.key).toBe(key);
      });

      it("700 emoji in a varchar(1000) are CORRELATION_INVALID (2,800 UTF-8 bytes, over PostgreSQL's unique index entry); 500 are stored and found", async () => {
        const { runtime } = setup();
        const count = () => db().orm.em.fork().count(LongKeySaga);
        const before = await count();
        const emoji = (n: number) => Array.from({ length: n }, (_, i) => String.fromCodePoint(0x1f300 + ((i * 7919) % 700))).join('');
        const error = await refusal(runtime.handle(longKeySaga, { type: 'Touch', key: emoji(700) }));
        expect(error).toMatchObject({ code: 'CORRELATION_INVALID', details: { property: 'key' } });
        expect(error.message).toMatch(/longer than 2000 UTF-8 bytes/);
        expect(await count()).toBe(before);
        const key = `${uniqueKey('e')}${emoji(480)}`;
        const started = await runtime.handle(longKeySaga, { type: 'Touch', key });
        await expect(runtime.handle(longKeySaga, { type: 'Touch', key })).resolves.toMatchObject({
          outcome: 'handled',
          sagaId: started.sagaId,
        });
        expect((await db().orm.em.fork().findOneOrFail(LongKeySaga, { key })).key).toBe(key);
      });

      it('an integer property takes only integers in its column range', async () => {
        const { runtime } = setup();
        const number = Math.floor(Math.random() * 1_000_000);
        await expect(runtime.handle(numberedSaga, { type: 'Touch', number })).resolves.toMatchObject({ outcome: 'started' });
        await expect(runtime.handle(numberedSaga, { type: 'Touch', number })).resolves.toMatchObject({ outcome: 'handled', version: 1 });
        for (const bad of [String(number), number + 0.5, 2 ** 31, -(2 ** 31) - 1, Number.POSITIVE_INFINITY, { $gt: 0 }, [number]]) {
          const error = await refusal(runtime.handle(numberedSaga, { type: 'Touch', number: bad }));
          expect(error.code).toBe('CORRELATION_INVALID');
        }
        expect(await db().orm.em.fork().count(NumberedSaga)).toBe(1);
      });

      it('a uuid property takes only a uuid (any case), so PostgreSQL never sees a malformed uuid', async () => {
        const { runtime, rows } = setup();
        const id = crypto.randomUUID();
        const key = uniqueKey('by-id');
        await runtime.handle(scriptedById, { type: 'Touch', id, key });
        const upper = await runtime.handle(scriptedById, { type: 'Touch', id: id.toUpperCase() });
        expect(upper).toMatchObject({ outcome: 'handled', sagaId: id });
        expect(await rows.saga(key)).toMatchObject({ id, counter: 2 });
        for (const bad of ['not-a-uuid', `${id}x`, { $ne: id }]) {
          const error = await refusal(runtime.handle(scriptedById, { type: 'Touch', id: bad }));
          expect(error.code).toBe('CORRELATION_INVALID');
        }
      });

      it('message types named toString, constructor or __proto__ do not pick up Object.prototype', async () => {
        const { runtime, rows } = setup();
        const before = await rows.counts();
        for (const type of ['toString', 'constructor', '__proto__', 'hasOwnProperty']) {
          const error = await refusal(runtime.handle(scriptedSaga, { type, key: 'k' } as never));
          expect(error.code).toBe('MESSAGE_TYPE_UNKNOWN');
        }
        expect(await rows.counts()).toEqual(before);
      });

      it('a step named constructor or toString without a correlation rule is CORRELATION_UNDEFINED, not Object.prototype', async () => {
        const { rows } = setup();
        type ProtoMessage = { readonly type: 'Start' | 'constructor' | 'toString'; readonly key: string };
        const protoNames = defineSaga<ScriptedSaga, ProtoMessage>({
          name: 'scripted-proto',
          state: ScriptedSaga,
          correlation: { property: 'key', from: { Start: (m: ProtoMessage) => m.key } as never },
          startedBy: ['Start'],
          steps: {
            Start() {},
            constructor(saga) {
              saga.counter++;
            },
            toString(saga) {
              saga.counter++;
            },
          },
        });
        const runtime = new SagaRuntime({ em: db().orm.em, sagas: [protoNames], clock: new FakeClock() });
        const key = uniqueKey('proto');
        await runtime.handle(protoNames, { type: 'Start', key });
        const before = await rows.counts();
        for (const type of ['constructor', 'toString'] as const) {
          const error = await refusal(runtime.handle(protoNames, { type, key }));
          expect(error.code).toBe('CORRELATION_UNDEFINED');
        }
        expect(await rows.saga(key)).toMatchObject({ counter: 0, version: 0 });
        expect(await rows.counts()).toEqual(before);
      });

      it('a correlation id with U+0000 is OPTION_INVALID before anything is written', async () => {
        const { runtime, rows } = setup();
        const before = await rows.counts();
        const error = await refusal(runtime.handle(scriptedSaga, { type: 'Start', key: uniqueKey('cid') }, { correlationId: 'a\u0000' }));
        expect(error).toMatchObject({ code: 'OPTION_INVALID' });
        expect(await rows.counts()).toEqual(before);
      });
    });

    describe('dates and durations are bounded', () => {
      it('the earliest and latest due dates, 1970-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z, are stored and read back exactly', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'latest');
        const ends = ['1970-01-01T00:00:00.000Z', '9999-12-31T23:59:59.999Z'];
        await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: ends.map((at, i) => ({ op: 'schedule', name: `end-${i}`, at, scope: 'saga' }) as const),
        });
        expect((await rows.pendingTimers(sagaId)).map((t) => t.dueAt.toISOString())).toEqual(ends);
      });

      it.each([
        ['a due date in year 10000 is TIMER_DUE_INVALID, not PERSISTENCE_FAILED: Invalid time value', { at: '+010000-01-01T00:00:00Z' }],
        ['a due date before 1970 is TIMER_DUE_INVALID', { at: '1969-12-31T23:59:59.999Z' }],
        ['a delay of 1e20 ms is TIMER_DUE_INVALID, not a stored row', { after: 1e20 }],
        ['a delay just past 9999-12-31 is TIMER_DUE_INVALID', { after: Date.UTC(10000, 0, 1) - Date.UTC(2026, 0, 9, 16) }],
      ])('%s', async (_what, when) => {
        const error = await expectRefusedStep([{ op: 'schedule', name: 't', ...when }], 'TIMER_DUE_INVALID');
        expect(error.message).toMatch(/1970-01-01 to 9999-12-31/);
      });

      it.each([
        ['a BigInt delay is TIMER_DELAY_INVALID, not a serializer crash', 10n, /BigInt/],
        ['{} is not a zero delay', {}, /no parts/],
        ['a delay object with only inherited keys is empty', Object.create({ days: 1 }), /no parts/],
        ['a BigInt part is TIMER_DELAY_INVALID', { seconds: 5n }, /not a number/],
      ])('%s', async (_what, after, hint) => {
        const error = await expectRefusedStep([{ op: 'schedule', name: 't', after: after as never }], 'TIMER_DELAY_INVALID');
        expect(error).toBeInstanceOf(SagaValidationError);
        expect(error.message).toMatch(hint);
      });

      it('a WeekdayCalendar delay of 1e20 ms is refused at once instead of blocking the event loop', async () => {
        const started = performance.now();
        const error = await expectRefusedStep([{ op: 'schedule', name: 't', after: 1e20, calendar: 'weekdays' }], 'TIMER_DUE_INVALID');
        expect(error.details).toMatchObject({ timerName: 't' });
        // Day by day this took 75 s; whole weeks at a time it is arithmetic.
        expect(performance.now() - started).toBeLessThan(2_000);
      });

      it.each([
        ['an invalid Date', 'invalid', /not a valid date/],
        ['a date before the start', 'backwards', /before the instant/],
        ['something other than a Date', 'stringly', /not a valid date/],
        ['a date after 9999-12-31', 'farAway', /after 9999-12-31/],
      ])("a custom calendar's %s is TIMER_DUE_INVALID", async (_what, calendar, hint) => {
        for (const when of [{ after: 1_000 }, { at: '2030-01-01T00:00:00Z' }]) {
          const error = await expectRefusedStep([{ op: 'schedule', name: 't', calendar, ...when }], 'TIMER_DUE_INVALID');
          expect(error.message).toMatch(hint);
          expect(error.message).toContain(`calendar '${calendar}'`);
        }
      });
    });

    describe('state values a step copies from its message', () => {
      it.each([
        ['U+0000 in a string column', { label: 'a\u0000b' }, /label to a value that contains U\+0000/],
        ['a lone surrogate in a string column', { label: '\uDC00' }, /lone UTF-16 surrogate/],
        ['21 characters in a varchar(20)', { label: 'x'.repeat(21) }, /longer than 20 characters/],
        ['a fraction in an integer column', { touched: 1.5 }, /not an integer/],
        ['a string in an integer column', { touched: '7' as never }, /is a string/],
        ['NaN in a double column', { score: Number.NaN }, /is NaN/],
        ['an invalid Date', { seenAt: new Date(Number.NaN) }, /invalid Date/],
        ['a Date in year 10000', { seenAt: new Date('+010000-01-01T00:00:00Z') }, /outside years 1 to 9999/],
        [
          'an upper-case uuid (PostgreSQL read it back in lower case, SQLite as written)',
          { ref: 'AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE' },
          /not in lower case/,
        ],
        ['a uuid without dashes', { ref: 'aaaaaaaabbbb4ccc8dddeeeeeeeeeeee' }, /is not a uuid/],
        ['1e300 in a float column (PostgreSQL real refuses it, SQLite stored it)', { ratio: 1e300 }, /range of a 4-byte float/],
        ['1e-50 in a float column (PostgreSQL real refuses it, SQLite stored it)', { ratio: -1e-50 }, /too close to zero/],
      ])('%s is STATE_VALUE_INVALID on both databases, and nothing is written', async (_what, set, hint) => {
        const { runtime } = setup();
        const number = Math.floor(Math.random() * 1_000_000);
        await runtime.handle(numberedSaga, { type: 'Touch', number });
        const em = () => db().orm.em.fork();
        const before = { sagas: await em().count(NumberedSaga) };
        const error = await refusal(runtime.handle(numberedSaga, { type: 'Touch', number, set }));
        expect(error).toMatchObject({ code: 'STATE_VALUE_INVALID', details: { sagaType: 'numbered' } });
        expect(error.message).toMatch(hint);
        expect(await em().findOne(NumberedSaga, { number })).toMatchObject({ touched: 1, version: 0, label: null });
        // A start message with the same values leaves no instance behind.
        const fresh = number + 1_000_000;
        await expect(runtime.handle(numberedSaga, { type: 'Touch', number: fresh, set })).rejects.toMatchObject({
          code: 'STATE_VALUE_INVALID',
        });
        expect(await em().count(NumberedSaga)).toBe(before.sagas);
      });

      it.each([
        ['50 characters in an embedded varchar(10)', { street: 'y'.repeat(50) }, 'address.street', /longer than 10 characters/],
        ['U+0000 in an embedded string', { street: 'a\u0000b' }, 'address.street', /contains U\+0000/],
        ['a fraction in an embedded integer', { street: 'ok', number: 1.5 }, 'address.number', /not an integer/],
      ])('%s is STATE_VALUE_INVALID naming the path (embeddable properties went unchecked)', async (_what, fields, property, hint) => {
        const { runtime } = setup();
        const key = uniqueKey('emb');
        await runtime.handle(embeddingSaga, { type: 'Touch', key });
        const address = Object.assign(new Address(), fields);
        const error = await refusal(runtime.handle(embeddingSaga, { type: 'Touch', key, set: { address } }));
        expect(error).toMatchObject({ code: 'STATE_VALUE_INVALID', details: { sagaType: 'embedding', property } });
        expect(error.message).toMatch(hint);
        expect(await db().orm.em.fork().findOneOrFail(EmbeddingSaga, { key })).toMatchObject({ version: 0, address: null });
      });

      it('a valid embeddable is stored and read back alike', async () => {
        const { runtime } = setup();
        const key = uniqueKey('emb');
        const address = Object.assign(new Address(), { street: '😀'.repeat(10), number: 7 });
        await runtime.handle(embeddingSaga, { type: 'Touch', key, set: { address } });
        expect((await db().orm.em.fork().findOneOrFail(EmbeddingSaga, { key })).address).toMatchObject({
          street: '😀'.repeat(10),
          number: 7,
        });
      });

      it('a lower-case uuid state value is stored and read back alike', async () => {
        const { runtime } = setup();
        const number = Math.floor(Math.random() * 1_000_000);
        const ref = crypto.randomUUID();
        await runtime.handle(numberedSaga, { type: 'Touch', number, set: { ref } });
        expect((await db().orm.em.fork().findOne(NumberedSaga, { number }))?.ref).toBe(ref);
      });

      it('20 emoji in a varchar(20), and Dates in years 1 and 9999, are stored and read back alike', async () => {
        const { runtime } = setup();
        const number = Math.floor(Math.random() * 1_000_000);
        for (const seenAt of [
          new Date('0001-01-01T00:00:00.000Z'),
          new Date('1950-06-01T12:00:00.000Z'),
          new Date('9999-12-31T23:59:59.999Z'),
        ]) {
          await runtime.handle(numberedSaga, { type: 'Touch', number, set: { label: '😀'.repeat(20), seenAt, score: -0.5 } });
          const row = await db().orm.em.fork().findOne(NumberedSaga, { number });
          expect(row).toMatchObject({ label: '😀'.repeat(20), score: -0.5 });
          expect(row?.seenAt?.toISOString()).toBe(seenAt.toISOString());
        }
      });
    });

    describe('column types the two databases store differently', () => {
      it('a float (real) correlation property is DEFINITION_INVALID: PostgreSQL rounded 0.1, so the saga was never found again', () => {
        expect(() => new SagaRuntime({ em: db().orm.em, sagas: [floatKeySaga] })).toThrow(
          expect.objectContaining({ code: 'DEFINITION_INVALID', message: expect.stringMatching(/key is a 4-byte float.*double/) }),
        );
      });

      it("a char(n) correlation property is DEFINITION_INVALID naming varchar: 'abc' and 'abc ' were one saga on PostgreSQL, two on SQLite", () => {
        expect(() => new SagaRuntime({ em: db().orm.em, sagas: [charKeySaga] })).toThrow(
          expect.objectContaining({
            code: 'DEFINITION_INVALID',
            message: expect.stringMatching(/key is a fixed-length char\(n\).*varchar/),
          }),
        );
      });

      it('a float state column takes 3.4028235e38 (LARGEST_FLOAT), 0.5 and 0, read back alike', async () => {
        const { runtime } = setup();
        const number = Math.floor(Math.random() * 1_000_000);
        for (const ratio of [-3.4028235e38, 0.5, 0]) {
          await runtime.handle(numberedSaga, { type: 'Touch', number, set: { ratio } });
          expect((await db().orm.em.fork().findOne(NumberedSaga, { number }))?.ratio).toBe(ratio);
        }
        // As documented: PostgreSQL rounds a float to 4 bytes, SQLite keeps the double.
        await runtime.handle(numberedSaga, { type: 'Touch', number, set: { ratio: 0.1 + 0.2 } });
        const rounded = (await db().orm.em.fork().findOne(NumberedSaga, { number }))?.ratio;
        expect(rounded).toBe(dialect === 'postgresql' ? 0.3 : 0.30000000000000004);
      });
    });

    describe('a bigint mapped to string', () => {
      it('a correlation value that is not a safe integer in plain digits ("abc", "1e3", "01", "-0", 2^63 - 1) is CORRELATION_INVALID, not any string', async () => {
        const { runtime } = setup();
        const count = () => db().orm.em.fork().count(BigStringSaga);
        const before = await count();
        const bad = ['abc', '1e3', '01', '+1', ' 1', '1 ', '-0', '', '9007199254740992', '-9223372036854775808', 12, 12n];
        for (const key of bad) {
          const error = await refusal(runtime.handle(bigStringSaga, { type: 'Touch', key }));
          expect(error.code, JSON.stringify(String(key))).toBe(key === '' ? 'CORRELATION_MISSING' : 'CORRELATION_INVALID');
        }
        expect(await count()).toBe(before);
      });

      it('the safe-integer extremes are started, found again and read back as written (SQLite read 2^63 - 1 back as ...6000)', async () => {
        const { runtime } = setup();
        for (const key of ['9007199254740991', '-9007199254740991']) {
          await db().orm.em.fork().nativeDelete(BigStringSaga, { key });
          const started = await runtime.handle(bigStringSaga, { type: 'Touch', key });
          await expect(runtime.handle(bigStringSaga, { type: 'Touch', key, set: { total: key } })).resolves.toMatchObject({
            outcome: 'handled',
            sagaId: started.sagaId,
            version: 1,
          });
          expect(await db().orm.em.fork().findOneOrFail(BigStringSaga, { key })).toMatchObject({ key, total: key });
        }
      });

      it('a BigInt state value beyond Number.MAX_SAFE_INTEGER is STATE_VALUE_INVALID (SQLite read 2^63 - 1 back rounded); the largest safe one reads back as written', async () => {
        const { runtime } = setup();
        const key = String(Math.floor(Math.random() * 1_000_000_000));
        await runtime.handle(bigStringSaga, { type: 'Touch', key, set: { count: 2n ** 53n - 1n } });
        expect((await db().orm.em.fork().findOneOrFail(BigStringSaga, { key })).count).toBe(2n ** 53n - 1n);
        for (const count of [2n ** 63n - 1n, -(2n ** 53n)]) {
          const error = await refusal(runtime.handle(bigStringSaga, { type: 'Touch', key, set: { count } }));
          expect(error).toMatchObject({ code: 'STATE_VALUE_INVALID', details: { property: 'count' } });
        }
        expect(await db().orm.em.fork().findOneOrFail(BigStringSaga, { key })).toMatchObject({ count: 2n ** 53n - 1n, version: 0 });
      });

      it('a state value of such a column that is not a safe integer in plain digits is STATE_VALUE_INVALID', async () => {
        const { runtime } = setup();
        const key = String(Math.floor(Math.random() * 1_000_000_000));
        await runtime.handle(bigStringSaga, { type: 'Touch', key, set: { total: '-42' } });
        for (const total of ['abc', '1.5', '007', '99999999999999999999']) {
          const error = await refusal(runtime.handle(bigStringSaga, { type: 'Touch', key, set: { total } }));
          expect(error).toMatchObject({ code: 'STATE_VALUE_INVALID', details: { property: 'total' } });
        }
        expect(await db().orm.em.fork().findOneOrFail(BigStringSaga, { key })).toMatchObject({ total: '-42', version: 0 });
      });
    });

    describe('payloads, headers and names', () => {
      it.each([
        [
          'U+0000 in a timer payload value',
          { op: 'schedule', name: 't', message: { type: 'Tick', label: 'a\u0000b' } },
          /\.label contains U\+0000/,
        ],
        [
          'a lone surrogate in a sent payload',
          { op: 'send', message: { type: 'M', nested: { list: ['ok', 'x\uDC00'] } } },
          /\.nested\.list\[1\] contains a lone/,
        ],
        ['U+0000 in a payload key', { op: 'send', message: { type: 'M', 'a\u0000': 1 } }, /\[key #1\]: the key contains U\+0000/],
        [
          'U+0000 in a header value',
          { op: 'send', message: { type: 'M' }, headers: { trace: 'a\u0000' } },
          /headers .*\.trace contains U\+0000/,
        ],
        ['a lone surrogate in a header key', { op: 'send', message: { type: 'M' }, headers: { '\uD800': 'v' } }, /the key contains a lone/],
      ] as [string, Action, RegExp][])('%s is PAYLOAD_NOT_SERIALIZABLE naming the path, on both databases', async (_what, action, path) => {
        const error = await expectRefusedStep([action], 'PAYLOAD_NOT_SERIALIZABLE');
        expect(error.message).toMatch(path);
        // The message names the path and quotes nothing: it is itself text both databases store.
        expect(textProblem(error.message)).toBeUndefined();
      });

      it("a getter answering the check 'fine' and JSON.stringify 'a\\u0000b' is PAYLOAD_NOT_SERIALIZABLE: what is stored is what was checked", async () => {
        let reads = 0;
        const message = {
          type: 'M',
          get note() {
            reads++;
            return reads === 1 ? 'fine' : 'a\u0000b';
          },
        };
        const error = await expectRefusedStepOf((ctx) => ctx.send(message), 'PAYLOAD_NOT_SERIALIZABLE');
        expect(error.message).toMatch(/once written as JSON, .*\.note contains U\+0000/);
        expect(reads).toBe(2);
      });

      it('a toJSON that appears after the check and throws is PAYLOAD_NOT_SERIALIZABLE with the error as cause, not a raw Error', async () => {
        let reads = 0;
        const thrown = new Error('boom');
        const message = {
          type: 'M',
          get toJSON() {
            reads++;
            return reads === 1
              ? undefined
              : () => {
                  throw thrown;
                };
          },
        };
        const error = await expectRefusedStepOf((ctx) => ctx.send(message), 'PAYLOAD_NOT_SERIALIZABLE');
        expect(error.message).toMatch(/could not be written as JSON/);
        expect(error.cause).toBe(thrown);
      });

      it('the publisher gets the sent payload deep-equal on both databases, but PostgreSQL (jsonb) reorders its keys: never hash or sign the text', async () => {
        const { clock, runtime } = setup();
        const { key } = await start(runtime, 'order');
        const type = `PaymentRequested-${key}`;
        const message = { type, orderId: 'o-1', amount: 10, currency: 'EUR' };
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'send', message }] });
        const published: OutboxEnvelope[] = [];
        const dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger, publish: async (e) => void published.push(e) });
        await dispatcher.runOnce();
        const envelope = published.find((e) => e.type === type);
        expect(envelope?.payload).toEqual(message);
        // jsonb orders keys shorter first, then bytewise; SQLite keeps the text as written.
        const order = dialect === 'postgresql' ? ['type', 'amount', 'orderId', 'currency'] : Object.keys(message);
        expect(Object.keys(envelope?.payload as object)).toEqual(order);
      });

      it('a payload nested 10,000 levels deep is PAYLOAD_NOT_SERIALIZABLE, not a stack overflow', async () => {
        let deep: Record<string, unknown> = { leaf: true };
        for (let i = 0; i < 10_000; i++) deep = { deep };
        const error = await expectRefusedStep([{ op: 'send', message: { type: 'M', deep } }], 'PAYLOAD_NOT_SERIALIZABLE');
        expect(error.message).toMatch(/nested deeper than 100 levels/);
      });

      it('a payload nested 100 levels deep is stored and read back', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'depth');
        let deep: Record<string, unknown> = { leaf: 'é😀' };
        for (let i = 0; i < 98; i++) deep = { d: deep };
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'send', message: { type: 'M', deep } }] });
        expect((await rows.outbox(sagaId))[0]?.payload).toEqual({ type: 'M', deep });
      });

      it('a 10 MB header is PAYLOAD_TOO_LARGE, not a stored row', async () => {
        const error = await expectRefusedStep(
          [{ op: 'send', message: { type: 'M' }, headers: { big: 'x'.repeat(10_000_000) } }],
          'PAYLOAD_TOO_LARGE',
        );
        expect(error.message).toMatch(/headers/);
        expect(error.message.length).toBeLessThan(1_000);
      });

      it('headers: any plain object of strings is stored as given (null prototype, a __proto__ key, none); the runtime headers win', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'headers');
        const bare = Object.assign(Object.create(null) as Record<string, string>, { tenant: 'é😀' });
        const protoKey = JSON.parse('{"__proto__":"p","trace":"t"}') as Record<string, string>;
        const actions: Action[] = [
          { op: 'send', message: { type: 'A' }, headers: { trace: 't-1', 'x-empty': '' } },
          { op: 'send', message: { type: 'B' }, headers: bare },
          { op: 'send', message: { type: 'C' }, headers: protoKey },
          { op: 'send', message: { type: 'D' }, headers: {} },
          { op: 'send', message: { type: 'E' } },
          { op: 'send', message: { type: 'F' }, options: {} },
          { op: 'send', message: { type: 'G' }, headers: { 'saga-id': 'forged' } },
        ];
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions });
        const own = { 'correlation-id': expect.any(String), 'saga-type': 'scripted', 'saga-id': sagaId };
        const headers = Object.fromEntries((await rows.outbox(sagaId)).map((row) => [row.messageType, row.headers]));
        expect(headers).toEqual({
          A: { trace: 't-1', 'x-empty': '', ...own },
          B: { tenant: 'é😀', ...own },
          // Spread copies the own '__proto__' key as a key.
          C: { ...(JSON.parse('{"__proto__":"p"}') as object), trace: 't', ...own },
          D: own,
          E: own,
          F: own,
          G: own,
        });
        expect(Object.getPrototypeOf(headers.C)).toBe(Object.prototype);
      });

      it('payload and headers together stay within maxPayloadBytes', async () => {
        const error = await expectRefusedStep(
          [{ op: 'send', message: { type: 'M', blob: 'x'.repeat(40_000) }, headers: { extra: 'y'.repeat(30_000) } }],
          'PAYLOAD_TOO_LARGE',
        );
        expect(error.message).toMatch(/and its headers \d+, together over the limit of 65536/);
      });

      it('two timer names that differ only in lone surrogates are TIMER_NAME_INVALID, not ten retries ending in CONCURRENCY_CONFLICT', async () => {
        const error = await expectRefusedStep(
          [
            { op: 'schedule', name: 'n\uD800' },
            { op: 'schedule', name: 'n\uD801' },
          ],
          'TIMER_NAME_INVALID',
        );
        expect(error.message).toMatch(/lone UTF-16 surrogate/);
      });

      it('a timer name of 200 emoji fits the varchar(200) as PostgreSQL counts it; 201 do not', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'emoji-name');
        const name = '😀'.repeat(200);
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name }] });
        expect((await rows.pendingTimers(sagaId)).map((t) => t.name)).toEqual([name]);
        await expectRefusedStep([{ op: 'schedule', name: `${name}😀` }], 'TIMER_NAME_INVALID');
      });

      it.each([
        ['a timer message type with U+0000', { op: 'schedule', name: 't', message: { type: 'Ti\u0000ck' } }],
        ['a sent message type with a lone surrogate', { op: 'send', message: { type: 'M\uDFFF' } }],
        ['a sent message type of 201 characters', { op: 'send', message: { type: 'M'.repeat(201) } }],
      ] as [string, Action][])('%s is MESSAGE_TYPE_MISSING', async (_what, action) => {
        await expectRefusedStep([action], 'MESSAGE_TYPE_MISSING');
      });

      it('an unknown calendar key is named without quoting odd text', async () => {
        const error = await expectRefusedStep([{ op: 'schedule', name: 't', calendar: 'x\u0000'.repeat(50) }], 'CALENDAR_UNKNOWN');
        expect(error.message).toContain('(a string of 100 UTF-16 units)');
        expect(error.message).not.toContain('\u0000');
      });

      it('a calendar registered under a key the column cannot store is OPTION_INVALID at start-up', () => {
        for (const key of ['', 'k\u0000', 'x'.repeat(101)]) {
          expect(() => new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], calendars: { [key]: new WeekdayCalendar() } })).toThrow(
            expect.objectContaining({ code: 'OPTION_INVALID' }),
          );
        }
      });

      it('a step value of 101 characters is STEP_INVALID when a step-scoped timer would record it; U+0000 is refused with the state', async () => {
        // The step lives in a text column here, so only saga_timer.step (varchar(100)) limits its length.
        type LogMessage =
          | { readonly type: 'Start'; readonly key: string }
          | { readonly type: 'Do'; readonly key: string; readonly log: string };
        const byLog = defineSaga<ScriptedSaga, LogMessage>({
          name: 'scripted-log-step',
          state: ScriptedSaga,
          correlation: { property: 'key', from: (m) => m.key },
          startedBy: ['Start'],
          stepProperty: 'log',
          steps: {
            Start() {},
            Do(saga, message, ctx) {
              saga.log = message.log;
              ctx.schedule('t', 1_000, { type: 'Start', key: message.key });
            },
          },
        });
        const runtime = new SagaRuntime({ em: db().orm.em, sagas: [byLog], clock: new FakeClock() });
        const rows = rowsOf(db().orm);
        const key = uniqueKey('log-step');
        await runtime.handle(byLog, { type: 'Start', key });
        const before = await rows.counts();
        const cases: [string, string][] = [
          ['s'.repeat(101), 'STEP_INVALID'],
          ['a\u0000b', 'STATE_VALUE_INVALID'],
        ];
        for (const [log, code] of cases) {
          const error = await refusal(runtime.handle(byLog, { type: 'Do', key, log }));
          expect(error.code).toBe(code);
          if (code === 'STEP_INVALID') expect(error.message).toMatch(/step \(stepProperty\) is longer than 100 characters/);
        }
        expect(await rows.counts()).toEqual(before);
        expect(await rows.saga(key)).toMatchObject({ version: 0 });
        // 100 emoji are 100 characters, as PostgreSQL counts them: recorded on the timer on both databases.
        const scripted = setup().runtime;
        const long = await start(scripted, 'long-step');
        await scripted.handle(scriptedSaga, {
          type: 'Do',
          key: long.key,
          actions: [
            { op: 'stage', stage: '😀'.repeat(100) },
            { op: 'schedule', name: 't' },
          ],
        });
        expect((await rows.pendingTimers(long.sagaId))[0]?.step).toBe('😀'.repeat(100));
      });
    });
  });
}
