import { createRequire } from 'node:module';
import pg from 'pg';
import { ORM_MAJOR } from '../../src/orm/orm-major.js';

/**
 * The pg module MikroORM's driver uses: the repository's on MikroORM 6; the MikroORM 7 leg's own copy on 7 (the leg
 * redirects only `@mikro-orm/*` imports, so a test's `pg` import is not the driver's there).
 */
export const driverPg: typeof pg =
  ORM_MAJOR === 6 ? pg : (createRequire(new URL('../../legs/mikro-orm-7/package.json', import.meta.url))('pg') as typeof pg);

/** Records the SQL texts the driver's pg clients send until `stop()` is called. */
export function recordStatements(): { readonly sent: string[]; stop(): void } {
  const sent: string[] = [];
  const original = driverPg.Client.prototype.query;
  driverPg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const [query] = args as [string | { text?: string }];
    sent.push(typeof query === 'string' ? query : (query?.text ?? ''));
    return (original as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof original;
  const stop = () => {
    driverPg.Client.prototype.query = original;
  };
  return { sent, stop };
}

/** The SQL texts the driver's pg clients send while `work` runs. */
export async function statementsSent(work: () => Promise<unknown>): Promise<string[]> {
  const recording = recordStatements();
  try {
    await work();
  } finally {
    recording.stop();
  }
  return recording.sent;
}

/**
 * How a group's statements go as few statements (`runUpdatesAsOne`), each beginning so: MikroORM 7 on PostgreSQL where
 * kysely holds the unit's transaction (a configuration with `onCreateConnection`, `onReserveConnection` or
 * `sessionContext: 'connection'`: {@link KYSELY_TRANSACTIONS}).
 */
export const ONE_STATEMENT_START = 'with "saga_update_plain" as (';

/**
 * How a group's statements written together begin as sent (and as pg_stat_activity shows them while they wait):
 * one string after BEGIN and the lock bound, on MikroORM 6 and on 7 (where the library holds the transaction).
 */
export const TOGETHER_START = 'begin; select set_config(';

/**
 * ORM settings under which MikroORM 7 runs a unit's transaction on kysely's own transaction instead of one the library
 * holds on a pg connection (`holdsPgTransactions`): a hook on every connection kysely hands out, doing nothing.
 */
export const KYSELY_TRANSACTIONS = { onReserveConnection: async () => undefined } as const;
