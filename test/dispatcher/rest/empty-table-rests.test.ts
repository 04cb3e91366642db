// The loop claims a table whose last claim came back empty again only after a poll interval while the other table
// keeps it busy (docs/timers.md, "The loop"): a busy relay sends no timer claim per pass, yet a timer that becomes
// due meanwhile fires a poll interval later at most, a message a fired timer sends goes out with the next pass,
// and the loop is idle only after a pass that claimed every table. Time only moves when a test moves the clock.
import { describe, expect, it } from 'vitest';
import { type DispatchPassResult, SagaDispatcher, SagaRuntime, silentLogger } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { claimCounter } from '../../support/claim-counter.js';
import { DIALECTS } from '../../support/databases.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

const POLL_MS = 5_000;

for (const dialect of DIALECTS) {
  describe(`the loop leaves an empty table at rest for a poll interval (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    /** A loop on an ORM of its own whose claim statements are counted per table; `run` resolves at its first idle. */
    const loop = async (clock: FakeClock, publish: (envelope: { type: string }) => void) => {
      const { claims, onQuery } = claimCounter();
      const orm = await db().openAnother({ onQuery });
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({
        runtime,
        clock,
        logger: silentLogger,
        pollIntervalMs: POLL_MS,
        batchSize: 2,
        concurrency: 2,
        publish: async (envelope) => publish(envelope),
      });
      const passes: DispatchPassResult[] = [];
      dispatcher.on('pass', (pass) => passes.push(pass));
      const run = async () => {
        const idle = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
        dispatcher.start();
        await idle;
        await dispatcher.stop();
      };
      return { claims, passes, run };
    };

    it('a busy relay claims no timers per pass; a timer due meanwhile fires once a poll interval has passed', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const seeding = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const timerKey = uniqueKey('rest');
      await seeding.handle(scriptedSaga, { type: 'Start', key: timerKey, actions: [{ op: 'schedule', name: 'later', after: 1_000 }] });
      for (let n = 0; n < 8; n++) {
        await seeding.handle(scriptedSaga, {
          type: 'Start',
          key: uniqueKey('rest'),
          actions: [{ op: 'send', message: { type: 'Out', n } }],
        });
      }
      let published = 0;
      // The second message's publish moves the clock a poll interval on: the timer is due, and the timers' claim
      // that found nothing at the first pass is a poll interval old.
      const { claims, passes, run } = await loop(clock, () => {
        if (++published === 2) clock.advance(POLL_MS);
      });
      await run();

      expect(published).toBe(8);
      expect(await rowsOf(db().orm).saga(timerKey)).toMatchObject({ log: 'started;tick:later;' });
      // The timer fired in a pass that still relayed messages, not after the relay ran dry (a pass reports when its
      // published stamps are written, so reports may come out of order).
      const firedIn = passes.filter((pass) => pass.timers.fired === 1);
      expect(firedIn).toHaveLength(1);
      expect(firedIn[0]!.outbox.claimed).toBeGreaterThan(0);
      // The timers were claimed in the first pass (nothing due), in a pass after the clock moved (the timer), and
      // in the passes claiming every table once the relay ran dry (the last one idle): fewer than the outbox,
      // claimed in every pass.
      expect(claims.saga_outbox).toBe(passes.length);
      expect(claims.saga_timer).toBeGreaterThanOrEqual(3);
      expect(claims.saga_timer).toBeLessThan(claims.saga_outbox - 1);
    });

    it('a message a fired timer sends is published by the next pass, though the outbox was found empty', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const seeding = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      // Timers due now on 6 sagas, 2 claimed per pass: the first pass's first timer sends a message.
      await seeding.handle(scriptedSaga, {
        type: 'Start',
        key: uniqueKey('rest'),
        actions: [
          {
            op: 'schedule',
            name: 'first',
            after: 0,
            message: { type: 'Tick', label: 'first', actions: [{ op: 'send', message: { type: 'Out' } }] },
          },
        ],
      });
      clock.advance(1);
      for (let n = 0; n < 5; n++) {
        await seeding.handle(scriptedSaga, {
          type: 'Start',
          key: uniqueKey('rest'),
          actions: [{ op: 'schedule', name: 'tick', after: 0 }],
        });
      }
      clock.advance(1);
      const { passes, run } = await loop(clock, () => undefined);
      await run();

      expect(passes.reduce((sum, pass) => sum + pass.timers.fired, 0)).toBe(6);
      // Published by a pass that fired timers too (the second of three), not once the timers ran dry.
      const publishedIn = passes.filter((pass) => pass.outbox.published === 1);
      expect(publishedIn).toHaveLength(1);
      expect(publishedIn[0]!.timers.fired).toBe(2);
    });
  });
}
