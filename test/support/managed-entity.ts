import { type EntityManager, type EntityMetadata, helper, wrap } from '@mikro-orm/core';

/** The metadata of `entity` (a class or schema) on `em`. */
export function metaOf(em: EntityManager, entity: object): EntityMetadata {
  return em.getMetadata().find(entity as never)!;
}

/**
 * What an EntityManager holds of a managed entity: its values, the original data its change sets are computed from,
 * its class and its schema. Two reads of one row compare equal on this when they hydrated the same thing.
 */
export function managedState(entity: object | null): unknown {
  if (!entity) return null;
  return {
    values: wrap(entity).toObject(),
    original: helper(entity).__originalEntityData,
    className: entity.constructor.name,
    schema: helper(entity).getSchema(),
  };
}
