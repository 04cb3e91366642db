// Breaker: a row whose last delivery died with its dispatcher (last_error 'LeaseExpired: ...') is delivered alone,
// after the lanes in flight. The claim (and, for the outbox, the start-at-claim SQL, whose lanes are numbered
// after leaving such rows out) makes the saga's NEXT row the head of its lane, so it is delivered (and, for the
// outbox, marked started by the claim) before the older row of the same instance. docs/timers.md promises to mark
// "the first row of each saga instance in the batch", and the pool runs "the rows of one saga instance" in order.
// Timers (no start-at-claim, tasks queued in batch order) keep due order: the first test passes. The outbox with
// an idle pool (start-at-claim: SQL lanes numbered without the poison row, queueAhead putting the isolated task
// behind the reservation's lanes) publishes the later message first: the second test fails.
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../src/index.js';
import { LEASE_EXPIRED_ERROR } from '../src/sql/dispatch-statements.js';
import { FakeClock } from '../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from './fixtures/scripted-saga.js';
import { DIALECTS } from './support/databases.js';
import { rowsOf } from './support/rows.js';
import { uniqueKey, useDatabase } from './support/suite.js';

for (const dialect of DIALECTS) {
  describe(`breaker: a crash-poison row and its saga's later rows (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it("a saga's timers stay in due order when the earlier one is delivered alone", async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const key = uniqueKey('poison-timer');
      const started = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [
          { op: 'schedule', name: 'early', after: { seconds: 10 } },
          { op: 'schedule', name: 'late', after: { seconds: 20 } },
        ],
      });
      const sagaId = (started as { sagaId: string }).sagaId;
      await db()
        .orm.em.getConnection()
        .execute("update saga_timer set last_error = ? where saga_id = ? and name = 'early'", [LEASE_EXPIRED_ERROR, sagaId]);
      clock.advance({ seconds: 30 });
      const dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger, concurrency: 3 });
      await dispatcher.runOnce();
      expect((await rowsOf(db().orm).saga(key))!.log).toBe('started;tick:early;tick:late;');
    });

    it("a saga's outbox rows are published in order, and the claim marks the first, when the first is delivered alone", async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const key = uniqueKey('poison-outbox');
      const result = await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'send', message: { type: 'First' } }] });
      const sagaId = (result as { sagaId: string }).sagaId;
      clock.advance({ seconds: 1 });
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'send', message: { type: 'Second' } }] });
      await db()
        .orm.em.getConnection()
        .execute("update saga_outbox set last_error = ? where saga_id = ? and message_type = 'First'", [LEASE_EXPIRED_ERROR, sagaId]);
      const published: string[] = [];
      const dispatcher = new SagaDispatcher({
        runtime,
        clock,
        logger: silentLogger,
        concurrency: 3,
        publish: async (envelope) => {
          published.push(envelope.type);
        },
      });
      await dispatcher.runOnce();
      expect(published).toEqual(['First', 'Second']);
    });
  });
}
