// Retention on every database: purge dispatched timers and outbox rows, completed sagas with their leftovers, and
// expired message ids, in bounded batches. Each test has a database of its own, so the counts a purge returns are
// exactly the rows the test wrote.
import { afterEach, describe, expect, it } from 'vitest';
import { type Duration, SagaDispatcher, SagaHandledMessage, SagaRuntime, silentLogger } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { type Action, failingTimer, ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { createTestDatabase, DIALECTS, type TestDatabase } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';

const YEAR: Duration = { days: 365 };
const HOUR_MS = 3_600_000;

for (const dialect of DIALECTS) {
  describe(`retention (${dialect})`, () => {
    let db: TestDatabase | undefined;
    afterEach(async () => {
      await db?.dispose();
      db = undefined;
    });
    const setup = async () => {
      db = await createTestDatabase(dialect, [ScriptedSaga]);
      const clock = new FakeClock('2026-01-05T09:00:00Z');
      const runtime = new SagaRuntime({ em: db.orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({
        runtime,
        logger: silentLogger,
        maxAttempts: 2,
        backoff: { baseMs: 1_000, maxMs: 1_000, jitter: false },
        publish: async (envelope) => {
          if (envelope.type === 'Refused') throw new Error('broker refused');
        },
      });
      const ops = new SagaOperations({ runtime });
      const start = async (key: string, actions: Action[] = []) =>
        (await runtime.handle(scriptedSaga, { type: 'Start', key, actions })).sagaId!;
      /** Two passes a second apart: due timers fire (or die), outbox rows are published (or die). */
      const twoPasses = async () => {
        clock.advance(1_000);
        await dispatcher.runOnce();
        clock.advance(1_000);
        await dispatcher.runOnce();
      };
      return { clock, runtime, ops, start, twoPasses, rows: rowsOf(db.orm) };
    };

    it('deletes dispatched timers and outbox rows before the cutoff; dead-lettered ones only when asked', async () => {
      const { clock, ops, start, twoPasses, rows } = await setup();
      const id = await start('k', [
        { op: 'schedule', name: 'fire', after: 1_000 },
        { op: 'schedule', name: 'later', after: YEAR },
        failingTimer('boom'),
        { op: 'send', message: { type: 'Hello' } },
        { op: 'send', message: { type: 'Refused' } },
      ]);
      const beforeDispatch = clock.now();
      await twoPasses();
      clock.advance({ days: 30 });
      expect(await ops.purge({ dispatchedBefore: beforeDispatch })).toMatchObject({ timers: 0, outbox: 0 });
      const kept = await ops.purge({ dispatchedBefore: new Date(clock.now().getTime() - HOUR_MS) });
      expect(kept).toEqual({ timers: 1, outbox: 1, inbox: 0, sagas: {}, messageIds: 0, batches: 3 });
      expect((await rows.timers({ sagaId: id })).map((t) => [t.name, t.outcome])).toEqual(
        expect.arrayContaining([
          ['later', null],
          ['boom', 'dead_lettered'],
        ]),
      );
      expect((await rows.outbox(id)).map((o) => [o.messageType, o.outcome])).toEqual([['Refused', 'dead_lettered']]);
      const all = await ops.purge({ dispatchedBefore: clock.now(), includeDeadLettered: true });
      expect(all).toMatchObject({ timers: 1, outbox: 1 });
      expect((await rows.timers({ sagaId: id })).map((t) => t.name)).toEqual(['later']);
      expect(await rows.outbox(id)).toEqual([]);
    });

    it('works in batches of batchSize, at most maxBatches per part', async () => {
      const { clock, ops, start, twoPasses, rows } = await setup();
      await start(
        'k',
        [1, 2, 3, 4, 5].map((n): Action => ({ op: 'schedule', name: `t${n}`, after: 1_000 })),
      );
      await twoPasses();
      clock.advance({ days: 1 });
      const first = await ops.purge({ dispatchedBefore: clock.now(), batchSize: 2, maxBatches: 2 });
      expect(first).toMatchObject({ timers: 4, outbox: 0, inbox: 0, batches: 4 });
      expect(await rows.timers()).toHaveLength(1);
      const rest = await ops.purge({ dispatchedBefore: clock.now(), batchSize: 2 });
      expect(rest).toMatchObject({ timers: 1, batches: 3 });
      expect(await rows.timers()).toEqual([]);
    });

    it('deletes completed sagas with their timers, outbox rows and message ids; keeps one whose outbox row is pending', async () => {
      const { clock, runtime, ops, start, twoPasses, rows } = await setup();
      const doneId = await start('done', [
        { op: 'schedule', name: 'fire', after: 1_000 },
        { op: 'send', message: { type: 'Hello' } },
      ]);
      await twoPasses();
      await runtime.handle(scriptedSaga, { type: 'Do', key: 'done', actions: [{ op: 'complete' }] }, { messageId: 'm-1' });
      const waitingId = await start('waiting', [{ op: 'send', message: { type: 'NotYet' } }, { op: 'complete' }]);
      const activeId = await start('active', [{ op: 'schedule', name: 'later', after: YEAR }]);
      clock.advance({ days: 10 });
      expect(await ops.purge({ completedSagasBefore: new Date(clock.now().getTime() - 11 * 24 * HOUR_MS) })).toMatchObject({
        sagas: { scripted: 0 },
      });
      const report = await ops.purge({ completedSagasBefore: clock.now() });
      expect(report).toEqual({ timers: 0, outbox: 0, inbox: 0, sagas: { scripted: 1 }, messageIds: 0, batches: 1 });
      expect((await rows.sagas()).map((s) => s.id).sort()).toEqual([waitingId, activeId].sort());
      expect(await rows.timers({ sagaId: doneId })).toEqual([]);
      expect(await rows.outbox(doneId)).toEqual([]);
      expect(await rows.handledMessages(doneId)).toEqual([]);
      expect(await rows.outbox(waitingId)).toHaveLength(1);
      expect(await rows.pendingTimers(activeId)).toHaveLength(1);
    });

    it('deletes message ids older than the runtime retention', async () => {
      const { clock, runtime, ops, start } = await setup();
      await start('k');
      await runtime.handle(scriptedSaga, { type: 'Do', key: 'k', actions: [] }, { messageId: 'old' });
      clock.advance({ days: 6 });
      await runtime.handle(scriptedSaga, { type: 'Do', key: 'k', actions: [] }, { messageId: 'recent' });
      clock.advance({ days: 2 });
      expect(await ops.purge({ expiredMessageIds: true })).toMatchObject({ messageIds: 1, timers: 0, outbox: 0, batches: 1 });
      const left = await db!.orm.em.fork().find(SagaHandledMessage, {});
      expect(left.map((m) => m.messageId)).toEqual(['recent']);
    });

    it('refuses a purge with nothing to do or bad options, deleting nothing', async () => {
      const { clock, ops, start, twoPasses, rows } = await setup();
      await start('k', [{ op: 'schedule', name: 'fire', after: 1_000 }]);
      await twoPasses();
      clock.advance({ days: 1 });
      const now = clock.now();
      const bad: unknown[] = [
        {},
        { dispatchedBefore: new Date('x') },
        { dispatchedBefore: '2026-01-01' },
        { dispatchedBefore: now, batchSize: 0 },
        { dispatchedBefore: now, batchSize: 100_001 },
        { dispatchedBefore: now, maxBatches: 0 },
        { dispatchedBefore: now, includeDeadLettered: 'yes' },
      ];
      for (const options of bad) {
        await expect(ops.purge(options as never)).rejects.toMatchObject({ code: 'OPTION_INVALID' });
      }
      expect(await rows.timers()).toHaveLength(1);
    });
  });
}
