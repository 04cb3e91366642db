// Dispatcher processes under faults, on every database: several dispatcher processes, one of them SIGKILLed while it
// holds claims and restarted; and dispatcher processes whose database fails under them (PostgreSQL: backends
// terminated, connections dropped at COMMIT by a TCP proxy; SQLite: the file locked past the busy timeout).
// Every timer fires exactly once. Both tests report their figures to the reliability table (docs/testing.md).
import type { MikroORM } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { SagaTimer } from '../../src/index.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import {
  type ChildDispatcher,
  type ChildLine,
  locationOf,
  sagasNotAppliedOnce,
  seedDueTimers,
  seedingRuntime,
  startChild,
} from '../support/child-dispatchers.js';
import { useChildScripts } from '../support/child-scripts.js';
import { DIALECTS, type TestDatabase } from '../support/databases.js';
import type { ChildOptions } from '../support/dispatcher-process.js';
import { countTimerFirings, reportFigures } from '../support/reliability-figures.js';
import { deferred, useDatabase } from '../support/suite.js';
import { CommitDroppingProxy, type CommitFault } from '../support/tcp-proxy.js';

const SAGAS = 40;
const PER_SAGA = 3;
const TIMERS = SAGAS * PER_SAGA;
/** A restarted or late process's clock: ten minutes on, past every lease and delivery timeout of the others. */
const PAST_THE_LEASES_MS = 600_000;
const SMALL_PASSES: ChildOptions = { batchSize: 10, concurrency: 5 };
/** SQLite: how long the children wait for a locked file before a statement fails. */
const LOCK_WAIT_MS = 250;

useChildScripts();

