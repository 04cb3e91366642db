import type { MigrationObject } from '@mikro-orm/core';
import { Migration20261130063251 as PostgreSqlInitial } from './postgresql/Migration20261130063251.js';
import { Migration20261130100809 as PostgreSqlHandledMessages } from './postgresql/Migration20261130100809.js';
import { Migration20261130101137 as PostgreSqlDeliveryStarted } from './postgresql/Migration20261130101137.js';
import { Migration20261130063252 as SqliteInitial } from './sqlite/Migration20261130063252.js';
import { Migration20261130100816 as SqliteHandledMessages } from './sqlite/Migration20261130100816.js';
import { Migration20261130101148 as SqliteDeliveryStarted } from './sqlite/Migration20261130101148.js';

/**
 * The library's migrations, oldest first, for MikroORM's `migrations.migrationsList`.
 * They create `saga_timer`, `saga_outbox` and `saga_handled_message` with every index (see docs/migrations.md).
 */
export const SAGA_MIGRATIONS: { readonly postgresql: readonly MigrationObject[]; readonly sqlite: readonly MigrationObject[] } = {
  postgresql: [
    { name: 'Migration20261130063251', class: PostgreSqlInitial },
    { name: 'Migration20261130100809', class: PostgreSqlHandledMessages },
    { name: 'Migration20261130101137', class: PostgreSqlDeliveryStarted },
  ],
  sqlite: [
    { name: 'Migration20261130063252', class: SqliteInitial },
    { name: 'Migration20261130100816', class: SqliteHandledMessages },
    { name: 'Migration20261130101148', class: SqliteDeliveryStarted },
  ],
};
