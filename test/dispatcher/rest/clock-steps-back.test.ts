// A table's rest ends when the dispatcher's clock steps back. The loop keeps a table unclaimed while
// `now - foundEmptyAt < pollIntervalMs`; the default clock is the wall clock (`new Date()`), which steps back (NTP step
// at boot, VM resumed or migrated, an operator setting the time): measured naively, a resting table would stay
// unclaimed for the size of the step plus a poll interval, as long as the other table keeps the loop busy.
// Here an outbox backlog keeps the relay busy (each publish takes 500 ms of the clock); the clock steps back an hour
// while the timers rest; app code then schedules a timer due at once. It fires within about a poll interval ("a row
// that becomes due in the resting table waits at most about a poll interval", docs/timers.md).
import { describe, expect, it } from 'vitest';
import { type Clock, SagaDispatcher, SagaRuntime, silentLogger } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

const POLL_MS = 5_000;
const HOUR = 3_600_000;

/** The fake clock, seen through an offset: `back` ms behind it (a wall clock stepped back). */
class SteppedClock implements Clock {
  back = 0;
  constructor(readonly fake: FakeClock) {}
  now(): Date {
    return new Date(this.fake.now().getTime() - this.back);
  }
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return this.fake.sleep(ms, signal);
  }
}

for (const dialect of DIALECTS) {
  describe(`a resting table when the clock steps back (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('a timer due at once, scheduled after the clock stepped back, fires within about a poll interval while the outbox is busy', async () => {
      const fake = new FakeClock('2026-01-05T09:00:00.000Z');
      const clock = new SteppedClock(fake);
      // The backlog was sent three hours ago: due by the clock stepped back too.
      const seeding = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock('2026-01-05T06:00:00.000Z') });
      for (let n = 0; n < 40; n++) {
        await seeding.handle(scriptedSaga, {
          type: 'Start',
          key: uniqueKey('rest'),
          actions: [{ op: 'send', message: { type: 'Out', n } }],
        });
      }
      const stepped = deferred();
      const scheduled = deferred();
      let published = 0;
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({
        runtime,
        clock,
        logger: silentLogger,
        pollIntervalMs: POLL_MS,
        batchSize: 2,
        concurrency: 2,
        publish: async () => {
          fake.advance(500);
          if (++published === 3) {
            // The wall clock steps back an hour; the loop waits until app code scheduled its timer.
            clock.back = HOUR;
            stepped.resolve();
            await scheduled.promise;
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
        await stepped.promise;
        const app = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
        const timerKey = uniqueKey('rest');
        const dueAt = clock.now().getTime();
        await app.handle(scriptedSaga, { type: 'Start', key: timerKey, actions: [{ op: 'schedule', name: 'soon', after: 0 }] });
        scheduled.resolve();
        await timerClaimed.promise;
        // Claimed within about a poll interval of the dispatcher's clock after it was due (the backlog of 37
        // messages left takes ~18 s of that clock).
        expect(timerClaims[0]! - dueAt).toBeLessThanOrEqual(POLL_MS + 1_000);
      } finally {
        scheduled.resolve();
        await dispatcher.stop();
      }
    });
  });
}
