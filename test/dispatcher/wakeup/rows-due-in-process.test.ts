// A loop waiting after an empty pass claims at once the rows a unit of work of its own runtime commits due at once
// (an outbox message, a timer due now), instead of at its next poll; rows due later still wait for the poll.
// 'drained' tells a loop that waits with nothing in flight from one whose overtaken pass still delivers.
// Time only moves when a test moves the clock: none of these waits is a poll interval. The loops do not LISTEN
// (`listen: false`): wakes through PostgreSQL's NOTIFY are pinned in rows-due-in-other-processes.test.ts.
import { describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaRuntime, silentLogger } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { rowsOf } from '../../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

const POLL_MS = 10_000;

for (const dialect of DIALECTS) {
  describe(`rows due at once wake the loop (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    /** A running loop on `runtime` at its first 'idle'; each published envelope is pushed to `published`. */
    async function idleLoop(runtime: SagaRuntime, clock: FakeClock, published: OutboxEnvelope[], onPublish?: () => Promise<void>) {
      const dispatcher = new SagaDispatcher({
        runtime,
        clock,
        logger: silentLogger,
        pollIntervalMs: POLL_MS,
        listen: false,
        publish: async (envelope) => {
          published.push(envelope);
          await onPublish?.();
        },
      });
      const idle = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
      dispatcher.start();
      await idle;
      return dispatcher;
    }

    it('a message a step of this runtime sends is published at once, though the poll interval has not passed', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const published: OutboxEnvelope[] = [];
      const dispatcher = await idleLoop(runtime, clock, published);
      const relayed = new Promise<void>((resolve) => dispatcher.on('pass', (pass) => pass.outbox.published > 0 && resolve()));
      const at = clock.now().getTime();
      await runtime.handle(scriptedSaga, { type: 'Start', key: uniqueKey('wake'), actions: [{ op: 'send', message: { type: 'Hello' } }] });
      await relayed;
      expect(published.map((envelope) => envelope.type)).toEqual(['Hello']);
      expect(clock.now().getTime()).toBe(at);
      expect((await rowsOf(db().orm).outbox()).filter((row) => row.messageType === 'Hello')).toMatchObject([{ outcome: 'published' }]);
      await dispatcher.stop();
    });

    it('a timer due at once fires at once; one due later waits for the clock, and a runtime of its own wakes no loop', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const ticking = scriptedSaga;
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [ticking], clock });
      const dispatcher = await idleLoop(runtime, clock, []);
      const fired = () => new Promise<void>((resolve) => dispatcher.on('pass', (pass) => pass.timers.fired > 0 && resolve()));
      const firedNow = fired();
      const idleAgain = firedNow.then(() => new Promise<void>((resolve) => dispatcher.on('idle', resolve)));
      const now = await runtime.handle(ticking, {
        type: 'Start',
        key: uniqueKey('wake'),
        actions: [{ op: 'schedule', name: 'now', after: 0 }],
      });
      await idleAgain;
      const later = await runtime.handle(ticking, {
        type: 'Start',
        key: uniqueKey('wake'),
        actions: [{ op: 'schedule', name: 'soon', after: 1_000 }],
      });
      // Another runtime of the process (another app component) writes a message: no loop on it hears of that.
      const elsewhere = new SagaRuntime({ em: db().orm.em, sagas: [ticking], clock });
      await elsewhere.handle(ticking, { type: 'Start', key: uniqueKey('wake'), actions: [{ op: 'send', message: { type: 'Quiet' } }] });
      const rows = rowsOf(db().orm);
      expect((await rows.timers({ sagaId: (now as { sagaId: string }).sagaId }))[0]).toMatchObject({ outcome: 'fired' });
      expect((await rows.timers({ sagaId: (later as { sagaId: string }).sagaId }))[0]).toMatchObject({ outcome: null });
      expect((await rows.outbox()).filter((row) => row.messageType === 'Quiet')).toMatchObject([{ outcome: null }]);
      const firedLater = fired();
      clock.advance(POLL_MS);
      await firedLater;
      expect((await rows.timers({ sagaId: (later as { sagaId: string }).sagaId }))[0]).toMatchObject({ outcome: 'fired' });
      await dispatcher.stop();
    });

    it("'drained' comes once the publish an overtaken pass waits on ends, after that loop's 'idle'", async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const gate = deferred();
      const entered = deferred();
      const published: OutboxEnvelope[] = [];
      const events: string[] = [];
      const dispatcher = await idleLoop(runtime, clock, published, async () => {
        entered.resolve();
        await gate.promise;
      });
      dispatcher.on('idle', () => events.push('idle'));
      dispatcher.on('drained', () => events.push('drained'));
      await runtime.handle(scriptedSaga, { type: 'Start', key: uniqueKey('wake'), actions: [{ op: 'send', message: { type: 'Slow' } }] });
      await entered.promise;
      // A poll interval with the publish hanging: the loop overtakes the pass, finds nothing more and waits.
      const idleAgain = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
      clock.advance(POLL_MS);
      await idleAgain;
      expect(events).toEqual(['idle']);
      const drained = new Promise<void>((resolve) => dispatcher.on('drained', resolve));
      gate.resolve();
      await drained;
      expect(events).toEqual(['idle', 'drained']);
      expect((await rowsOf(db().orm).outbox()).filter((row) => row.messageType === 'Slow')).toMatchObject([{ outcome: 'published' }]);
      await dispatcher.stop();
    });
  });
}
