// One correlation id from end to end: the request's ambient id is the step's (ctx.correlationId and
// getCorrelationId() alike), the timer's, the woken step's days later, and the published envelope's (its
// correlationId, its correlation-id header, and the ambient id the publisher runs under). Two chains running at
// once, their steps interleaved and their timers fired and messages published in the same passes, never mix ids.
// Every database.
import { describe, expect, it } from 'vitest';
import {
  defineSaga,
  getCorrelationId,
  type OutboxEnvelope,
  runWithCorrelationId,
  SagaDispatcher,
  SagaOutbox,
  SagaRuntime,
  SagaTimer,
  silentLogger,
} from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';

type ChainMessage = { type: 'Start'; key: string } | { type: 'Remind'; key: string };
type Sent = { type: 'Reminded'; key: string };

/** What a step or the publisher saw: the id it was handed and the ambient one. */
interface Seen {
  readonly where: string;
  readonly key: string;
  readonly handed: string | null;
  readonly ambient: string | undefined;
}

/** A saga that records the ids each step sees; Start waits at `gate` (both chains' starts reach it), then schedules. */
function chainSaga(seen: Seen[], gate: () => Promise<void>) {
  return defineSaga<ScriptedSaga, ChainMessage, Sent>({
    name: 'scripted',
    state: ScriptedSaga,
    correlation: { property: 'key', from: (m) => m.key },
    startedBy: ['Start'],
    steps: {
      async Start(_saga, m, ctx) {
        await gate();
        seen.push({ where: 'Start', key: m.key, handed: ctx.correlationId, ambient: getCorrelationId() });
        ctx.schedule('reminder', { days: 1 }, { type: 'Remind', key: m.key });
      },
      async Remind(_saga, m, ctx) {
        // Both woken steps are in flight together before either records.
        await gate();
        seen.push({ where: 'Remind', key: m.key, handed: ctx.correlationId, ambient: getCorrelationId() });
        ctx.send({ type: 'Reminded', key: m.key });
      },
    },
  });
}

/** A gate the first `n` callers wait at until all `n` arrived; later callers pass. */
function barrier(n: number): () => Promise<void> {
  let waiting = 0;
  const all = deferred();
  return async () => {
    if (++waiting >= n) all.resolve();
    await all.promise;
  };
}

for (const dialect of DIALECTS) {
  describe(`one correlation id from the request to the published envelope (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('request -> step -> timer -> woken step -> envelope keep the id; two concurrent chains never mix', async () => {
      const em = db().orm.em.fork();
      await em.nativeDelete(SagaTimer, {});
      await em.nativeDelete(SagaOutbox, {});
      const clock = new FakeClock();
      const seen: Seen[] = [];
      const saga = chainSaga(seen, barrier(2));
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [saga], clock });
      const published: OutboxEnvelope[] = [];
      const publish = async (envelope: OutboxEnvelope) => {
        seen.push({ where: 'publish', key: envelope.payload.key as string, handed: envelope.correlationId, ambient: getCorrelationId() });
        published.push(envelope);
      };
      const dispatcher = new SagaDispatcher({ runtime, publish, logger: silentLogger, concurrency: 4 });
      const chains = [
        { key: uniqueKey('a'), id: `request-a-${uniqueKey('id')}` },
        { key: uniqueKey('b'), id: `request-b-${uniqueKey('id')}` },
      ];

      // Two requests at once, each under its own ambient id; their steps wait for each other.
      await Promise.all(chains.map(({ key, id }) => runWithCorrelationId(id, () => runtime.handle(saga, { type: 'Start', key }))));
      for (const { key, id } of chains) {
        const [timer] = await rowsOf(db().orm).timers({ sagaId: (await rowsOf(db().orm).saga(key))!.id });
        expect(timer!.correlationId).toBe(id);
      }
      // Outside any request: the dispatcher restores each timer's id, both timers in one pass.
      clock.advance({ days: 1 });
      const fired = await dispatcher.runOnce();
      expect(fired.timers).toMatchObject({ claimed: 2, fired: 2 });
      // The woken steps' messages: claimed by the pass that fired them when their units committed before its outbox
      // claim ran (the two run at once), by the next pass otherwise.
      const next = await dispatcher.runOnce();
      expect(fired.outbox.published + next.outbox.published).toBe(2);

      for (const { key, id } of chains) {
        const mine = seen.filter((s) => s.key === key);
        expect(mine.map((s) => s.where)).toEqual(['Start', 'Remind', 'publish']);
        for (const s of mine) expect(s).toMatchObject({ handed: id, ambient: id });
        const envelope = published.find((e) => e.payload.key === key)!;
        expect(envelope.headers['correlation-id']).toBe(id);
      }
      expect(getCorrelationId()).toBeUndefined();
    });

    it('an id passed to handle() is the ambient id of its step, whatever the caller runs under', async () => {
      const seen: Seen[] = [];
      const saga = chainSaga(seen, async () => {});
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [saga], clock: new FakeClock() });
      const key = uniqueKey('explicit');
      await runWithCorrelationId('the-caller', () => runtime.handle(saga, { type: 'Start', key }, { correlationId: 'the-message' }));
      expect(seen).toEqual([{ where: 'Start', key, handed: 'the-message', ambient: 'the-message' }]);
    });
  });
}
