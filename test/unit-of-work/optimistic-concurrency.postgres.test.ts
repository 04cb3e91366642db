// Real parallel transactions on PostgreSQL: many handlers, one saga instance.
import { describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../src/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

describe('parallel handlers on one instance (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);

  it('16 concurrent handlers delivering 400 increments apply exactly 400 and report the conflicts they retried', async () => {
    const orm = db().orm;
    const runtime = new SagaRuntime({
      em: orm.em,
      sagas: [scriptedSaga],
      concurrency: { maxAttempts: 500, baseDelayMs: 2, maxDelayMs: 40 },
    });
    const key = uniqueKey('hot');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    let remaining = 400;
    const results = await Promise.all(
      Array.from({ length: 16 }, async () => {
        const mine = [];
        while (remaining > 0) {
          remaining--;
          mine.push(await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }));
        }
        return mine;
      }),
    ).then((all) => all.flat());
    expect(results).toHaveLength(400);
    const saga = await rowsOf(orm).saga(key);
    expect(saga).toMatchObject({ counter: 400, version: 400 });
    // Every version from 1 to 400 was produced by exactly one handler: no two commits from the same read.
    expect(new Set(results.map((r) => r.version)).size).toBe(400);
    const conflicts = results.reduce((sum, r) => sum + r.conflicts, 0);
    expect(conflicts).toBeGreaterThan(0);
    expect(runtime.stats().concurrencyConflicts).toBe(conflicts);
    console.info(`400 increments by 16 handlers: ${conflicts} concurrency conflicts retried`);
  });

  it('10 concurrent start messages for one key leave exactly one row, whichever wins', async () => {
    const orm = db().orm;
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
    for (let round = 0; round < 5; round++) {
      const key = uniqueKey('start-race');
      const results = await Promise.all(
        Array.from({ length: 10 }, () => runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] })),
      );
      expect(results.filter((r) => r.outcome === 'started')).toHaveLength(1);
      const rows = (await rowsOf(orm).sagas()).filter((s) => s.key === key);
      expect(rows).toHaveLength(1);
      expect(rows[0]?.counter).toBe(10);
    }
  });

  it('two units of work racing to schedule one timer name leave exactly one pending row', async () => {
    const orm = db().orm;
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
    for (let round = 0; round < 10; round++) {
      const key = uniqueKey('name-race');
      const started = await runtime.handle(scriptedSaga, { type: 'Start', key });
      await Promise.all([
        runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'schedule', name: 'n', after: 1_000 }] }),
        runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 'n', after: 2_000 }] }),
      ]);
      expect(await rowsOf(orm).pendingTimers(started.sagaId!)).toHaveLength(1);
    }
  });
});
