// An outgoing message of the application itself, staged through its EntityManager (`stageMessage`), commits or rolls
// back with the application's writes and is relayed by the dispatcher as a saga's own messages are, on every database:
// at least once, with the row id as the envelope id, dead-lettered after `maxAttempts`, requeued by an operator, and
// in staging order among the committed messages of one ordering key. Staging order is not commit order: a message whose
// transaction commits after a later-staged one of its key was relayed goes out after it.
import { afterEach, describe, expect, it } from 'vitest';
import {
  APP_MESSAGE_SAGA_TYPE,
  type OutboxEnvelope,
  runWithCorrelationId,
  SagaDispatcher,
  SagaOutbox,
  SagaRuntime,
  silentLogger,
} from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { drainDueTimers, FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`the application's own outgoing messages, staged in its transaction (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const dispatchers: SagaDispatcher[] = [];
    const setup = (publish: (envelope: OutboxEnvelope) => Promise<void>) => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({
        runtime,
        publish,
        logger: silentLogger,
        backoff: { jitter: false, baseMs: 1_000 },
        maxAttempts: 2,
      });
      dispatchers.push(dispatcher);
      return { clock, runtime, dispatcher, ops: new SagaOperations({ runtime }) };
    };
    afterEach(async () => {
      const running = dispatchers.splice(0).filter((d) => d.running);
      await Promise.all(running.map((d) => d.stop()));
      expect(running, 'a dispatcher was left running').toEqual([]);
      await db().orm.em.fork().nativeDelete(SagaOutbox, {});
    });

    it('committed: relayed once, with its id, type, payload and headers; rolled back: never relayed', async () => {
      const published: OutboxEnvelope[] = [];
      const { runtime, dispatcher } = setup(async (envelope) => void published.push(envelope));
      const tag = uniqueKey('tag');
      const staged = await runWithCorrelationId(`corr-${tag}`, () =>
        db()
          .orm.em.fork()
          .transactional(async (em) => runtime.stageMessage(em, { type: 'ArticleWritten', tag }, { headers: { tenant: 'acme' } })),
      );
      await expect(
        db()
          .orm.em.fork()
          .transactional(async (em) => {
            runtime.stageMessage(em, { type: 'RolledBack', tag });
            await em.flush();
            throw new Error('no');
          }),
      ).rejects.toThrow('no');
      expect((await drainDueTimers(dispatcher)).outbox).toMatchObject({ published: 1, failed: 0 });
      expect(published).toEqual([
        expect.objectContaining({
          id: staged.id,
          type: 'ArticleWritten',
          payload: { type: 'ArticleWritten', tag },
          headers: { tenant: 'acme', 'correlation-id': `corr-${tag}` },
          sagaType: APP_MESSAGE_SAGA_TYPE,
          sagaId: staged.id,
          correlationId: `corr-${tag}`,
        }),
      ]);
      expect((await drainDueTimers(dispatcher)).outbox.claimed).toBe(0);
      expect(runtime.stats().messagesStaged).toBe(2);
    });

    it('messages of one ordering key go out one at a time in staging order; the key is a header', async () => {
      const order: string[] = [];
      const { runtime, dispatcher } = setup(async (envelope) => void order.push(String(envelope.payload.n)));
      await db()
        .orm.em.fork()
        .transactional(async (em) => {
          for (let n = 1; n <= 5; n++) runtime.stageMessage(em, { type: 'Step', n }, { orderingKey: 'article-1' });
        });
      const drained = await drainDueTimers(dispatcher);
      expect(drained.outbox.published).toBe(5);
      expect(order).toEqual(['1', '2', '3', '4', '5']);
      const rows = await db().orm.em.fork().find(SagaOutbox, { messageType: 'Step' });
      // One lane: one saga id for the key, and the key as a header.
      expect(new Set(rows.map((row) => row.sagaId)).size).toBe(1);
      expect(rows.every((row) => row.headers['ordering-key'] === 'article-1' && row.sagaType === '')).toBe(true);
    });

    it('one ordering key from two transactions: staging order among the committed messages, not commit order', async () => {
      const order: string[] = [];
      const { runtime, dispatcher, clock } = setup(async (envelope) => void order.push(String(envelope.payload.v)));
      /** Stages `v` for `key` into an EntityManager of its own, flushed (committed) later by the caller. */
      const stage = (key: string, v: string) => {
        const em = db().orm.em.fork();
        runtime.stageMessage(em, { type: 'Version', v }, { orderingKey: key });
        clock.advance(1);
        return em;
      };
      // Both committed before a pass: relayed in staging order, though the later-staged one committed first.
      const both = uniqueKey('both');
      const [first, second] = [stage(both, 'a1'), stage(both, 'a2')];
      await second.flush();
      await first.flush();
      await drainDueTimers(dispatcher);
      expect(order).toEqual(['a1', 'a2']);
      // The later-staged one committed and relayed before the earlier one commits: that one goes out after it.
      order.length = 0;
      const late = uniqueKey('late');
      const [early, later] = [stage(late, 'b1'), stage(late, 'b2')];
      await later.flush();
      await drainDueTimers(dispatcher);
      await early.flush();
      await drainDueTimers(dispatcher);
      expect(order).toEqual(['b2', 'b1']);
    });

    it('a publish that keeps failing is dead-lettered, listed by the operator API and requeued', async () => {
      let failing = true;
      const published: string[] = [];
      const { runtime, dispatcher, clock, ops } = setup(async (envelope) => {
        if (failing) throw new Error('broker down');
        published.push(envelope.id);
      });
      const staged = await db()
        .orm.em.fork()
        .transactional(async (em) => runtime.stageMessage(em, { type: 'Unlucky' }, { delay: { seconds: 10 } }));
      expect((await drainDueTimers(dispatcher)).outbox.claimed).toBe(0);
      clock.advance({ seconds: 10 });
      await drainDueTimers(dispatcher);
      clock.advance({ seconds: 1 });
      expect((await drainDueTimers(dispatcher)).outbox).toMatchObject({ deadLettered: 1 });
      const dead = await ops.listOutbox({ status: 'dead_lettered', messageType: 'Unlucky', limit: 10 });
      expect(dead.items).toMatchObject([{ id: staged.id, sagaType: '', sagaId: staged.id, status: 'dead_lettered' }]);
      failing = false;
      expect(await ops.requeueOutbox([staged.id])).toMatchObject({ affected: 1 });
      await drainDueTimers(dispatcher);
      expect(published).toEqual([staged.id]);
    });
  });
}
