import type { MikroORM } from '@mikro-orm/core';
import type { FakeClock } from '../../src/testing/index.js';
import type { Clock } from '../../src/time/clock.js';

/** Backends of `orm`'s database waiting for a lock (PostgreSQL). */
export async function lockWaiters(orm: MikroORM): Promise<number> {
  const sql = "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'";
  const [row] = await orm.em.fork().getConnection().execute<{ n: number }[]>(sql);
  return row!.n;
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

/** `fake`, seen through a clock that records every sleep asked of it (a FakeClock does not tell). */
export function recordingClock(fake: FakeClock): { clock: Clock; sleeps: number[] } {
  const sleeps: number[] = [];
  const clock: Clock = {
    now: () => fake.now(),
    sleep: (ms, signal) => {
      sleeps.push(ms);
      return fake.sleep(ms, signal);
    },
  };
  return { clock, sleeps };
}
