// Several dispatchers in separate processes, a dispatcher killed between claim and commit, and a database
// outage mid-run, on PostgreSQL.
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, SagaTimer, silentLogger } from '../../src/index.js';
import { pgConnectionOptions } from '../../src/orm/connection-info.js';
import { drainDueTimers, FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { type ChildLine, sagasNotAppliedOnce, seedDueTimers, startChild } from '../support/child-dispatchers.js';
import { useChildScripts } from '../support/child-scripts.js';
import { useDatabase } from '../support/suite.js';

useChildScripts();

describe('dispatcher reliability (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const url = () => db().config.clientUrl as string;

  it('three dispatchers in three processes drain 2,000 timers of 200 sagas: each fired exactly once, none owned twice', async () => {
    const orm = db().orm;
    const seeding = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock: new FakeClock(new Date(Date.now() - 3_600_000)) });
    await seedDueTimers(seeding, 'multi', 200, 10);
    expect(await orm.em.fork().count(SagaTimer, { dispatchedAt: null })).toBe(2_000);

    const lines: ChildLine[] = [];
    const children = [0, 1, 2].map(() => startChild('drain', 'postgresql', url(), (line) => lines.push(line), { waitForGo: true }));
    // All three connected: they start at once, each claiming batches of 100 while the others do.
    await Promise.all(children.map((c) => c.ready));
    for (const child of children) child.go();
    expect(await Promise.all(children.map((c) => c.exited))).toEqual([0, 0, 0]);

    // Every saga shows each of its ten timers applied once.
    const sagas = await orm.em.fork().find(ScriptedSaga, { key: { $like: 'multi-%' } });
    expect(sagas).toHaveLength(200);
    expect(sagasNotAppliedOnce(sagas, 10)).toEqual([]);
    expect(await orm.em.fork().count(SagaTimer, { dispatchedAt: null })).toBe(0);
    expect(await orm.em.fork().count(SagaTimer, { outcome: 'fired' })).toBe(2_000);

    // No timer was claimed twice: with no failures and leases far longer than the run, one claim each.
    const claims = lines.filter((l) => l.event === 'claim');
    expect(claims).toHaveLength(2_000);
    expect(new Set(claims.map((c) => c.id)).size).toBe(2_000);
    const done = lines.filter((l) => l.event === 'done');
    expect(done).toHaveLength(3);
    expect(done.reduce((sum, d) => sum + Number(d.fired), 0)).toBe(2_000);
    // All three took part.
    expect(new Set(claims.map((c) => c.pid)).size).toBe(3);
    console.info(`claims per dispatcher: ${done.map((d) => d.claimed).join(', ')}`);
  }, 240_000);

  it('a dispatcher killed with SIGKILL between claim and commit loses nothing: another fires its timers once after the lease and delivery timeout', async () => {
    const orm = db().orm;
    const seeding = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock: new FakeClock(new Date(Date.now() - 3_600_000)) });
    await orm.em.fork().nativeDelete(SagaTimer, {});
    const keys = await seedDueTimers(seeding, 'crash', 10, 2);

    let claimed = 0;
    let resolveEntered!: () => void;
    const allEntered = new Promise<void>((resolve) => {
      resolveEntered = resolve;
    });
    const { child, exited } = startChild('hang', 'postgresql', url(), (line) => {
      if (line.event === 'claimed') claimed += Number(line.count);
      // One step per saga runs at a time: ten steps hang inside their units of work.
      if (line.event === 'entered' && line.count === 10) resolveEntered();
    });
    await allEntered;
    child.kill('SIGKILL');
    await exited;
    expect(claimed).toBe(20);
    const leased = await orm.em.fork().find(SagaTimer, { dispatchedAt: null });
    expect(leased).toHaveLength(20);
    expect(leased.every((t) => t.lockedUntil !== null)).toBe(true);

    // Another dispatcher, once the lease (30 s) and, for the started deliveries, the delivery timeout (60 s)
    // have passed by its clock: until then they might still be running.
    const clock = new FakeClock(new Date(Date.now() + 61_000));
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock });
    const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger });
    const report = await drainDueTimers(dispatcher);
    expect(report.timers).toMatchObject({ claimed: 20, fired: 20, stale: 0 });
    const sagas = await orm.em.fork().find(ScriptedSaga, { key: { $in: keys } });
    expect(sagas).toHaveLength(10);
    expect(sagasNotAppliedOnce(sagas, 2)).toEqual([]);
    expect(await orm.em.fork().count(SagaTimer, { dispatchedAt: null })).toBe(0);
    // The ten deliveries that had started were charged when their rows were taken over; the ten rows that
    // were claimed but still waited their turn (second timer of each saga) were taken over free.
    const fired = await orm.em.fork().find(SagaTimer, { sagaId: { $in: sagas.map((s) => s.id) } });
    expect(fired.every((t) => t.outcome === 'fired')).toBe(true);
    const charged = fired.filter((t) => t.attempts === 1 && t.lastError?.startsWith('LeaseExpired'));
    expect(charged.map((t) => t.name).sort()).toEqual(Array(10).fill('t0'));
    expect(fired.filter((t) => t.name === 't1').every((t) => t.attempts === 0 && t.lastError === null)).toBe(true);
  });

  it('survives its database connections being terminated mid-run and finishes the work', async () => {
    const orm = db().orm;
    await orm.em.fork().nativeDelete(SagaTimer, {});
    const seeding = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock: new FakeClock('2026-01-05T09:00:00Z') });
    const keys = await seedDueTimers(seeding, 'outage', 30, 10);

    // The dispatcher's connections carry an application name, so the outage can target them alone.
    const dispatcherOrm = await db().openAnother({ driverOptions: pgConnectionOptions({ applicationName: 'saga-dispatcher' }) });
    const clock = new FakeClock('2026-01-05T10:00:00Z');
    const runtime = new SagaRuntime({ em: dispatcherOrm.em, sagas: [scriptedSaga], clock });
    const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, batchSize: 50, pollIntervalMs: 1_000, dbRetryMaxMs: 2_000 });

    let passes = 0;
    let failedPasses = 0;
    let terminated = false;
    let killed = 0;
    const terminateDispatcherConnections = async () => {
      const [row] = await orm.em
        .fork()
        .getConnection()
        .execute<{ n: string }[]>(
          "select count(pg_terminate_backend(pid)) as n from pg_stat_activity where datname = current_database() and application_name = 'saga-dispatcher'",
        );
      return Number(row?.n);
    };
    const finished = new Promise<void>((resolve, reject) => {
      const check = async () => {
        // Everything a running dispatcher waits for is on the fake clock: move it past leases and backoffs.
        clock.advance(31_000);
        try {
          if ((await orm.em.fork().count(SagaTimer, { dispatchedAt: null })) === 0) resolve();
        } catch (error) {
          reject(error);
        }
      };
      dispatcher.on('pass', async (pass) => {
        passes++;
        if (!terminated && pass.timers.fired > 0) {
          terminated = true;
          killed = await terminateDispatcherConnections();
        }
      });
      dispatcher.on('passFailed', () => {
        failedPasses++;
        void check();
      });
      dispatcher.on('idle', () => void check());
    });
    dispatcher.start();
    await finished;
    await dispatcher.stop();
    expect(terminated).toBe(true);
    expect(killed).toBeGreaterThan(0);
    expect(passes).toBeGreaterThan(1);
    const sagas = await orm.em.fork().find(ScriptedSaga, { key: { $in: keys } });
    expect(sagas).toHaveLength(30);
    expect(sagasNotAppliedOnce(sagas, 10)).toEqual([]);
    // Terminated connections are the database's fault, not the timers': no attempt was charged.
    const timers = await orm.em.fork().find(SagaTimer, { sagaId: { $in: sagas.map((s) => s.id) } });
    expect(timers.filter((t) => t.attempts > 0).map((t) => `${t.name}: ${t.lastError}`)).toEqual([]);
    console.info(`outage run: ${killed} connections terminated, ${passes} passes, ${failedPasses} failed passes`);
  });
});
