// Issue 9, retention from several processes at once (PostgreSQL, where purges really run in parallel): four
// purges, each on its own connection pool, share the work; every row is deleted and counted exactly once.
import { describe, expect, it } from 'vitest';
import { SagaOutbox, SagaRuntime, SagaTimer } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { OTHER_TIMERS, SAGAS, seedPurgeable } from '../support/purge-seed.js';
import { useDatabase } from '../support/suite.js';

describe('purge from several processes at once (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);

  it('four parallel purges delete every row exactly once, in bounded batches', async () => {
    const clock = new FakeClock('2026-03-01T00:00:00Z');
    await seedPurgeable(db().orm, new Date('2026-01-01T00:00:00Z'));
    const orms = [db().orm, ...(await Promise.all([1, 2, 3].map(() => db().openAnother())))];
    const operations = orms.map((orm) => new SagaOperations({ runtime: new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock }) }));
    // Sagas first, then dispatched rows, each by four purges at once: a purge of dispatched rows running beside one of
    // sagas would take some of those sagas' fired timers and published rows itself (deleted once all the same, but
    // counted as dispatched rows rather than with their saga), and the counts below would depend on timing.
    const sagaReports = await Promise.all(operations.map((ops) => ops.purge({ completedSagasBefore: clock.now(), batchSize: 20 })));
    const dispatchedReports = await Promise.all(operations.map((ops) => ops.purge({ dispatchedBefore: clock.now(), batchSize: 20 })));
    const reports = [...sagaReports, ...dispatchedReports];
    const sum = (pick: (r: (typeof reports)[number]) => number) => reports.reduce((total, r) => total + pick(r), 0);
    expect(sum((r) => r.sagas.scripted ?? 0)).toBe(SAGAS);
    expect(sum((r) => r.timers)).toBe(OTHER_TIMERS);
    expect(sum((r) => r.outbox)).toBe(0);
    // Bounded: no batch deleted more than batchSize sagas, so each process ran several short transactions.
    for (const report of reports) expect(report.batches).toBeGreaterThanOrEqual(Math.ceil((report.sagas.scripted ?? 0) / 20));
    const em = db().orm.em.fork();
    expect(await em.count(ScriptedSaga, {})).toBe(0);
    expect(await em.count(SagaTimer, {})).toBe(0);
    expect(await em.count(SagaOutbox, {})).toBe(0);
  });
});
