// The staged deliveries due and not yet delivered are a backlog an operator watches like the timers' and the outbox's:
// the gauge saga.inbox.backlog reports them from the database, on every database. It counts the rows held behind
// their saga's first one too (each is a delivery still to make), not those due later, and not those that left the
// pending set (delivered, ignored, dead-lettered).
import { describe, expect, it } from 'vitest';
import { SAGA_GAUGES, SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { SagaGauges } from '../../src/telemetry/saga-gauges.js';
import { drainDueTimers, FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { clearStagedRows } from '../support/staged-rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';
import { useTelemetry } from '../support/telemetry.js';

const telemetry = useTelemetry();

for (const dialect of DIALECTS) {
  describe(`the backlog of staged deliveries is a gauge (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('saga.inbox.backlog counts the staged deliveries due and not delivered, those held behind their saga included', async () => {
      await clearStagedRows(db().orm);
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, backoff: { jitter: false, baseMs: 60_000 } });
      const gauges = new SagaGauges({ db: runtime.context, sagas: runtime.gaugedSagas(), clock, logger: silentLogger, cacheMs: 1 });
      const [held, free] = [uniqueKey('held'), uniqueKey('free')];
      await db()
        .orm.em.fork()
        .transactional(async (em) => {
          // A saga whose first delivery fails and backs off, holding the two after it; another saga's delivery; one due later.
          runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key: held, actions: [{ op: 'throw', message: 'poison' }] });
          runtime.stageDelivery(em, scriptedSaga, { type: 'Do', key: held, actions: [{ op: 'inc' }] });
          runtime.stageDelivery(em, scriptedSaga, { type: 'Do', key: held, actions: [{ op: 'inc' }] });
          runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key: free });
          runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key: uniqueKey('later') }, { delay: { hours: 1 } });
        });
      gauges.start();
      try {
        const before = await telemetry().collect();
        expect(before.gauge(SAGA_GAUGES.inboxBacklog)).toBe(4);
        expect(before.descriptor(SAGA_GAUGES.inboxBacklog)).toMatchObject({ unit: '{delivery}' });

        // The free saga's delivery is delivered; the held saga's first one failed and backs off, still due later.
        expect((await drainDueTimers(dispatcher)).inbox).toMatchObject({ delivered: 1, failed: 1 });
        clock.advance(1);
        expect((await telemetry().collect()).gauge(SAGA_GAUGES.inboxBacklog)).toBe(2);

        // An hour on: the delayed one is due, and the failed one too.
        clock.advance({ hours: 1 });
        expect((await telemetry().collect()).gauge(SAGA_GAUGES.inboxBacklog)).toBe(4);
      } finally {
        gauges.stop();
      }
    });
  });
}
