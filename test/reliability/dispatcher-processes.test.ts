// Dispatcher processes on every database: a delivery that kills its process takes only itself down (the crash-poison
// scenario of the reliability table), and several dispatcher processes share one database (SQLite included), each
// taking part.
import { describe, expect, it } from 'vitest';
import { SagaTimer } from '../../src/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import {
  type ChildLine,
  locationOf,
  sagasNotAppliedOnce,
  seedDueTimers,
  seedingRuntime,
  startChild,
  stopChild,
} from '../support/child-dispatchers.js';
import { useChildScripts } from '../support/child-scripts.js';
import { DIALECTS } from '../support/databases.js';
import { countTimerFirings, reportFigures } from '../support/reliability-figures.js';
import { useDatabase } from '../support/suite.js';

useChildScripts();

for (const dialect of DIALECTS) {
  describe(`dispatcher processes (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('a timer whose step kills its process, due just before 30 healthy ones: restarted by a supervisor, only it is charged and dead-lettered; every healthy timer fires once', {
      tags: ['reliability'],
    }, async ({ task }) => {
      const orm = db().orm;
      await orm.em.fork().nativeDelete(SagaTimer, {});
      const seeding = seedingRuntime(orm);
      const maxAttempts = 3;
      const [poison] = await seedDueTimers(seeding, 'poison', 1, 0);
      await seeding.handle(scriptedSaga, {
        type: 'Do',
        key: poison!,
        actions: [{ op: 'schedule', name: 'poison', after: 0, message: { type: 'Tick', label: 'poison' } }],
      });
      const healthy = await seedDueTimers(seeding, 'healthy', 30, 1);
      // Due one second after the poison: it is always claimed with them, and first.
      await orm.em
        .fork()
        .nativeUpdate(
          SagaTimer,
          { name: 't0' },
          { dueAt: new Date(Date.now() - 3_599_000), availableAt: new Date(Date.now() - 3_599_000) },
        );

      // The supervisor: restart the dispatcher until it exits normally, at most maxAttempts times. Each restart's
      // clock stands ten minutes after the last one's, so the dead process's leases have run out without anyone
      // waiting. The restarts are started ahead and wait for their turn, so none waits for a process to start.
      const runs = Array.from({ length: maxAttempts + 1 }, (_, restart) =>
        startChild('poison', dialect, locationOf(db()), () => undefined, {
          waitForGo: true,
          clockOffsetMs: restart * 600_000,
          maxAttempts,
          concurrency: 10,
        }),
      );
      let kills = 0;
      try {
        for (const run of runs) {
          await run.ready;
          run.go();
          const code = await run.exited;
          if (code === 0) break;
          expect(run.signal()).toBe('SIGKILL');
          kills++;
        }
      } finally {
        // The restarts not needed.
        await Promise.all(runs.map(stopChild));
      }
      // Charged one attempt per process it killed; the claim after the last one retired it undelivered.
      expect(kills).toBe(maxAttempts);
      const [dead] = await orm.em.fork().find(SagaTimer, { name: 'poison' });
      expect(dead).toMatchObject({ outcome: 'dead_lettered', attempts: maxAttempts });
      expect(dead?.deadLetterReason).toMatch(/failed 3 time\(s\), the last with: LeaseExpired/);
      const sagas = await orm.em.fork().find(ScriptedSaga, { key: { $in: healthy } });
      const { lost, twice } = countTimerFirings(sagas, healthy, 1);
      // Hostile input: the poison timer, delivered once per process it killed.
      reportFigures(task, {
        scenario: 'crash-poison',
        database: dialect,
        processes: kills + 1,
        load: 31,
        kills,
        restarts: kills,
        dbFaults: 0,
        hostile: kills,
        lost,
        twice,
      });
      expect({ lost, twice }).toEqual({ lost: 0, twice: 0 });
      expect(sagas).toHaveLength(30);
      expect(sagasNotAppliedOnce(sagas, 1)).toEqual([]);
      const timers = await orm.em.fork().find(SagaTimer, { sagaId: { $in: sagas.map((s) => s.id) } });
      expect(timers.every((t) => t.outcome === 'fired')).toBe(true);
      // A healthy delivery in flight when the first kill came is charged that once; none is charged again.
      expect(timers.filter((t) => t.attempts > 1)).toEqual([]);
    });

    it('three dispatcher processes drain one database together: each claims, every timer is applied once, none claimed by two at once', async () => {
      const orm = db().orm;
      await orm.em.fork().nativeDelete(SagaTimer, {});
      const keys = await seedDueTimers(seedingRuntime(orm), 'trio', 60, 5);
      const lines: ChildLine[] = [];
      const children = [0, 1, 2].map(() =>
        startChild('drain', dialect, locationOf(db()), (line) => lines.push(line), { waitForGo: true, batchSize: 10, concurrency: 5 }),
      );
      // All three connected: start them at once.
      await Promise.all(children.map((c) => c.ready));
      for (const child of children) child.go();
      expect(await Promise.all(children.map((c) => c.exited))).toEqual([0, 0, 0]);

      const done = lines.filter((l) => l.event === 'done');
      const total = (field: string) => done.reduce((sum, d) => sum + Number(d[field]), 0);
      console.info(
        `${dialect}: claims per process ${done.map((d) => d.claimed).join(', ')}; failed passes ${total('failedPasses')}; interrupted ${total('interrupted')}`,
      );
      const sagas = await orm.em.fork().find(ScriptedSaga, { key: { $in: keys } });
      expect(sagas).toHaveLength(60);
      expect(sagasNotAppliedOnce(sagas, 5)).toEqual([]);
      expect(await orm.em.fork().count(SagaTimer, { dispatchedAt: null })).toBe(0);
      expect(done).toHaveLength(3);
      // Each process took part.
      expect(done.map((d) => Number(d.claimed)).every((n) => n > 0)).toBe(true);
      expect(total('fired')).toBe(300);
      // A row is claimed again only after a database fault gave it back (SQLite: the file stayed locked past
      // the busy timeout); never while another process held it.
      const claims = lines.filter((l) => l.event === 'claim');
      expect(new Set(claims.map((c) => c.id)).size).toBe(300);
      expect(claims.length - 300).toBeLessThanOrEqual(total('interrupted'));
    });
  });
}
