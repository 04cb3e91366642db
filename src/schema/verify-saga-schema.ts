import type { EntityManager, EntityMetadata, EntityProperty } from '@mikro-orm/core';
import { dialectOf } from '../dialect/dialect-adapter.js';
import { assertSagaEntitiesRegistered } from '../entities/assert-saga-entities-registered.js';
import { SagaHandledMessage, SagaHandledMessageSchema } from '../entities/saga-handled-message.js';
import { SagaInbox, SagaInboxSchema } from '../entities/saga-inbox.js';
import { SagaOutbox, SagaOutboxSchema } from '../entities/saga-outbox.js';
import { SagaTimer, SagaTimerSchema } from '../entities/saga-timer.js';
import { SagaDefinitionError, SagaSchemaError } from '../errors.js';
import { entityMetadata, freshFork } from '../orm/index.js';
import { type CatalogTable, normalizeSql, readCatalog } from './read-catalog.js';

/** What a {@link SchemaProblem} found wrong. */
export const SCHEMA_PROBLEM_KINDS = {
  TABLE_MISSING: 'table_missing',
  COLUMN_MISSING: 'column_missing',
  /** The column's type is of another family (text, uuid, integer, number, datetime, json, boolean). */
  COLUMN_TYPE: 'column_type',
  COLUMN_NULLABILITY: 'column_nullability',
  INDEX_MISSING: 'index_missing',
  /** An index of that name exists with another definition (columns, filter or uniqueness). */
  INDEX_DIFFERENT: 'index_different',
} as const;
/** What a {@link SchemaProblem} found wrong. */
export type SchemaProblemKind = (typeof SCHEMA_PROBLEM_KINDS)[keyof typeof SCHEMA_PROBLEM_KINDS];

/** One difference between the connected database and what the library and the registered sagas need. */
export interface SchemaProblem {
  readonly kind: SchemaProblemKind;
  readonly table: string;
  /** The column or index name; the table name for `table_missing`. */
  readonly item: string;
  /** What was expected (a type family, `null`/`not null`, an index definition). */
  readonly expected?: string;
  /** What the database has. */
  readonly actual?: string;
}

/** Options of {@link verifySagaSchema}. */
export interface VerifySagaSchemaOptions {
  /** The application's EntityManager (`orm.em`). */
  readonly em: EntityManager;
  /**
   * Saga definitions (from `defineSaga()`) whose tables are checked too; only their name and state entity are
   * read. Default: none (library tables only).
   */
  readonly sagas?: readonly { readonly name: string; readonly state: new (...args: never[]) => object }[];
}

/** The command that fixes any schema problem, quoted in every `SagaSchemaError` of the check. */
export const SCHEMA_FIX =
  "run your migrations: the library's (SAGA_MIGRATIONS from 'mikro-orm-saga/migrations') or your own, generated with " +
  '`npx mikro-orm migration:create` after adding SAGA_ENTITIES and your saga entities, then `npx mikro-orm migration:up` (docs/migrations.md)';

/** What one table must have. */
interface ExpectedTable {
  readonly table: string;
  readonly columns: readonly EntityProperty[];
  /** Indexes by name (or by filter only, for a saga's active-row index): normalised tail `columns + where`. */
  readonly indexes: readonly { readonly name: string | undefined; readonly unique: boolean; readonly tail: string }[];
}

const LIBRARY_ENTITIES = [SagaTimer, SagaOutbox, SagaHandledMessage, SagaInbox];
const BASE_PROPERTIES = ['id', 'createdAt', 'updatedAt', 'completedAt', 'version'];

function libraryTable(meta: EntityMetadata): ExpectedTable {
  const indexes = [...meta.indexes, ...meta.uniques]
    .filter((index): index is typeof index & { name: string; expression: string } => typeof index.expression === 'string' && !!index.name)
    .map((index) => {
      const sql = normalizeSql(index.expression);
      const on = `on${meta.tableName}`;
      return { name: index.name, unique: sql.startsWith('createunique'), tail: sql.slice(sql.indexOf(on) + on.length) };
    });
  return { table: meta.tableName, columns: Object.values(meta.properties).filter((p) => p.fieldNames?.length === 1), indexes };
}

function sagaTable(meta: EntityMetadata): ExpectedTable {
  const completedAt = meta.properties['completedAt' as never]?.fieldNames[0] ?? 'completed_at';
  return {
    table: meta.tableName,
    columns: BASE_PROPERTIES.map((name) => meta.properties[name as never]).filter((p): p is EntityProperty => p !== undefined),
    indexes: [{ name: undefined, unique: false, tail: `where${completedAt}isnull` }],
  };
}

