import type { EntityManager, EntityMetadata } from '@mikro-orm/core';
import { type DialectAdapter, dialectOf } from '../dialect/dialect-adapter.js';
import { SagaHandledMessage } from '../entities/saga-handled-message.js';
import { SagaInbox } from '../entities/saga-inbox.js';
import { SagaOutbox } from '../entities/saga-outbox.js';
import type { SagaState } from '../entities/saga-state.js';
import { SagaTimer } from '../entities/saga-timer.js';
import { SagaDefinitionError } from '../errors.js';
import {
  createUnitTransactions,
  entityMetadata,
  freshFork,
  type OrmCloseWatch,
  qualifiedTableName,
  quoteName,
  storedProperties,
  tableOf,
  type UnitTransactions,
  watchOrmClose,
} from '../orm/index.js';

/** A table as the library's statements name it: read from MikroORM's metadata, quoted for the platform. */
export interface TableNames<TProperty extends string> {
  /** The table's name as the metadata has it, unquoted: for error messages and error details, never for SQL. */
  readonly name: string;
  /** `schema.name` where the metadata names a schema, else `name`; unquoted, never for SQL. */
  readonly qualifiedName: string;
  /** The quoted (and schema-qualified) table name. */
  readonly table: string;
  /** The quoted column name of each property. */
  readonly column: Readonly<Record<TProperty, string>>;
  /** The column name of each property as the metadata has it, unquoted: for error messages, never for SQL. */
  readonly field: Readonly<Record<TProperty, string>>;
  /** Every column the entity stores in its own table (each column of a composite reference too), in property order. */
  readonly stored: readonly StoredColumn[];
}

/** One column a table stores: its name as the metadata has it (for messages) and quoted (for SQL). */
export interface StoredColumn {
  readonly field: string;
  readonly column: string;
}

/** The properties of `SagaTimer`. */
export type TimerProperty = keyof SagaTimer & string;
/** The properties of `SagaOutbox`. */
export type OutboxProperty = keyof SagaOutbox & string;
/** The properties of `SagaInbox`. */
export type InboxProperty = keyof SagaInbox & string;
/** The properties every dispatch table (timers, outbox, staged deliveries) has. */
export type DispatchProperty = TimerProperty & OutboxProperty & InboxProperty;

/** A dispatch table's names: typed with the columns the three share (the object holds every column of the table). */
export interface DispatchTableNames extends TableNames<DispatchProperty> {
  /**
   * The quoted column naming a row's saga within its type: `saga_id`, or `saga_key` (the correlation value) for a
   * staged delivery, whose saga may not exist yet. The rows of one saga share a delivery lane and a lock order.
   */
  readonly sagaColumn: string;
}

/** The properties of `SagaHandledMessage`. */
export type HandledMessageProperty = keyof SagaHandledMessage & string;

/**
 * A saga's own table: the columns of `SagaState` and of every other property of the saga's entity (its
 * correlation and step properties among them), and the column of its primary key.
 */
export interface SagaTableNames extends TableNames<keyof SagaState & string> {
  readonly column: Readonly<Record<keyof SagaState & string, string>> & Readonly<Record<string, string | undefined>>;
  readonly field: Readonly<Record<keyof SagaState & string, string>> & Readonly<Record<string, string | undefined>>;
  /** The quoted column of the primary key. */
  readonly primaryKey: string;
}

/** Every table the library writes, named as MikroORM's metadata has them. */
export interface LibraryTables {
  readonly timer: TableNames<TimerProperty>;
  readonly outbox: TableNames<OutboxProperty>;
  readonly inbox: TableNames<InboxProperty>;
  readonly handledMessage: TableNames<HandledMessageProperty>;
  /** The three tables the dispatcher drains, with the columns they share (`dispatchTableNames`). */
  readonly dispatch: { readonly timer: DispatchTableNames; readonly outbox: DispatchTableNames; readonly inbox: DispatchTableNames };
  /** The table of a saga's state entity (`meta`: its metadata), read once and kept. */
  saga(meta: EntityMetadata): SagaTableNames;
}

/**
 * What every statement needs, built once per runtime and handed to the runtime, the dispatcher, the operations
 * and every statement function (as graphile-worker hands its compiled options to every query): the
 * EntityManager, the database's capabilities, how units of work hold their transactions on the installed
 * MikroORM major, and every table and column name as MikroORM's metadata has it, so the statements never type
 * one. Internal: not part of the public API.
 */
