import type { EntityManager } from '@mikro-orm/core';
import { assertOrmOpen } from './orm-close-watch.js';

/** The slice of MikroORM's SqlEntityManager (`@mikro-orm/knex` on 6, `@mikro-orm/sql` on 7) the library uses. */
interface SqlExecutor {
  execute<T = unknown>(sql: string, params?: unknown[], method?: 'all' | 'get' | 'run'): Promise<T>;
}

/**
 * Runs one statement with `?` placeholders on `em`, inside its transaction when it has one. MikroORM formats
 * the parameters for the platform (Dates become epoch ms on SQLite) on both majors. Outside a transaction it
 * rejects with `OrmClosed` once the ORM was closed: the statement would wait for the pool (6) or reconnect (7).
 */
export async function executeSql<T>(em: EntityManager, sql: string, params: readonly unknown[], mode: 'all' | 'get' | 'run'): Promise<T> {
  if (!em.getTransactionContext()) assertOrmOpen(em);
  return (em as unknown as SqlExecutor).execute<T>(sql, [...params], mode);
}

/** Runs one statement on `em` and returns the rows. */
export function queryRows<T>(em: EntityManager, sql: string, params: readonly unknown[]): Promise<T[]> {
  return executeSql<T[]>(em, sql, params, 'all');
}

/** A fresh fork of `em` with an empty identity map, outside any transaction `em` may have open. */
export function freshFork(em: EntityManager): EntityManager {
  return em.fork({ clear: true });
}

/**
 * Runs `work` in one transaction on a fresh fork of `em` (MikroORM's `em.transactional`): committed when `work`
 * resolves, rolled back when it throws (the error passes on).
 */
export function inFreshTransaction<T>(em: EntityManager, work: (tx: EntityManager) => Promise<T>): Promise<T> {
  return freshFork(em).transactional(work);
}

/** Logs `sql` in MikroORM's query log (when enabled) as sent on `em`'s connection. */
export function logQuery(em: EntityManager, sql: string): void {
  (em.getConnection('write') as unknown as { logQuery(sql: string): void }).logQuery(sql);
}
