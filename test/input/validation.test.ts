// Bad input on every database gets a typed error that says what to do, and nothing is written.
import { describe, expect, it } from 'vitest';
import {
  defineSaga,
  SagaCorrelationError,
  SagaDefinitionError,
  type SagaErrorCode,
  SagaRuntime,
  SagaValidationError,
} from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { type Action, ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

const cyclic: Record<string, unknown> = { type: 'Tick' };
cyclic.self = cyclic;

const badSchedules: [string, Action, SagaErrorCode, RegExp][] = [
  ['an empty timer name', { op: 'schedule', name: '' }, 'TIMER_NAME_INVALID', /1 to 200 characters/],
  ['a blank timer name', { op: 'schedule', name: '   ' }, 'TIMER_NAME_INVALID', /not only spaces/],
  ['an over-long timer name', { op: 'schedule', name: 'x'.repeat(201) }, 'TIMER_NAME_INVALID', /1 to 200/],
  ['a negative delay', { op: 'schedule', name: 't', after: -1 }, 'TIMER_DELAY_INVALID', /non-negative/],
  ['a NaN delay', { op: 'schedule', name: 't', after: Number.NaN }, 'TIMER_DELAY_INVALID', /finite/],
  ['an infinite delay', { op: 'schedule', name: 't', after: Number.POSITIVE_INFINITY }, 'TIMER_DELAY_INVALID', /finite/],
  ['a delay with an unknown unit', { op: 'schedule', name: 't', after: { weeks: 1 } as never }, 'TIMER_DELAY_INVALID', /days\/hours/],
  ['an invalid due date', { op: 'schedule', name: 't', at: 'not a date' }, 'TIMER_DUE_INVALID', /valid Date/],
  ['an unknown calendar', { op: 'schedule', name: 't', calendar: 'mars' }, 'CALENDAR_UNKNOWN', /register it/],
  ['a timer message without type', { op: 'schedule', name: 't', message: { label: 'x' } }, 'MESSAGE_TYPE_MISSING', /'type' string/],
  [
    'a timer message the saga has no step for',
    { op: 'schedule', name: 't', message: { type: 'Nope' } },
    'MESSAGE_TYPE_UNKNOWN',
    /add steps\.Nope/,
  ],
  [
    'a BigInt in a timer payload',
    { op: 'schedule', name: 't', message: { type: 'Tick', n: 10n } },
    'PAYLOAD_NOT_SERIALIZABLE',
    /\.n is a BigInt/,
  ],
  ['a cycle in a timer payload', { op: 'schedule', name: 't', message: cyclic }, 'PAYLOAD_NOT_SERIALIZABLE', /cycle/],
  [
    'a function in a timer payload',
    { op: 'schedule', name: 't', message: { type: 'Tick', f: () => 1 } },
    'PAYLOAD_NOT_SERIALIZABLE',
    /\.f is a function/,
  ],
  [
    'a Date in a timer payload',
    { op: 'schedule', name: 't', message: { type: 'Tick', at: new Date() } },
    'PAYLOAD_NOT_SERIALIZABLE',
    /ISO string/,
  ],
  ['a Map in a timer payload', { op: 'schedule', name: 't', message: { type: 'Tick', m: new Map() } }, 'PAYLOAD_NOT_SERIALIZABLE', /Map/],
  ['NaN in a timer payload', { op: 'schedule', name: 't', message: { type: 'Tick', n: Number.NaN } }, 'PAYLOAD_NOT_SERIALIZABLE', /NaN/],
  [
    'an over-large timer payload',
    { op: 'schedule', name: 't', message: { type: 'Tick', blob: 'x'.repeat(70_000) } },
    'PAYLOAD_TOO_LARGE',
    /maxPayloadBytes/,
  ],
  ['a sent message without type', { op: 'send', message: { n: 1 } }, 'MESSAGE_TYPE_MISSING', /'type' string/],
  ['a BigInt in a sent message', { op: 'send', message: { type: 'M', n: 1n } }, 'PAYLOAD_NOT_SERIALIZABLE', /BigInt/],
  ['an over-large sent message', { op: 'send', message: { type: 'M', blob: 'é'.repeat(40_000) } }, 'PAYLOAD_TOO_LARGE', /80\d+ bytes/],
  [
    'a non-string header',
    { op: 'send', message: { type: 'M' }, headers: { n: 1 as never } },
    'PAYLOAD_NOT_SERIALIZABLE',
    /headers are strings/,
  ],
  // Headers that are not a plain object of strings were stored as index keys ('abc', an array), dropped (a Map,
  // a number) or threw a TypeError (null).
  ...(
    [
      ["headers 'abc'", 'abc', /are a string/],
      ['headers that are an array', ['a', 'b'], /are an array/],
      ['headers that are a Map', new Map([['trace', 't']]), /are a 'Map' object, not a plain object/],
      ['headers that are a number', 5, /are a number/],
      ['headers that are null', null, /are null/],
    ] as const
  ).map(([what, headers, hint]): [string, Action, SagaErrorCode, RegExp] => [
    what,
    { op: 'send', message: { type: 'M' }, headers: headers as never },
    'PAYLOAD_NOT_SERIALIZABLE',
    new RegExp(`${hint.source}: headers are strings, in a plain object`),
  ]),
  ['send options that are null', { op: 'send', message: { type: 'M' }, options: null }, 'OPTION_INVALID', /leave the argument out/],
  ['schedule options that are null', { op: 'schedule', name: 't', options: null }, 'OPTION_INVALID', /leave the argument out/],
  ['schedule options that are a string', { op: 'schedule', name: 't', options: 'step' }, 'OPTION_INVALID', /are a string/],
  ['a timer scope of null', { op: 'schedule', name: 't', options: { scope: null } }, 'OPTION_INVALID', /'step' or 'saga'/],
  // ctx.cancel() took anything: an array cancelled several timers, a number or [] reached SQL, U+0000 failed as a
  // persistence error, a 100,000-element array ran a one-second statement.
  ...(
    [
      ['an array', ['a', 'b']],
      ['an empty array', []],
      ['a 100,000-element array', Array.from({ length: 100_000 }, (_, i) => `t${i}`)],
      ['a number', 7],
      ['a boolean', true],
      ['undefined', undefined],
      ['an empty name', ''],
      ['a blank name', '   '],
      ['a name over 200 characters', 'x'.repeat(201)],
      ['a name with U+0000', 'a\u0000b'],
      ['a name with a lone surrogate', 'a\uD800'],
    ] as const
  ).map(([what, name]): [string, Action, SagaErrorCode, RegExp] => [
    `ctx.cancel() of ${what}`,
    { op: 'cancel', name: name as never },
    'TIMER_NAME_INVALID',
    /use 1 to 200 characters/,
  ]),
];

for (const dialect of DIALECTS) {
  describe(`bad input (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const setup = () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
      return { runtime, rows: rowsOf(db().orm) };
    };

    for (const [what, action, code, hint] of badSchedules) {
      it(`${what}: ${code}, and nothing is written`, async () => {
        const { runtime, rows } = setup();
        const key = uniqueKey('bad');
        const started = await runtime.handle(scriptedSaga, { type: 'Start', key });
        const error = await runtime
          .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'send', message: { type: 'Before' } }, action] })
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(SagaValidationError);
        expect(error).toMatchObject({ code, details: { sagaType: 'scripted', sagaId: started.sagaId } });
        expect((error as Error).message).toMatch(hint);
        expect(await rows.saga(key)).toMatchObject({ version: 0, counter: 0 });
        expect(await rows.timers({ sagaId: started.sagaId })).toEqual([]);
        expect(await rows.outbox(started.sagaId!)).toEqual([]);
        // The same failure on a start message leaves no instance behind.
        const fresh = uniqueKey('bad-start');
        await expect(runtime.handle(scriptedSaga, { type: 'Start', key: fresh, actions: [action] })).rejects.toMatchObject({ code });
        expect(await rows.saga(fresh)).toBeNull();
      });
    }

    it('ctx.cancel() of an array of names cancels none of them: TIMER_NAME_INVALID, the timers stay pending', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('cancel-array');
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [
          { op: 'schedule', name: 'a', after: 1_000 },
          { op: 'schedule', name: 'b', after: 1_000 },
        ],
      });
      const error = await runtime
        .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'cancel', name: ['a', 'b'] as never }] })
        .catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'TIMER_NAME_INVALID', message: expect.stringContaining('is an array, not a string') });
      expect((await rows.pendingTimers(sagaId!)).map((timer) => timer.name)).toEqual(['a', 'b']);
    });

    it('a definition that is not one, or a handle() without a registered definition, is DEFINITION_INVALID; options that are not an object, OPTION_INVALID', async () => {
      const { runtime, rows } = setup();
      const em = db().orm.em;
      // These threw TypeErrors (reading 'name' of undefined).
      for (const sagas of [[undefined], [scriptedSaga, null], [{ name: 'scripted' }], ['scripted']]) {
        expect(() => new SagaRuntime({ em, sagas: sagas as never })).toThrow(
          expect.objectContaining({
            name: 'SagaDefinitionError',
            code: 'DEFINITION_INVALID',
            message: expect.stringMatching(/^sagas\[\d\] /),
          }),
        );
      }
      const before = await rows.counts();
      const key = uniqueKey('no-definition');
      for (const definition of [undefined, null, 'scripted', 42]) {
        await expect(runtime.handle(definition as never, { type: 'Start', key })).rejects.toMatchObject({
          name: 'SagaDefinitionError',
          code: 'DEFINITION_INVALID',
          message: expect.stringContaining('instead of a saga definition: pass the definition defineSaga() returned'),
        });
      }
      await expect(runtime.handle(scriptedSaga, { type: 'Start', key }, null as never)).rejects.toMatchObject({ code: 'OPTION_INVALID' });
      await expect(runtime.route({ type: 'Start', key }, null as never)).rejects.toMatchObject({ code: 'OPTION_INVALID' });
      // A correlation id of null took the default; it is refused like any other value that is not one.
      await expect(runtime.handle(scriptedSaga, { type: 'Start', key }, { correlationId: null as never })).rejects.toMatchObject({
        code: 'OPTION_INVALID',
        message: expect.stringContaining('correlation id of a message for scripted is null'),
      });
      expect(await rows.counts()).toEqual(before);
    });

    it('a message without a type: MESSAGE_TYPE_MISSING', async () => {
      const { runtime } = setup();
      await expect(runtime.handle(scriptedSaga, { key: 'k' } as never)).rejects.toMatchObject({ code: 'MESSAGE_TYPE_MISSING' });
      await expect(runtime.handle(scriptedSaga, null as never)).rejects.toBeInstanceOf(SagaValidationError);
      await expect(runtime.route({ type: '' })).rejects.toMatchObject({ code: 'MESSAGE_TYPE_MISSING' });
    });

    it('a message type the saga has no step for: MESSAGE_TYPE_UNKNOWN naming the fix', async () => {
      const { runtime } = setup();
      await expect(runtime.handle(scriptedSaga, { type: 'Refund', key: 'k' } as never)).rejects.toMatchObject({
        code: 'MESSAGE_TYPE_UNKNOWN',
        message: expect.stringContaining("has no step for message type 'Refund': add a step for it"),
      });
    });

    it('a message without its correlation value: CORRELATION_MISSING, and no row is written', async () => {
      const { runtime, rows } = setup();
      const before = (await rows.sagas()).length;
      for (const key of [undefined, null, '']) {
        const error = await runtime.handle(scriptedSaga, { type: 'Start', key } as never).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(SagaCorrelationError);
        expect(error).toMatchObject({ code: 'CORRELATION_MISSING', details: { messageType: 'Start' } });
        expect((error as Error).message).toContain('scripted.key');
      }
      expect(await rows.sagas()).toHaveLength(before);
    });

    it('a message type with no correlation rule: CORRELATION_UNDEFINED', async () => {
      const { runtime } = setup();
      // 'Tick' is only ever delivered by the saga's own timers, so the fixture defines no correlation for it.
      await expect(runtime.handle(scriptedSaga, { type: 'Tick', key: 'k' })).rejects.toMatchObject({
        code: 'CORRELATION_UNDEFINED',
        message: expect.stringContaining('correlation.from.Tick'),
      });
    });

    it('a saga whose entity is not registered, or whose correlation property is not unique, is refused at start-up', () => {
      const em = db().orm.em;
      class Unregistered extends ScriptedSaga {}
      const unregistered = defineSaga<ScriptedSaga, { type: 'A'; k: string }>({
        name: 'unregistered',
        state: Unregistered,
        correlation: { property: 'key', from: (m) => m.k },
        startedBy: ['A'],
        steps: { A() {} },
      });
      expect(() => new SagaRuntime({ em, sagas: [unregistered] })).toThrow(/not registered in MikroORM/);
      const notUnique = defineSaga<ScriptedSaga, { type: 'A'; k: string }>({
        name: 'not-unique',
        state: ScriptedSaga,
        correlation: { property: 'stage', from: (m) => m.k },
        startedBy: ['A'],
        steps: { A() {} },
      });
      const error = (() => {
        try {
          new SagaRuntime({ em, sagas: [notUnique] });
        } catch (e) {
          return e;
        }
      })();
      expect(error).toBeInstanceOf(SagaDefinitionError);
      expect((error as Error).message).toMatch(/unique: true/);
      expect(() => new SagaRuntime({ em, sagas: [scriptedSaga, scriptedSaga] })).toThrow(/must be unique/);
      expect(() => new SagaRuntime({ em, sagas: [scriptedSaga], concurrency: { maxAttempts: 0 } })).toThrow(/maxAttempts/);
    });
  });
}
