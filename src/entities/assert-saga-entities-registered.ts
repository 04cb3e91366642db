import type { EntityManager } from '@mikro-orm/core';
import { SagaDefinitionError } from '../errors.js';
import { allEntityMetadata } from '../orm/index.js';
import { SAGA_ENTITIES } from './index.js';

/**
 * Checks that MikroORM knows every entity in {@link SAGA_ENTITIES}. Without this check a config that lists
 * them in `entities` but not in `entitiesTs` (folder-based discovery run through ts-node or tsx, where
 * MikroORM reads only `entitiesTs`) starts fine and fails at the first timer or outbox write; and
 * `migration:create` run with it writes `drop table` for the library's tables.
 *
 * An abstract base (`SagaState`, `DispatchRecord`) has no table and may not be listed in MikroORM's metadata;
 * it counts as registered when an entity MikroORM knows extends it.
 * @throws SagaDefinitionError `DEFINITION_INVALID` naming the missing entities and the config keys to add them to.
 */
export function assertSagaEntitiesRegistered(em: EntityManager): void {
  const known = allEntityMetadata(em);
  const missing = SAGA_ENTITIES.map((schema) => schema.meta.class as abstract new () => unknown)
    .filter((entity) => !known.some((meta) => meta.class === entity || meta.class?.prototype instanceof entity))
    .map((entity) => entity.name);
  if (missing.length === 0) return;
  // Known by name but not as this class: the app registered another installed copy of the library.
  const otherCopy = missing.filter((name) => known.some((meta) => meta.className === name));
  const hint =
    otherCopy.length > 0
      ? ` MikroORM knows ${otherCopy.join(', ')} from another copy of mikro-orm-saga: install one version (npm ls mikro-orm-saga).`
      : '';
  throw new SagaDefinitionError(
    'DEFINITION_INVALID',
    `mikro-orm-saga: MikroORM does not know the library's entities ${missing.join(', ')}. Add ...SAGA_ENTITIES to ` +
      "'entities' in your MikroORM config, and to 'entitiesTs' too when you use folder-based discovery (MikroORM " +
      "reads only 'entitiesTs' when it runs TypeScript through ts-node or tsx), e.g. " +
      "entities: ['./dist/entities', ...SAGA_ENTITIES], entitiesTs: ['./src/entities', ...SAGA_ENTITIES]. " +
      "Until then, a migration generated with this config ('migration:create') drops the library's tables: do not run it." +
      hint,
    { missing },
  );
}
