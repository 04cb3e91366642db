import type { EntityManager } from '@mikro-orm/core';
import { type DialectAdapter, dialectOf } from '../dialect/dialect-adapter.js';
import { SagaOutbox } from '../entities/saga-outbox.js';
import { SagaTimer } from '../entities/saga-timer.js';
import { SagaDefinitionError } from '../errors.js';
import { createUnitTransactions, entityMetadata, freshFork, quoteName, tableOf, type UnitTransactions } from '../orm/index.js';

/** A library table as the hand-written statements name it: quoted, read from MikroORM's metadata. */
export interface TableNames<TProperty extends string> {
  /** The quoted (and schema-qualified) table name. */
  readonly table: string;
  /** The quoted column name of each property. */
  readonly column: Readonly<Record<TProperty, string>>;
}

/** The properties of `saga_timer`. */
export type TimerProperty = keyof SagaTimer & string;
/** The properties of `saga_outbox`. */
export type OutboxProperty = keyof SagaOutbox & string;

/**
 * What every hand-written statement needs, built once per runtime and handed to the runtime, the dispatcher
 * and the statements (as graphile-worker hands its compiled options to every query): the EntityManager, the
 * database's capabilities, how units of work hold their transactions on the installed MikroORM major, and the
 * library tables' names as MikroORM's metadata has them, so a naming
 * strategy or a schema option reaches every statement. Internal: not part of the public API.
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
  readonly tables: {
    readonly saga_timer: TableNames<TimerProperty>;
    readonly saga_outbox: TableNames<OutboxProperty>;
  };
}

/**
 * Reads the dialect and the library tables' names from `em`.
 * @throws SagaError `DIALECT_UNSUPPORTED` for a database other than PostgreSQL and SQLite.
 * @throws SagaDefinitionError `DEFINITION_INVALID` when `SagaTimer` or `SagaOutbox` is not registered in MikroORM.
 */
export function createDatabaseContext(em: EntityManager): DatabaseContext {
  return {
    em,
    autocommit: freshFork(em),
    dialect: dialectOf(em),
    transactions: createUnitTransactions(),
    tables: {
      saga_timer: tableNames<TimerProperty>(em, SagaTimer),
      saga_outbox: tableNames<OutboxProperty>(em, SagaOutbox),
    },
  };
}

/** The quoted table and column names of one registered entity, read from MikroORM's metadata. */
export function tableNames<TProperty extends string>(em: EntityManager, entity: { name: string }): TableNames<TProperty> {
  const meta = entityMetadata(em, entity);
  if (!meta) {
    throw new SagaDefinitionError(
      'DEFINITION_INVALID',
      `Entity ${entity.name} is not registered in MikroORM: add SAGA_ENTITIES from mikro-orm-saga to the 'entities' of your ORM config.`,
    );
  }
  const column: Record<string, string> = {};
  for (const property of Object.values(meta.properties)) {
    const field = property.fieldNames?.[0];
    if (field) column[property.name] = quoteName(em, field);
  }
  return {
    table: tableOf(em, meta),
    column: column as Record<TProperty, string>,
  };
}
