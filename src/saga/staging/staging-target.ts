import type { EntityManager } from '@mikro-orm/core';
import { BEFORE_INSERT, type StagedEntity } from '../../entities/before-insert.js';
import { SagaDefinitionError, SagaValidationError } from '../../errors.js';
import { sameOrm } from '../../orm/index.js';
import type { DatabaseContext } from '../../sql/database-context.js';
import { queryRows, type SqlStatement } from '../../sql/sql-executor.js';
import type { SagaMetrics } from '../../telemetry/saga-metrics.js';
import type { ResolvedSagaRuntimeOptions } from '../runtime-options.js';
import { kindOf } from '../stored-text.js';

/** What a staging call uses of its runtime. */
export interface StagingRuntime {
  readonly db: DatabaseContext;
  readonly options: ResolvedSagaRuntimeOptions;
  readonly metrics: SagaMetrics;
}

/**
 * The application's EntityManager a staging call persists its row into: one of the ORM the runtime was built with
 * (`orm.em`, a fork of it, or the one `em.transactional()` hands over), so the row goes to the tables the dispatcher
 * drains, in the application's transaction.
 * @param call names the call in the error, e.g. "stageDelivery()".
 * @throws SagaValidationError `OPTION_INVALID` otherwise.
 */
export function stagingEntityManager(runtime: StagingRuntime, em: unknown, call: string): EntityManager {
  const candidate = em as Partial<EntityManager> | null | undefined;
  const isEntityManager =
    candidate !== null &&
    typeof candidate === 'object' &&
    typeof candidate.persist === 'function' &&
    typeof candidate.fork === 'function' &&
    typeof candidate.getMetadata === 'function';
  if (!isEntityManager) {
    throw new SagaValidationError(
      'OPTION_INVALID',
      `${call} was given ${kindOf(em)} instead of an EntityManager: pass the EntityManager of your transaction (the one em.transactional() hands you) or the one you flush.`,
    );
  }
  if (!sameOrm(candidate as EntityManager, runtime.options.em)) {
    throw new SagaValidationError(
      'OPTION_INVALID',
      `${call} was given an EntityManager of another MikroORM instance than the runtime's: pass orm.em of the ORM the runtime was built with, a fork of it, or the one its em.transactional() hands you.`,
    );
  }
  return candidate as EntityManager;
}

/**
 * Persists `row` into `em`, with `statement` (the saga key's lock, the NOTIFY; see `stagingStatement`) to run in the
 * flush's transaction right before the row's INSERT. Nothing is sent now: staging inside the application's
 * transaction never asks for a second connection (SQLite has one).
 * @param lock whether `statement` holds a lock until COMMIT: the flush must then run in a transaction.
 */
export function persistStaged<T extends object>(em: EntityManager, row: T, statement: SqlStatement | undefined, lock: boolean): void {
  if (statement) {
    (row as StagedEntity)[BEFORE_INSERT] = async (flushing) => {
      if (lock && !flushing.getTransactionContext()) {
        // A lock taken outside a transaction ends with its statement: the row would not be numbered in commit order.
        throw new SagaDefinitionError(
          'OPTION_INVALID',
          'A staged delivery was flushed outside a transaction (an ORM configured with implicitTransactions: false): flush it inside em.transactional(), or leave implicitTransactions on, so that it is ordered by its commit.',
        );
      }
      await queryRows(flushing, statement);
    };
  }
  em.persist(row);
}
