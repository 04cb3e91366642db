// A pass whose timer claim failed but whose outbox claim published rows reaches "only stamps left": the loop must
// still report the failure at once, back off like after any failed pass and count its failures in a row, rather than
// start the next pass at once (while outbox rows keep coming, a database fault on the timers would be retried without
// pause, one error log per pass).
import { afterEach, describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`dispatcher loop: a failed pass that published outbox rows (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const dispatchers: SagaDispatcher[] = [];
    afterEach(async () => {
      await Promise.all(dispatchers.splice(0).map((d) => d.stop()));
    });

    it('backs off like any failed pass, its failures counted in a row', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      for (let n = 0; n < 3; n++) {
        await runtime.handle(scriptedSaga, {
          type: 'Start',
          key: uniqueKey(`backoff-${n}`),
          actions: [{ op: 'send', message: { type: 'Hello', n } }],
        });
        clock.advance({ seconds: 1 });
      }
      const published: string[] = [];
      const dispatcher = new SagaDispatcher({
        runtime,
        logger: silentLogger,
        batchSize: 1,
        pollIntervalMs: 1_000,
        dbRetryMaxMs: 60_000,
        verifySchema: false,
        publish: async (envelope) => void published.push(envelope.id),
      });
      dispatchers.push(dispatcher);
      const claimedAt: number[] = [];
      dispatcher.on('claimed', (claim) => {
        if (claim.table === 'saga_outbox') claimedAt.push(claim.at.getTime());
      });
      const failures: number[] = [];
      let third!: () => void;
      const thirdFailure = new Promise<void>((resolve) => {
        third = resolve;
      });
      dispatcher.on('passFailed', (_error, n) => {
        failures.push(n);
        // The loop waits its backoff on the clock: moving it by that much wakes it (a late report just moves time).
        clock.advance(1_000 * 2 ** (n - 1));
        if (failures.length === 3) third();
      });
      const em = db().orm.em;
      await em.getConnection().execute('alter table "saga_timer" rename to "saga_timer_away"');
      try {
        dispatcher.start();
        await thirdFailure;
      } finally {
        await em.getConnection().execute('alter table "saga_timer_away" rename to "saga_timer"');
      }
      await dispatcher.stop();
      expect(published).toHaveLength(3);
      expect(failures.slice(0, 3)).toEqual([1, 2, 3]);
      // Each pass after a failed one claims only once its backoff passed on the clock.
      expect(claimedAt.slice(0, 3)).toEqual([...new Set(claimedAt.slice(0, 3))].sort((a, b) => a - b));
    });
  });
}