/** The type family a column type belongs to: types compare loosely (varchar(100) and text are both text). */
export function typeFamily(type: string): string {
  const t = type.toLowerCase();
  const families: [RegExp, string][] = [
    [/uuid/, 'uuid'],
    [/json/, 'json'],
    [/time|date/, 'datetime'],
    [/bool/, 'boolean'],
    // `bigserial` (an auto-assigned bigint, as MikroORM declares one) is an integer column.
    [/int|serial/, 'integer'],
    [/char|text|clob|string/, 'text'],
    [/real|double|float|numeric|decimal/, 'number'],
  ];
  return families.find(([pattern]) => pattern.test(t))?.[1] ?? t;
}

function compareTable(expected: ExpectedTable, actual: CatalogTable | undefined): SchemaProblem[] {
  const { table } = expected;
  if (!actual) return [{ kind: SCHEMA_PROBLEM_KINDS.TABLE_MISSING, table, item: table }];
  const problems: SchemaProblem[] = [];
  for (const property of expected.columns) {
    const item = property.fieldNames[0]!;
    const column = actual.columns.get(item);
    if (!column) {
      problems.push({ kind: SCHEMA_PROBLEM_KINDS.COLUMN_MISSING, table, item });
      continue;
    }
    const want = typeFamily(property.columnTypes?.[0] ?? String(property.type));
    if (typeFamily(column.type) !== want) {
      problems.push({ kind: SCHEMA_PROBLEM_KINDS.COLUMN_TYPE, table, item, expected: want, actual: column.type });
    }
    const nullable = property.nullable === true;
    if (column.nullable !== nullable) {
      const label = (n: boolean) => (n ? 'null' : 'not null');
      problems.push({
        kind: SCHEMA_PROBLEM_KINDS.COLUMN_NULLABILITY,
        table,
        item,
        expected: label(nullable),
        actual: label(column.nullable),
      });
    }
  }
  for (const index of expected.indexes) problems.push(...compareIndex(table, index, actual));
  return problems;
}

function compareIndex(table: string, index: ExpectedTable['indexes'][number], actual: CatalogTable): SchemaProblem[] {
  const matches = (i: CatalogTable['indexes'][number]) => i.definition.endsWith(index.tail) && i.unique === index.unique;
  const expected = `${index.unique ? 'unique ' : ''}(${index.tail})`;
  if (index.name === undefined) {
    return actual.indexes.some(matches)
      ? []
      : [{ kind: SCHEMA_PROBLEM_KINDS.INDEX_MISSING, table, item: `active-row index on ${table}`, expected }];
  }
  const found = actual.indexes.find((i) => i.name === index.name);
  if (!found) return [{ kind: SCHEMA_PROBLEM_KINDS.INDEX_MISSING, table, item: index.name, expected }];
  return matches(found)
    ? []
    : [{ kind: SCHEMA_PROBLEM_KINDS.INDEX_DIFFERENT, table, item: index.name, expected, actual: found.definition }];
}

/**
 * Compares the connected database with what the library needs (`saga_timer`, `saga_outbox`,
 * `saga_handled_message`, `saga_inbox`: every column, its type family and nullability, the filtered unique pending-name
 * index and the partial due indexes) and with each registered saga table (the base columns and the
 * active-row index). Reads the catalog only: PostgreSQL `information_schema` and `pg_indexes`, SQLite
 * `pragma_table_info` and `sqlite_master`. Tables of the connection's default schema.
 * @returns every difference found; empty when the schema fits.
 * @throws SagaDefinitionError `DEFINITION_INVALID` when a library entity (naming `SAGA_ENTITIES` and `entitiesTs`) or a
 *   saga's state entity is not registered.
 * @throws SagaPersistenceError `DATABASE_UNREACHABLE` for a SQLite file that does not exist and cannot be created;
 *   the driver's error when the database cannot be reached otherwise.
 */
export async function inspectSagaSchema(options: VerifySagaSchemaOptions): Promise<SchemaProblem[]> {
  return inspectSagaSchemaThrough(options, freshFork(options.em));
}

/**
 * {@link inspectSagaSchema}, reading the catalog through `reader` (inside its transaction when it has one: a unit
 * joined to the application's transaction reads on that transaction's connection).
 */
