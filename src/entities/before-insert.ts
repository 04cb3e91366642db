import type { EntityManager } from '@mikro-orm/core';

/**
 * Where a staging call (`SagaRuntime.stageDelivery`, `stageMessage`) leaves, on the entity it persists through the
 * application's EntityManager, the statements to run in the flush's transaction before the row's INSERT: on
 * PostgreSQL the saga key's advisory lock (a staged delivery) and the NOTIFY that wakes dispatchers at COMMIT.
 * A symbol: MikroORM neither stores nor compares it.
 */
export const BEFORE_INSERT: unique symbol = Symbol('mikro-orm-saga.beforeInsert');

/** What runs before the INSERT of a staged row, given the flushing EntityManager (inside the flush's transaction). */
export type BeforeInsert = (em: EntityManager) => Promise<void>;

/** An entity a staging call persisted. */
export interface StagedEntity {
  [BEFORE_INSERT]?: BeforeInsert;
}

/**
 * The `beforeCreate` hook of `SagaInbox` and `SagaOutbox`: runs what the staging call left on the entity. MikroORM
 * runs it inside the flush's transaction, after BEGIN and before the INSERT (both majors). A row inserted otherwise
 * (the runtime writes outbox rows with its own statements) has nothing to run.
 */
export async function runBeforeInsert(args: { readonly entity: unknown; readonly em: EntityManager }): Promise<void> {
  const work = (args.entity as StagedEntity | null)?.[BEFORE_INSERT];
  if (work) await work(args.em);
}
