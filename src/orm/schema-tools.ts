import type { MikroORM } from '@mikro-orm/core';

/*
 * Schema generator and migrator calls for the test suite, the demo, the bench and the docs; the runtime never
 * uses them. MikroORM 7 renamed the methods (`updateSchema` became `update`, `createMigration` became `create`,
 * ...), and `orm.schema` / `orm.migrator` exist on both majors: each helper calls whichever name is there.
 */

type Method = (...args: never[]) => Promise<unknown>;

function call<T>(target: object, names: readonly [string, string], ...args: unknown[]): Promise<T> {
  const methods = target as Record<string, Method | undefined>;
  const name = names.find((n) => typeof methods[n] === 'function');
  if (!name) throw new TypeError(`MikroORM has neither ${names.join(' nor ')}`);
  return (methods[name] as (...a: unknown[]) => Promise<T>).apply(target, args);
}

/** Runs the pending migrations (`orm.migrator.up()`). */
export async function migrateUp(orm: MikroORM): Promise<void> {
  await orm.migrator.up();
}

/** Brings the schema in line with the entities (6 `updateSchema`, 7 `update`). */
export async function updateSchema(orm: MikroORM, options: { dropTables?: boolean } = {}): Promise<void> {
  await call(orm.schema, ['update', 'updateSchema'], options);
}

/** Drops the entities' tables (6 `dropSchema`, 7 `drop`); `dropMigrationsTable` defaults to false. */
export async function dropSchema(orm: MikroORM, options: { dropMigrationsTable?: boolean } = {}): Promise<void> {
  await call(orm.schema, ['drop', 'dropSchema'], { dropMigrationsTable: false, ...options });
}

/** The SQL that would bring the schema in line with the entities, without transaction wrapping ('' when none). */
export async function updateSchemaSql(orm: MikroORM, options: { dropTables?: boolean } = {}): Promise<string> {
  return (await orm.schema.getUpdateSchemaSQL({ wrap: false, ...options })).trim();
}

/** What `createMigration` produced. */
export interface CreatedMigration {
  readonly fileName: string;
  readonly code: string;
  readonly diff: { readonly up: string[]; readonly down: string[] };
}

/** Generates a migration from the schema diff (6 `createMigration`, 7 `create`). */
export function createMigration(orm: MikroORM, path?: string, blank = false): Promise<CreatedMigration> {
  return call<CreatedMigration>(orm.migrator, ['create', 'createMigration'], path, blank);
}

/** Names of the migrations already run (6 `getExecutedMigrations`, 7 `getExecuted`). */
export async function executedMigrations(orm: MikroORM): Promise<string[]> {
  const rows = await call<{ name: string }[]>(orm.migrator, ['getExecuted', 'getExecutedMigrations']);
  return rows.map((row) => row.name);
}
