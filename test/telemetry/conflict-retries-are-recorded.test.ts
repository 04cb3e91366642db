// A concurrency conflict shows in telemetry: two real transactions race for one saga, the loser's single saga.step
// span says how many conflicts it retried (`saga.step.conflicts`), the conflict is counted on
// saga.concurrency_conflict, and conflicts that outlast the retries end the span in error with the code as
// `error.type`. Real SDK, every database.
import { SpanStatusCode } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { SagaConcurrencyError, SagaRuntime } from '../../src/index.js';
import { ScriptedSaga, scriptedSaga, scriptedVariant } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';
import { useTelemetry } from '../support/telemetry.js';

const telemetry = useTelemetry();

for (const dialect of DIALECTS) {
  describe(`conflicts retried show on the step's span and counter (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('the loser of a race records one saga.step span with saga.step.conflicts = 1, and saga.concurrency_conflict counts it', async () => {
      const orm = db().orm;
      const key = uniqueKey('race');
      const plain = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      await plain.handle(scriptedSaga, { type: 'Start', key });
      const loaded = deferred();
      const release = deferred();
      let runs = 0;
      const slow = scriptedVariant('Bump', async (saga) => {
        saga.counter += 10;
        if (++runs === 1) {
          loaded.resolve();
          await release.promise;
        }
      });
      const slowRuntime = new SagaRuntime({ em: orm.em, sagas: [slow] });
      telemetry().resetSpans();
      await telemetry().collect();
      const racing = slowRuntime.handle(slow, { type: 'Bump', key });
      await loaded.promise;
      await plain.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      release.resolve();
      expect(await racing).toMatchObject({ outcome: 'handled', version: 2, conflicts: 1 });

      const bumps = telemetry()
        .spans()
        .filter((s) => s.name === 'saga.step' && s.attributes['saga.message.type'] === 'Bump');
      expect(bumps).toHaveLength(1);
      expect(bumps[0]!.attributes).toMatchObject({ 'saga.step.outcome': 'handled', 'saga.step.conflicts': 1, 'saga.version': 2 });
      const metrics = await telemetry().collect();
      expect(metrics.sum('saga.concurrency_conflict', { 'saga.type': 'scripted' })).toBe(1);
      expect(metrics.descriptor('saga.concurrency_conflict')).toMatchObject({ unit: '{conflict}' });
      expect(metrics.histogram('saga.step.duration', { 'saga.message.type': 'Bump', 'saga.step.outcome': 'handled' })).toEqual([
        expect.objectContaining({ count: 1 }),
      ]);
    });

    it('conflicts past concurrency.maxAttempts end the span in error: CONCURRENCY_CONFLICT, every conflict counted', async () => {
      const orm = db().orm;
      const key = uniqueKey('exhaust');
      const plain = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      await plain.handle(scriptedSaga, { type: 'Start', key });
      // Every attempt of this step lets another unit of work commit first.
      const unlucky = scriptedVariant('Bump', async (saga) => {
        saga.counter += 100;
        await plain.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      });
      const runtime = new SagaRuntime({ em: orm.em, sagas: [unlucky], concurrency: { maxAttempts: 3, baseDelayMs: 0 } });
      telemetry().resetSpans();
      await telemetry().collect();
      await expect(runtime.handle(unlucky, { type: 'Bump', key })).rejects.toBeInstanceOf(SagaConcurrencyError);
      const span = telemetry()
        .spans()
        .find((s) => s.name === 'saga.step' && s.attributes['saga.message.type'] === 'Bump')!;
      expect(span.status.code).toBe(SpanStatusCode.ERROR);
      expect(span.attributes).toMatchObject({ 'saga.step.conflicts': 3, 'error.type': 'CONCURRENCY_CONFLICT' });
      expect(span.attributes['saga.step.outcome']).toBeUndefined();
      const metrics = await telemetry().collect();
      expect(metrics.sum('saga.concurrency_conflict', { 'saga.type': 'scripted' })).toBe(3);
      expect(metrics.histogram('saga.step.duration', { 'saga.message.type': 'Bump', 'error.type': 'CONCURRENCY_CONFLICT' })).toEqual([
        expect.objectContaining({ count: 1 }),
      ]);
    });
  });
}
