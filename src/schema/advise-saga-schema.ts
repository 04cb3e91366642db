import type { EntityManager } from '@mikro-orm/core';
import { type DialectAdapter, dialectOf } from '../dialect/dialect-adapter.js';
import { assertSagaEntitiesRegistered } from '../entities/assert-saga-entities-registered.js';
import { SagaInbox } from '../entities/saga-inbox.js';
import { SagaOutbox } from '../entities/saga-outbox.js';
import { SagaTimer } from '../entities/saga-timer.js';
import { entityMetadata, freshFork } from '../orm/index.js';
import { readTableSettings } from './read-catalog.js';

/** A table setting the library recommends but does not need: the schema fits without it. */
export interface SchemaAdvice {
  readonly table: string;
  /** The setting's name: a PostgreSQL storage parameter such as `autovacuum_vacuum_scale_factor`. */
  readonly setting: string;
  /** The value the library's migrations set. */
  readonly recommended: string;
}

/** Options of {@link adviseSagaSchema}. */
export interface AdviseSagaSchemaOptions {
  /** The application's EntityManager (`orm.em`). */
  readonly em: EntityManager;
}

/**
 * The autovacuum settings the library's PostgreSQL migrations give the tables the dispatcher drains
 * (`Migration20261201230000`: `saga_timer` and `saga_outbox`; `Migration20261208120000`: `saga_inbox`): vacuum and
 * analyze once 2% of the rows, and at least 1,000, changed (docs/migrations.md, "Autovacuum"). MikroORM's schema diff does not carry them, so migrations an app generates itself lack them.
 */
export const RECOMMENDED_AUTOVACUUM_SETTINGS = {
  autovacuum_vacuum_scale_factor: '0.02',
  autovacuum_vacuum_threshold: '1000',
  autovacuum_analyze_scale_factor: '0.02',
  autovacuum_analyze_threshold: '1000',
} as const;

/** Settings recommended on the tables the dispatcher drains, per database; SQLite has no table settings. */
const RECOMMENDED: Readonly<Record<DialectAdapter['name'], Readonly<Record<string, string>>>> = {
  postgresql: RECOMMENDED_AUTOVACUUM_SETTINGS,
  sqlite: {},
};

/**
 * Lists the recommended table settings the connected database lacks: on PostgreSQL, the autovacuum settings of
 * `saga_timer`, `saga_outbox` and `saga_inbox` ({@link RECOMMENDED_AUTOVACUUM_SETTINGS}) that are not set at all (a
 * value of your own is kept as your choice). Reads `pg_class.reloptions` only; a missing table gets no advice
 * (`inspectSagaSchema` names it). Empty on SQLite.
 * @throws SagaDefinitionError `DEFINITION_INVALID` when a library entity is not registered.
 */
export async function adviseSagaSchema(options: AdviseSagaSchemaOptions): Promise<SchemaAdvice[]> {
  const { em } = options;
  assertSagaEntitiesRegistered(em);
  const dialect = dialectOf(em);
  const recommended = Object.entries(RECOMMENDED[dialect.name]);
  if (recommended.length === 0) return [];
  // Registered: assertSagaEntitiesRegistered would have thrown.
  const tables = [SagaTimer, SagaOutbox, SagaInbox].map((entity) => entityMetadata(em, entity)!.tableName);
  const settings = await readTableSettings(freshFork(em), dialect, tables);
  return tables.flatMap((table) => {
    const set = settings.get(table);
    if (!set) return [];
    return recommended.filter(([setting]) => !set.has(setting)).map(([setting, value]) => ({ table, setting, recommended: value }));
  });
}

/** The advice in words, with the statements that apply it; names tables and settings, never data. */
export function describeAdvice(advice: readonly SchemaAdvice[]): string {
  const tables = [...new Set(advice.map((a) => a.table))];
  const statements = tables.map((table) => {
    const settings = advice.filter((a) => a.table === table).map((a) => `${a.setting} = ${a.recommended}`);
    return `alter table "${table}" set (${settings.join(', ')});`;
  });
  return (
    `${tables.join(' and ')} ${tables.length === 1 ? 'lacks' : 'lack'} the autovacuum settings the library's migrations set: ` +
    'without them PostgreSQL vacuums and analyzes these busy tables late, and every claim reads past more dead rows. ' +
    `Add them in a migration of your own: ${statements.join(' ')} (docs/migrations.md, "Autovacuum")`
  );
}
