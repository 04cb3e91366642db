// A resting table behind a hung delivery. docs/timers.md promises that a row that becomes due in the resting table
// "waits at most about a poll interval, as with the loop idle", and that "one hanging step or publish delays other due
// rows by at most a poll interval". Combined: a pass that starts just before a table's rest ends skips that table; when
// that pass hangs on a delivery, the due row must still be claimed within about a poll interval of its due time, not
// ~2 poll intervals later, once the loop overtakes the hung pass.
// The tests stop the clock at due + pollIntervalMs + 500 ms and wait for the due row to be claimed (an event of the
// dispatcher, never a wall-clock wait).
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga, scriptedSagaWithTick } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

const POLL_MS = 5_000;

for (const dialect of DIALECTS) {
  describe(`a resting table behind a hung delivery (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('a timer due while the timers rest is claimed within about a poll interval, though the pass that skipped them hangs on a publish', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const seeding = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      await seeding.handle(scriptedSaga, { type: 'Start', key: uniqueKey('rest'), actions: [{ op: 'send', message: { type: 'Out' } }] });
      clock.advance(1);
      await seeding.handle(scriptedSaga, { type: 'Start', key: uniqueKey('rest'), actions: [{ op: 'send', message: { type: 'Hang' } }] });
      clock.advance(1);
      const timerKey = uniqueKey('rest');
      await seeding.handle(scriptedSaga, { type: 'Start', key: timerKey, actions: [{ op: 'schedule', name: 'later', after: 1_000 }] });
      const t0 = clock.now().getTime();
      const dueAt = t0 + 1_000;

      const entered = deferred();
      const gate = deferred();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({
        runtime,
        clock,
        logger: silentLogger,
        pollIntervalMs: POLL_MS,
        batchSize: 1,
        concurrency: 4,
        deliveryTimeoutMs: 600_000,
        leaseMs: 600_000,
        publish: async (envelope) => {
          // The first message's publish moves the clock to just before the timers' rest ends (the timer is due by
          // then); the next pass skips the timers and hangs on the second message.
          if (envelope.type === 'Out') clock.advance(POLL_MS - 1);
          if (envelope.type === 'Hang') {
            entered.resolve();
            await gate.promise;
          }
        },
      });
      const timerClaims: number[] = [];
      const timerClaimed = deferred();
      dispatcher.on('claimed', (event) => {
        if (event.table !== 'saga_timer') return;
        timerClaims.push(event.at.getTime());
        timerClaimed.resolve();
      });
      dispatcher.start();
      try {
        await entered.promise;
        // The timer has been due for a poll interval and a half; the timers' claim that found nothing is more than
        // a poll interval old; a delivery slot is free.
        clock.set(new Date(dueAt + POLL_MS + 500));
        await timerClaimed.promise;
        expect(timerClaims[0]! - dueAt).toBeLessThanOrEqual(POLL_MS + 500);
      } finally {
        // Let the loop go on so it stops cleanly.
        clock.advance(POLL_MS * 3);
        gate.resolve();
        await dispatcher.stop();
      }
    });

    it('an app message sent while the outbox rests is published within about a poll interval, though the pass that skipped it hangs on a timer step', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const entered = deferred();
      const gate = deferred();
      const hanging = scriptedSagaWithTick(async (saga, message) => {
        // 'first' fails (a fired timer would end the outbox's rest): it only moves the clock.
        if (message.label === 'first') {
          clock.advance(POLL_MS - 1);
          throw new Error('first fails');
        }
        if (message.label === 'hang') {
          entered.resolve();
          await gate.promise;
        }
        saga.log += `tick:${message.label};`;
      });
      const seeding = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      await seeding.handle(scriptedSaga, { type: 'Start', key: uniqueKey('rest'), actions: [{ op: 'schedule', name: 'first', after: 0 }] });
      clock.advance(1);
      await seeding.handle(scriptedSaga, { type: 'Start', key: uniqueKey('rest'), actions: [{ op: 'schedule', name: 'hang', after: 0 }] });
      clock.advance(1);
      const t0 = clock.now().getTime();
      // App code (another process, its clock a millisecond ahead) sends a message that becomes due at t0 + 1: just
      // after the first pass found the outbox empty.
      const dueAt = t0 + 1;
      const app = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock(new Date(dueAt)) });
      await app.handle(scriptedSaga, { type: 'Start', key: uniqueKey('rest'), actions: [{ op: 'send', message: { type: 'App' } }] });

      const published: number[] = [];
      const firstPublished = deferred();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [hanging], clock });
      const dispatcher = new SagaDispatcher({
        runtime,
        clock,
        logger: silentLogger,
        pollIntervalMs: POLL_MS,
        batchSize: 1,
        concurrency: 4,
        deliveryTimeoutMs: 600_000,
        leaseMs: 600_000,
        backoff: { baseMs: 600_000, jitter: false },
        publish: async () => {
          published.push(clock.now().getTime());
          firstPublished.resolve();
        },
      });
      dispatcher.start();
      try {
        // Pass 1 (t0): outbox empty (rests from t0); 'first' moves the clock to t0 + poll - 1 and fails (no timer
        // fired: the rest holds). Pass 2 skips the outbox and hangs on 'hang'.
        await entered.promise;
        expect(clock.now().getTime()).toBe(t0 + POLL_MS - 1);
        // The message has been due for a poll interval and a half, the outbox's empty claim is older than a poll
        // interval, and delivery slots are free.
        clock.set(new Date(dueAt + POLL_MS + 500));
        await firstPublished.promise;
        expect(published[0]! - dueAt).toBeLessThanOrEqual(POLL_MS + 500);
      } finally {
        clock.advance(POLL_MS * 3);
        gate.resolve();
        await dispatcher.stop();
      }
    });
  });
}
