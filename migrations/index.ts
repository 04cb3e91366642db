import type { MigrationObject } from '@mikro-orm/core';
import type { Migration } from '@mikro-orm/migrations';
import { SagaDefinitionError } from '../src/errors.js';
import { Migration20261130063251 as PostgreSqlInitial } from './postgresql/Migration20261130063251.js';
import { Migration20261130100809 as PostgreSqlHandledMessages } from './postgresql/Migration20261130100809.js';
import { Migration20261130101137 as PostgreSqlDeliveryStarted } from './postgresql/Migration20261130101137.js';
import { Migration20261201011500 as PostgreSqlClaimIndex } from './postgresql/Migration20261201011500.js';
import { Migration20261201230000 as PostgreSqlAutovacuum } from './postgresql/Migration20261201230000.js';
import { Migration20261207000000 as PostgreSqlTraceContext } from './postgresql/Migration20261207000000.js';
import { Migration20261208120000 as PostgreSqlInbox } from './postgresql/Migration20261208120000.js';
import { Migration20261130063252 as SqliteInitial } from './sqlite/Migration20261130063252.js';
import { Migration20261130100816 as SqliteHandledMessages } from './sqlite/Migration20261130100816.js';
import { Migration20261130101148 as SqliteDeliveryStarted } from './sqlite/Migration20261130101148.js';
import { Migration20261201011501 as SqliteClaimIndex } from './sqlite/Migration20261201011501.js';
import { Migration20261207000001 as SqliteTraceContext } from './sqlite/Migration20261207000001.js';
import { Migration20261208120001 as SqliteInbox } from './sqlite/Migration20261208120001.js';

/**
 * The library's migrations, oldest first, for MikroORM's `migrations.migrationsList`.
 * They create `saga_timer`, `saga_outbox` and `saga_handled_message` with every index, then add the delivery
 * start mark (`delivery_started_at`) to the first two, then index their pending rows in claim order, then (PostgreSQL
 * only) have autovacuum clean and analyze those two sooner, then add the stored trace context (`trace_context`) to
 * both, then create `saga_inbox`, the deliveries an application stages for its sagas in its own transactions (see
 * docs/migrations.md).
 */
export const SAGA_MIGRATIONS: { readonly postgresql: readonly MigrationObject[]; readonly sqlite: readonly MigrationObject[] } = {
  postgresql: [
    { name: 'Migration20261130063251', class: PostgreSqlInitial },
    { name: 'Migration20261130100809', class: PostgreSqlHandledMessages },
    { name: 'Migration20261130101137', class: PostgreSqlDeliveryStarted },
    { name: 'Migration20261201011500', class: PostgreSqlClaimIndex },
    { name: 'Migration20261201230000', class: PostgreSqlAutovacuum },
    { name: 'Migration20261207000000', class: PostgreSqlTraceContext },
    { name: 'Migration20261208120000', class: PostgreSqlInbox },
  ],
  sqlite: [
    { name: 'Migration20261130063252', class: SqliteInitial },
    { name: 'Migration20261130100816', class: SqliteHandledMessages },
    { name: 'Migration20261130101148', class: SqliteDeliveryStarted },
    { name: 'Migration20261201011501', class: SqliteClaimIndex },
    { name: 'Migration20261207000001', class: SqliteTraceContext },
    { name: 'Migration20261208120001', class: SqliteInbox },
  ],
};

/**
 * A migration class of the library, as MikroORM's migrator takes it. An interface rather than MikroORM's
 * `Constructor<Migration>` so that an app's `export const ... = sagaMigration(...)` has a type its
 * declaration files can name.
 */
export interface SagaMigrationClass {
  new (...args: ConstructorParameters<typeof Migration>): Migration;
}

/**
 * One of the library's migrations, by name, for an application whose own migrations live in a folder.
 * MikroORM runs either `migrationsList` or the folder, never both; so such an app adds, for each library
 * migration, a file to its folder named after the migration that exports this class:
 *
 *   // src/migrations/Migration20261130063251.ts
 *   export const Migration20261130063251 = sagaMigration('postgresql', 'Migration20261130063251');
 *
 * Both then run in name order and are recorded in the app's migration table (docs/migrations.md).
 * @throws SagaDefinitionError `OPTION_INVALID` when `name` is not in `SAGA_MIGRATIONS[dialect]`; the message lists them.
 */
export function sagaMigration(dialect: keyof typeof SAGA_MIGRATIONS, name: string): SagaMigrationClass {
  const migrations = SAGA_MIGRATIONS[dialect] ?? [];
  const found = migrations.find((migration) => migration.name === name);
  if (!found) {
    throw new SagaDefinitionError(
      'OPTION_INVALID',
      `mikro-orm-saga has no ${String(dialect)} migration named '${name}'. Its migrations for postgresql: ` +
        `${SAGA_MIGRATIONS.postgresql.map((m) => m.name).join(', ')}; for sqlite: ${SAGA_MIGRATIONS.sqlite.map((m) => m.name).join(', ')}.`,
      { dialect, name },
    );
  }
  return found.class as SagaMigrationClass;
}
