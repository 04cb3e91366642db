// Property-based tests (fast-check) of hostile input at the staging calls, on every database: `stageDelivery()` refuses
// exactly what `handle()` refuses for the same message and options, with the same typed error and code, and what it
// accepts it stores as JSON reads it back; its `delay` and `notBefore` are refused as a timer's delay and due date
// are; `stageMessage()` refuses what `ctx.send()` refuses. A refused call persists nothing: the application's flush
// that follows writes no staged row.
import type { EntityManager } from '@mikro-orm/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type Duration, defineSaga, SAGA_ERROR_CODES, type SagaError, SagaInbox, SagaOutbox, SagaRuntime } from '../../src/index.js';
import { nameProblem } from '../../src/saga/stored-text.js';
import { FakeClock } from '../../src/testing/index.js';
import { type Action, ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import {
  correlationValue,
  delay,
  dueDate,
  expectTyped,
  headers,
  longString,
  nastyString,
  outcomeOf,
  payload,
  probeSaga,
  scalar,
} from '../support/hostile-input.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

// Runs per property and database; raise it (FC_RUNS=1000) to search harder locally.
const RUNS = Number(process.env.FC_RUNS ?? 60);
const TIMEOUT_MS = Math.max(60_000, RUNS * 1_000);

/** A saga whose step schedules a timer at whatever the message says, then throws: nothing is written. */
type TimerProbeMessage = { readonly type: 'Schedule'; readonly key: string; readonly when: unknown };
const SCHEDULED = 'scheduled, not written';
const timerProbe = defineSaga<ScriptedSaga, TimerProbeMessage>({
  name: 'timer-probe',
  state: ScriptedSaga,
  correlation: { property: 'key', from: (m) => m.key },
  startedBy: ['Schedule'],
  steps: {
    Schedule(_saga, message, ctx) {
      ctx.schedule('probe', message.when as Duration | Date, { type: 'Schedule', key: message.key, when: 0 });
      throw new Error(SCHEDULED);
    },
  },
});

/** The error code of a failed outcome, or 'ok'. */
const codeOf = (outcome: { ok: boolean; error?: unknown }) => (outcome.ok ? 'ok' : (outcome.error as SagaError).code);

for (const dialect of DIALECTS) {
  describe(`hostile input at the staging calls, property-based (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const setup = () => {
      const clock = new FakeClock('2026-01-09T16:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga, probeSaga, timerProbe], clock });
      return { clock, runtime };
    };
    const counts = async () => {
      const em = db().orm.em.fork();
      return { inbox: await em.count(SagaInbox), outbox: await em.count(SagaOutbox) };
    };
    /**
     * Runs a staging call on a fresh EntityManager, then the application's flush: what the call persisted, the flush
     * writes. Returns the call's outcome.
     */
    const staged = async <T>(call: (em: EntityManager) => T) => {
      const em = db().orm.em.fork();
      const outcome = await outcomeOf(Promise.resolve().then(() => call(em)));
      await em.flush();
      return outcome;
    };

    it(
      'a correlation value of any type: refused exactly when handle() refuses it, with its code; accepted, stored as its saga key',
      async () => {
        const { runtime } = setup();
        await fc.assert(
          fc.asyncProperty(correlationValue, fc.constantFrom('Start', 'Do') as fc.Arbitrary<'Start' | 'Do'>, async (key, type) => {
            const before = await counts();
            const handled = await outcomeOf(runtime.handle(probeSaga, { type, key }));
            const outcome = await staged((em) => runtime.stageDelivery(em, probeSaga, { type, key }));
            expect(codeOf(outcome), String(!outcome.ok && outcome.error)).toBe(codeOf(handled));
            if (!outcome.ok) {
              expectTyped(outcome.error, ['CORRELATION_INVALID', 'CORRELATION_MISSING']);
              expect(await counts()).toEqual(before);
            } else {
              const row = await db().orm.em.fork().findOneOrFail(SagaInbox, { id: outcome.value.id });
              expect(row).toMatchObject({ sagaType: 'probe', sagaKey: key, messageType: type });
            }
          }),
          { numRuns: RUNS },
        );
      },
      TIMEOUT_MS,
    );

    it(
      "a message of any shape: handle()'s refusals with its codes; accepted, stored as JSON reads it back, or refused as a payload",
      async () => {
        const { runtime } = setup();
        const message = fc.oneof(
          fc.anything(),
          fc.record(
            {
              type: fc.oneof(fc.constantFrom('Start', 'Do', 'Tick', 'toString', 'constructor', '__proto__'), nastyString),
              key: correlationValue,
              data: payload,
            },
            { requiredKeys: ['type'] },
          ),
        );
        await fc.assert(
          fc.asyncProperty(message, async (hostile) => {
            const before = await counts();
            const handled = await outcomeOf(runtime.handle(probeSaga, hostile as never));
            const outcome = await staged((em) => runtime.stageDelivery(em, probeSaga, hostile as never));
            if (!handled.ok) {
              expect(codeOf(outcome)).toBe(codeOf(handled));
            } else if (!outcome.ok) {
              // handle() does not store the message it handles; a staged one is stored, so it must be JSON.
              expectTyped(outcome.error, ['PAYLOAD_NOT_SERIALIZABLE', 'PAYLOAD_TOO_LARGE']);
            }
            if (outcome.ok) {
              const row = await db().orm.em.fork().findOneOrFail(SagaInbox, { id: outcome.value.id });
              expect(row.payload).toEqual(JSON.parse(JSON.stringify(hostile)));
            } else {
              expectTyped(outcome.error, Object.values(SAGA_ERROR_CODES));
              expect(await counts()).toEqual(before);
            }
          }),
          { numRuns: RUNS },
        );
      },
      TIMEOUT_MS,
    );

    it(
      "message ids and correlation ids of any kind: refused as handle() refuses them; delays and dates as a timer's",
      async () => {
        const { runtime, clock } = setup();
        const key = uniqueKey('options');
        await runtime.handle(scriptedSaga, { type: 'Start', key });
        const ids = fc.option(fc.oneof(nastyString, longString, scalar), { nil: undefined });
        const when = fc.oneof(
          fc.constant({}),
          delay.map((d) => ({ delay: d })),
          dueDate.map((at) => ({ notBefore: at })),
          fc.tuple(delay, dueDate).map(([d, at]) => ({ delay: d, notBefore: at })),
        );
        await fc.assert(
          fc.asyncProperty(ids, ids, when, async (messageId, correlationId, time) => {
            const before = await counts();
            const ids = { messageId, correlationId } as { messageId?: string; correlationId?: string };
            const message = { type: 'Do', key, actions: [] } as const;
            const outcome = await staged((em) => runtime.stageDelivery(em, scriptedSaga, message, { ...ids, ...time } as never));
            const handled = await outcomeOf(runtime.handle(scriptedSaga, message, ids));
            // The same checks as handle() first, then the delivery time, checked as a timer's due time.
            const timing = 'delay' in time && 'notBefore' in time ? 'OPTION_INVALID' : await timerCode(runtime, time);
            expect(codeOf(outcome), String(!outcome.ok && outcome.error)).toBe(handled.ok ? timing : codeOf(handled));
            if (outcome.ok) {
              const { delay: after, notBefore } = time as { delay?: unknown; notBefore?: Date };
              const expected = notBefore ?? new Date(clock.now().getTime() + (after === undefined ? 0 : msOf(after)));
              expect(outcome.value.availableAt.getTime()).toBe(expected.getTime());
              const row = await db().orm.em.fork().findOneOrFail(SagaInbox, { id: outcome.value.id });
              expect({ messageId: row.messageId, availableAt: row.availableAt.getTime() }).toEqual({
                messageId: messageId ?? null,
                availableAt: Math.trunc(expected.getTime()),
              });
            } else {
              expect(await counts()).toEqual(before);
            }
          }),
          { numRuns: RUNS },
        );
      },
      TIMEOUT_MS,
    );

    it(
      "an application's outgoing message of any shape: refused as ctx.send() refuses it; accepted, stored as JSON reads it back",
      async () => {
        const { runtime } = setup();
        const key = uniqueKey('send');
        await runtime.handle(scriptedSaga, { type: 'Start', key });
        const orderingKey = fc.option(fc.oneof(nastyString, longString, scalar), { nil: undefined });
        await fc.assert(
          fc.asyncProperty(payload, headers, orderingKey, async (data, extraHeaders, ordering) => {
            const before = await counts();
            const message = { type: 'M', data };
            const outcome = await staged((em) =>
              runtime.stageMessage(em, message as never, { headers: extraHeaders as never, orderingKey: ordering as never }),
            );
            if (outcome.ok) {
              const row = await db().orm.em.fork().findOneOrFail(SagaOutbox, { id: outcome.value.id });
              expect(row.payload).toEqual(JSON.parse(JSON.stringify(message)));
              expect(row).toMatchObject({ sagaType: '', messageType: 'M', headers: { ...extraHeaders } });
            } else {
              expect(await counts()).toEqual(before);
            }
            const send: Action = { op: 'send', message: message as never, headers: extraHeaders as never };
            const sent = await outcomeOf(runtime.handle(scriptedSaga, { type: 'Do', key, actions: [send] }));
            const orderingRefused = ordering !== undefined && nameProblem(ordering, { maxLength: 200 }) !== undefined;
            // The message and its headers first, as ctx.send() checks them; then the ordering key.
            expect(codeOf(outcome), String(!outcome.ok && outcome.error)).toBe(
              sent.ok && orderingRefused ? 'OPTION_INVALID' : codeOf(sent),
            );
          }),
          { numRuns: RUNS },
        );
      },
      TIMEOUT_MS,
    );
  });
}

/** The code a timer scheduled at `time` would fail with, or 'ok' (the probe's step throws after it: nothing is written). */
async function timerCode(runtime: SagaRuntime, time: { delay?: unknown; notBefore?: Date }): Promise<string> {
  if (time.delay === undefined && time.notBefore === undefined) return 'ok';
  const when = time.notBefore ?? time.delay;
  const outcome = await outcomeOf(runtime.handle(timerProbe, { type: 'Schedule', key: uniqueKey('timer'), when }));
  if (!outcome.ok && (outcome.error as Error).message === SCHEDULED) return 'ok';
  return codeOf(outcome);
}

function msOf(value: unknown): number {
  if (typeof value === 'number') return value;
  const units: Record<string, number> = { days: 86_400_000, hours: 3_600_000, minutes: 60_000, seconds: 1_000, milliseconds: 1 };
  return Object.entries(value as Record<string, number>).reduce((sum, [unit, n]) => sum + (n ?? 0) * (units[unit] ?? 0), 0);
}
