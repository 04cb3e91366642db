// The loop's resting table with a pool that has no room, and a stop() during the rest. The single
// delivery slot hangs on a publish, two claimed messages wait unstarted behind it, and the timers rest (their claim
// found nothing). The clock then passes several rest ends: the restLeftMs overtake fires each time, but with no room
// in the pool no further pass may start (no claim statement of either table piles up). stop() during the rest must
// resolve once the hung publish ends, giving back the two unstarted rows (not published, not leased) and stamping
// the one it published. Time moves only with the fake clock; the test waits on events and round trips, never on time.
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { claimCounter } from '../../support/claim-counter.js';
import { DIALECTS } from '../../support/databases.js';
import { drainContinuations } from '../../support/flush-hold.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

const POLL_MS = 5_000;

for (const dialect of DIALECTS) {
  describe(`stop() while a table rests and the pool has no room (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('no pass piles up over several rest ends; stop() resolves and releases the unstarted rows', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const seeding = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      for (const type of ['Hang', 'Wait1', 'Wait2']) {
        await seeding.handle(scriptedSaga, { type: 'Start', key: uniqueKey('rest'), actions: [{ op: 'send', message: { type } }] });
        clock.advance(1);
      }
      const { claims, onQuery, whenClaimed } = claimCounter();
      const orm = await db().openAnother({ onQuery });
      const entered = deferred();
      const gate = deferred();
      const published: string[] = [];
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({
        runtime,
        clock,
        logger: silentLogger,
        pollIntervalMs: POLL_MS,
        batchSize: 3,
        concurrency: 1,
        deliveryTimeoutMs: 600_000,
        leaseMs: 600_000,
        stopTimeoutMs: 3_600_000,
        publish: async (envelope) => {
          if (envelope.type === 'Hang') {
            entered.resolve();
            await gate.promise;
          }
          published.push(envelope.type);
        },
      });
      try {
        dispatcher.start();
        await entered.promise;
        await whenClaimed({ saga_timer: 1, saga_outbox: 1 });
        expect(claims).toEqual({ saga_timer: 1, saga_outbox: 1 });
        for (let n = 0; n < 6; n++) {
          clock.advance(POLL_MS / 2);
          // The loop, woken, decides at once; a claim it sent then goes before this round trip on its ORM.
          await drainContinuations();
          await orm.em.fork().getConnection().execute('select 1');
        }
        expect(claims).toEqual({ saga_timer: 1, saga_outbox: 1 });
        const stopping = dispatcher.stop();
        await drainContinuations();
        gate.resolve();
        await stopping;
      } finally {
        gate.resolve();
        clock.advance(POLL_MS * 10);
        await dispatcher.stop();
      }
      expect(published).toEqual(['Hang']);
      const rows = (await db()
        .orm.em.fork()
        .getConnection()
        .execute('select message_type as "type", locked_until as "lockedUntil", dispatched_at as "dispatchedAt" from saga_outbox')) as {
        type: string;
        lockedUntil: unknown;
        dispatchedAt: unknown;
      }[];
      const byType = Object.fromEntries(rows.map((r) => [r.type, { leased: r.lockedUntil !== null, sent: r.dispatchedAt !== null }]));
      expect(byType).toEqual({
        Hang: { leased: false, sent: true },
        Wait1: { leased: false, sent: false },
        Wait2: { leased: false, sent: false },
      });
      await orm.close();
    });
  });
}
