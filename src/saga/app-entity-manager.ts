import type { EntityManager } from '@mikro-orm/core';
import { SagaValidationError } from '../errors.js';
import { kindOf } from './stored-text.js';

/**
 * Refuses an `em` option that is not an EntityManager of the MikroORM instance of `runtimeEm` (`OPTION_INVALID`),
 * before anything is read. Whether it is inside an open transaction is asked when the unit joins it
 * (`TRANSACTION_REQUIRED`).
 */
export function checkAppEntityManager(em: unknown, runtimeEm: EntityManager, call: string, details: { readonly sagaType?: string }): void {
  if (em === undefined) return;
  const candidate = em as Partial<EntityManager> | null;
  if (typeof candidate?.fork !== 'function' || typeof candidate.getTransactionContext !== 'function') {
    throw new SagaValidationError(
      'OPTION_INVALID',
      `The 'em' option of ${call} is ${kindOf(em)}, not an EntityManager: pass the EntityManager em.transactional() hands its callback, or leave 'em' out (undefined).`,
      details,
    );
  }
  if (candidate.getDriver?.() !== runtimeEm.getDriver()) {
    throw new SagaValidationError(
      'OPTION_INVALID',
      `The 'em' option of ${call} is an EntityManager of another MikroORM instance than this runtime's: pass one of the instance whose EntityManager the runtime was built with.`,
      details,
    );
  }
}