export interface DatabaseContext {
  /** The application's EntityManager; units of work run in forks of it. */
  readonly em: EntityManager;
  /**
   * A fork of `em` kept for the dispatcher's autocommit statements: it never opens a transaction and
   * holds no entities, and being a fork it never joins a transaction the caller may have open.
   */
  readonly autocommit: EntityManager;
  readonly dialect: DialectAdapter;
  /** How units of work hold their transactions on the installed MikroORM major, chosen once here. */
  readonly transactions: UnitTransactions;
  readonly tables: LibraryTables;
  /** Whether `orm.close()` was called on the ORM of `em` (and it did not connect again since). */
  readonly orm: OrmCloseWatch;
}

/**
 * Reads the dialect and the library tables' names from `em`.
 * @throws SagaError `DIALECT_UNSUPPORTED` for a database other than PostgreSQL and SQLite.
 * @throws SagaDefinitionError `DEFINITION_INVALID` when one of the library's entities is not registered in MikroORM.
 */
export function createDatabaseContext(em: EntityManager): DatabaseContext {
  const timer = libraryTable<TimerProperty>(em, SagaTimer);
  const outbox = libraryTable<OutboxProperty>(em, SagaOutbox);
  const inbox = libraryTable<InboxProperty>(em, SagaInbox);
  return {
    em,
    autocommit: freshFork(em),
    dialect: dialectOf(em),
    transactions: createUnitTransactions(),
    tables: {
      timer,
      outbox,
      inbox,
      handledMessage: libraryTable(em, SagaHandledMessage),
      dispatch: {
        timer: dispatchTable(timer, timer.column.sagaId),
        outbox: dispatchTable(outbox, outbox.column.sagaId),
        inbox: dispatchTable(inbox, inbox.column.sagaKey),
      },
      saga: sagaTables(em),
    },
    orm: watchOrmClose(em),
  };
}

/** A dispatch table's names, typed with the columns the three share, and the column naming a row's saga. */
function dispatchTable(names: TableNames<DispatchProperty>, sagaColumn: string): DispatchTableNames {
  return { ...names, sagaColumn };
}

/** The names of one of the library's own entities, read from its metadata. */
function libraryTable<TProperty extends string>(em: EntityManager, entity: { name: string }): TableNames<TProperty> {
  const meta = entityMetadata(em, entity);
  if (!meta) {
    throw new SagaDefinitionError(
      'DEFINITION_INVALID',
      `Entity ${entity.name} is not registered in MikroORM: add SAGA_ENTITIES from mikro-orm-saga to the 'entities' of your ORM config.`,
    );
  }
  return tableNames<TProperty>(em, meta);
}

/** Reads each saga table's names the first time a statement asks: MikroORM's metadata does not change once initialised. */
function sagaTables(em: EntityManager): (meta: EntityMetadata) => SagaTableNames {
  const read = new Map<EntityMetadata, SagaTableNames>();
  return (meta) => {
    let names = read.get(meta);
    if (!names) {
      const table = tableNames<string>(em, meta) as Omit<SagaTableNames, 'primaryKey'>;
      names = { ...table, primaryKey: table.column[meta.primaryKeys[0]!]! };
      read.set(meta, names);
    }
    return names;
  };
}

/** The table and column names of `meta`, quoted for `em`'s platform. */
function tableNames<TProperty extends string>(em: EntityManager, meta: EntityMetadata): TableNames<TProperty> {
  const column: Record<string, string> = {};
  const field: Record<string, string> = {};
  for (const property of Object.values(meta.properties)) {
    const name = property.fieldNames?.[0];
    if (!name) continue;
    field[property.name] = name;
    column[property.name] = quoteName(em, name);
  }
  return {
    name: meta.tableName,
    qualifiedName: qualifiedTableName(meta),
    table: tableOf(em, meta),
    column: column as Record<TProperty, string>,
    field: field as Record<TProperty, string>,
    stored: storedProperties(meta)
      .flatMap((property) => property.fieldNames ?? [])
      .map((name) => ({ field: name, column: quoteName(em, name) })),
  };
}
