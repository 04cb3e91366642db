import type { EntityMetadata } from '@mikro-orm/core';
import { SagaCorrelationError } from '../errors.js';
import { entityMetadata } from '../orm/index.js';
import { type CorrelationCheck, correlationCheckFor } from '../saga/correlation-value.js';
import type { AnySagaDefinition } from '../saga/registered-saga.js';
import type { DatabaseContext } from '../sql/database-context.js';

/** A registered saga's table as the operator statements name it: the context's names, read from MikroORM's metadata. */
export interface SagaTable {
  readonly sagaType: string;
  readonly definition: AnySagaDefinition;
  readonly meta: EntityMetadata;
  /** The quoted table name. */
  readonly table: string;
  /** Quoted columns of the base properties, the correlation property and the step property (null without one). */
  readonly column: {
    readonly id: string;
    readonly createdAt: string;
    readonly updatedAt: string;
    readonly completedAt: string;
    readonly version: string;
    readonly correlation: string;
    readonly step: string | null;
  };
  /** The correlation property's check, as the runtime applies it to messages; see {@link checkCorrelationValue}. */
  readonly checkCorrelation: CorrelationCheck;
}

/**
 * Checks an operator's correlation value (a filter or a lookup) as an incoming message's value is checked.
 * @throws SagaCorrelationError `CORRELATION_INVALID`, worded for an operator, quoting no value.
 */
export function checkCorrelationValue(saga: SagaTable, value: unknown, what: string): unknown {
  try {
    return saga.checkCorrelation(value, what);
  } catch (error) {
    if (!(error instanceof SagaCorrelationError)) throw error;
    const property = saga.definition.correlationProperty;
    throw new SagaCorrelationError(
      'CORRELATION_INVALID',
      `${what} is not a value of ${saga.sagaType}'s correlation property ${property}: pass a value of that property's own type (no objects or arrays); nothing was read.`,
      { sagaType: saga.sagaType, property },
    );
  }
}

/** The table of each saga, as the context names it (the runtime checked each saga's entity is registered). */
export function sagaTablesOf(db: DatabaseContext, sagas: readonly AnySagaDefinition[]): Map<string, SagaTable> {
  const tables = new Map<string, SagaTable>();
  for (const definition of sagas) {
    const meta = entityMetadata(db.em, definition.state)!;
    const { table, column } = db.tables.saga(meta);
    const { stepProperty } = definition;
    tables.set(definition.name, {
      sagaType: definition.name,
      definition,
      meta,
      table,
      column: {
        id: column.id,
        createdAt: column.createdAt,
        updatedAt: column.updatedAt,
        completedAt: column.completedAt,
        version: column.version,
        correlation: column[definition.correlationProperty]!,
        step: stepProperty === undefined ? null : column[stepProperty]!,
      },
      checkCorrelation: correlationCheckFor(definition.name, meta.properties[definition.correlationProperty as never]!),
    });
  }
  return tables;
}
