// Several purges at once (docs/operations.md "Several processes may purge at once") delete every row exactly once
// and count a row at most once, in bounded batches: two purge processes on every database (on SQLite their batches
// run one after the other), and four purges on connection pools of their own on PostgreSQL, where they really run
// in parallel.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { SagaOutbox, SagaRuntime, SagaTimer } from '../../src/index.js';
import { type PurgeReport, SagaOperations } from '../../src/operations/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { OTHER_TIMERS, SAGAS, seedPurgeable } from '../support/purge-seed.js';
import { REPO_ROOT } from '../support/repository.js';
import { useDatabase } from '../support/suite.js';

const run = promisify(execFile);
const BATCH = 25;

for (const dialect of DIALECTS) {
  describe(`purge from two processes (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('two purge processes at once delete every row exactly once and count none twice, in bounded batches', async () => {
      await seedPurgeable(db().orm, new Date('2026-01-01T00:00:00Z'));
      const seeded = db().orm.em.fork();
      const [allTimers, allOutbox] = [await seeded.count(SagaTimer, {}), await seeded.count(SagaOutbox, {})];
      const location = String(db().config.clientUrl ?? db().config.dbName);
      const args = ['--import', 'tsx', 'test/support/purge-process.ts', dialect, location, '2026-03-01T00:00:00Z', String(BATCH)];
      const cwd = REPO_ROOT;
      const outputs = await Promise.all([0, 1].map(() => run(process.execPath, args, { cwd })));
      const reports = outputs.map(({ stdout }) => JSON.parse(stdout.trim().split('\n').pop()!) as PurgeReport);

      const sum = (pick: (r: PurgeReport) => number) => reports.reduce((total, r) => total + pick(r), 0);
      expect(sum((r) => r.sagas.scripted ?? 0)).toBe(SAGAS);
      // A saga's own dispatched timers and outbox rows go with it, uncounted, unless the other process's
      // dispatched-row purge reaches them first (it runs while this one is still purging sagas) and counts them:
      // every row is deleted once and counted at most once.
      expect(sum((r) => r.timers)).toBeGreaterThanOrEqual(OTHER_TIMERS);
      expect(sum((r) => r.timers)).toBeLessThanOrEqual(allTimers);
      expect(sum((r) => r.outbox)).toBeLessThanOrEqual(allOutbox);
      for (const report of reports) expect(report.batches).toBeGreaterThanOrEqual(Math.ceil((report.sagas.scripted ?? 0) / BATCH));
      const em = db().orm.em.fork();
      expect(await em.count(ScriptedSaga, {})).toBe(0);
      expect(await em.count(SagaTimer, {})).toBe(0);
      expect(await em.count(SagaOutbox, {})).toBe(0);
    }, 120_000);
  });
}

describe('purges on several connection pools at once (postgresql)', () => {
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
