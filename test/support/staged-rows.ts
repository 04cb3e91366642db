import type { MikroORM } from '@mikro-orm/core';
import { SagaInbox } from '../../src/index.js';

/** The staged deliveries (`saga_inbox`) of one saga, in order-key order, read through a fresh EntityManager. */
export function stagedRowsOf(orm: MikroORM, sagaKey?: string): Promise<SagaInbox[]> {
  return orm.em.fork({ clear: true }).find(SagaInbox, sagaKey === undefined ? {} : { sagaKey }, { orderBy: { orderKey: 'asc' } });
}

/** Deletes every staged delivery, so a test sees only its own. */
export async function clearStagedRows(orm: MikroORM): Promise<void> {
  await orm.em.fork().nativeDelete(SagaInbox, {});
}