async function inspectSagaSchemaThrough(options: VerifySagaSchemaOptions, reader: EntityManager): Promise<SchemaProblem[]> {
  const { em } = options;
  const expected: ExpectedTable[] = [];
  // Names SAGA_ENTITIES and 'entitiesTs': a config without them also generates migrations that drop the tables.
  assertSagaEntitiesRegistered(em);
  for (const entity of LIBRARY_ENTITIES) expected.push(libraryTable(entityMetadata(em, entity)!));
  for (const saga of options.sagas ?? []) {
    const meta = entityMetadata(em, saga.state);
    if (!meta) {
      throw new SagaDefinitionError(
        'DEFINITION_INVALID',
        `Saga ${saga.name}: entity ${saga.state.name} is not registered in MikroORM: add it to the 'entities' of your ORM config.`,
        { sagaType: saga.name },
      );
    }
    // Two sagas may share a state entity (and so a table): check it once.
    if (!expected.some((table) => table.table === meta.tableName)) expected.push(sagaTable(meta));
  }
  const catalog = await readCatalog(reader, dialectOf(em), [...new Set(expected.map((t) => t.table))]);
  return expected.flatMap((table) => compareTable(table, catalog.get(table.table)));
}

/**
 * Checks the schema as {@link inspectSagaSchema} does and throws when anything differs. The runtime runs it
 * before its first unit of work and the dispatcher before its first pass, unless `verifySchema: false`.
 * @throws SagaSchemaError `SCHEMA_INVALID` naming every missing or different item (`details.problems`) and the command that fixes it.
 */
export async function verifySagaSchema(options: VerifySagaSchemaOptions): Promise<void> {
  return verifySagaSchemaThrough(options, freshFork(options.em));
}

/** {@link verifySagaSchema}, reading the catalog through `reader` (see {@link inspectSagaSchemaThrough}). */
export async function verifySagaSchemaThrough(options: VerifySagaSchemaOptions, reader: EntityManager): Promise<void> {
  const problems = await inspectSagaSchemaThrough(options, reader);
  if (problems.length === 0) return;
  const causes = likelyCauses(problems);
  const because = causes.map((cause) => ` Likely cause: ${cause}.`).join('');
  throw new SagaSchemaError(
    'SCHEMA_INVALID',
    `The database schema does not fit mikro-orm-saga: ${problems.map(describeProblem).join('; ')}.${because} To fix it, ${SCHEMA_FIX}.`,
    { problems, causes },
  );
}

/** The library's tables: their schemas name them, whatever the app's naming strategy. */
const LIBRARY_TABLES: ReadonlySet<string> = new Set(
  [SagaTimerSchema, SagaOutboxSchema, SagaHandledMessageSchema, SagaInboxSchema].map((schema) => schema.meta.tableName),
);

/**
 * What most likely led to `problems`, each with what to do: for a library table that is missing, a migration
 * generated while MikroORM's metadata lacked `SAGA_ENTITIES` (it writes `drop table` for them). Empty when no
 * cause is known beyond the problems themselves.
 */
export function likelyCauses(problems: readonly SchemaProblem[]): string[] {
  const missing = problems.filter((p) => p.kind === SCHEMA_PROBLEM_KINDS.TABLE_MISSING && LIBRARY_TABLES.has(p.table)).map((p) => p.table);
  if (missing.length === 0) return [];
  const [tables, were, they] = missing.length === 1 ? ['table', 'was', 'it'] : ['tables', 'were', 'they'];
  return [
    `the library's ${tables} ${missing.join(', ')} ${were} dropped by a migration generated without SAGA_ENTITIES in the ORM ` +
      `config, if ${they} existed before ('migration:create' run through ts-node or tsx reads only 'entitiesTs'). Add ` +
      "...SAGA_ENTITIES to both 'entities' and 'entitiesTs', then create and run a new migration, which creates the missing " +
      'tables again; the rows they held are gone unless restored from a backup',
  ];
}

/** One problem in words: names tables, columns, indexes and types, never data. */
export function describeProblem(problem: SchemaProblem): string {
  const { table, item, expected, actual } = problem;
  switch (problem.kind) {
    case SCHEMA_PROBLEM_KINDS.TABLE_MISSING:
      return `table ${table} is missing`;
    case SCHEMA_PROBLEM_KINDS.COLUMN_MISSING:
      return `column ${table}.${item} is missing`;
    case SCHEMA_PROBLEM_KINDS.COLUMN_TYPE:
      return `column ${table}.${item} is ${actual}, expected a ${expected} type`;
    case SCHEMA_PROBLEM_KINDS.COLUMN_NULLABILITY:
      return `column ${table}.${item} is ${actual}, expected ${expected}`;
    case SCHEMA_PROBLEM_KINDS.INDEX_MISSING:
      return `index ${item} is missing (expected ${expected})`;
    default:
      return `index ${table}.${item} differs (expected ${expected})`;
  }
}
