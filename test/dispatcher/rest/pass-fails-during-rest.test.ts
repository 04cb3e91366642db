// A pass that fails (the database refuses every statement) while the timers rest behind a busy relay.
// The loop must back off (a poll interval for the first failure) rather than retry at once, send no statement while
// it waits, and once the database is back fire the timer that became due during the rest and publish the rest.
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

const POLL_MS = 5_000;

for (const dialect of DIALECTS) {
  describe(`a pass failing during a rest (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('backs off, sends nothing while it waits, then fires the due timer and publishes every message', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const seeding = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      for (let n = 0; n < 4; n++) {
        await seeding.handle(scriptedSaga, {
          type: 'Start',
          key: uniqueKey('rest'),
          actions: [{ op: 'send', message: { type: `Out${n}` } }],
        });
      }
      const timerKey = uniqueKey('rest');
      await seeding.handle(scriptedSaga, { type: 'Start', key: timerKey, actions: [{ op: 'schedule', name: 'later', after: 1_000 }] });
      let down = false;
      let statementsWhileDown = 0;
      const orm = await db().openAnother({
        onQuery: (sql: string) => {
          if (down) {
            statementsWhileDown++;
            return 'select * from saga_test_database_is_down';
          }
          return sql;
        },
      });
      const fired: number[] = [];
      const failures: number[] = [];
      const published: string[] = [];
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({
        runtime,
        clock,
        logger: silentLogger,
        pollIntervalMs: POLL_MS,
        batchSize: 1,
        concurrency: 2,
        publish: async (envelope) => {
          published.push(envelope.type);
          // The second message's publish: the timers rest (found empty at the start), the timer is due; the database goes away.
          if (published.length === 2) {
            clock.advance(2_000);
            down = true;
          }
        },
      });
      const failed = new Promise<void>((resolve) =>
        dispatcher.on('passFailed', (_e, n) => {
          failures.push(n);
          resolve();
        }),
      );
      dispatcher.on('claimed', (event) => {
        if (event.table === 'saga_timer') fired.push(event.at.getTime());
      });
      const idle = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
      dispatcher.start();
      try {
        await failed;
        const sent = statementsWhileDown;
        // Round trips of another connection let the loop's own I/O run meanwhile; the clock does not move, so a loop
        // waiting out its backoff sends nothing, where a spinning one would.
        for (let i = 0; i < 5; i++) await db().orm.em.fork().getConnection().execute('select 1');
        expect(statementsWhileDown).toBe(sent);
        expect(failures).toEqual([1]);
        down = false;
        clock.advance(POLL_MS);
        await idle;
      } finally {
        down = false;
        await dispatcher.stop();
        await orm.close();
      }
      expect(fired.length).toBe(1);
      expect([...published].sort()).toEqual(['Out0', 'Out1', 'Out2', 'Out3']);
    });
  });
}
