import { Utils } from '@mikro-orm/core';

/**
 * The MikroORM major this run is meant to test: `MIKRO_ORM_LEG` (set by `legs/mikro-orm-7/run` and its vitest
 * config), default 6, the repository's own node_modules.
 */
export const EXPECTED_ORM_MAJOR = Number(process.env.MIKRO_ORM_LEG ?? '6');

/** The MikroORM major actually loaded in this process (from `@mikro-orm/core`'s own package.json). */
export const LOADED_ORM_MAJOR = Number(Utils.getORMVersion().split('.')[0]);
