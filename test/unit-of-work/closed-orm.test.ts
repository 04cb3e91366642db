// orm.close() while handle() calls or a dispatcher are in flight: every call settles at once with ORM_CLOSED (not
// after the pool's acquire timeout), nothing is half-written, and dispatcher.stop() returns without its stopTimeoutMs.
import type { MikroORM, Options } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, SagaDispatcher, SagaPersistenceError, SagaRuntime } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { FlushHold } from '../support/flush-hold.js';
import { gatedSaga } from '../support/gated-saga.js';
import { rowsOf } from '../support/rows.js';
import { StepGate } from '../support/step-gate.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

/** How long a call may take to settle once the ORM is closed: far below the pool's 60 s acquire timeout. */
const PROMPT_MS = 2_000;

/** What `promise` settled with, or a failure when it is still pending after `ms` of real time. */
async function settledWithin<T>(promise: Promise<T>, ms = PROMPT_MS): Promise<{ value?: T; error?: unknown }> {
  let timeout: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timeout = setTimeout(() => reject(new Error(`still pending ${ms} ms after orm.close()`)), ms);
  });
  const settled = promise.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
  try {
    return await Promise.race([settled, late]);
  } finally {
    clearTimeout(timeout);
  }
}

const CLOSED_FIRST_CLAUSE = /^Saga scripted(\/[0-9a-f-]+)?: the MikroORM instance was closed \(orm\.close\(\)\) before 'Do' was handled/;

function expectOrmClosed(error: unknown): void {
  expect(error).toBeInstanceOf(SagaPersistenceError);
  expect(error).toMatchObject({ code: 'ORM_CLOSED', details: { sagaType: 'scripted', messageType: 'Do' } });
  expect((error as Error).message).toMatch(CLOSED_FIRST_CLAUSE);
  expect((error as Error).message).toContain('nothing of it was written');
}

for (const dialect of DIALECTS) {
  describe(`orm.close() with work in flight (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const opened: MikroORM[] = [];
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close();
    });
    async function openOwn(overrides: Partial<Options> = {}) {
      const orm = await db().openAnother(overrides);
      opened.push(orm);
      return orm;
    }
    async function started(orm: MikroORM, gate = new StepGate(1)) {
      const saga = gatedSaga(gate);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [saga], clock: new FakeClock() });
      const key = uniqueKey('closing');
      await runtime.handle(saga, { type: 'Start', key });
      return { saga, runtime, key, gate };
    }

    it('a handle() whose step runs when orm.close() is called settles at once with ORM_CLOSED and writes nothing', async () => {
      const orm = await openOwn();
      const { saga, runtime, key, gate } = await started(orm);
      const inFlight = settledWithin(runtime.handle(saga, { type: 'Do', key, gated: true, inc: 1 }), 60_000);
      await gate.all.promise;
      await orm.close();
      gate.go.resolve();
      const { error } = await settledWithin(inFlight.then((outcome) => (outcome.error ? Promise.reject(outcome.error) : outcome)));
      expectOrmClosed(error);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 0, version: 0 });
    });

    it('a handle() after orm.close() settles at once with ORM_CLOSED and does not connect again', async () => {
      const orm = await openOwn();
      const { saga, runtime, key } = await started(orm);
      await orm.close();
      const { error } = await settledWithin(runtime.handle(saga, { type: 'Do', key, inc: 1 }));
      expectOrmClosed(error);
      // MikroORM 7 would build a new pool for the next statement; none was sent.
      expect(await orm.isConnected()).toBe(false);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 0, version: 0 });
    });

    it('a handle() waiting for a connection when orm.close() is called settles at once; the unit holding it commits whole or not at all', async () => {
      const orm = await openOwn(dialect === 'postgresql' ? { pool: { min: 0, max: 1 } } : {});
      const hold = new FlushHold();
      orm.em.getEventManager().registerSubscriber(hold);
      const { saga, runtime, key } = await started(orm);
      const other = uniqueKey('waiting');
      await runtime.handle(saga, { type: 'Start', key: other });
      // The unit of `key` holds the only connection in its transaction, at its flush; the unit of `other` waits for it.
      const holder = hold.arm(key);
      const holding = settledWithin(runtime.handle(saga, { type: 'Do', key, inc: 1, schedule: 'later' }), 60_000);
      await holder.reached.promise;
      const waiting = runtime.handle(saga, { type: 'Do', key: other, inc: 1 });
      const closing = orm.close();
      const { error } = await settledWithin(waiting);
      expectOrmClosed(error);
      holder.release.resolve();
      await settledWithin(closing);
      const held = await holding;
      const rows = rowsOf(db().orm);
      const saga1 = await rows.saga(key);
      // Committed before the close ended (the pool waits for the connection in use), or refused whole.
      if (held.error === undefined) expect(saga1).toMatchObject({ counter: 1, version: 1 });
      else {
        expectOrmClosed(held.error);
        expect(saga1).toMatchObject({ counter: 0, version: 0 });
      }
      expect(await rows.pendingTimers(saga1!.id)).toHaveLength(held.error === undefined ? 1 : 0);
      expect(await rows.saga(other)).toMatchObject({ counter: 0, version: 0 });
    });

    it('dispatcher.stop() after orm.close() returns at once, logs what it left, and the delivery in flight writes nothing', async () => {
      const orm = await openOwn();
      const clock = new FakeClock();
      const gate = new StepGate(1);
      const saga = defineSaga<ScriptedSaga, { type: 'Start'; key: string } | { type: 'Do'; key: string }>({
        name: 'scripted',
        state: ScriptedSaga,
        correlation: { property: 'key', from: { Start: (m) => m.key, Do: (m) => m.key } },
        startedBy: ['Start'],
        steps: {
          Start: (_state, message, ctx) => ctx.schedule('wake', { minutes: 1 }, { type: 'Do', key: message.key }),
          Do: async (state) => {
            await gate.enter();
            state.counter++;
          },
        },
      });
      const runtime = new SagaRuntime({ em: orm.em, sagas: [saga], clock });
      const key = uniqueKey('dispatching');
      const { sagaId } = await runtime.handle(saga, { type: 'Start', key });
      clock.advance({ minutes: 2 });
      const errors: [string, Record<string, unknown> | undefined][] = [];
      const logger = {
        debug() {},
        info() {},
        warn() {},
        error: (line: string, fields?: Record<string, unknown>) => void errors.push([line, fields]),
      };
      const dispatcher = new SagaDispatcher({ runtime, clock, logger, stopTimeoutMs: 60_000 });
      dispatcher.start();
      await gate.all.promise;
      await orm.close();
      const stopped = await settledWithin(dispatcher.stop());
      expect(stopped.error).toBeUndefined();
      expect(dispatcher.running).toBe(false);
      expect(errors).toContainEqual([
        expect.stringMatching(/^dispatcher stop\(\): the ORM was closed \(orm\.close\(\)\) before the dispatcher stopped/),
        { deliveriesInFlight: expect.any(Number), outcomesUnwritten: 0 },
      ]);
      expect(errors.find(([line]) => line.includes('the ORM was closed'))![1]!.deliveriesInFlight).toBeGreaterThan(0);
      gate.go.resolve();
      const rows = rowsOf(db().orm);
      expect(await rows.saga(key)).toMatchObject({ counter: 0, version: 0 });
      expect(await rows.pendingTimers(sagaId!)).toHaveLength(1);
    });
  });
}
