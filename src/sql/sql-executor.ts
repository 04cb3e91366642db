import type { EntityManager } from '@mikro-orm/core';

/** The slice of MikroORM's SqlEntityManager the hand-written statements use. */
export interface SqlExecutor {
  execute<T = unknown>(sql: string, params?: unknown[], method?: 'all' | 'get' | 'run'): Promise<T>;
}

/**
 * Runs one statement on `em`, inside its transaction when it has one, and returns the rows.
 * MikroORM formats the parameters for the platform (Dates become epoch ms on SQLite).
 */
export function queryRows<T>(em: EntityManager, sql: string, params: unknown[]): Promise<T[]> {
  return (em as unknown as SqlExecutor).execute<T[]>(sql, params, 'all');
}

/** Runs one INSERT, UPDATE or DELETE on `em` and returns the number of rows it affected. */
export async function runStatement(em: EntityManager, sql: string, params: unknown[]): Promise<number> {
  const result = await (em as unknown as SqlExecutor).execute<{ affectedRows: number }>(sql, params, 'run');
  return result.affectedRows;
}

/** `?, ?, ?` for `count` parameters. */
export function placeholders(count: number): string {
  return Array.from({ length: count }, () => '?').join(', ');
}