for (const dialect of DIALECTS) {
  describe(`dispatcher processes under faults (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it(`three dispatcher processes drain ${TIMERS} timers; one is SIGKILLed mid-delivery while it holds claims and restarted: every timer fires once`, {
      tags: ['reliability'],
      timeout: 120_000,
    }, async ({ task }) => {
      const orm = db().orm;
      await orm.em.fork().nativeDelete(SagaTimer, {});
      const keys = await seedDueTimers(seedingRuntime(orm), 'restart', SAGAS, PER_SAGA);
      const location = locationOf(db());
      const holding = deferred();
      const onLine = (line: ChildLine) => {
        if (line.event === 'holding') holding.resolve();
      };
      // The victim's third step never returns. The healthy processes lease for an hour, so the restarted
      // process, whose clock stands past the victim's leases, takes over the victim's rows and only those.
      const victim = startChild('drain', dialect, location, onLine, { ...SMALL_PASSES, waitForGo: true, holdAtStep: 3 });
      const healthy = [0, 1].map(() =>
        startChild('drain', dialect, location, onLine, { ...SMALL_PASSES, waitForGo: true, leaseMs: 3_600_000 }),
      );
      // The restart is started ahead and let go once the victim is dead, so it does not wait for a process to start.
      const restarted = startChild('drain', dialect, location, onLine, {
        ...SMALL_PASSES,
        waitForGo: true,
        clockOffsetMs: PAST_THE_LEASES_MS,
      });
      await Promise.all([victim, ...healthy, restarted].map((c) => c.ready));
      // The victim starts first, so it holds claims before the others can drain everything.
      victim.go();
      await holding.promise;
      for (const child of healthy) child.go();
      victim.child.kill('SIGKILL');
      expect(await victim.exited).toBeNull();
      expect(victim.signal()).toBe('SIGKILL');
      restarted.go();
      expect(await Promise.all([...healthy, restarted].map((c) => c.exited))).toEqual([0, 0, 0]);

      const outcome = await timerOutcome(orm, keys);
      reportFigures(task, {
        scenario: 'kill-restart',
        database: dialect,
        processes: 4,
        load: TIMERS,
        kills: 1,
        restarts: 1,
        dbFaults: 0,
        hostile: 0,
        lost: outcome.lost,
        twice: outcome.twice,
      });
      expect(outcome).toEqual({ lost: 0, twice: 0, pending: 0, notApplied: [], notFired: 0 });
    });

    it(`dispatcher processes drain ${TIMERS} timers while their database fails under them (${dialect === 'postgresql' ? 'backends terminated, connections dropped at COMMIT' : 'the file locked past the busy timeout'}): every timer fires once`, {
      tags: ['reliability'],
      timeout: 120_000,
    }, async ({ task }) => {
      const orm = db().orm;
      await orm.em.fork().nativeDelete(SagaTimer, {});
      const keys = await seedDueTimers(seedingRuntime(orm), 'faults', SAGAS, PER_SAGA);
      const faults = await faultInjector(db());
      try {
        let claims = 0;
        const children: ChildDispatcher[] = [];
        const onLine = (line: ChildLine) => {
          if (line.event === 'claim') faults.claimsSeen(++claims);
          if (line.event === 'passFailed') faults.passFailed();
          if (line.event === 'paused') faults.paused(children.find((c) => c.child.pid === line.pid)!);
        };
        for (let i = 0; i < 2; i++) {
          children.push(
            startChild('drain', dialect, faults.location, onLine, {
              ...SMALL_PASSES,
              waitForGo: true,
              ...faults.childOptions[i],
            }),
          );
        }
        faults.watch(children);
        await Promise.all(children.map((c) => c.ready));
        for (const child of children) child.go();
        expect(await Promise.all(children.map((c) => c.exited))).toEqual([0, 0]);
        await faults.finish();
        // A claim whose COMMIT landed but whose answer was lost leaves rows leased by nobody: a dispatcher that
        // starts once the lease has run out (here: whose clock stands past it) fires them.
        let late = 0;
        while ((await orm.em.fork().count(SagaTimer, { dispatchedAt: null })) > 0 && late < 2) {
          late++;
          const sweeper = startChild('drain', dialect, locationOf(db()), () => undefined, { clockOffsetMs: late * PAST_THE_LEASES_MS });
          expect(await sweeper.exited).toBe(0);
        }

        const outcome = await timerOutcome(orm, keys);
        reportFigures(task, {
          scenario: 'connection-faults',
          database: dialect,
          processes: 2 + late,
          load: TIMERS,
          kills: 0,
          restarts: 0,
          dbFaults: faults.injected(),
          hostile: 0,
          lost: outcome.lost,
          twice: outcome.twice,
        });
        console.info(`${dialect}: ${faults.describe()}; ${claims} claims; ${late} late dispatcher(s)`);
        expect(faults.injected()).toBeGreaterThan(0);
        expect(outcome).toEqual({ lost: 0, twice: 0, pending: 0, notApplied: [], notFired: 0 });
      } finally {
        await faults.close();
      }
    });
  });
}

/** What became of the timers of the sagas `keys`: firings lost or repeated, rows still pending or not fired. */
async function timerOutcome(orm: MikroORM, keys: string[]) {
  const sagas = await orm.em.fork().find(ScriptedSaga, { key: { $in: keys } });
  const { lost, twice } = countTimerFirings(sagas, keys, PER_SAGA);
  const timers = await orm.em.fork().find(SagaTimer, { sagaId: { $in: sagas.map((s) => s.id) } });
  return {
    lost,
    twice,
    pending: timers.filter((t) => t.dispatchedAt === null).length,
    notApplied: sagasNotAppliedOnce(sagas, PER_SAGA),
    notFired: timers.filter((t) => t.outcome !== 'fired').length + (TIMERS - timers.length),
  };
}

/** Injects database faults while child dispatchers run, triggered by how many claims they reported. */
interface FaultInjector {
  /** Where the children connect: through the proxy on PostgreSQL. */
  readonly location: string;
  /** What each of the two children needs for the faults to reach it. */
  readonly childOptions: readonly [ChildOptions, ChildOptions];
  watch(children: ChildDispatcher[]): void;
  claimsSeen(claims: number): void;
  /** A child paused before a claim (it was given `pauseAfterPasses`); it waits for `go`. */
  paused(child: ChildDispatcher): void;
  passFailed(): void;
  /** Waits for a fault in progress to be lifted; throws what failed in injecting one. */
  finish(): Promise<void>;
  injected(): number;
  describe(): string;
  close(): Promise<void>;
}

function faultInjector(db: TestDatabase): Promise<FaultInjector> {
  return db.dialect === 'postgresql' ? postgresFaults(db) : sqliteLockOuts(db);
}

/**
 * PostgreSQL: the children connect through a TCP proxy. At 20 claims their backends are terminated
 * (pg_terminate_backend), at 50 the proxy drops the connection after the server applied a COMMIT, at 80 before
 * COMMIT reached it. A fault armed when no COMMIT follows any more simply does not happen (and is not counted).
 */
async function postgresFaults(db: TestDatabase): Promise<FaultInjector> {
  const applicationName = 'saga-reliability-faults';
  const target = new URL(db.config.clientUrl as string);
  const proxy = new CommitDroppingProxy(target.hostname, Number(target.port || 5432));
  const proxied = new URL(target);
  proxied.port = String(await proxy.listen());
  const plan: { at: number; fault: 'terminate' | CommitFault }[] = [
    { at: 20, fault: 'terminate' },
    { at: 50, fault: 'drop-after-commit' },
    { at: 80, fault: 'drop-before-commit' },
  ];
  let terminated = 0;
  let dropped = 0;
  let busy: Promise<void> = Promise.resolve();
  let failure: unknown;
  const terminate = async () => {
    const [row] = await db.orm.em
      .fork()
      .getConnection()
      .execute<{ n: string }[]>(
        'select count(pg_terminate_backend(pid)) as n from pg_stat_activity where datname = current_database() and application_name = ?',
        [applicationName],
      );
    terminated += Number(row?.n);
  };
  return {
    location: proxied.toString(),
    childOptions: [{ applicationName }, { applicationName }],
    watch: () => undefined,
    claimsSeen(claims) {
      // One fault at a time: the next waits until the armed one has happened.
      while (plan[0] && claims >= plan[0].at) {
        const { fault } = plan.shift()!;
        busy = busy.then(async () => {
          if (fault === 'terminate') return terminate();
          proxy.arm(fault);
          await proxy.faulted;
          dropped++;
        });
        busy = busy.catch((error) => {
          failure = error;
        });
      }
    },
    paused: (child) => child.go(),
    passFailed: () => undefined,
    // Not awaiting `busy`: a fault armed after the last COMMIT never happens.
    finish: async () => {
      if (failure) throw failure;
    },
    injected: () => terminated + dropped,
    describe: () => `${terminated} backends terminated, ${dropped} connections dropped at COMMIT`,
    close: () => proxy.close(),
  };
}

/**
 * SQLite: the first child pauses after its first and fourth passes. Each time, another connection takes the
 * file's exclusive lock, lets the child go on, and holds the lock until a pass failed on it (the child's claim
 * waited out the busy timeout) or no child is left. The other child, wherever it is, meets the same lock: a unit
 * of work retries, a claim fails its pass, and both carry on once the lock is gone. The children's busy timeout is
 * 250 ms instead of the drivers' 1 to 5 s, so each lock-out lasts a fraction of a second.
 */
async function sqliteLockOuts(db: TestDatabase): Promise<FaultInjector> {
  const locker = await db.openAnother();
  const execute = (sql: string) => locker.em.getConnection().execute(sql);
  let children: ChildDispatcher[] = [];
  let lockOuts = 0;
  let failedWhileLocked = 0;
  let locked = false;
  let lifted = deferred();
  let busy: Promise<void> = Promise.resolve();
  let failure: unknown;
  const anyRunning = () => children.some((c) => c.child.exitCode === null && c.child.signalCode === null);
  const lockOut = async (paused: ChildDispatcher) => {
    // Nothing writes while the child is paused but the other child: a BEGIN EXCLUSIVE that meets one of its short
    // write transactions waits the busy timeout and may fail; try again.
    for (let attempt = 1; ; attempt++) {
      try {
        await execute('begin exclusive');
        break;
      } catch (error) {
        if (attempt >= 20) throw error;
      }
    }
    locked = true;
    lifted = deferred();
    lockOuts++;
    paused.go();
    await lifted.promise;
    locked = false;
    await execute('commit');
  };
  return {
    location: locationOf(db),
    childOptions: [{ pauseAfterPasses: [1, 4], busyTimeoutMs: LOCK_WAIT_MS }, { busyTimeoutMs: LOCK_WAIT_MS }],
    watch(watched) {
      children = watched;
      for (const c of watched) void c.exited.then(() => anyRunning() || lifted.resolve());
    },
    claimsSeen: () => undefined,
    paused(child) {
      busy = busy
        .then(() => lockOut(child))
        .catch((error) => {
          failure = error;
          child.go();
        });
    },
    passFailed() {
      if (!locked) return;
      failedWhileLocked++;
      lifted.resolve();
    },
    finish: async () => {
      await busy;
      if (failure) throw failure;
    },
    injected: () => lockOuts,
    describe: () => `${lockOuts} lock-outs of the file past the busy timeout, ${failedWhileLocked} passes failed on them`,
    close: () => locker.close(true),
  };
}
