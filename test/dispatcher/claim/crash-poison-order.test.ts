// A row whose last delivery died with its dispatcher (last_error 'LeaseExpired: ...') is delivered alone, and the
// later rows of its saga wait behind it: timers (queued in batch order) and outbox rows (whose claim, with an idle
// pool, marks started only the sagas without such a row; their lanes go ahead, this saga's rows queue behind).
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../../src/index.js';
import { LEASE_EXPIRED_ERROR } from '../../../src/sql/dispatch-tables.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`a crash-poison row and its saga's later rows (${dialect})`, () => {
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
