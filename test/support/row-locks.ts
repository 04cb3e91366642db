import type { MikroORM } from '@mikro-orm/core';
import { drainContinuations } from './flush-hold.js';

/** Backends of `orm`'s database waiting for a lock (PostgreSQL). */
export async function lockWaiters(orm: MikroORM): Promise<number> {
  const sql = "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'";
  const [row] = await orm.em.fork().getConnection().execute<{ n: number }[]>(sql);
  return row!.n;
}

/** Resolves once at least `count` backends of `orm`'s database wait for a lock (PostgreSQL); never sleeps. */
export async function untilLockWaiters(orm: MikroORM, count = 1): Promise<void> {
  while ((await lockWaiters(orm)) < count) await drainContinuations();
}

/**
 * A transaction on `orm` (another connection than the code under test: an application's own transaction, an
 * operator's session): `lock` locks the rows of `table` whose `column` is `value`, `release` rolls it back (once).
 */
export async function rowLocker(orm: MikroORM, table: string) {
  const connection = orm.em.getConnection();
  const trx = await connection.begin();
  let released: Promise<unknown> | undefined;
  const release = () => {
    released ??= connection.rollback(trx).catch(() => undefined);
    return released;
  };
  const lock = (column: string, value: string) =>
    connection.execute(`select 1 from "${table}" where "${column}" = ? for update`, [value], 'all', trx);
  return { lock, release };
}

/**
 * Makes the published stamps of `saga_outbox` wait while the gate is closed (PostgreSQL): a trigger on the stamp
 * (`outcome` set to 'published') takes an advisory lock that `close()` holds in a transaction of `orm` until `open()`.
 * A stamp no longer waits for a row another transaction holds locked (it skips it: test/dispatcher/stamp/locked-row.postgres.test.ts), so
 * tests of a slow stamp statement hold it up this way. `orm` is a connection of the test's own, not the code's.
 */
export async function stampGate(orm: MikroORM) {
  const connection = orm.em.getConnection();
  const key = 424_242;
  await connection.execute(
    `create or replace function saga_test_stamp_gate() returns trigger as $$ begin perform pg_advisory_xact_lock(${key}); return new; end $$ language plpgsql`,
  );
  await connection.execute('drop trigger if exists saga_test_stamp_gate on "saga_outbox"');
  await connection.execute(
    `create trigger saga_test_stamp_gate before update on "saga_outbox" for each row
     when (new."outcome" = 'published' and old."outcome" is null) execute function saga_test_stamp_gate()`,
  );
  let closed: Promise<Awaited<ReturnType<typeof connection.begin>>> | undefined;
  let opened: Promise<unknown> | undefined;
  return {
    /** Closes the gate (once): stamps wait from now on. */
    close: async () => {
      closed ??= (async () => {
        const trx = await connection.begin();
        await connection.execute(`select pg_advisory_xact_lock(${key})`, [], 'all', trx);
        return trx;
      })();
      await closed;
    },
    /** Opens it again (once): the waiting stamps go on. */
    open: () => {
      opened ??= (closed ? closed.then((trx) => connection.rollback(trx)) : Promise.resolve()).catch(() => undefined);
      return opened;
    },
  };
}

/**
 * An operator's session on `orm` (an instance of the test's own: `db().openAnother()`), one open transaction at a time,
 * as in psql: `lock` locks outbox rows, `run` runs a statement, both opening the transaction first; `rollback` and
 * `commit` end it.
 */
export function operatorSession(orm: MikroORM) {
  const connection = orm.em.getConnection();
  let trx: Awaited<ReturnType<typeof connection.begin>> | undefined;
  const begin = async () => {
    trx ??= await connection.begin();
    return trx;
  };
  return {
    /** Locks the outbox rows of `ids` in the open transaction (opening one). */
    lock: async (...ids: string[]) => {
      const t = await begin();
      for (const id of ids) await connection.execute('select 1 from "saga_outbox" where "id" = ? for update', [id], 'all', t);
    },
    /** Runs `sql` in the open transaction (opening one). */
    run: async (sql: string, params: unknown[]) => connection.execute(sql, params, 'all', await begin()),
    rollback: async () => {
      if (trx) await connection.rollback(trx);
      trx = undefined;
    },
    commit: async () => {
      if (trx) await connection.commit(trx);
      trx = undefined;
    },
  };
}
