import { existsSync } from 'node:fs';
import type { EntityManager } from '@mikro-orm/core';
import type { DialectAdapter } from '../dialect/dialect-adapter.js';
import { SagaPersistenceError } from '../errors.js';
import { placeholders, queryRows } from '../sql/sql-executor.js';

/** A column as the database's catalog describes it. */
export interface CatalogColumn {
  readonly type: string;
  readonly nullable: boolean;
}

/** An index as the database's catalog describes it. */
export interface CatalogIndex {
  readonly name: string;
  readonly unique: boolean;
  /** Its definition, normalised by {@link normalizeSql}. */
  readonly definition: string;
}

/** What the catalog says about one table; absent from the map when the table does not exist. */
export interface CatalogTable {
  readonly columns: ReadonlyMap<string, CatalogColumn>;
  readonly indexes: readonly CatalogIndex[];
}

/** Lower case, without quotes, brackets or white space: definitions compare alike on both databases. */
export function normalizeSql(sql: string): string {
  return sql.toLowerCase().replace(/["`()[\]\s]/g, '');
}

type CatalogReader = (em: EntityManager, tables: readonly string[]) => Promise<Map<string, CatalogTable>>;

/** PostgreSQL: one information_schema query for the columns and one pg_indexes query, over every table at once. */
const readPostgresql: CatalogReader = async (em, tables) => {
  const columns = await queryRows<{ table_name: string; column_name: string; data_type: string; is_nullable: string }>(em, {
    sql: `select table_name, column_name, data_type, is_nullable from information_schema.columns
     where table_schema = current_schema() and table_name in (${placeholders(tables.length)})`,
    params: [...tables],
  });
  const indexes = await queryRows<{ tablename: string; indexname: string; indexdef: string }>(em, {
    sql: `select tablename, indexname, indexdef from pg_indexes where schemaname = current_schema() and tablename in (${placeholders(tables.length)})`,
    params: [...tables],
  });
  return assemble(
    columns.map((c) => ({ table: c.table_name, name: c.column_name, type: c.data_type, nullable: c.is_nullable === 'YES' })),
    indexes.map((i) => ({ table: i.tablename, name: i.indexname, sql: i.indexdef })),
  );
};

/** SQLite: `pragma_table_info` per table, and one sqlite_master query for the indexes. */
const readSqlite: CatalogReader = async (em, tables) => {
  const file = String(em.config.get('dbName') ?? '');
  // Checked before any statement: opening a missing file would create it empty, and its empty catalog says
  // nothing about the schema (the path is wrong, or no migration ever ran there).
  if (file !== '' && !file.startsWith(':memory:') && !file.startsWith('file:') && !existsSync(file)) {
    throw new SagaPersistenceError(
      'DATABASE_UNREACHABLE',
      `Cannot verify the database schema: the SQLite database '${file}' does not exist. Check the dbName of your ORM config, then run the migrations there.`,
      { operation: 'read' },
    );
  }
  const columns: { table: string; name: string; type: string; nullable: boolean }[] = [];
  for (const table of tables) {
    const rows = await queryRows<{ name: string; type: string; notnull: number; pk: number }>(em, {
      sql: 'select name, type, "notnull", pk from pragma_table_info(?)',
      params: [table],
    });
    columns.push(...rows.map((r) => ({ table, name: r.name, type: r.type, nullable: Number(r.notnull) === 0 && Number(r.pk) === 0 })));
  }
  const indexes = await queryRows<{ tbl_name: string; name: string; sql: string | null }>(em, {
    sql: `select tbl_name, name, sql from sqlite_master where type = 'index' and tbl_name in (${placeholders(tables.length)})`,
    params: [...tables],
  });
  return assemble(
    columns,
    indexes.map((i) => ({ table: i.tbl_name, name: i.name, sql: i.sql ?? '' })),
  );
};

function assemble(
  columns: readonly { table: string; name: string; type: string; nullable: boolean }[],
  indexes: readonly { table: string; name: string; sql: string }[],
): Map<string, CatalogTable> {
  const tables = new Map<string, { columns: Map<string, CatalogColumn>; indexes: CatalogIndex[] }>();
  for (const column of columns) {
    const table = tables.get(column.table) ?? { columns: new Map(), indexes: [] };
    table.columns.set(column.name, { type: column.type, nullable: column.nullable });
    tables.set(column.table, table);
  }
  for (const index of indexes) {
    const definition = normalizeSql(index.sql);
    tables.get(index.table)?.indexes.push({ name: index.name, unique: definition.startsWith('createuniqueindex'), definition });
  }
  return tables;
}

const READERS: Readonly<Record<DialectAdapter['name'], CatalogReader>> = { postgresql: readPostgresql, sqlite: readSqlite };

/** Storage settings per existing table (`name` to `value`); a table without any has an empty map. */
export type TableSettings = Map<string, ReadonlyMap<string, string>>;

type SettingsReader = (em: EntityManager, tables: readonly string[]) => Promise<TableSettings>;

/** PostgreSQL: `pg_class.reloptions` (`{autovacuum_vacuum_threshold=1000,...}`) of each table, one query. */
const readPostgresqlSettings: SettingsReader = async (em, tables) => {
  const rows = await queryRows<{ relname: string; reloptions: string[] | null }>(em, {
    sql: `select c.relname, c.reloptions from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where n.nspname = current_schema() and c.relkind in ('r', 'p') and c.relname in (${placeholders(tables.length)})`,
    params: [...tables],
  });
  const settings: TableSettings = new Map();
  for (const row of rows) {
    const pairs = (row.reloptions ?? []).map((option): [string, string] => {
      const at = option.indexOf('=');
      return [option.slice(0, at), option.slice(at + 1)];
    });
    settings.set(row.relname, new Map(pairs));
  }
  return settings;
};

/** SQLite has no per-table storage settings. */
const readSqliteSettings: SettingsReader = async () => new Map();

const SETTINGS_READERS: Readonly<Record<DialectAdapter['name'], SettingsReader>> = {
  postgresql: readPostgresqlSettings,
  sqlite: readSqliteSettings,
};

/** Reads the storage settings (PostgreSQL `reloptions`) of `tables` (unquoted names) that exist. */
export function readTableSettings(em: EntityManager, dialect: DialectAdapter, tables: readonly string[]): Promise<TableSettings> {
  return SETTINGS_READERS[dialect.name](em, tables);
}

/** Reads the columns and indexes of `tables` (unquoted names) from the catalog of the database behind `em`. */
export function readCatalog(em: EntityManager, dialect: DialectAdapter, tables: readonly string[]): Promise<Map<string, CatalogTable>> {
  return READERS[dialect.name](em, tables);
}
