// Optimistic concurrency on every database: a stale version rolls back, re-reads and re-runs; bounded; never a lost
// update.
import { describe, expect, it } from 'vitest';
import { SagaConcurrencyError, SagaRuntime } from '../../src/index.js';
import { ScriptedSaga, scriptedSaga, scriptedVariant } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`optimistic concurrency (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('the loser of a race rolls back, re-reads and re-runs its step on fresh state: no lost update', async () => {
      const orm = db().orm;
      const key = uniqueKey('race');
      const plain = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      const started = await plain.handle(scriptedSaga, { type: 'Start', key });
      const loaded = deferred();
      const release = deferred();
      const seen: number[] = [];
      const slow = scriptedVariant('Bump', async (saga, _m, ctx) => {
        seen.push(saga.version);
        saga.counter += 10;
        ctx.send({ type: 'Bumped', counter: saga.counter });
        ctx.schedule('after-bump', 1_000, { type: 'Bump', key });
        if (seen.length === 1) {
          loaded.resolve();
          await release.promise;
        }
      });
      const slowRuntime = new SagaRuntime({ em: orm.em, sagas: [slow] });
      const racing = slowRuntime.handle(slow, { type: 'Bump', key });
      await loaded.promise;
      const winner = await plain.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(winner.version).toBe(1);
      release.resolve();
      const loser = await racing;
      expect(loser).toMatchObject({ outcome: 'handled', version: 2, attempts: 2, conflicts: 1, messagesSent: 1 });
      expect(seen).toEqual([0, 1]);
      expect(slowRuntime.stats().concurrencyConflicts).toBe(1);
      expect(await rowsOf(orm).saga(key)).toMatchObject({ counter: 11, version: 2 });
      // Only the successful attempt's outbox row and timer exist.
      const outbox = await rowsOf(orm).outbox(started.sagaId!);
      expect(outbox.map((o) => o.payload)).toEqual([{ type: 'Bumped', counter: 11 }]);
      expect(await rowsOf(orm).pendingTimers(started.sagaId!)).toHaveLength(1);
    });

    it('after maxAttempts conflicts it throws SagaConcurrencyError and writes nothing of its own', async () => {
      const orm = db().orm;
      const key = uniqueKey('exhaust');
      const plain = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      const started = await plain.handle(scriptedSaga, { type: 'Start', key });
      // Every attempt of this step lets another unit of work commit first.
      const unlucky = scriptedVariant('Bump', async (saga, _m, ctx) => {
        saga.counter += 100;
        ctx.send({ type: 'Never' });
        await plain.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      });
      const runtime = new SagaRuntime({ em: orm.em, sagas: [unlucky], concurrency: { maxAttempts: 3, baseDelayMs: 0 } });
      const error = await runtime.handle(unlucky, { type: 'Bump', key }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SagaConcurrencyError);
      expect(error).toMatchObject({ code: 'CONCURRENCY_CONFLICT', details: { sagaType: 'scripted', sagaId: started.sagaId, attempts: 3 } });
      expect((error as Error).message).toMatch(/raise concurrency.maxAttempts/);
      expect(await rowsOf(orm).saga(key)).toMatchObject({ counter: 3, version: 3 });
      expect(await rowsOf(orm).outbox(started.sagaId!)).toEqual([]);
    });
  });
}
