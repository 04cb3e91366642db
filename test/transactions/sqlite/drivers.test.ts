// What tells the SQLite drivers apart for the library (README "Which SQLite driver", docs/timers.md): how long a
// statement waits for a locked file by default, how to change it, and whether the process can do anything else
// meanwhile. node-sqlite3 (`@mikro-orm/sqlite` on 6) waits on its thread pool; better-sqlite3
// (`@mikro-orm/better-sqlite` on 6, `@mikro-orm/sqlite` on 7) waits synchronously, the event loop standing still.
import type { MikroORM, Options } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { dialectOf } from '../../../src/dialect/dialect-adapter.js';
import { isInfrastructureFault } from '../../../src/dispatcher/infrastructure-fault.js';
import { SagaConcurrencyError, SagaRuntime } from '../../../src/index.js';
import { isDriverException, platformNames } from '../../../src/orm/index.js';
import { ORM_MAJOR } from '../../../src/orm/orm-major.js';
import { queryRows } from '../../../src/orm/sql-execution.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS, isSqlite, waitsForLocksSynchronously } from '../../support/databases.js';
import { sqliteBusyTimeout } from '../../support/orm-options.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

/** The busy timeout of the connection `orm` uses, ms (`pragma busy_timeout`). */
async function busyTimeoutOf(orm: MikroORM): Promise<number> {
  const [row] = await orm.em.getConnection().execute<{ timeout: number }[]>('pragma busy_timeout');
  return Number(row?.timeout);
}

/**
 * Runs `work` and counts the turns of the event loop (setImmediate callbacks) until it settles: many when the
 * driver waits off the main thread, next to none when it blocks it.
 */
async function loopTurnsDuring(work: () => Promise<unknown>): Promise<{ turns: number; error: unknown }> {
  let turns = 0;
  let settled = false;
  const spin = () => {
    if (settled) return;
    turns++;
    setImmediate(spin);
  };
  setImmediate(spin);
  const error = await work().then(
    () => undefined,
    (e: unknown) => e,
  );
  settled = true;
  return { turns, error };
}

for (const dialect of DIALECTS.filter(isSqlite)) {
  describe(`SQLite driver behaviour the library relies on (${dialect}, MikroORM ${ORM_MAJOR})`, () => {
    const db = useDatabase(dialect, []);
    const opened: MikroORM[] = [];
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close(true);
    });
    const open = async (overrides: Partial<Options> = {}) => {
      const orm = await db().openAnother(overrides);
      opened.push(orm);
      return orm;
    };

    it('opens the driver the dialect names, which the library takes for SQLite', () => {
      const platform = dialect === 'better-sqlite' ? 'BetterSqlitePlatform' : 'SqlitePlatform';
      expect(platformNames(db().orm.em)[0]).toBe(platform);
      expect(dialectOf(db().orm.em)).toMatchObject({ name: 'sqlite', supportsSkipLocked: false, commitCanFailAfterApplying: false });
    });

    it('the default busy timeout: 1,000 ms with node-sqlite3, 5,000 ms with better-sqlite3', async () => {
      expect(await busyTimeoutOf(await open())).toBe(waitsForLocksSynchronously(dialect) ? 5_000 : 1_000);
    });

    it('the busy timeout is set per connection: pool.afterCreate on 6, driverOptions.timeout on 7', async () => {
      const orm = await open(sqliteBusyTimeout(dialect, 250));
      expect(await busyTimeoutOf(orm)).toBe(250);
    });

    it(`a statement waiting for a locked file ${waitsForLocksSynchronously(dialect) ? 'blocks the event loop' : 'leaves the event loop running'}, then fails as a database fault`, async () => {
      const locker = await open();
      const waiter = await open(sqliteBusyTimeout(dialect, 300));
      await locker.em.getConnection().execute('begin exclusive');
      try {
        const { turns, error } = await loopTurnsDuring(() => queryRows(waiter.em, 'select count(*) as n from "saga_timer"', []));
        expect(isDriverException(error) && error.name, String(error)).toBe('LockWaitTimeoutException');
        expect(isInfrastructureFault(error)).toBe(true);
        // node-sqlite3 sleeps in its thread pool between retries: the loop turns thousands of times in 300 ms.
        if (waitsForLocksSynchronously(dialect)) expect(turns).toBeLessThan(5);
        else expect(turns).toBeGreaterThan(50);
      } finally {
        await locker.em.getConnection().execute('commit');
      }
    });
  });
}

for (const dialect of DIALECTS.filter(isSqlite)) {
  describe(`a unit of work meeting a write lock held by another connection (${dialect}, MikroORM ${ORM_MAJOR})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const opened: MikroORM[] = [];
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close(true);
    });

    it('is retried, and after maxAttempts fails with CONCURRENCY_CONFLICT naming the lock and the busy timeout; nothing written', async () => {
      const locker = await db().openAnother();
      opened.push(locker);
      const waiter = await db().openAnother(sqliteBusyTimeout(dialect, 50));
      opened.push(waiter);
      const runtime = new SagaRuntime({ em: waiter.em, sagas: [scriptedSaga], concurrency: { maxAttempts: 2, baseDelayMs: 0 } });
      const key = uniqueKey('locked');
      // RESERVED: others may read (the unit loads its saga) but not write until the locker ends.
      await locker.em.getConnection().execute('begin immediate');
      try {
        const error = await runtime.handle(scriptedSaga, { type: 'Start', key }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(SagaConcurrencyError);
        expect(error).toMatchObject({ code: 'CONCURRENCY_CONFLICT', details: { attempts: 2 } });
        const message = (error as Error).message;
        expect(message).toContain('the database stayed locked by another connection past its busy timeout');
        expect(message).toContain("or the connection's busy timeout");
        expect(message).not.toContain('kept committing first');
        expect(isDriverException((error as Error).cause) && ((error as Error).cause as Error).name).toBe('LockWaitTimeoutException');
      } finally {
        await locker.em.getConnection().execute('commit');
      }
      expect(await rowsOf(db().orm).saga(key)).toBeNull();
    });
  });
}
