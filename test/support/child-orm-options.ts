/**
 * Connection settings for a child process that opens an ORM on a database its parent built (the purge processes,
 * the bench's relay processes): those of `connectionOptions` (databases.ts) without the migrator, loading only the
 * dialect's driver. Without vitest, `@mikro-orm/migrations` and the other drivers, which databases.ts imports, a
 * child is ready in about half the time.
 */
import type { Options } from '@mikro-orm/core';
import { SAGA_ENTITIES } from '../../src/index.js';
import type { DialectName, TestEntity } from './databases.js';

/** The dialect a child process was given on its command line, or undefined when it names none. */
export function childDialect(name: string | undefined): DialectName | undefined {
  return ['postgresql', 'sqlite', 'better-sqlite'].includes(name ?? '') ? (name as DialectName) : undefined;
}

/** `connectionOptions(dialect, location, entities)` of databases.ts, without the migrator. */
export async function childOrmOptions(dialect: DialectName, location: string, entities: TestEntity[]): Promise<Options> {
  const common = { entities: [...SAGA_ENTITIES, ...entities], allowGlobalContext: false, debug: process.env.MIKRO_ORM_DEBUG === 'true' };
  if (dialect === 'postgresql') {
    const { PostgreSqlDriver } = await import('@mikro-orm/postgresql');
    return { ...common, driver: PostgreSqlDriver, clientUrl: location, pool: { min: 0, max: 20 } };
  }
  if (dialect === 'sqlite') {
    const { SqliteDriver } = await import('@mikro-orm/sqlite');
    return { ...common, driver: SqliteDriver, dbName: location };
  }
  // MikroORM 6 only; a variable, so that vite does not resolve it on 7 (as in databases.ts).
  const betterSqlite = '@mikro-orm/better-sqlite';
  const { BetterSqliteDriver } = (await import(betterSqlite)) as typeof import('@mikro-orm/better-sqlite');
  return { ...common, driver: BetterSqliteDriver, dbName: location };
}
